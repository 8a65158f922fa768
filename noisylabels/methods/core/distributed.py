"""What a method needs under DDP beyond Lightning's own: every parameter in each step's graph,
and the global batch of a step on every process.

DDP (``find_unused_parameters=False``, Lightning's default) expects every parameter to get a
gradient in every step. A method whose stage leaves a parameter unused (T-Revision's and PTD's
ΔT before their revision, VolMinNet's T in a warm-up) adds it to the objective with weight 0
(:func:`with_zero_gradients`: the value and every other gradient unchanged) and drops the zero
gradient after the backward (:func:`drop_gradients`), so its optimizer skips it as in one process.

A sample selection over the batch (Co-teaching's small-loss samples) must see the global batch
to equal the one-process step: :func:`gather_batch` gives every process the values of all
processes' samples, in the order one process with the global batch holds them
(:class:`~noisylabels.data.samplers.ShardSampler` gives process ``r`` the positions ``r, r + W,
r + 2W, ...`` of the step's global batch), with fixed sizes, so no host synchronization.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn


def with_zero_gradients(loss: Tensor, params: Sequence[nn.Parameter]) -> Tensor:
    """``loss`` plus ``0 · Σ p`` for each of ``params``: the same value and gradients, and a
    zero gradient for each of ``params``."""
    for param in params:
        loss = loss + param.sum() * 0.0
    return loss


def drop_gradients(params: Sequence[nn.Parameter]) -> None:
    """Remove the gradients of ``params`` (after the backward of :func:`with_zero_gradients`):
    optimizers skip a parameter without one."""
    for param in params:
        param.grad = None


def world() -> tuple[int, int]:
    """``(world size, rank)`` of the default process group; ``(1, 0)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def gather_batch(values: Tensor, capacity: int | None) -> tuple[Tensor, Tensor]:
    """The values of the step's global batch, from every process's own.

    Args:
        values: ``(K, n)`` values of this process's ``n`` samples (e.g. K networks' losses).
        capacity: the most samples a process's batch holds (the per-process batch size); ``None``
            asks the processes (one host synchronization).

    Returns:
        ``(K, W · capacity)`` values in the global batch's order, with padding, and the boolean
        ``(W · capacity,)`` mask of the positions that hold a sample (the padding comes last).
        Process ``r``'s sample ``j`` is at position ``j · W + r``: :func:`own_part` takes a
        process's samples back out of a global ``(W · capacity,)`` tensor.
    """
    size, _ = world()
    k, n = values.shape
    if capacity is None:
        count = torch.tensor([n], device=values.device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        capacity = int(count)
    padded = values.new_zeros(k + 1, capacity)
    padded[:k, :n] = values
    padded[k, 0] = n  # the sample count travels with the values
    gathered = values.new_empty(size * (k + 1), capacity)  # concatenated: gloo's layout
    dist.all_gather_into_tensor(gathered, padded)
    gathered = gathered.view(size, k + 1, capacity)
    ordered = gathered[:, :k].permute(1, 2, 0).reshape(k, capacity * size)
    counts = gathered[:, k, 0]
    slots = torch.arange(capacity, device=values.device, dtype=counts.dtype)
    valid = (slots[:, None] < counts[None, :]).reshape(-1)
    return ordered, valid


def own_part(global_values: Tensor, n: int) -> Tensor:
    """This process's ``n`` entries of a ``(..., W · capacity)`` tensor in the order of
    :func:`gather_batch`."""
    size, rank = world()
    shaped = global_values.reshape(*global_values.shape[:-1], -1, size)
    return shaped[..., :n, rank]


class SumOverProcesses(torch.autograd.Function):
    """Sum over processes whose exact backward is the sum of the incoming gradients over
    processes (each process's result feeds its own objective)."""

    @staticmethod
    def forward(ctx: object, tensor: Tensor) -> Tensor:
        out = tensor.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    @staticmethod
    def backward(ctx: object, grad: Tensor) -> Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad


def gather_rows_with_grad(values: Tensor, capacity: int) -> Tensor:
    """The rows of the step's global batch from every process's own ``(n, ...)`` rows, with
    gradient: a ``(W · capacity, ...)`` tensor in the order of :func:`gather_batch` (process
    ``r``'s row ``j`` at ``j · W + r``, zero rows as padding). A row used by another process's
    objective sends its gradient back to the process that owns it; with one process, the rows
    padded to ``capacity``."""
    size, rank = world()
    n = values.shape[0]
    positions = torch.arange(n, device=values.device) * size + rank
    padded = values.new_zeros(size * capacity, *values.shape[1:])
    padded = padded.index_copy(0, positions, values)
    return SumOverProcesses.apply(padded) if size > 1 else padded


def gather_updates(index: Tensor, rows: Tensor, capacity: int | None) -> tuple[Tensor, Tensor]:
    """The rows of a per-sample table that every process updated in this step, on every process:
    ``(indices, rows)`` of all processes' samples (``(W · capacity,)`` and ``(W · capacity, K)``,
    in the global batch's order), with padding given the index ``-1``. Without DDP: ``index`` and
    ``rows`` themselves.

    Each process updates the rows of its own samples (ELR's targets); writing every process's rows
    keeps the table identical on all of them, and equal to one process's table after the same
    global batch. The values travel as float64 beside their indices (exact for float32 rows and
    for indices below 2**53), with fixed sizes, so without host synchronization.
    """
    if world()[0] == 1:
        return index, rows
    values = torch.cat([index[:, None].double(), rows.double()], dim=1).T  # (1 + K, n)
    gathered, valid = gather_batch(values.contiguous(), capacity)
    indices = torch.where(valid, gathered[0].long(), -1)
    return indices, gathered[1:].T.to(rows.dtype)
