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

from noisylabels.methods.losses import EPS
from noisylabels.methods.transition import TransitionMethod


class Reweight(TransitionMethod):
    """Importance reweighting with a transition matrix (Liu & Tao 2016).

    Args:
        transition: ``estimate`` (default: warm-up, then T̂), ``true`` or a T file path; see
            :class:`~noisylabels.methods.transition.TransitionMethod` for the estimation options.
        detach_beta: treat ``β`` as a constant (default) or backpropagate through it.
        **kwargs: see :class:`~noisylabels.methods.transition.TransitionMethod`.
    """

    def __init__(
        self, transition: bool | str = "estimate", detach_beta: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(transition=transition, **kwargs)
        self.detach_beta = bool(detach_beta)

    def importance_weights(self, probs: Tensor, labels: Tensor) -> Tensor:
        """``β_i = p_{y~_i} / (p @ T)_{y~_i}`` for clean posteriors ``probs`` (B x C)."""
        idx = labels.unsqueeze(1)
        p_y = probs.gather(1, idx).squeeze(1)
        q_y = self.noisy_posterior(probs).gather(1, idx).squeeze(1)
        beta = p_y / q_y.clamp_min(EPS)
        return beta.detach() if self.detach_beta else beta

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        logits = logits.float()
        labels = batch["label"]
        beta = self.importance_weights(F.softmax(logits, dim=1), labels)
        return beta * F.cross_entropy(logits, labels, reduction="none")
