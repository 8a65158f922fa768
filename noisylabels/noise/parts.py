"""Part-dependent transition matrices (PTD: Xia et al., "Part-dependent Label Noise: Towards
Instance-dependent Label Noise", NeurIPS 2020).

An instance's transition matrix is a convex combination of ``R`` part matrices,
``T(x) = Σ_r w_r(x) A_r``: ``w(x) >= 0`` with ``Σ_r w_r(x) = 1`` are the weights of ``x`` on
``R`` parts found by a non-negative matrix factorisation of (non-negative) deep features, and
every ``A_r`` is row-stochastic, ``A_r[i, j] = P(noisy = j | clean = i, part r)``, so ``T(x)`` is
row-stochastic too. The part matrices are fitted to anchor points: at each of several outlier
quantiles, the anchor point ``x*`` of class ``i`` (:func:`~noisylabels.noise.anchor_points`)
has ``T(x*)[i, :] ≈ softmax output at x*``, so row ``i`` of the ``A_r`` is the least-squares
fit of ``Σ_r w_r(x*) A_r[i, :]`` to those outputs, with a ridge penalty toward the anchor
estimate T̂ (PTD's reference code fits the least squares alone, with its own normalisation;
here each row is a softmax of free parameters).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from .estimate import anchor_points

__all__ = ["part_weights", "fit_part_transitions", "part_transition", "part_noisy_posterior"]


def part_weights(
    features: Tensor, parts: int, max_iter: int = 200, seed: int = 0
) -> tuple[Tensor, float]:
    """Weights ``w(x)`` (N x ``parts``, rows summing to 1) of the rows of ``features`` on
    ``parts`` parts, from scikit-learn's NMF ``features ≈ W H`` (negative entries are clipped to
    0 first; ``nndsvda`` initialisation, or a seeded random one where ``parts`` exceeds the
    number of samples or features). A sample whose features are all zero gets equal weights.

    Returns ``(weights, relative reconstruction error ‖X − WH‖ / ‖X‖)``.
    """
    from sklearn.decomposition import NMF

    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    X = features.detach().float().clamp_min(0).cpu().numpy()
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"features must be an N x d matrix (N >= 1), got {X.shape}")
    init = "nndsvda" if parts <= min(X.shape) else "random"
    model = NMF(n_components=parts, init=init, max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a ConvergenceWarning: the error below says how good
        W = model.fit_transform(X)
    norm = float(np.linalg.norm(X))
    error = float(model.reconstruction_err_) / norm if norm > 0 else 0.0
    weights = torch.from_numpy(W).float()
    sums = weights.sum(dim=1, keepdim=True)
    weights = torch.where(sums > 0, weights / sums.clamp_min(1e-12), 1.0 / parts)
    return weights, error


def fit_part_transitions(
    probs: Tensor,
    weights: Tensor,
    quantiles: Sequence[float],
    ridge: float = 0.1,
    steps: int = 300,
    lr: float = 0.05,
) -> Tensor:
    """Part matrices ``A`` (R x C x C, each row-stochastic) fitted to anchor points.

    Args:
        probs: softmax outputs (N x C) of a model trained on the noisy labels, without
            augmentation.
        weights: the same samples' part weights (N x R, rows summing to 1).
        quantiles: outlier-filter quantiles (fractions); each gives one anchor point per class.
        ridge: weight of ``Σ_r ‖A_r − T̂‖²``, which pulls every part matrix toward the anchor
            estimate T̂ at the first quantile. Each class has as many anchor points as there
            are parts, often with similar weights, so the least-squares fit alone is
            ill-conditioned and scatters ``T(x)`` far from any plausible T (on MNIST with 50 %
            symmetric noise, a mean ε_T of ``T(x)`` of 0.61 without the penalty, 0.18 with 0.1,
            against 0.16 of T̂ itself).
        steps, lr: Adam steps and learning rate of the fit (deterministic).

    Every ``A_r`` starts at T̂, so parts that no anchor point weighs keep that estimate.
    """
    probs = probs.detach().float().cpu()
    weights = weights.detach().float().cpu()
    if probs.shape[0] != weights.shape[0]:
        raise ValueError(f"{probs.shape[0]} outputs but {weights.shape[0]} rows of weights")
    c, r = probs.shape[1], weights.shape[1]
    anchors = torch.stack([anchor_points(probs, True, float(q)) for q in quantiles])  # (J, C)
    targets = probs[anchors]  # (J, C, C): row i of target j is anchor (j, i)'s output
    targets = targets / targets.sum(dim=2, keepdim=True)
    w = weights[anchors]  # (J, C, R)
    prior = targets[0]  # the anchor estimate of T at the first quantile
    theta = prior.clamp_min(1e-6).log().expand(r, c, c).clone().requires_grad_(True)
    optimizer = torch.optim.Adam([theta], lr=lr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # hundreds of tiny steps: a thread pool only costs here
    try:
        with torch.enable_grad():
            for _ in range(steps):
                A = torch.softmax(theta, dim=2)  # (R, C, C)
                # prediction of anchor (j, i): sum_r w[j, i, r] * A[r, i, :]
                pred = torch.einsum("jir,rik->jik", w, A)
                loss = (pred - targets).square().sum() + ridge * (A - prior).square().sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return torch.softmax(theta.detach(), dim=2)


def part_transition(weights: Tensor, part_matrices: Tensor) -> Tensor:
    """``T(x) = Σ_r w_r(x) A_r`` for each row of ``weights`` (n x R): ``(n, C, C)``,
    row-stochastic when the weights sum to 1 and every ``A_r`` is row-stochastic."""
    return torch.einsum("nr,rij->nij", weights.float(), part_matrices.float())


def part_noisy_posterior(probs: Tensor, weights: Tensor, part_matrices: Tensor) -> Tensor:
    """Noisy posteriors ``q = p @ T(x) = Σ_r w_r(x) (p @ A_r)`` (n x C) of clean posteriors
    ``probs`` (n x C), without forming the n matrices ``T(x)``."""
    with torch.autocast(probs.device.type, enabled=False):
        probs = probs.float()
        q = torch.zeros_like(probs)
        for r in range(part_matrices.shape[0]):
            q = q + weights[:, r : r + 1].float() * (probs @ part_matrices[r].float())
    return q
