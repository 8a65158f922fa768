"""CORES², confidence regularization and a sample sieve (Cheng et al., "Learning with
Instance-Dependent Label Noise: A Sample Sieve Approach", ICLR 2021), its first phase.

The per-sample loss subtracts from the cross-entropy the cross-entropy expected under a class
prior ``P`` (the noisy labels' class distribution, revised every epoch), weighted by ``β_t``:

    l_i = CE(z_i, y~_i) - β_t · Σ_j P_j · (-log(p_ij + 1e-8))

which rewards confident predictions. The sieve keeps, from epoch ``sieve_epoch`` of the
method's stage on, only the samples whose cross-entropy is at most their mean cross-entropy over
all classes, ``CE_i - mean_j(-log(p_ij + 1e-8)) <= 0``; the objective is the mean loss of the
kept samples (0 where none is kept), VRNL's ``mean - alpha·Var`` over them with ``alpha != 0``.
After every epoch the prior becomes ``P ∝ P_0·n - s``, with ``P_0`` the noisy labels' class
distribution over the ``n`` training samples and ``s`` the number of samples of each (noisy)
class the sieve dropped in that epoch.

``β_t`` (``t``: epochs into the method's stage) is 0 for ``beta_start`` epochs, then rises
linearly to ``beta`` over ``beta_ramp_epochs`` epochs (``linspace(0, beta, ramp)``) and stays
there (reference: 10, 30, 2); with ``scale_lr`` every epoch's learning rate is divided by
``1 + β_t``, as the reference does.

State: the prior is a buffer (in every checkpoint, the same on every process); the sieve's
per-class counts of an epoch are summed over the DDP processes at its end, so the prior is the
one-process prior.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.losses import cross_entropy

LOG_EPS = 1e-8
"""Added inside the logarithm of the confidence term (the reference's)."""


class CORES(NoisyLabelMethod):
    """CORES²: CE minus β_t times the CE expected under a class prior, and a sample sieve
    (Cheng et al. 2021).

    Args:
        beta: the largest ``β_t`` (reference: 2).
        beta_start: epochs of the method's stage with ``β_t = 0`` (reference: 10).
        beta_ramp_epochs: epochs over which ``β_t`` rises linearly from 0 to ``beta``
            (reference: 30).
        sieve_epoch: the first epoch of the method's stage whose batches are sieved
            (reference: 31; the epochs before train on every sample).
        prior: ``noisy``: the noisy labels' class distribution, revised every epoch by the
            samples the sieve dropped (reference); ``uniform``: ``1/C`` throughout.
        scale_lr: divide every epoch's learning rate by ``1 + β_t`` (reference).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self,
        beta: float = 2.0,
        beta_start: int = 10,
        beta_ramp_epochs: int = 30,
        sieve_epoch: int = 31,
        prior: str = "noisy",
        scale_lr: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if beta < 0:
            raise InputError(f"--model.beta must be >= 0, got {beta}")
        for name, value in (
            ("beta_start", beta_start),
            ("beta_ramp_epochs", beta_ramp_epochs),
            ("sieve_epoch", sieve_epoch),
        ):
            if int(value) < 0:
                raise InputError(f"--model.{name} must be >= 0, got {value}")
        if prior not in ("noisy", "uniform"):
            raise InputError(f"--model.prior must be 'noisy' or 'uniform', got {prior!r}")
        c = self.num_classes
        self.register_buffer("prior", torch.full((c,), 1.0 / c))
        self.register_buffer("initial_prior", torch.full((c,), 1.0 / c))
        self.register_buffer("num_train", torch.tensor(0.0))
        self.register_buffer("beta_now", torch.tensor(0.0), persistent=False)
        # the sieve's dropped samples per noisy class in this epoch: not a buffer, which DDP
        # would overwrite with process 0's before every step
        self.dropped = torch.zeros(c)

    # ---------------------------------------------------------------- schedules
    def stage_epoch(self, epoch: int | None = None) -> int:
        """Epochs into the method's stage at ``epoch`` (default: the current one)."""
        epoch = self.current_epoch if epoch is None else epoch
        return epoch - self.warmup_length()

    def beta_at(self, t: int) -> float:
        """``β_t`` at epoch ``t`` of the method's stage (0 before it)."""
        hp = self.hparams
        start, ramp, top = int(hp.beta_start), int(hp.beta_ramp_epochs), float(hp.beta)
        if t < start:
            return 0.0
        if t < start + ramp:
            return top * (t - start) / (ramp - 1) if ramp > 1 else top
        return top

    def val_loss_changes(self) -> str | None:
        """``β_t`` weights the confidence term by the epoch."""
        betas = {self.beta_at(t) for t in range(int(self.schedule.main_epochs))}
        if len(betas) > 1:
            return (
                "its loss subtracts β_t times the prior-weighted cross-entropy, and β_t changes "
                "over the epochs (--model.beta_start, --model.beta_ramp_epochs)"
            )
        return None

    def inert_options(self) -> list[tuple[str, str]]:
        """The sieve past the end of the method's stage; the regularizer's options where
        ``β_t`` is 0 in every epoch of it (``beta`` 0, or ``beta_start`` past its end)."""
        length = int(self.schedule.main_epochs)
        inert = []
        if int(self.hparams.sieve_epoch) >= length:
            inert.append(
                ("sieve_epoch", f"the method's own stage has {length} epochs (0 to "
                 f"{length - 1}), so the sieve never starts")
            )  # fmt: skip
        if float(self.hparams.beta) == 0.0:
            off = "beta is 0: there is no confidence regularizer to plan or scale by"
            inert += [(name, off) for name in ("beta_start", "beta_ramp_epochs", "scale_lr")]
            inert.append(("prior", off))
        elif not any(self.beta_at(t) > 0 for t in range(length)):
            off = (
                f"β_t is 0 in every one of the method's {length} epochs (0 for beta_start "
                "epochs, then rising from 0), so the confidence regularizer never acts; "
                "--model.beta 0 trains without it"
            )
            names = ("beta", "beta_start", "beta_ramp_epochs", "scale_lr", "prior")
            inert += [(name, off) for name in names]
        return inert

    def lr_factor(self, epoch: int) -> float:
        """``1 / (1 + β_t)`` with ``scale_lr`` (1 in a warm-up)."""
        t = self.stage_epoch(epoch)
        if not self.hparams.scale_lr or t < 0:
            return 1.0
        return 1.0 / (1.0 + self.beta_at(t))

    def sieving(self) -> bool:
        """Whether this epoch's batches are sieved."""
        return not self.in_warmup and self.stage_epoch() >= int(self.hparams.sieve_epoch)

    # ---------------------------------------------------------------- the prior
    def setup(self, stage: str) -> None:
        super().setup(stage)
        facts = self.data_facts()
        if stage != "fit" or facts is None or self.hparams.prior != "noisy":
            return
        labels = facts.noisy_labels[facts.train_indices].long()
        labels = labels[labels >= 0]
        counts = torch.bincount(labels.cpu(), minlength=self.num_classes).float()
        # a checkpoint's prior replaces the first epoch's on resume
        self.initial_prior.copy_(counts / counts.sum())
        self.prior.copy_(self.initial_prior)
        self.num_train.fill_(float(counts.sum()))

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()
        self.dropped = torch.zeros(self.num_classes, device=self.device)
        self.beta_now.fill_(self.beta_at(self.stage_epoch()) if not self.in_warmup else 0.0)

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        if self.in_warmup or self.hparams.prior != "noisy":
            return
        dropped = self.trainer.strategy.reduce(self.dropped, reduce_op="sum")
        revised = (self.initial_prior * self.num_train - dropped.to(self.prior)).clamp_min(0.0)
        self.prior.copy_(revised / revised.sum().clamp_min(1e-12))
        self.log("train/sieved_out", dropped.sum())

    # ---------------------------------------------------------------- the objective
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """``CE - β_t · Σ_j P_j (-log(p_j + 1e-8))`` at this epoch's ``β_t``."""
        probs = F.softmax(logits.float(), dim=1)
        expected = -(self.prior * torch.log(probs + LOG_EPS)).sum(1)
        return cross_entropy(logits, batch["label"]) - self.beta_now * expected

    def sieve(self, logits: Tensor, labels: Tensor) -> Tensor:
        """The samples the sieve keeps: ``CE_i - mean_j(-log(p_ij + 1e-8)) <= 0``."""
        probs = F.softmax(logits.float(), dim=1)
        mean_ce = -torch.log(probs + LOG_EPS).mean(1)
        return cross_entropy(logits, labels) - mean_ce <= 0

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The VRNL objective of the losses of the samples the sieve keeps (all of them before
        ``sieve_epoch``); the dropped ones are counted per noisy class for the prior."""
        if self.in_warmup:
            return super().training_objective(batch)
        logits = self(batch["image"])
        losses = self.stage_loss_fn(logits, batch)
        used = None
        if self.sieving():
            with torch.no_grad():
                used = self.sieve(logits.detach(), batch["label"])
                if self.dropped.device != logits.device:
                    self.dropped = self.dropped.to(logits.device)
                self.dropped.index_add_(0, batch["label"], (~used).float())
        return self.vrnl(losses, logits, batch, used=used)
