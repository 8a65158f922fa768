"""Importance reweighting (Liu & Tao, "Classification with Noisy Labels by Importance
Reweighting", TPAMI 2016), in two stages.

1. Warm-up: plain cross-entropy on the noisy labels (``warmup_epochs``; paper: 20, 15 on
   CIFAR-100), then T̂ is estimated from the warm-up model (anchor points or Dual-T).
2. Per-sample loss ``l_i = β_i · CE(z_i, y~_i)`` with ``β_i = p_{y~_i} / (p @ T̂)_{y~_i}`` from the
   current model's softmax ``p``; ``T̂`` is row-stochastic, ``T̂[i, j] ≈ P(noisy=j | clean=i)``.

``β`` is a constant weight by default (``detach_beta: true``); ``detach_beta: false``
differentiates through it, as the VRNL paper's gradient formula does. With ``alpha != 0`` this is
Reweight-VRNL, whose variance is that of the weighted losses ``β_i · CE_i``.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor

from noisylabels.methods.core.losses import importance_weights
from noisylabels.methods.core.stages import StageSchedule
from noisylabels.methods.transition import TransitionMethod


class Reweight(TransitionMethod):
    """Importance reweighting with a transition matrix (Liu & Tao 2016).

    Args:
        transition: ``estimate`` (default: a warm-up, then T̂), ``true`` or a T file path; see
            :class:`~noisylabels.methods.transition.TransitionMethod` for the estimation options.
        detach_beta: treat ``β`` as a constant (default) or backpropagate through it.
        schedule: the stages (:class:`~noisylabels.methods.core.stages.StageSchedule`), with 20
            warm-up epochs by default (the paper; 15 on CIFAR-100).
        **kwargs: see :class:`~noisylabels.methods.transition.TransitionMethod`.

    A given T (``true`` or a file) must be invertible with every diagonal entry above chance
    (``1/C``; ``β <= 1 / T[y, y]``): others are refused.
    """

    correction = "reweights by p_y / (p @ T)_y"

    def __init__(
        self,
        transition: bool | str = "estimate",
        detach_beta: bool = True,
        schedule: StageSchedule = StageSchedule(warmup_epochs=20),
        **kwargs: Any,
    ) -> None:
        super().__init__(transition=transition, schedule=schedule, **kwargs)
        self.detach_beta = bool(detach_beta)

    def importance_weights(
        self, probs: Tensor, labels: Tensor, index: Tensor | None = None
    ) -> Tensor:
        """``β_i = p_{y~_i} / (p @ T)_{y~_i}`` for clean posteriors ``probs`` (B x C) of the
        samples ``index``. With ``detach_beta`` no gradient reaches the network through β (a
        learned T, as T-Revision's, still gets one)."""
        if self.detach_beta:
            probs = probs.detach()
        return importance_weights(probs, self.noisy_posterior(probs, index), labels)

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        logits = logits.float()
        labels = batch["label"]
        beta = self.importance_weights(F.softmax(logits, dim=1), labels, batch.get("index"))
        return beta * F.cross_entropy(logits, labels, reduction="none")
