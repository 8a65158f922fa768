"""Sample selection with two networks: the shared machinery of Co-teaching, Co-teaching+,
JoCoR, MentorNet and Decoupling.

Both networks are built by :meth:`~noisylabels.methods.core.base.NoisyLabelMethod.add_network`, so
each has its own optimizer (stepped by the shared manual-optimization step) and its own
validation and test accuracy; network 0 (``self.net``) is the one model selection and
``test/acc`` use, network 1's accuracies are logged as ``val/net1/acc`` and ``test/net1/acc``.
In every batch :meth:`TwoNetworkMethod.select` chooses the samples each network learns from and
each network's objective is the VRNL objective of the cross-entropies of its chosen samples
(recorded as the :class:`~noisylabels.methods.core.step.StepOutput` of network 0 and 1). A warm-up
(the schedule's ``warmup_epochs``) trains both networks on every sample with plain cross-entropy.

The small-loss methods drop a fraction ``tau_t`` of each batch: ``tau_t`` ramps linearly from 0
at the first epoch of the method's own stage to ``tau`` after ``ramp_epochs`` epochs (Han et al.
2018: 10), with ``tau`` the data's nominal noise rate, a given number, or ``1 - mean(diag T̂)``
of a T̂ estimated from network 0 after a warm-up (row-stochastic,
``T̂[i, j] ≈ P(noisy=j | clean=i)``).
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.distributed import gather_batch, own_part, world
from noisylabels.methods.core.losses import cross_entropy
from noisylabels.methods.transition import estimate_from_model

FORGET_RATES = ("noise_rate", "estimate")


class TwoNetworkMethod(NoisyLabelMethod):
    """Two networks, each trained on the samples :meth:`select` chooses for it.

    Args:
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    abstract = True  # a base of methods, not one itself (see methods.registry)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_network()

    def select(self, losses: list[Tensor], logits: list[Tensor]) -> list[Tensor]:
        """Boolean masks ``(B,)``: the samples each network trains on, from both networks'
        (detached) per-sample losses and logits."""
        raise NotImplementedError

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return cross_entropy(logits, batch["label"])

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The sum of the networks' VRNL objectives over their selected samples (every sample
        in a warm-up); the networks share no parameter, so each learns from its own."""
        logits = [self.network_logits(batch["image"], k) for k in range(len(self.networks))]
        losses = [self.stage_loss_fn(z, batch) for z in logits]
        if self.in_warmup:
            used: list[Tensor | None] = [None] * len(losses)
        else:
            used = list(self.select([l.detach() for l in losses], [z.detach() for z in logits]))
        objectives = [
            self.vrnl(l, z, batch, used=u, network=k)
            for k, (l, z, u) in enumerate(zip(losses, logits, used, strict=True))
        ]
        return torch.stack(objectives).sum()


def small_loss_mask(losses: Tensor, keep: int | Tensor) -> Tensor:
    """Boolean mask of the ``keep`` smallest ``losses`` (ties: the earlier sample first);
    ``keep`` may be a 0-d tensor, so that a count computed on the device needs no host copy."""
    order = torch.argsort(losses, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=order.device)
    return rank < keep


class SmallLossMethod(TwoNetworkMethod):
    """Two networks that keep the ``1 - tau_t`` fraction of each batch with the smallest loss.

    Args:
        forget_rate: ``tau``: a number in [0, 1); ``noise_rate``: the data's nominal noise rate
            (synthetic noise only: label files and real noise have none, so give a number or
            ``estimate``); ``estimate``: ``1 - mean(diag T̂)`` of T̂ estimated by anchor points
            from network 0 after the schedule's ``warmup_epochs`` (which must then be > 0).
        ramp_epochs: epochs over which ``tau_t`` rises linearly from 0 to ``tau``, counted from
            the first epoch of the method's own stage (Han et al. 2018: 10).
        filter_outliers: the anchor points' 97th-percentile filter, for ``estimate``.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    abstract = True  # a base of methods, not one itself (see methods.registry)

    def __init__(
        self,
        forget_rate: float | str = "noise_rate",
        ramp_epochs: int = 10,
        filter_outliers: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(forget_rate, str):
            if forget_rate not in FORGET_RATES:
                raise InputError(
                    f"forget_rate must be a number in [0, 1) or one of {FORGET_RATES}, "
                    f"got {forget_rate!r}"
                )
            if forget_rate == "estimate":
                self.schedule.require_warmup("--model.forget_rate estimate: T̂")
        elif not 0.0 <= float(forget_rate) < 1.0:
            raise InputError(f"forget_rate must lie in [0, 1), got {forget_rate}")
        if int(ramp_epochs) < 0:
            raise InputError(f"ramp_epochs must be >= 0, got {ramp_epochs}")
        self.forget_rate_source = forget_rate
        initial = float(forget_rate) if not isinstance(forget_rate, str) else 0.0
        self.register_buffer("tau", torch.tensor(initial))
        self.register_buffer("T_hat", torch.eye(self.num_classes))
        self.register_buffer("t_estimated", torch.tensor(False))
        self.current_forget_rate = 0.0  # tau_t of the current epoch (set at each epoch's start)

    # ---------------------------------------------------------------- tau
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit" and self.forget_rate_source == "noise_rate":
            self.tau.fill_(self._nominal_rate())

    def _nominal_rate(self) -> float:
        facts = self.data_facts()
        rate = None if facts is None else facts.rate_nominal
        if rate is None:
            noise = "unknown" if facts is None else facts.noise_type
            raise InputError(
                f"forget_rate: noise_rate needs the data's nominal noise rate, which noise "
                f"type {noise!r} does not have; pass --model.forget_rate "
                "with a number (e.g. the label file's known noise rate), or "
                "--model.forget_rate estimate with --model.schedule.warmup_epochs N"
            )
        return float(rate)

    def on_main_stage_start(self) -> None:
        """With ``forget_rate: estimate``: T̂ from the warm-up network 0, ``tau = 1 -
        mean(diag T̂)``."""
        if self.forget_rate_source != "estimate":
            return
        T_hat = estimate_from_model(self, "anchor", self.hparams.filter_outliers)
        self.T_hat.copy_(T_hat.to(self.T_hat))
        self.t_estimated.fill_(True)
        self.tau.fill_(float(1.0 - T_hat.diagonal().mean()))
        error = self.t_estimation_error()
        err = "" if error is None else f" (ε_T = {error:.4f})"
        rank_zero_info(f"{type(self).__name__}: forget rate {float(self.tau):.4f} from T̂{err}")

    def transition(self) -> Tensor | None:
        """T̂ that ``tau`` was estimated from (``forget_rate: estimate``), else ``None``."""
        return self.T_hat if bool(self.t_estimated) else None

    def samples_per_variance(self, batch_size: int) -> int:
        """The samples a network keeps of a batch once ``tau_t`` has reached ``tau`` (all of
        them where ``tau`` is only known after the warm-up: ``forget_rate: estimate``)."""
        source = self.forget_rate_source
        if source == "estimate":
            return batch_size
        if source == "noise_rate":
            facts = self.data_facts()
            if facts is None or facts.rate_nominal is None:
                return batch_size  # refused by setup, naming the option
            tau = float(facts.rate_nominal)
        else:
            tau = float(source)
        return int(self.keep_count(batch_size, tau))

    def inert_options(self) -> list[tuple[str, str]]:
        """``filter_outliers`` unless ``tau`` is estimated from T̂; ``ramp_epochs`` where
        nothing is forgotten."""
        inert = super().inert_options()
        source = self.forget_rate_source
        if source != "estimate":
            inert.append(
                ("filter_outliers", "it filters the anchor points of the T̂ that only "
                 f"--model.forget_rate estimate uses (forget_rate is {source})")
            )  # fmt: skip
        if not isinstance(source, str) and float(source) == 0.0:
            inert.append(("ramp_epochs", "forget_rate is 0: no epoch forgets a sample"))
        return inert

    def forget_rate_at(self, epoch: int) -> float:
        """``tau_t`` at ``epoch`` epochs into the method's own stage: ``tau * t / (ramp - 1)``
        for ``t < ramp_epochs`` (0 at the first epoch, ``tau`` from epoch ``ramp - 1`` on)."""
        ramp, tau = int(self.hparams.ramp_epochs), float(self.tau)
        if ramp <= 1:
            return tau
        return tau * min(max(epoch, 0) / (ramp - 1), 1.0)

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()  # may start the method's stage (and estimate tau)
        self.current_forget_rate = self.forget_rate_at(self.current_epoch - self.warmup_length())

    def keep_count(self, batch_size: int | Tensor, rate: float | None = None) -> int | Tensor:
        """How many samples of a batch a network keeps: ``floor((1 - tau_t) B)``, at least 1,
        at this epoch's ``tau_t`` (or the forget ``rate`` given); a 0-d tensor for a batch size
        counted on the device (the global batch under DDP)."""
        rate = self.current_forget_rate if rate is None else rate
        if isinstance(batch_size, Tensor):
            kept = batch_size.to(torch.float64) * (1.0 - rate)
            return torch.floor(kept).clamp_min(1.0)
        return max(1, int((1.0 - rate) * batch_size))

    def small_loss_masks(self, losses: list[Tensor], among: Tensor | None = None) -> list[Tensor]:
        """For each network's (detached) losses, the mask of the :meth:`keep_count` samples of
        the batch with the smallest ones. Under DDP the batch is the global one, as one process
        with the global batch selects (:func:`~noisylabels.methods.core.distributed.gather_batch`;
        ties go to the earlier sample of the global batch); each process gets its own part.

        ``among``: a boolean ``(B,)`` mask of the candidates (Co-teaching+: the samples the
        networks disagree on): the smallest losses are taken among them only, keeping
        ``floor((1 - tau_t) n)`` of the ``n`` candidates of the (global) batch, or all ``n``
        where that is 0 (as Co-teaching+'s reference does); none where there is no candidate.
        """
        if among is None and world()[0] == 1:
            keep = self.keep_count(len(losses[0]))
            return [small_loss_mask(l, keep) for l in losses]
        n = len(losses[0])
        rows = torch.stack(losses if among is None else [*losses, among.to(losses[0].dtype)])
        if world()[0] == 1:
            values, valid = rows, torch.ones(n, dtype=torch.bool, device=rows.device)
        else:
            facts = self.data_facts()
            capacity = None if facts is None else facts.batch_size
            values, valid = gather_batch(rows, capacity)
        if among is None:
            candidates, keep = valid, self.keep_count(valid.sum())
        else:
            candidates, values = valid & (values[-1] > 0), values[:-1]
            count = candidates.sum().to(torch.float64)
            kept = torch.floor(count * (1.0 - self.current_forget_rate))
            keep = torch.where(kept > 0, kept, count)
        values = torch.where(candidates, values, torch.inf)  # padding and others sort last
        masks = [small_loss_mask(row, keep) & candidates for row in values]
        return masks if world()[0] == 1 else [own_part(mask, n) for mask in masks]

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        if not self.in_warmup:
            self.log("train/forget_rate", self.current_forget_rate)
