"""The VRNL objective: ``mean(l) - alpha * Var(l)`` over per-sample losses.

From "Do We Need to Penalize Variance of Losses for Learning with Label Noise?" (VRNL).
``Var`` is the population variance ``mean(l^2) - mean(l)^2``. ``alpha > 0`` increases the
variance (the paper's proposal), ``alpha = 0`` is the base method and ``alpha < 0`` penalizes it.
The gradient of the objective weights sample ``i`` by ``w_i = 1 + 2 alpha (mean(l) - l_i)``.

Under DDP, ``scope="global"`` computes mean and variance over the global batch with a
differentiable all-reduce of ``(sum l, sum l^2, n)``; ``scope="local"`` uses each process's own
batch. Why the global gradient is right: every process computes the same objective ``R`` of the
global batch from the same reduced sums, so the backward of the sum over the ``W`` processes
(the sum of identical incoming gradients) is ``W`` times the local one and process ``r`` gets
``W * dR/d(its losses)``; DDP then averages the parameter gradients over the
processes, which gives ``sum_r dR/d(losses of r) * d(losses of r)/dtheta = dR/dtheta``: the
gradient of the objective on the concatenated batch.

The bounded form (``form="bounded"``) keeps the objective's value and floors each sample's
weight at 0: its gradient is that of ``sum_i max(w_i, 0) l_i / n`` with the weights held constant,
so that no sample's loss is pushed up (the paper's form pushes up every loss whose weight is
negative, which is what leaves ``mean - alpha * Var`` unbounded below for ``alpha > 0`` and an
unbounded loss). Where every weight is positive the two forms have the same gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from noisylabels.errors import InputError, warn
from noisylabels.methods.core.distributed import SumOverProcesses

SCOPES = ("global", "local")
FORMS = ("paper", "bounded")
"""The forms of the objective: the paper's ``mean - alpha * Var`` and its bounded form, whose
gradient weights every sample by ``max(1 + 2 alpha (mean(l) - l_i), 0)``."""


@dataclass
class VRNLOutput:
    """Objective and the statistics behind it (statistics are detached)."""

    objective: Tensor
    mean: Tensor
    variance: Tensor
    weights: Tensor


class _AllReduceSum(SumOverProcesses):
    """Sum over processes, for a result that every process turns into the same objective.

    The exact backward of a sum over processes sums the incoming gradients over processes. Here
    every process receives the same incoming gradient (each computes the identical objective from
    the identical reduced sums), so that sum is ``world_size * grad``: computed locally, it saves
    a second collective and the wait for the slowest process in the middle of the backward pass.
    """

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * dist.get_world_size()


def _global_sums(sums: Tensor) -> Tensor:
    """Differentiable sum of ``sums`` over all processes (identity without DDP)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return _AllReduceSum.apply(sums)
    return sums


def vrnl_objective(
    losses: Tensor,
    alpha: float,
    scope: str = "global",
    variance_losses: Tensor | None = None,
    mask: Tensor | None = None,
    form: str = "paper",
) -> VRNLOutput:
    """Return ``mean(l) - alpha * Var(l)`` for per-sample losses ``l`` of shape ``(n,)``.

    Args:
        losses: per-sample losses of the base method (with gradient).
        alpha: variance coefficient; positive increases the variance, negative penalizes it.
        scope: ``"global"`` (statistics over all DDP processes) or ``"local"``.
        variance_losses: the same losses computed through another graph, when the variance
            term must reach only some parameters (VolMinNet: the classifier, not T); their values
            equal ``losses``. Default: ``losses``.
        mask: boolean ``(n,)``: the statistics cover only these samples (a method's selection);
            the others get weight 0 (and no gradient). Applied with ``torch.where``, never by
            indexing, so the result needs no host synchronization.
        form: ``"paper"`` (the gradient of ``mean - alpha * Var``: sample ``i`` weighted by
            ``w_i = 1 + 2 alpha (mean(l) - l_i)``) or ``"bounded"`` (the same value, its gradient
            with every ``w_i`` floored at 0; ``weights`` are then the floored ones).

    Every operation runs on the losses' device with shapes known in advance (no host
    synchronization), so the function can be compiled into one graph.
    """
    if scope not in SCOPES:
        raise ValueError(f"variance scope must be one of {SCOPES}, got {scope!r}")
    if form not in FORMS:
        raise ValueError(f"VRNL form must be one of {FORMS}, got {form!r}")
    if losses.ndim != 1:
        raise ValueError(f"expected per-sample losses of shape (n,), got {tuple(losses.shape)}")
    v = losses if variance_losses is None else variance_losses
    if v.shape != losses.shape:
        raise ValueError("variance_losses must have the shape of losses")
    if mask is None:
        count = losses.new_full((), float(losses.numel()))  # a fill, not a host-to-device copy
        sums = torch.stack([losses.sum(), v.square().sum(), count, v.sum()])
    else:
        chosen, v = torch.where(mask, losses, 0.0), torch.where(mask, v, 0.0)
        count = mask.sum().to(losses.dtype)
        sums = torch.stack([chosen.sum(), v.square().sum(), count, v.sum()])
    if scope == "global":
        sums = _global_sums(sums)
    n = sums[2].detach().clamp_min(1.0)
    mean = sums[0] / n
    variance = sums[1] / n - (sums[3] / n).square()
    objective = mean - alpha * variance if alpha != 0 else mean
    with torch.no_grad():
        weights = 1.0 + 2.0 * alpha * (mean - losses)
        if form == "bounded":
            weights = weights.clamp_min(0.0)
        if mask is not None:
            weights = torch.where(mask, weights, 0.0)
    if form == "bounded" and alpha != 0:
        objective = _bounded(objective, mean, v, weights, n, scope)
    return VRNLOutput(objective, mean.detach(), variance.detach(), weights)


def _bounded(
    objective: Tensor, mean: Tensor, v: Tensor, weights: Tensor, n: Tensor, scope: str
) -> Tensor:
    """The bounded form's objective: the value of ``objective``, the gradient of ``mean`` (every
    sample at weight 1, through ``losses``' graph) plus ``sum_i (w_i - 1) v_i / n`` with the
    floored weights ``w_i`` held constant (through ``v``, the variance's graph): together
    ``sum_i w_i dl_i / n``. The second term is this process's samples only; with a global scope
    DDP's mean of the processes' gradients divides it by the number of processes, which the factor
    ``world`` undoes (the first term's all-reduce is differentiable, as in the paper's form)."""
    world = 1
    if scope == "global" and dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
    # a floored sample's -1 cancels its +1 in the mean; outside the mask v is a constant 0
    correction = ((weights - 1.0) * v).sum()
    surrogate = mean + correction * (world / n)
    return objective.detach() + (surrogate - surrogate.detach())


def masked_mean(values: Tensor, mask: Tensor | None, scope: str = "global") -> Tensor:
    """The mean of the rows of ``values`` (``(n, ...)``) where ``mask`` (all rows without one),
    over the batch of all DDP processes with ``scope`` ``global``: the sums and the count are
    reduced by the same differentiable all-reduce as :func:`vrnl_objective`'s, so DDP's averaged
    gradient is the gradient of the mean over the concatenated batch. 0 where no row is
    selected. Applied with ``torch.where``, never by indexing (no host synchronization)."""
    if scope not in SCOPES:
        raise ValueError(f"variance scope must be one of {SCOPES}, got {scope!r}")
    if mask is None:
        chosen = values
        count = values.new_full((1,), float(values.shape[0]))
    else:
        shape = (-1,) + (1,) * (values.ndim - 1)
        chosen = torch.where(mask.view(shape), values, 0.0)
        count = mask.sum().to(values.dtype).view(1)
    sums = torch.cat([chosen.sum(0).reshape(-1), count])
    if scope == "global":
        sums = _global_sums(sums)
    return (sums[:-1] / sums[-1].detach().clamp_min(1.0)).view(values.shape[1:])


def check_variance_samples(
    alpha: float,
    batch_size: int,
    world_size: int,
    scope: str,
    kept: Callable[[int], int],
    method: str,
    base_method: str,
) -> None:
    """Refuse VRNL (``alpha != 0``) where the variance of a step's losses covers fewer than 2
    samples: the variance of one loss is always 0, so the run would silently train the base
    method. The batch is the per-process ``batch_size`` with ``scope`` ``local``, the global one
    (``world_size`` processes) with ``global``; ``kept(batch)`` is how many of a batch's losses
    the method keeps (all, unless it selects samples). Raises
    :class:`~noisylabels.errors.InputError`."""
    scope_global = scope == "global"
    batch = batch_size * (world_size if scope_global else 1)
    count = kept(batch)
    if alpha == 0 or count >= 2:
        return
    size = f"--data.batch_size {batch_size}"
    if scope_global and world_size > 1:
        size = f"{world_size} processes x {size} = {batch} in the global batch"
    elif world_size > 1:
        size += " per process with --model.variance_scope local"
    if count != batch:
        size += f", of which {method} keeps {count}"
    raise InputError(
        f"--model.alpha {alpha:g} asks for VRNL, mean(l) - alpha * Var(l), but the variance of "
        f"each training step covers {count} sample ({size}): the variance of one loss is always "
        f"0, so the run would silently train {base_method} without VRNL. Use a larger "
        "--data.batch_size (the paper: 128)"
        + (", or --model.variance_scope global" if not scope_global else "")
        + ", or --model.alpha 0 for the base method"
    )


def warn_nonpositive_weights(fraction: float, alpha: float, threshold: float) -> None:
    """Warn when more than ``threshold`` of an epoch's samples got a non-positive VRNL weight
    ``1 + 2 alpha (mean(l) - l_i)`` (``fraction``): ``alpha`` is then too large."""
    if fraction > threshold and alpha != 0:
        warn(
            f"alpha={alpha}: {fraction:.1%} of this epoch's samples got a non-positive VRNL "
            f"weight 1 + 2*alpha*(mean(l) - l_i); lower |alpha| so every weight stays positive",
            every_process=True,
        )
