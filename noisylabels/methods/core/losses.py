"""Per-sample losses shared by the methods.

Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``, so the noisy
posterior of a clean posterior ``p`` (a row vector) is ``q = p @ T``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

EPS = 1e-12
"""Added inside the logarithm of corrected losses (Patrini et al. 2017's reference value)."""


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Per-sample cross-entropy ``-log softmax(z)_y`` in float32, shape ``(B,)``."""
    return F.cross_entropy(logits.float(), labels, reduction="none")


def apply_transition(probs: Tensor, T: Tensor) -> Tensor:
    """Noisy posteriors ``q = p @ T`` in float32 (also under mixed precision), for clean
    posteriors ``probs`` (B x C) and a row-stochastic ``T[i, j] = P(noisy=j | clean=i)``."""
    with torch.autocast(probs.device.type, enabled=False):
        return probs.float() @ T.float()


def forward_loss(probs: Tensor, T: Tensor, labels: Tensor) -> Tensor:
    """Forward-corrected loss ``-log((p @ T)_{y~} + 1e-12)`` per sample (Patrini et al. 2017),
    for clean posteriors ``probs`` (B x C) and a row-stochastic
    ``T[i, j] = P(noisy=j | clean=i)``."""
    q = apply_transition(probs, T)
    return -torch.log(q.gather(1, labels.unsqueeze(1)).squeeze(1) + EPS)


def importance_weights(probs: Tensor, noisy_probs: Tensor, labels: Tensor) -> Tensor:
    """Importance weights ``β_i = p_{y~_i} / q_{y~_i}`` (Liu & Tao 2016) of clean posteriors
    ``probs`` and noisy posteriors ``noisy_probs`` (both B x C; ``q = p @ T`` with a
    row-stochastic ``T[i, j] = P(noisy=j | clean=i)``, or a per-sample T(x)), in float32."""
    idx = labels.unsqueeze(1)
    p_y = probs.float().gather(1, idx).squeeze(1)
    q_y = noisy_probs.float().gather(1, idx).squeeze(1)
    return p_y / q_y.clamp_min(EPS)


RCE_PROB_FLOOR = 1e-7
"""The floor of the predicted probabilities in the reverse cross-entropy (Wang et al. 2019's
reference clamps ``p`` to ``[1e-7, 1]``)."""
RCE_LOG_ZERO = math.log(1e-4)
"""``A``, the value the reverse cross-entropy takes for ``log 0`` (its reference clamps the
one-hot label to ``[1e-4, 1]``, so ``A = log 1e-4 ≈ -9.21``)."""


def reverse_cross_entropy(
    logits: Tensor,
    labels: Tensor,
    log_zero: float = RCE_LOG_ZERO,
    prob_floor: float = RCE_PROB_FLOOR,
) -> Tensor:
    """Reverse cross-entropy ``-Σ_k p_k log q_k`` per sample, in float32, shape ``(B,)``: ``p``
    the softmax of ``logits`` floored at ``prob_floor``, ``q`` the one-hot label with ``log 0``
    taken as ``log_zero`` (``log 1 = 0``), so ``-log_zero · Σ_{k≠y} max(p_k, prob_floor)``, in
    ``[-log_zero (1 - p_y), -log_zero (1 - p_y + (K - 1) prob_floor)]``."""
    probs = F.softmax(logits.float(), dim=1).clamp(min=prob_floor, max=1.0)
    others = probs.masked_fill(F.one_hot(labels, probs.shape[1]).bool(), 0.0).sum(dim=1)
    return -log_zero * others
