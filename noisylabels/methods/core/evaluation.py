"""The model over the training split without augmentation: what T estimation, exact training
statistics and a method's per-epoch pass over the training set (:func:`training_pass`:
DivideMix's per-sample losses) run on.

Such a pass feeds an estimate (anchor points, Dual-T, PTD's features and parts), so it runs in
float32 whatever the training precision: under mixed precision (``bf16-mixed``, ``16-mixed``)
autocast is off for it, so that a GPU run's T̂ equals the T̂ of the same model in float32
(rounding logits to bf16 moves anchor points). With weights in half precision (``*-true``) the
pass runs in the weights' own type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import lightning as L
import torch
import torch.distributed as dist
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.distributed import world
from noisylabels.noise import DataFacts


@torch.no_grad()
def split_logits(
    method: L.LightningModule,
    facts: DataFacts | None,
    limit: int | float | None = None,
    rank: int = 0,
    world_size: int = 1,
    split: str = "train",
) -> Iterator[tuple[dict[str, Tensor], Tensor]]:
    """``(batch, logits)`` of ``method``'s forward over the training split of ``facts`` in
    order, without augmentation, with the model in eval mode (restored afterwards), in float32
    (autocast off; see the module's docstring). ``limit``/``rank``/``world_size``/``split``
    (``val``: the noisy validation split) as in :data:`~noisylabels.noise.facts.EvalBatches`."""
    if facts is None:
        raise InputError(
            f"{type(method).__name__} needs a noisylabels data module (one with data_facts) to "
            "run the model over the training split"
        )
    modes = {m: m.training for m in method.modules()}
    method.eval()
    try:
        for batch in facts.eval_batches(method.device, limit, rank, world_size, split):
            method.speed.begin_step()
            plugin = method.trainer.precision_plugin
            with plugin.forward_context(), torch.autocast(method.device.type, enabled=False):
                logits = method(plugin.convert_input(batch["image"]))
            yield batch, method.speed.keep(logits)
    finally:
        for module, mode in modes.items():
            module.train(mode)


@torch.no_grad()
def network_accuracies(
    method: L.LightningModule,
    facts: DataFacts,
    split: str = "test",
    rank: int = 0,
    world_size: int = 1,
) -> Tensor:
    """``(correct of the prediction, correct of network 1, ..., samples)`` over a split of
    ``facts`` (``test``: the clean test set), in eval mode (restored afterwards), on this
    process's share of the batches: the predictors the clean test scores (``test/acc``: the
    method's :meth:`prediction_logits`, network 0's or its networks' mean; ``test/net{k}/acc``:
    network ``k``'s clean posterior), each one's argmax against the split's labels."""
    modes = {m: m.training for m in method.modules()}
    method.eval()
    counts = torch.zeros(len(method.networks) + 1, dtype=torch.long, device=method.device)
    try:
        for batch in facts.eval_batches(method.device, None, rank, world_size, split):
            images = batch["image"]
            logits = []
            for k in range(len(method.networks)):
                method.speed.begin_step()
                with method.trainer.precision_plugin.forward_context():
                    # kept: the next network's step may reuse a CUDA graph's outputs
                    logits.append(method.speed.keep(method.network_logits(images, k)))
            logits[0] = method.prediction_logits(images, logits)
            for k, scored in enumerate(logits):
                counts[k] += (scored.argmax(1) == batch["label"]).sum()
            counts[-1] += len(batch["label"])
    finally:
        for module, mode in modes.items():
            module.train(mode)
    return counts


@dataclass
class TrainingPass:
    """Per-sample values of one evaluation pass over the training split, the same on every
    process.

    Attributes:
        values: ``(K, N)`` float32, ``values[k, i]`` the value of network ``k`` for the sample
            of dataset index ``i`` (``N``: the training set with its validation split); NaN
            at indices outside the training split (and of images a file-backed data set
            could not read).
        counts: ``(N,)`` how many times the pass evaluated each index, over all processes (1
            for every training index, 0 elsewhere and for unreadable images).
        indices: the training split's dataset indices, sorted.
    """

    values: Tensor
    counts: Tensor
    indices: Tensor

    def of_training_split(self) -> Tensor:
        """``(K, n)``: the values of the training split's samples, by sorted dataset index."""
        return self.values[:, self.indices]


@torch.no_grad()
def training_pass(
    method: L.LightningModule,
    facts: DataFacts | None,
    value_fn: Callable[[Tensor, dict[str, Tensor]], Tensor],
) -> TrainingPass:
    """Every network of ``method`` over the whole training split, in eval mode, without
    augmentation, in float32 (as :func:`split_logits`): ``value_fn(logits, batch)`` gives the
    ``(B,)`` values of a batch (e.g. per-sample cross-entropy against the noisy labels).

    Under DDP each process evaluates every ``W``-th batch of the split (each training index on
    exactly one process) and writes its rows into a zero table; the tables are summed over the
    processes, which is exact (every entry is one value plus zeros), so every process holds the
    same full table, equal to the one a single process computes. A pass that sees a sample
    twice or outside the training split raises ``RuntimeError``; an image a file-backed data set
    cannot read is skipped (count 0, value NaN), as training skips it."""
    if facts is None:
        raise InputError(
            f"{type(method).__name__} needs a noisylabels data module (one with data_facts) to "
            "run the model over the training split"
        )
    size, rank = world()
    networks = len(method.networks)
    device = method.device
    values = torch.zeros(networks, facts.num_samples, device=device)
    counts = torch.zeros(facts.num_samples, device=device)
    modes = {m: m.training for m in method.modules()}
    method.eval()
    try:
        for batch in facts.eval_batches(device, None, rank, size, "train"):
            index = batch["index"]
            for k in range(networks):
                method.speed.begin_step()
                plugin = method.trainer.precision_plugin
                with plugin.forward_context(), torch.autocast(device.type, enabled=False):
                    logits = method.network_logits(plugin.convert_input(batch["image"]), k)
                values[k].index_copy_(0, index, value_fn(logits.float(), batch).float())
            counts.index_add_(0, index, torch.ones_like(index, dtype=counts.dtype))
    finally:
        for module, mode in modes.items():
            module.train(mode)
    if size > 1:
        table = torch.cat([values, counts[None]])
        dist.all_reduce(table, op=dist.ReduceOp.SUM)
        values, counts = table[:-1], table[-1]
    indices = facts.train_indices.to(device).sort().values
    inside = torch.zeros_like(counts, dtype=torch.bool)
    inside[indices] = True
    if not (bool((counts[indices] <= 1).all()) and bool((counts[~inside] == 0).all())):
        raise RuntimeError("the pass over the training split saw a sample twice or outside it")
    values[:, counts == 0] = torch.nan  # outside the split, or an image that could not be read
    return TrainingPass(values, counts.long(), indices)
