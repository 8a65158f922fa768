"""Backward loss correction (Patrini et al., "Making Deep Neural Networks Robust to Label Noise:
a Loss Correction Approach", CVPR 2017), the sibling of Forward.

``T`` is row-stochastic, ``T[i, j] = P(noisy = j | clean = i)``. For a clean posterior
``p = softmax(z)`` write ``ℓ(p)`` for the column vector of the losses of every label,
``ℓ(p)_j = -log p_j``. The corrected per-sample loss is row ``y~`` of ``T^{-1}`` applied to it:

    l(p, y~) = (T^{-1} ℓ(p))_{y~} = Σ_j (T^{-1})[y~, j] · (-log p_j).

Why: for a clean label ``y = i`` the noisy label is ``j`` with probability ``T[i, j]``, so
``E_{y~ | y=i} [(T^{-1} ℓ)_{y~}] = Σ_j T[i, j] (T^{-1} ℓ)_j = (T T^{-1} ℓ)_i = ℓ_i``: in
expectation over the noise the corrected loss on the noisy label is the loss on the clean one
(Patrini et al., Theorem 1, written there with the same row-stochastic ``T``). ``T^{-1}`` has
negative entries, so ``l`` can be negative and is unbounded below where some ``p_j → 0``; as in
the reference, ``p`` is clipped to ``[1e-7, 1 - 1e-7]`` (Keras' epsilon) before the logarithm,
which bounds it.

T comes from the same places as Forward's
(:class:`~noisylabels.methods.transition.TransitionMethod`): the true T, a file, or T̂ estimated
after a warm-up (anchor points or Dual-T). Its inverse is
taken once, when T is stored, in float64 (a pseudo-inverse, which is the inverse wherever T is
invertible: a given singular T is refused before, a degenerate T̂ warned about). With
``alpha != 0`` this is Backward-VRNL, whose variance is that of the corrected losses ``l_i``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from noisylabels.methods.transition import TransitionMethod

CLIP = 1e-7
"""``p`` is clipped to ``[CLIP, 1 - CLIP]`` before the logarithm (the reference's Keras
epsilon)."""


def backward_loss(logits: Tensor, T_inv: Tensor, labels: Tensor) -> Tensor:
    """``(T^{-1} ℓ(p))_{y~}`` per sample, ``ℓ(p)_j = -log clip(p_j)``, for logits ``z`` (B x C),
    the inverse ``T_inv`` of a row-stochastic ``T[i, j] = P(noisy=j | clean=i)`` and the noisy
    labels; float32."""
    probs = F.softmax(logits.float(), dim=1).clamp(CLIP, 1.0 - CLIP)
    losses = -torch.log(probs)  # B x C: ℓ(p) of every sample, one row each
    with torch.autocast(losses.device.type, enabled=False):
        rows = T_inv.float()[labels]  # B x C: row y~_i of T^{-1}
        return (rows * losses).sum(1)


class Backward(TransitionMethod):
    """Backward correction: row ``y~`` of ``T^{-1}`` times the per-class losses (Patrini 2017).

    A given T (``true`` or a file) must be invertible with every diagonal entry above chance
    (``1/C``): others are refused (see
    :meth:`~noisylabels.methods.transition.TransitionMethod.check_given_transition`).
    """

    correction = "corrects by the loss (T^-1 (-log p))_y"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.register_buffer("T_inv", torch.eye(self.num_classes))

    def store_transition(self, T: Tensor) -> None:
        """Make ``T`` (row-stochastic) the transition matrix of the run, and keep its inverse."""
        super().store_transition(T)
        inverse = torch.linalg.pinv(self.T.detach().double().cpu())
        self.T_inv.copy_(inverse.to(self.T_inv))

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return backward_loss(logits, self.T_inv, batch["label"])
