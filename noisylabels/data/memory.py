"""In-memory datasets: samples held as tensors and served a whole batch at a time, on the host
through a ``DataLoader`` or on the training device through :class:`DeviceBatches`, and the
message of a missing torchvision-layout folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset, Sampler

from noisylabels.errors import InputError

ON_DEVICE = ("auto", True, False)
"""Values of a data module's ``on_device`` option."""


class TensorDictDataset(Dataset):
    """In-memory samples fetched a whole batch at a time through ``__getitems__``."""

    def __init__(self, images: Tensor, labels: Tensor, clean_labels: Tensor, indices: Tensor):
        self.images = images
        self.labels = labels
        self.clean_labels = clean_labels
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitems__(self, positions: list[int]) -> dict[str, Tensor]:
        idx = self.indices[torch.as_tensor(positions, dtype=torch.long)]
        return {
            "image": self.images[idx],
            "label": self.labels[idx],
            "clean_label": self.clean_labels[idx],
            "index": idx,
        }

    def __getitem__(self, position: int) -> dict[str, Tensor]:
        i = int(self.indices[position])
        return {
            "image": self.images[i],
            "label": self.labels[i],
            "clean_label": self.clean_labels[i],
            "index": torch.tensor(i),
        }


class DeviceBatches:
    """Batches of a :class:`TensorDictDataset` drawn on ``device``, where its tensors live.

    The uint8 images, labels and indices are copied to ``device`` once (through ``cache``,
    shared by the loaders of one data module, so a tensor is copied once for all splits); each
    epoch takes the order of ``sampler`` (the sampler a ``DataLoader`` would use: shuffled,
    sequential, or this process's :class:`~noisylabels.data.samplers.ShardSampler` share under
    DDP), copies it to the device in one transfer, and gathers every batch there. A step then
    moves no data between host and device and needs no host synchronization. Lightning iterates
    it like a ``DataLoader`` (``len``, ``sampler.set_epoch``); batches are dicts as
    :meth:`TensorDictDataset.__getitems__` returns them, the last one possibly smaller.
    """

    def __init__(
        self,
        dataset: TensorDictDataset,
        sampler: Sampler[int],
        batch_size: int,
        device: torch.device | str,
        cache: dict[int, Any] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.dataset = dataset
        self.sampler = sampler  # Lightning calls sampler.set_epoch(epoch) through this name
        self.batch_sampler = None  # what Lightning inspects of a DataLoader
        self.batch_size = batch_size
        self.device = torch.device(device)
        cache = {} if cache is None else cache
        self.tensors = {
            name: _on_device(getattr(dataset, name), self.device, cache)
            for name in ("images", "labels", "clean_labels", "indices")
        }

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        t = self.tensors
        # a DataLoader draws its workers' base seed from the global generator first: so does
        # this, so that a seeded run draws the same batches on the host and on the device
        torch.empty((), dtype=torch.int64).random_()
        order = torch.as_tensor(list(self.sampler), dtype=torch.long).to(self.device)
        for start in range(0, len(order), self.batch_size):
            idx = t["indices"][order[start : start + self.batch_size]]
            yield {
                "image": t["images"][idx],
                "label": t["labels"][idx],
                "clean_label": t["clean_labels"][idx],
                "index": idx,
            }


def batch_device(
    on_device: bool | str, dataset: Dataset, trainer: Any, owner: str
) -> torch.device | None:
    """The device on which :class:`DeviceBatches` should draw ``dataset``'s batches, or
    ``None`` for a host ``DataLoader``: the trainer's device for in-memory data when
    ``on_device`` is ``True``, or ``"auto"`` and that device is an accelerator. ``owner`` names
    the data module in the error for file-backed data with ``on_device=True``."""
    if on_device is False:
        return None
    strategy = getattr(trainer, "strategy", None)
    device = strategy.root_device if strategy is not None else torch.device("cpu")
    if not isinstance(dataset, TensorDictDataset):
        if on_device is True:
            raise InputError(
                f"--data.on_device true needs in-memory data; {owner} reads its images from "
                "files. Use --data.on_device auto or false"
            )
        return None
    return device if on_device is True or device.type != "cpu" else None


def _on_device(tensor: Tensor, device: torch.device, cache: dict[int, Any]) -> Tensor:
    """``tensor`` on ``device``, copied once per ``cache``; the cache keeps the host tensor
    alive, so its ``id`` cannot be reused by another one."""
    entry = cache.get(id(tensor))
    if entry is None or entry[0] is not tensor or entry[1].device != device:
        entry = cache[id(tensor)] = (tensor, torch.as_tensor(tensor).to(device))
    return entry[1]


def collate_batch(batch: Any) -> dict[str, Tensor]:
    """Collate for loaders: batches from ``__getitems__`` are already stacked."""
    if isinstance(batch, dict):
        return batch
    return torch.utils.data.default_collate(batch)


def missing_files_message(
    dataset: str, root: Path, expected: list[str], download_hint: bool = True
) -> str:
    """The message of a missing or incomplete dataset folder: every expected file, and how to
    provide them."""
    files = "\n".join(f"  {root / name}" for name in expected)
    hint = (
        "\nPass --data.download true to fetch it with torchvision's downloader (needs network),"
        " or point --data.data_dir at a folder that holds this layout."
        if download_hint
        else "\nPoint --data.data_dir at a folder that holds this layout."
    )
    return f"{dataset} not found or incomplete. Expected these files:\n{files}{hint}"
