"""Estimating and perturbing transition matrices.

All matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .corrupt import empirical_transition
from .matrices import check_transition

__all__ = [
    "anchor_points",
    "anchor_transition",
    "dual_t_correction",
    "dual_t_transition",
    "estimation_error",
    "bias_transition",
]


def _check_probs(probs: Tensor) -> Tensor:
    probs = torch.as_tensor(probs).detach()
    if probs.dim() != 2 or probs.shape[0] == 0 or probs.shape[1] < 2:
        raise ValueError(
            f"probs must be an N x C matrix (N >= 1, C >= 2), got {tuple(probs.shape)}"
        )
    if not probs.is_floating_point():
        raise ValueError(f"probs must be floating point, got dtype {probs.dtype}")
    return probs


def _normalize_rows(M: Tensor) -> Tensor:
    return M / M.sum(dim=1, keepdim=True).clamp_min(torch.finfo(M.dtype).tiny)


def _column_quantile(x: Tensor, q: float) -> Tensor:
    """Per-column quantile with linear interpolation (same as ``torch.quantile(x, q, dim=0)``),
    without ``torch.quantile``'s input-size limit."""
    s, _ = torch.sort(x, dim=0)
    pos = q * (x.shape[0] - 1)
    lo = int(pos)
    hi = min(lo + 1, x.shape[0] - 1)
    frac = pos - lo
    return s[lo] + (s[hi] - s[lo]) * frac


def anchor_points(probs: Tensor, filter_outliers: bool = True, quantile: float = 0.97) -> Tensor:
    """Index of each class's anchor point among the rows of ``probs`` (N x C softmax outputs):
    the sample maximising ``probs[:, i]``, with ``filter_outliers`` among the entries below the
    column's ``quantile`` (a fraction); see :func:`anchor_transition`. Returns ``(C,)`` indices.
    """
    probs = _check_probs(probs)
    if not (0.0 < quantile <= 1.0):
        raise ValueError(
            f"quantile must be a fraction in (0, 1] (e.g. 0.97, not 97), got {quantile}"
        )
    anchors = probs.argmax(dim=0)
    if filter_outliers:
        thresh = _column_quantile(probs, quantile)
        below = probs < thresh
        masked = probs.masked_fill(~below, float("-inf"))  # new tensor; probs untouched
        filtered = masked.argmax(dim=0)
        # a column with nothing below its threshold (e.g. constant) falls back to the plain argmax
        anchors = torch.where(below.any(dim=0), filtered, anchors)
    return anchors


def anchor_transition(
    probs: Tensor, filter_outliers: bool = True, quantile: float = 0.97
) -> Tensor:
    """Anchor-point estimate of T (Patrini et al. 2017, "Making deep neural networks robust to
    label noise"; also Liu & Tao 2015).

    ``probs`` (N x C) are the softmax outputs of a model trained on noisy labels, computed
    without augmentation. For each class ``i``, the anchor ``x*`` maximises ``probs[:, i]``; with
    ``filter_outliers`` entries at or above the column's ``quantile`` (a fraction, default 0.97)
    are ignored first. Row ``i`` of the estimate is ``probs[x*, :]``; rows are renormalised.
    Returns a row-stochastic ``T̂[i, j] ≈ P(noisy=j | clean=i)``. ``probs`` is not modified.
    """
    probs = _check_probs(probs)
    anchors = anchor_points(probs, filter_outliers, quantile)
    return _normalize_rows(probs[anchors].clone())


def dual_t_correction(probs: Tensor, noisy_labels: Tensor, num_classes: int) -> Tensor:
    """The correction factor T♠ of Dual-T (Yao et al. 2020, "Dual T: reducing estimation error for
    transition matrix in label-noise learning").

    ``T♠[i, j] = #(argmax probs = i and noisy = j) / #(argmax probs = i)``, a row-stochastic
    matrix from the intermediate (predicted) class to the noisy class, in the same row convention
    as ``T[i, j] = P(noisy=j | clean=i)``. Rows of classes never predicted are identity rows.
    """
    probs = _check_probs(probs)
    noisy = torch.as_tensor(noisy_labels).long().to(probs.device)
    c = int(num_classes)
    if probs.shape[1] != c:
        raise ValueError(f"probs have {probs.shape[1]} columns, expected num_classes={c}")
    if noisy.shape != (probs.shape[0],):
        raise ValueError(
            f"noisy_labels must have shape ({probs.shape[0]},), got {tuple(noisy.shape)}"
        )
    if noisy.numel() and (noisy.min() < 0 or noisy.max() >= c):
        raise ValueError(f"noisy_labels must lie in [0, {c})")
    # the measured transition from the predicted class to the noisy label
    T_spade = empirical_transition(probs.argmax(dim=1), noisy, c)
    return T_spade.to(device=probs.device, dtype=probs.dtype)


def dual_t_transition(
    probs: Tensor,
    noisy_labels: Tensor,
    filter_outliers: bool = True,
    quantile: float = 0.97,
) -> Tensor:
    """Dual-T estimate (Yao et al. 2020): anchor estimate ``T̂`` (:func:`anchor_transition`)
    times the correction ``T♠`` (:func:`dual_t_correction`), rows renormalised.

    Returns a row-stochastic ``T[i, j] ≈ P(noisy=j | clean=i)``.
    """
    return dual_t_parts(probs, noisy_labels, filter_outliers, quantile)[2]


def dual_t_parts(
    probs: Tensor,
    noisy_labels: Tensor,
    filter_outliers: bool = True,
    quantile: float = 0.97,
) -> tuple[Tensor, Tensor, Tensor]:
    """The parts of the Dual-T estimate: the anchor estimate ``T♣``, the correction ``T♠`` and
    their renormalised product (:func:`dual_t_transition`), all row-stochastic."""
    probs = _check_probs(probs)
    T_club = anchor_transition(probs, filter_outliers=filter_outliers, quantile=quantile)
    T_spade = dual_t_correction(probs, noisy_labels, probs.shape[1])
    return T_club, T_spade, _normalize_rows(T_club @ T_spade)


def estimation_error(T: Tensor, T_hat: Tensor) -> float:
    """Relative entry-wise L1 error ``‖T − T̂‖₁,₁ / ‖T‖₁,₁`` of an estimated transition matrix.

    Both are row-stochastic, ``T[i, j] = P(noisy=j | clean=i)`` (the error is the same in the
    column convention as long as both use it).
    """
    T = torch.as_tensor(T).detach().double()
    T_hat = torch.as_tensor(T_hat).detach().double().to(T.device)
    if T.shape != T_hat.shape:
        raise ValueError(f"shape mismatch: T {tuple(T.shape)} vs T_hat {tuple(T_hat.shape)}")
    norm = T.abs().sum()
    if norm == 0:
        raise ValueError("reference transition matrix T is all zeros")
    return ((T - T_hat).abs().sum() / norm).item()


def bias_transition(T: Tensor, gamma: float, generator: torch.Generator) -> Tensor:
    """Biased transition matrix of the VRNL paper §4.4: ``T^ρ = T + γ|Δ|``, ``Δ ~ N(0, 1)``
    entry-wise (drawn with the CPU ``generator``), rows renormalised (the paper normalises columns
    in its column convention). Input and output are row-stochastic,
    ``T[i, j] = P(noisy=j | clean=i)``. ``gamma = 0`` returns a copy of ``T``; ``gamma < 0`` raises.
    """
    gamma = float(gamma)
    if not gamma >= 0.0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    T = check_transition(T)
    if gamma == 0.0:
        return T.clone()
    delta = torch.randn(T.shape, generator=generator, dtype=torch.float64).abs()
    biased = T.detach().double().cpu() + gamma * delta
    return _normalize_rows(biased).to(dtype=T.dtype, device=T.device)
