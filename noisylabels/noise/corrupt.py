"""Corrupting clean labels with synthetic noise: the categorical draw from a class-level T that
the transition-matrix kinds share, the per-sample generator of instance-dependent noise, and the
measured rate and T of a labelling. Which kind uses which is said by its entry in
:mod:`noisylabels.noise.kinds`.

Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``.
All randomness comes from an explicit ``torch.Generator`` seeded by the *noise* seed, which is
independent of the training seed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .matrices import _check_num_classes, _check_rate, check_transition

__all__ = [
    "corrupt_labels",
    "rate_actual",
    "empirical_transition",
    "instance_flip_probabilities",
    "instance_dependent_noise",
]

_CHUNK_ELEMENTS = 1 << 24  # feature values per chunk of the instance-dependent noise (float64)


def _check_labels(labels: Tensor, num_classes: int) -> Tensor:
    labels = torch.as_tensor(labels)
    if labels.dim() != 1:
        raise ValueError(f"labels must be a 1-D tensor, got shape {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be an integer tensor, got dtype {labels.dtype}")
    labels = labels.long()
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"labels must lie in [0, {num_classes}), got range "
            f"[{labels.min().item()}, {labels.max().item()}]"
        )
    return labels


def corrupt_labels(labels: Tensor, T: Tensor, generator: torch.Generator) -> Tensor:
    """Draw noisy labels: sample ``i`` gets ``ỹ_i ~ Categorical(T[labels[i]])``.

    ``T`` is row-stochastic, ``T[i, j] = P(noisy=j | clean=i)``. Sampling is vectorised
    (``torch.multinomial`` on ``T[labels]``) and driven by ``generator`` (a CPU generator), so the
    same generator state gives the same labels. Returns a long tensor on the device of ``labels``.
    """
    T = check_transition(T).detach().cpu()
    device = torch.as_tensor(labels).device
    labels = _check_labels(labels, T.shape[0]).cpu()
    if labels.numel() == 0:
        return labels.clone().to(device)
    noisy = torch.multinomial(T[labels], 1, replacement=True, generator=generator).squeeze(1)
    return noisy.to(device)


def rate_actual(clean: Tensor, noisy: Tensor) -> float:
    """The measured (actual) noise rate: the fraction of samples whose noisy label differs from
    the clean one."""
    clean = torch.as_tensor(clean)
    noisy = torch.as_tensor(noisy)
    if clean.shape != noisy.shape:
        raise ValueError(
            f"shape mismatch: clean {tuple(clean.shape)} vs noisy {tuple(noisy.shape)}"
        )
    if clean.numel() == 0:
        return 0.0
    return (clean != noisy.to(clean.device)).float().mean().item()


def _truncated_normal(
    n: int, mean: float, std: float, low: float, high: float, generator: torch.Generator
) -> Tensor:
    """``n`` draws of Normal(mean, std) truncated to [low, high], by inverse CDF (float64)."""
    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0)
    a = normal.cdf(torch.tensor((low - mean) / std, dtype=torch.float64))
    b = normal.cdf(torch.tensor((high - mean) / std, dtype=torch.float64))
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    u = (a + u * (b - a)).clamp(1e-12, 1.0 - 1e-12)
    return (mean + std * torch.special.ndtri(u)).clamp(low, high)


def empirical_transition(clean: Tensor, noisy: Tensor, num_classes: int) -> Tensor:
    """Measured class-level transition of a labelling: row-stochastic,
    ``T[i, j] = #(clean = i, noisy = j) / #(clean = i)``.

    Samples whose clean label is unknown (``-1``) are left out; a class without any sample keeps
    the identity row. For instance-dependent, file and real noise this is the only T there is.
    """
    c = _check_num_classes(num_classes)
    clean = torch.as_tensor(clean).long().cpu()
    noisy = torch.as_tensor(noisy).long().cpu()
    if clean.shape != noisy.shape:
        raise ValueError(
            f"shape mismatch: clean {tuple(clean.shape)} vs noisy {tuple(noisy.shape)}"
        )
    known = clean >= 0
    counts = torch.bincount(clean[known] * c + noisy[known], minlength=c * c).view(c, c)
    counts = counts.double()
    totals = counts.sum(dim=1, keepdim=True)
    T = torch.where(totals > 0, counts / totals.clamp_min(1), torch.eye(c, dtype=torch.float64))
    return T.float()


def instance_flip_probabilities(
    features: Tensor,
    labels: Tensor,
    num_classes: int,
    rate_nominal: float,
    generator: torch.Generator,
) -> Tensor:
    """Per-sample label distributions of PTD's instance-dependent noise (Xia et al. 2020,
    "Part-dependent label noise: towards instance-dependent label noise", NeurIPS).

    Row ``i`` of the result is ``P(noisy = j | x_i, clean = y_i)`` (row convention, rows sum
    to 1), built as in PTD's generator:

    1. flip rate ``q_i ~ TruncNormal(rate_nominal, 0.1)`` on [0, 1];
    2. ``W ~ N(0, 1)`` of shape C x d x C (drawn once);
    3. ``a = x_i @ W[y_i]`` with ``x_i`` the flattened features at their **raw scale** (pixel
       values 0-255: no division by 255, no unit-length scaling) and ``a[y_i] = -inf``;
    4. ``q_i * softmax(a)`` with ``1 - q_i`` added at ``y_i``.

    At the pixel scale ``softmax(a)`` is nearly one-hot, so each sample has its own flip target:
    the noise depends on the instance, not only on its class. Draw order from ``generator``:
    q (N values), then W. Logits are computed in float64, per class and in chunks of samples
    (``features`` may stay uint8; it is converted chunk by chunk).
    """
    c = _check_num_classes(num_classes)
    rate_nominal = _check_rate(rate_nominal)
    labels = _check_labels(labels, c).cpu()
    features = torch.as_tensor(features).detach().cpu()
    n = labels.numel()
    if features.shape[0] != n:
        raise ValueError(f"features have {features.shape[0]} rows but there are {n} labels")
    x = features.reshape(n, -1)
    q = _truncated_normal(n, rate_nominal, 0.1, 0.0, 1.0, generator)
    W = torch.randn(c, x.shape[1], c, generator=generator)
    logits = torch.empty(n, c, dtype=torch.float64)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, x.shape[1]))
    for k in torch.unique(labels).tolist():  # loop over classes (and chunks), not samples
        rows = torch.nonzero(labels == k).flatten()
        w = W[k].double()
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            logits[part] = x[part].double() @ w
    rows = torch.arange(n)
    logits[rows, labels] = float("-inf")
    probs = torch.softmax(logits, dim=1) * q[:, None]
    probs[rows, labels] += 1.0 - q
    return probs


def instance_dependent_noise(
    features: Tensor,
    labels: Tensor,
    num_classes: int,
    rate_nominal: float,
    generator: torch.Generator,
) -> Tensor:
    """Instance-dependent noise of the PTD paper (Xia et al. 2020, "Part-dependent label noise").

    No class-level T exists: sample ``i``'s noisy label is one draw from row ``i`` of
    :func:`instance_flip_probabilities` (raw-scale features, see there), with ``generator``
    continuing after q and W. Returns a long tensor of noisy labels on the device of ``labels``.
    """
    device = torch.as_tensor(labels).device
    probs = instance_flip_probabilities(features, labels, num_classes, rate_nominal, generator)
    if len(probs) == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    noisy = torch.multinomial(probs, 1, replacement=True, generator=generator).squeeze(1)
    return noisy.to(device)
