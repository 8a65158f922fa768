"""The model over the training split without augmentation: what T estimation and exact training
statistics run on.

Such a pass feeds an estimate (anchor points, Dual-T, PTD's features and parts), so it runs in
float32 whatever the training precision: under mixed precision (``bf16-mixed``, ``16-mixed``)
autocast is off for it, so that a GPU run's T̂ equals the T̂ of the same model in float32
(rounding logits to bf16 moves anchor points). With weights in half precision (``*-true``) the
pass runs in the weights' own type.
"""

from __future__ import annotations

from collections.abc import Iterator

import lightning as L
import torch
from torch import Tensor

from noisylabels.errors import InputError
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
    """``(correct per network..., samples)`` of ``method``'s networks over a split of ``facts``
    (``test``: the clean test set), each network's clean posterior's argmax against the split's
    labels, in eval mode (restored afterwards); this process's share of the batches."""
    modes = {m: m.training for m in method.modules()}
    method.eval()
    counts = torch.zeros(len(method.networks) + 1, dtype=torch.long, device=method.device)
    try:
        for batch in facts.eval_batches(method.device, None, rank, world_size, split):
            for k in range(len(method.networks)):
                method.speed.begin_step()
                with method.trainer.precision_plugin.forward_context():
                    logits = method.network_logits(batch["image"], k)
                counts[k] += (logits.argmax(1) == batch["label"]).sum()
            counts[-1] += len(batch["label"])
    finally:
        for module, mode in modes.items():
            module.train(mode)
    return counts
