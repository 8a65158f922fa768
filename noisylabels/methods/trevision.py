"""T-Revision (Xia et al., "Are Anchor Points Really Indispensable in Label-Noise Learning?",
NeurIPS 2019): importance reweighting with a transition matrix that is revised while training.

1. Warm-up: plain cross-entropy on the noisy labels (the schedule's ``warmup_epochs``;
   reference: 20, 15 on CIFAR-100), then T̂ is estimated from the warm-up model (anchor points
   or Dual-T).
2. Reweighting: per-sample loss ``l_i = β_i · CE(z_i, y~_i)`` with
   ``β_i = p_{y~_i} / (p @ T)_{y~_i}``.
3. Revision (the schedule's ``revision_epochs > 0``, the reference's protocol): from the best
   reweighting model, ``ΔT`` (C x C, from 0) and the network are trained together by the
   stage's own Adam (the optimizer group's ``revision_lr``, reference 5e-7) on the same loss
   with the revised ``T = rownorm(max(T̂ + ΔT, 0))``, β not detached, so the gradient reaches
   ΔT and the network through β. In stage 2 T̂ is then fixed.

With ``revision_epochs: 0`` the revision is joint instead: ΔT is learned from the first
reweighting epoch by its own Adam (``delta_lr``) while the network trains with β as
``detach_beta`` says. Clipping and renormalising keep T row-stochastic
(``T[i, j] = P(noisy=j | clean=i)``) whatever ``ΔT`` becomes; ``ΔT`` enters once per batch (the
reference code adds it again for every sample of a batch, which this does not). With
``alpha != 0`` (T-Revision-VRNL) the variance is that of the weighted losses ``β_i · CE_i``, and,
as for VolMinNet, its gradient reaches the network only: ΔT learns from the mean.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.losses import apply_transition, importance_weights
from noisylabels.methods.reweight import Reweight
from noisylabels.noise import revise_transition


class TRevision(Reweight):
    """T-Revision (Xia et al. 2019): reweighting with T̂ + ΔT, ΔT learned.

    Args:
        delta_lr: learning rate of ΔT's Adam optimizer in a joint revision (the schedule's
            ``revision_epochs: 0``; reference: 5e-7).
        delta_weight_decay: weight decay of ΔT in a joint revision (reference: the model's, 1e-4).
        **kwargs: see :class:`~noisylabels.methods.reweight.Reweight` (``transition``,
            ``estimator``, ``schedule``, ...); the revision stage is the schedule's
            (``revision_epochs``, ``revision_model``) with the optimizer group's
            ``revision_lr`` and ``revision_weight_decay``.

    ``detach_beta: true`` (default) makes β a constant weight for the network in the
    reweighting stage, as in the reference. In a joint revision ΔT still learns through β; the
    revision stage never detaches β.
    """

    def __init__(
        self, delta_lr: float = 5e-7, delta_weight_decay: float = 1e-4, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if delta_lr <= 0:
            raise InputError(f"--model.delta_lr must be positive, got {delta_lr}")
        if delta_weight_decay < 0:
            raise InputError(f"--model.delta_weight_decay must be >= 0, got {delta_weight_decay}")
        self.automatic_optimization = False
        self.delta = nn.Parameter(torch.zeros(self.num_classes, self.num_classes))

    @property
    def revises(self) -> bool:
        """Whether ΔT is learned now: in the revision stage, or jointly without one."""
        return self.in_revision or not self.has_revision_stage

    def revised_transition(self) -> Tensor:
        """The T in use: T̂ revised by ΔT (row-stochastic, differentiable in ΔT) while ΔT is
        learned, T̂ itself in a reweighting stage before a revision stage."""
        return revise_transition(self.T, self.delta) if self.revises else self.T

    def transition(self) -> Tensor | None:
        return None if self.in_warmup else self.revised_transition()

    def noisy_posterior(self, probs: Tensor, index: Tensor | None = None) -> Tensor:
        return apply_transition(probs, self.revised_transition())

    def revision_loss(self, logits: Tensor, labels: Tensor, T: Tensor) -> Tensor:
        """``β_i · CE_i`` with ``β_i = p_{y~_i} / (p @ T)_{y~_i}`` for the transition ``T`` (β
        detached for the network as ``detach_beta`` says, never in the revision stage)."""
        logits = logits.float()
        probs = F.softmax(logits, dim=1)
        p = probs.detach() if self.detach_beta and not self.in_revision else probs
        beta = importance_weights(p, apply_transition(p, T), labels)
        return beta * F.cross_entropy(logits, labels, reduction="none")

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return self.revision_loss(logits, batch["label"], self.revised_transition())

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """VRNL objective of ``β_i · CE_i``; while ΔT is learned the variance term sees the
        losses through a detached ΔT, so ΔT learns from ``mean(l)`` only."""
        if self.in_warmup or not self.revises:  # T̂ fixed: the reweighting stage
            return super().training_objective(batch)
        logits = self(batch["image"])
        T = self.revised_transition()
        losses = self.revision_loss(logits, batch["label"], T)
        detached = None
        if self.alpha != 0:
            detached = self.revision_loss(logits, batch["label"], T.detach())
        return self.vrnl(losses, logits, batch, variance_losses=detached)

    def unused_parameters(self) -> list[nn.Parameter]:
        """ΔT, in the warm-up and in a reweighting stage before the revision stage."""
        return [self.delta] if self.in_warmup or not self.revises else []

    def on_revision_start(self) -> None:
        """The revision starts from ΔT = 0 (the reference's)."""
        with torch.no_grad():
            self.delta.zero_()

    def configure_optimizers(self) -> Any:
        """The network's optimizer (with its LR schedule) and, in a joint revision, ΔT's Adam;
        with a revision stage, the stage's own Adam over the network and ΔT."""
        hp = self.hparams
        opt_net = self.make_optimizer(self.net.parameters())
        optimizers = [opt_net]
        if not self.has_revision_stage:
            optimizers.append(
                torch.optim.Adam([self.delta], lr=hp.delta_lr, weight_decay=hp.delta_weight_decay)
            )
        return self.with_revision(optimizers, [self.make_scheduler(opt_net)])
