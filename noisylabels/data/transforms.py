"""Batched, on-device image transforms: nothing runs per item or through PIL."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import Tensor, nn


def random_crop(images: Tensor, padding: int, generator: torch.Generator | None = None) -> Tensor:
    """Zero-pad each image by ``padding`` and crop back to its size at a random offset.

    The batch equivalent of ``torchvision.transforms.RandomCrop(size, padding)`` with an
    independent offset per image.
    """
    if padding <= 0:
        return images
    b, _, h, w = images.shape
    padded = nn.functional.pad(images, (padding, padding, padding, padding))
    dev = images.device
    oy = torch.randint(0, 2 * padding + 1, (b, 1), device=dev, generator=generator)
    ox = torch.randint(0, 2 * padding + 1, (b, 1), device=dev, generator=generator)
    rows = (oy + torch.arange(h, device=dev)).view(b, 1, h, 1)
    cols = (ox + torch.arange(w, device=dev)).view(b, 1, 1, w)
    batch = torch.arange(b, device=dev).view(b, 1, 1, 1)
    chans = torch.arange(images.shape[1], device=dev).view(1, -1, 1, 1)
    return padded[batch, chans, rows, cols]


def random_hflip(
    images: Tensor, p: float = 0.5, generator: torch.Generator | None = None
) -> Tensor:
    """Flip each image left-right with probability ``p``."""
    flip = torch.rand(images.shape[0], device=images.device, generator=generator) < p
    return torch.where(flip.view(-1, 1, 1, 1), images.flip(-1), images)


class BatchTransform(nn.Module):
    """uint8 → float in [0, 1], optional random crop + flip (training only), then normalize.

    Args:
        mean, std: per-channel statistics of the dataset (in [0, 1] units).
        augment: apply random crop (``crop_padding``) and horizontal flip while training.
        crop_padding: zero padding of the random crop (4 for CIFAR; 0 disables cropping).
    """

    def __init__(
        self,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        augment: bool = False,
        crop_padding: int = 4,
    ) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        self.augment = augment
        self.crop_padding = crop_padding

    def forward(self, images: Tensor, train: bool = False) -> Tensor:
        return self.normalize(self.augmented(images, train))

    def augmented(self, images: Tensor, train: bool = True) -> Tensor:
        """Floats in [0, 1], randomly cropped and flipped where ``train`` and ``augment``."""
        x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        if train and self.augment:
            x = random_hflip(random_crop(x, self.crop_padding))
        return x

    def normalize(self, x: Tensor) -> Tensor:
        """``(x - mean) / std`` per channel of floats in [0, 1]."""
        if self.mean.device != x.device:
            self.to(x.device)  # once per device: a copy per batch would synchronize
        return (x - self.mean) / self.std


def evaluation_batches(
    loader: Iterable[dict[str, Tensor]],
    transform: BatchTransform,
    device: torch.device | str,
    limit: int | float | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[dict[str, Tensor]]:
    """The batches of ``loader`` on ``device``, normalized by ``transform``, never augmented.

    Args:
        limit: as Lightning's ``limit_*_batches``: an int caps the number of batches, a float
            below 1 keeps that fraction of them (at least one).
        rank, world_size: keep every ``world_size``-th batch, starting at ``rank``.
    """
    n = len(loader)  # type: ignore[arg-type]
    if isinstance(limit, int):
        n = min(n, limit)
    elif limit is not None and limit < 1.0:
        n = max(1, int(n * limit))
    for b, batch in enumerate(loader):
        if b >= n:
            break
        if b % world_size != rank:
            continue
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        batch["image"] = transform(batch["image"], train=False)
        yield batch
