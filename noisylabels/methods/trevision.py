"""T-Revision (Xia et al., "Are Anchor Points Really Indispensable in Label-Noise Learning?",
NeurIPS 2019): importance reweighting with a transition matrix that is revised while training.

1. Warm-up: plain cross-entropy on the noisy labels (``warmup_epochs``; reference: 20, 15 on
   CIFAR-100), then T̂ is estimated from the warm-up model (anchor points or Dual-T).
2. Per-sample loss ``l_i = β_i · CE(z_i, y~_i)`` with ``β_i = p_{y~_i} / (p @ T)_{y~_i}`` and the
   revised ``T = rownorm(max(T̂ + ΔT, 0))``: ``ΔT`` (C x C) starts at 0 and is learned through β
   by its own Adam optimizer (lr 5e-7), while the network keeps its own optimizer (β is a
   constant weight for the network unless ``detach_beta: false``). Clipping and renormalising
   keep T row-stochastic (``T[i, j] = P(noisy=j | clean=i)``) whatever ``ΔT`` becomes; ``ΔT``
   enters once per batch (the reference code adds it again for every sample of a batch, which
   this does not).

The reference runs the revision as a third stage (the reweighted model reloaded and fine-tuned
with ΔT at Adam lr 5e-7); here ΔT is learned jointly with the reweighted training. With
``alpha != 0`` (T-Revision-VRNL) the variance is that of the weighted losses ``β_i · CE_i``, and,
as for VolMinNet, its gradient reaches the network only: ΔT learns from the mean.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from noisylabels.methods.core.losses import apply_transition, importance_weights
from noisylabels.methods.reweight import Reweight


def revise_transition(T_hat: Tensor, delta: Tensor) -> Tensor:
    """``rownorm(max(T̂ + ΔT, 0))``: the revised, row-stochastic transition matrix (a row
    clipped to all zeros falls back to uniform)."""
    revised = (T_hat + delta).clamp_min(0.0)
    sums = revised.sum(dim=1, keepdim=True)
    uniform = torch.full_like(revised, 1.0 / revised.shape[1])
    return torch.where(sums > 0, revised / sums.clamp_min(1e-12), uniform)


class TRevision(Reweight):
    """T-Revision (Xia et al. 2019): reweighting with T̂ + ΔT, ΔT learned.

    Args:
        delta_lr: learning rate of ΔT's Adam optimizer (reference: 5e-7).
        delta_weight_decay: weight decay of ΔT (reference: the model's, 1e-4).
        **kwargs: see :class:`~noisylabels.methods.reweight.Reweight` (``transition``,
            ``estimator``, ``warmup_epochs``, ...).

    ``detach_beta: true`` (default) makes β a constant weight for the network, as in the
    reference's reweighting stage, while ΔT still learns through β; ``false`` also sends the
    network the gradient through β, as the reference's revision stage does (there the network
    moves at Adam lr 5e-7; at the protocol's SGD lr 0.01 it trains markedly worse).

    Both optimizers step on every batch through the base's shared manual-optimization step;
    ΔT's learning rate is constant, the network's follows ``milestones``.
    """

    def __init__(
        self, delta_lr: float = 5e-7, delta_weight_decay: float = 1e-4, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if delta_lr <= 0:
            raise ValueError(f"delta_lr must be positive, got {delta_lr}")
        if delta_weight_decay < 0:
            raise ValueError(f"delta_weight_decay must be >= 0, got {delta_weight_decay}")
        self.automatic_optimization = False
        self.delta = nn.Parameter(torch.zeros(self.num_classes, self.num_classes))

    def revised_transition(self) -> Tensor:
        """The T in use: T̂ revised by ΔT (row-stochastic, differentiable in ΔT)."""
        return revise_transition(self.T, self.delta)

    def transition(self) -> Tensor | None:
        return None if self.in_warmup else self.revised_transition()

    def noisy_posterior(self, probs: Tensor, index: Tensor | None = None) -> Tensor:
        return apply_transition(probs, self.revised_transition())

    def revision_loss(self, logits: Tensor, labels: Tensor, T: Tensor) -> Tensor:
        """``β_i · CE_i`` with ``β_i = p_{y~_i} / (p @ T)_{y~_i}`` for the transition ``T``."""
        logits = logits.float()
        probs = F.softmax(logits, dim=1)
        p = probs.detach() if self.detach_beta else probs
        beta = importance_weights(p, apply_transition(p, T), labels)
        return beta * F.cross_entropy(logits, labels, reduction="none")

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return self.revision_loss(logits, batch["label"], self.revised_transition())

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """VRNL objective of ``β_i · CE_i``; the variance term sees the losses through a
        detached ΔT, so ΔT learns from ``mean(l)`` only."""
        if self.in_warmup:
            return super().training_objective(batch)
        logits = self(batch["image"])
        T = self.revised_transition()
        losses = self.revision_loss(logits, batch["label"], T)
        detached = None
        if self.alpha != 0:
            detached = self.revision_loss(logits, batch["label"], T.detach())
        return self.vrnl(losses, logits, batch, variance_losses=detached)

    def configure_optimizers(self) -> Any:
        """The network's optimizer (with its LR milestones) and ΔT's Adam."""
        hp = self.hparams
        opt_net = self.make_optimizer(self.net.parameters(), hp.optimizer, hp.lr, hp.weight_decay)
        opt_delta = torch.optim.Adam(
            [self.delta], lr=hp.delta_lr, weight_decay=hp.delta_weight_decay
        )
        return [opt_net, opt_delta], [self.make_scheduler(opt_net)]
