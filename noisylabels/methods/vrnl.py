"""The VRNL objective: ``mean(l) - alpha * Var(l)`` over per-sample losses.

From "Do We Need to Penalize Variance of Losses for Learning with Label Noise?" (VRNL).
``Var`` is the population variance ``mean(l^2) - mean(l)^2``. ``alpha > 0`` increases the
variance (the paper's proposal), ``alpha = 0`` is the base method and ``alpha < 0`` penalizes it.
The gradient of the objective weights sample ``i`` by ``w_i = 1 + 2 alpha (mean(l) - l_i)``.

Under DDP, ``scope="global"`` computes mean and variance over the global batch with a
differentiable all-reduce of ``(sum l, sum l^2, n)``, so gradients are those of the objective on
the concatenated batch; ``scope="local"`` uses each process's own batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

SCOPES = ("global", "local")


@dataclass
class VRNLOutput:
    """Objective and the statistics behind it (statistics are detached)."""

    objective: Tensor
    mean: Tensor
    variance: Tensor
    weights: Tensor


def _global_sums(sums: Tensor) -> Tensor:
    """Differentiable sum of ``sums`` over all processes (identity without DDP)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        from torch.distributed.nn.functional import all_reduce

        return all_reduce(sums, op=dist.ReduceOp.SUM)
    return sums


def vrnl_objective(losses: Tensor, alpha: float, scope: str = "global") -> VRNLOutput:
    """Return ``mean(l) - alpha * Var(l)`` for per-sample losses ``l`` of shape ``(n,)``.

    Args:
        losses: per-sample losses of the base method (with gradient).
        alpha: variance coefficient; positive increases the variance, negative penalizes it.
        scope: ``"global"`` (statistics over all DDP processes) or ``"local"``.
    """
    if scope not in SCOPES:
        raise ValueError(f"variance scope must be one of {SCOPES}, got {scope!r}")
    if losses.ndim != 1:
        raise ValueError(f"expected per-sample losses of shape (n,), got {tuple(losses.shape)}")
    sums = torch.stack(
        [losses.sum(), losses.square().sum(), losses.new_tensor(float(losses.numel()))]
    )
    if scope == "global":
        sums = _global_sums(sums)
    n = sums[2].detach().clamp_min(1.0)
    mean = sums[0] / n
    variance = sums[1] / n - mean.square()
    objective = mean - alpha * variance if alpha != 0 else mean
    with torch.no_grad():
        weights = 1.0 + 2.0 * alpha * (mean - losses)
    return VRNLOutput(objective, mean.detach(), variance.detach(), weights)
