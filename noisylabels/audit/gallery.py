"""The image grid of the most suspect labels: each image with its given and predicted label."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

COLUMNS = 8


def as_hwc(image: Tensor | None) -> Tensor | None:
    """A uint8 image ``(C, H, W)`` or ``(H, W, C)`` (C = 1 or 3) as ``(H, W, C)``; grayscale
    drops its channel axis for matplotlib."""
    if image is None:
        return None
    image = torch.as_tensor(image)
    if image.ndim == 2:
        return image
    if image.ndim == 3 and image.shape[0] in (1, 3) and image.shape[-1] not in (1, 3):
        image = image.permute(1, 2, 0)
    return image[..., 0] if image.shape[-1] == 1 else image


def draw_grid(
    images: Sequence[Tensor | None], captions: Sequence[str], path: Path, title: str
) -> Path:
    """Write a PNG grid of ``images`` (uint8; ``None``: an image that could not be read) under
    their ``captions`` to ``path``; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(images), 1)
    cols = min(COLUMNS, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.9 * cols, 2.2 * rows + 0.4), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, image, caption in zip(axes.flat, images, captions, strict=False):
        shown = as_hwc(image)
        if shown is None:
            ax.text(0.5, 0.5, "unreadable", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.imshow(shown.cpu().numpy(), cmap="gray" if shown.ndim == 2 else None)
        ax.set_title(caption, fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
