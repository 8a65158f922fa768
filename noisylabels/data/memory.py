"""In-memory datasets: samples held as tensors and served a whole batch at a time, and the
message of a missing torchvision-layout folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset


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
