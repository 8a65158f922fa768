"""Per-sample losses shared by the methods.

Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``, so the noisy
posterior of a clean posterior ``p`` (a row vector) is ``q = p @ T``.
"""

from __future__ import annotations

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
