"""PTD, part-dependent transition matrices (Xia et al., "Part-dependent Label Noise: Towards
Instance-dependent Label Noise", NeurIPS 2020).

1. Warm-up: plain cross-entropy on the noisy labels (the schedule's ``warmup_epochs``;
   reference: 4 on MNIST).
2. Estimation point: the warm-up network's penultimate features (the input of its last linear
   layer) over the training and noisy-validation splits, without augmentation, are factorised
   by NMF into ``parts`` parts (reference: 10); a sample's weights ``w(x)`` are its NMF
   coefficients normalised to sum 1. The part matrices ``A_r`` (row-stochastic) are fitted to
   anchor points at ``parts`` outlier quantiles from 0.97 to 0.99 (see
   :mod:`noisylabels.noise.parts`), giving each sample ``T(x) = Σ_r w_r(x) A_r``, row-stochastic
   (``T(x)[i, j] = P(noisy=j | clean=i, x)``).
3. Importance reweighting with the sample's own T: ``l_i = β_i · CE(z_i, y~_i)``,
   ``β_i = p_{y~_i} / (p @ T(x_i))_{y~_i}``, β a constant weight as in the reference. Validation
   accuracy uses ``p @ T(x)`` against the noisy labels; the test accuracy uses the clean ``p``.

4. Revision (the schedule's ``revision_epochs > 0``, the reference's third stage): from the best
   reweighting model, one ``ΔT`` (C x C, from 0) shared by all samples revises every
   ``T(x) → rownorm(max(T(x) + ΔT, 0))``; the stage's own Adam (the optimizer group's
   ``revision_lr``, reference 5e-7) trains it with the network, β not detached (the reference
   takes ``|T(x) + ΔT|`` where this clips at 0, as T-Revision does).

With ``alpha != 0`` (PTD-VRNL) the variance is that of ``β_i · CE_i``. The reported T̂ (ε_T,
``transition_estimate.csv``) is the mean ``T(x)`` over the training split (revised by ΔT in the
revision stage).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.losses import importance_weights
from noisylabels.methods.core.stages import StageSchedule
from noisylabels.noise import (
    fit_part_transitions,
    part_noisy_posterior,
    part_transition,
    part_weights,
    revise_transition,
)


class PTD(NoisyLabelMethod):
    """PTD (Xia et al. 2020): reweighting with part-dependent transition matrices T(x).

    Args:
        parts: number of parts ``r`` of the NMF and of part matrices (reference: 10).
        anchor_quantiles: first and last outlier quantile (fractions) of the ``parts`` anchor
            points per class that the part matrices are fitted to (reference: 0.97 to 0.99).
        nmf_max_iter: iterations of scikit-learn's NMF.
        ridge: weight of the penalty pulling every part matrix toward the anchor estimate T̂
            (see :func:`~noisylabels.noise.fit_part_transitions`); 0 is the plain least
            squares of the reference.
        schedule: the stages (:class:`~noisylabels.methods.core.stages.StageSchedule`), with
            20 warm-up epochs by default (the parts are estimated from the warm-up model, so
            there must be one).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self,
        parts: int = 10,
        anchor_quantiles: Sequence[float] = (0.97, 0.99),
        nmf_max_iter: int = 200,
        ridge: float = 0.1,
        schedule: StageSchedule = StageSchedule(warmup_epochs=20),
        **kwargs: Any,
    ) -> None:
        super().__init__(schedule=schedule, **kwargs)
        if int(parts) < 1:
            raise InputError(f"parts must be >= 1, got {parts}")
        self.schedule.require_warmup("PTD's parts (the NMF of the network's features)")
        if ridge < 0:
            raise InputError(f"ridge must be >= 0, got {ridge}")
        low, high = (float(q) for q in anchor_quantiles)
        if not 0.0 < low <= high <= 1.0:
            raise InputError(
                f"anchor_quantiles must be two fractions 0 < low <= high <= 1, got "
                f"{list(anchor_quantiles)}"
            )
        c, r = self.num_classes, int(parts)
        self.register_buffer("part_matrices", torch.eye(c).expand(r, c, c).clone())
        self.register_buffer("mean_weights", torch.full((r,), 1.0 / r))
        # w(x) of every sample of the training set (train and validation split), by dataset
        # index, set at the estimation point. Part of the state dict (checkpoints) but not a
        # buffer, which DDP would broadcast before every training step.
        self.weights = torch.empty(0, r)
        if self.has_revision_stage:  # ΔT exists (and is checkpointed) only where it is learned
            self.delta = nn.Parameter(torch.zeros(c, c))
        save_hook = getattr(self, "register_state_dict_post_hook", None)
        (save_hook or self._register_state_dict_hook)(_save_weights)
        self.register_load_state_dict_pre_hook(_load_weights)

    # ---------------------------------------------------------------- T(x)
    def sample_weights(self, index: Tensor | None, n: int) -> Tensor:
        """``w(x)`` of the samples ``index`` (the training split's mean where unknown)."""
        if index is None or len(self.weights) == 0:
            return self.mean_weights.expand(n, -1)
        if self.weights.device != index.device:
            self.weights = self.weights.to(index.device)
        return self.weights[index]

    def transition_at(self, index: Tensor) -> Tensor:
        """``T(x)`` (n x C x C, row-stochastic) of the samples with dataset indices ``index``."""
        return part_transition(self.sample_weights(index, len(index)), self.part_matrices)

    def noisy_posterior(self, probs: Tensor, index: Tensor | None = None) -> Tensor:
        """``q = p @ T(x)`` per sample (``T`` of the mean weights without ``index``; revised by
        ΔT in the revision stage)."""
        weights = self.sample_weights(index, len(probs))
        if not self.in_revision:
            return part_noisy_posterior(probs, weights, self.part_matrices)
        T = revise_transition(part_transition(weights, self.part_matrices), self.delta)
        with torch.autocast(probs.device.type, enabled=False):
            return torch.bmm(probs.float().unsqueeze(1), T).squeeze(1)

    def mean_transition(self) -> Tensor:
        """The mean ``T(x)`` over the training split: ``Σ_r mean(w_r) A_r`` (revised by ΔT in
        the revision stage)."""
        T = part_transition(self.mean_weights[None], self.part_matrices)[0]
        return revise_transition(T, self.delta) if self.in_revision else T

    def transition(self) -> Tensor | None:
        """The mean ``T(x)`` over the training split (``None`` before the estimate)."""
        return None if self.in_warmup else self.mean_transition()

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        logits = logits.float()
        labels = batch["label"]
        probs = F.softmax(logits, dim=1)
        if not self.in_revision:  # β is a constant weight but in the revision stage
            probs = probs.detach()
        beta = importance_weights(probs, self.noisy_posterior(probs, batch.get("index")), labels)
        return beta * F.cross_entropy(logits, labels, reduction="none")

    def unused_parameters(self) -> list[nn.Parameter]:
        """ΔT (where there is a revision stage) before the revision stage."""
        return [self.delta] if self.has_revision_stage and not self.in_revision else []

    def on_revision_start(self) -> None:
        """The revision starts from ΔT = 0 (the reference's)."""
        with torch.no_grad():
            self.delta.zero_()

    # ---------------------------------------------------------------- the estimation point
    def on_main_stage_start(self) -> None:
        """Parts of the warm-up model's features (NMF), then part matrices from anchor points;
        every process uses process 0's result."""
        hp = self.hparams
        trainer = self.trainer
        features, probs, index = self._features(trainer.limit_train_batches, "train")
        n_train = len(probs)
        val_features, _, val_index = self._features(trainer.limit_val_batches, "val")
        if len(val_index):
            features = torch.cat([features, val_features])
            index = torch.cat([index, val_index])
        weights, error = part_weights(features, hp.parts, hp.nmf_max_iter, seed=0)
        low, high = (float(q) for q in hp.anchor_quantiles)
        quantiles = torch.linspace(low, high, hp.parts).tolist()
        part_matrices = fit_part_transitions(probs, weights[:n_train], quantiles, hp.ridge)
        facts = self.data_facts()
        all_weights = torch.full((facts.num_samples, hp.parts), 1.0 / hp.parts)
        all_weights[index] = weights
        strategy = trainer.strategy
        self.weights = strategy.broadcast(all_weights, src=0).to(self.device)
        self.part_matrices.copy_(strategy.broadcast(part_matrices, src=0))
        self.mean_weights.copy_(strategy.broadcast(weights[:n_train].mean(0), src=0))
        error_t = self.t_estimation_error(self.mean_transition())
        err = "" if error_t is None else f"; mean T(x): ε_T = {error_t:.4f}"
        rank_zero_info(
            f"PTD: {hp.parts} parts of the {features.shape[1]}-d features of {len(features)} "
            f"samples (NMF relative error {error:.3f}) at epoch {self.current_epoch}{err}"
        )

    def _features(self, limit: Any, split: str) -> tuple[Tensor, Tensor, Tensor]:
        """Penultimate features, softmax outputs and dataset indices of a split's samples."""
        features, probs, index = [], [], []
        with _classifier_inputs(self.net) as captured:
            for batch, logits in self.training_split_logits(limit, split=split):
                features.append(captured.pop().flatten(1).float().cpu())
                probs.append(F.softmax(logits.float(), dim=1).cpu())
                index.append(batch["index"].cpu())
        if not features:
            return torch.empty(0, 0), torch.empty(0, self.num_classes), torch.empty(0).long()
        return torch.cat(features), torch.cat(probs), torch.cat(index)


@contextmanager
def _classifier_inputs(net: nn.Module) -> Iterator[list[Tensor]]:
    """Capture the input of ``net``'s last linear layer (its penultimate features) on every
    forward pass, into the yielded list. The passes run eagerly: a compiled network's graphs do
    not call a hook added after they were made."""
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise InputError("PTD needs a backbone whose last layer is a torch.nn.Linear")
    captured: list[Tensor] = []
    handle = linears[-1].register_forward_hook(
        lambda module, inputs, output: captured.append(inputs[0].detach())
    )
    try:
        with torch.compiler.set_stance("force_eager"):
            yield captured
    finally:
        handle.remove()


def _save_weights(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``state_dict`` hook: the per-sample part weights go into the state dict."""
    state_dict[prefix + "weights"] = module.weights.detach().cpu()


def _load_weights(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: take the per-sample part weights out of the state dict."""
    saved = state_dict.pop(prefix + "weights", None)
    if saved is not None:
        module.weights = saved.to(module.mean_weights.device, torch.float32)
