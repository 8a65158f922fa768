"""Datasets of image files: decoding in DataLoader workers, batch collation, bad-image skipping.

Images stay on disk under a root folder and are addressed by keys (paths relative to the root).
Workers read and decode them with torchvision's decoder, resize the shorter side and crop on
uint8 tensors; flip and normalization run batched on the device. An image that cannot be read
is skipped, never fatal, and remembered in a mask shared with the workers
(:class:`SkippedImages`) so a data module can say how many of each split were lost.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, get_worker_info

from noisylabels.errors import InputError, warn

_DRIVE = re.compile(r"^[A-Za-z]:")
_MAX_ITEM_WARNINGS = 5
_MAX_RETRIES = 50


def default_num_workers() -> int:
    """``min(8, number of CPUs)``: enough JPEG decoders to feed one GPU without oversubscribing."""
    return max(1, min(8, os.cpu_count() or 1))


def is_safe_key(key: str) -> bool:
    """Whether ``key`` is a relative path that stays inside the dataset root.

    Rejected: empty keys, absolute paths (``/x``, ``\\x``, ``C:x``), any ``..`` component (with
    either separator) and NUL characters. The check is lexical; nothing is opened.
    """
    if not key or "\0" in key or key[0] in "/\\" or _DRIVE.match(key):
        return False
    return ".." not in re.split(r"[\\/]", key)


def key_array(keys: list[str]) -> np.ndarray:
    """Keys as one fixed-width bytes array: cheap to share with forked DataLoader workers."""
    return np.array([k.encode("utf-8") for k in keys], dtype=np.bytes_)


def warn_rejected_keys(path: Path, rejected: list[tuple[int, str]]) -> None:
    """Warn once about the keys of list file ``path`` that were dropped because they point
    outside the dataset root (``rejected``: ``(line number, key)``)."""
    if not rejected:
        return
    shown = ", ".join(f"line {n}: {k!r}" for n, k in rejected[:3])
    more = f" and {len(rejected) - 3} more" if len(rejected) > 3 else ""
    warn(
        f"{path}: ignored {len(rejected)} key(s) that point outside the dataset root "
        f"(absolute paths or '..'): {shown}{more}",
        every_process=True,
    )


def read_key_list(path: Path) -> list[str]:
    """Keys of a list file (one image path per line, relative to the dataset root), in order;
    blank lines skipped, unsafe keys (:func:`is_safe_key`) dropped with a warning."""
    keys: list[str] = []
    rejected: list[tuple[int, str]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            key = line.strip()
            if not key:
                continue
            if is_safe_key(key):
                keys.append(key)
            else:
                rejected.append((lineno, key))
    warn_rejected_keys(path, rejected)
    return keys


def read_label_kv(path: Path, num_classes: int) -> dict[str, int]:
    """``key -> label`` of a list file of ``KEY LABEL`` lines (Clothing1M's ``*_label_kv.txt``,
    WebVision's ``*_filelist*.txt``), in the file's order.

    Raises :class:`~noisylabels.errors.InputError` (a ``ValueError``) naming the line for a
    malformed line or a label outside ``0..num_classes-1``; keys that point outside the root are
    dropped with a warning.
    """
    labels: dict[str, int] = {}
    rejected: list[tuple[int, str]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            text = line.strip()
            if not text:
                continue
            parts = text.rsplit(maxsplit=1)
            if len(parts) != 2:
                raise InputError(f"{path}, line {lineno}: expected 'KEY LABEL', got {text!r}")
            key, value = parts
            try:
                label = int(value)
            except ValueError:
                raise InputError(
                    f"{path}, line {lineno}: label {value!r} is not an integer"
                ) from None
            if not 0 <= label < num_classes:
                raise InputError(
                    f"{path}, line {lineno}: label {label} is outside 0-{num_classes - 1}"
                )
            if not is_safe_key(key):
                rejected.append((lineno, key))
                continue
            labels[key] = label
    warn_rejected_keys(path, rejected)
    return labels


def load_image(
    path: Path, image_size: int, resize_size: int, train: bool, views: int = 1
) -> Tensor:
    """Read and decode one image (JPEG, PNG, GIF or WebP) to uint8 RGB
    ``(3, image_size, image_size)``.

    The shorter side is resized to ``resize_size`` (antialiased bilinear), then a random
    (``train``) or center crop of ``image_size`` is taken; the result is a view into the resized
    image (:func:`collate_images` copies it into the batch once). ``views > 1`` (with
    ``train``): ``(views, 3, image_size, image_size)``, an independent random crop of the one
    decoded image each.
    """
    from torchvision.io import ImageReadMode, decode_image, read_file
    from torchvision.transforms.v2 import functional as TF

    image = decode_image(read_file(str(path)), mode=ImageReadMode.RGB)
    image = TF.resize(image, [resize_size], antialias=True)
    _, h, w = image.shape
    if not train:
        return TF.center_crop(image, [image_size, image_size])
    crops = []
    for _ in range(views):
        top = int(torch.randint(0, h - image_size + 1, ()))
        left = int(torch.randint(0, w - image_size + 1, ()))
        crops.append(TF.crop(image, top, left, image_size, image_size))
    return crops[0] if views == 1 else torch.stack(crops)


def _image_batch(n: int, image_size: int, views: int = 1) -> Tensor:
    """Empty uint8 ``(n, 3, image_size, image_size)`` (``(n, views, 3, ...)`` for several
    views); inside a DataLoader worker it lives in shared memory, so handing the batch to the
    main process copies nothing more."""
    shape = (n, 3, image_size, image_size) if views == 1 else (n, views, 3, image_size, image_size)
    if get_worker_info() is None:
        return torch.empty(shape, dtype=torch.uint8)
    storage = torch.UntypedStorage._new_shared(n * views * 3 * image_size * image_size)
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape)


def collate_images(
    items: list[dict[str, Any] | None], image_size: int, views: int = 1
) -> dict[str, Tensor]:
    """Stack decoded samples into a batch dict, dropping the ``None`` markers of bad images."""
    kept = [item for item in items if item is not None]
    images = _image_batch(len(kept), image_size, views)
    if kept:
        torch.stack([item["image"] for item in kept], out=images)
    return {
        "image": images,
        **{
            name: torch.tensor([item[name] for item in kept], dtype=torch.long)
            for name in ("label", "clean_label", "index")
        },
    }


class SkippedImages:
    """Which images could not be read: one boolean mask per image array (e.g. ``train``,
    ``val``, ``test``), in shared memory so DataLoader workers mark them too."""

    def __init__(self) -> None:
        self.masks: dict[str, Tensor] = {}
        self.reported = 0

    def mask(self, name: str, size: int) -> Tensor:
        """The (shared) mask of image array ``name`` with ``size`` images."""
        if name not in self.masks:
            self.masks[name] = torch.zeros(size, dtype=torch.bool).share_memory_()
        return self.masks[name]

    def count(self, name: str, indices: Tensor | None = None) -> int:
        """Skipped images of array ``name`` (only those at ``indices`` when given)."""
        mask = self.masks.get(name)
        if mask is None:
            return 0
        return int(mask.sum() if indices is None else mask[indices].sum())

    @property
    def total(self) -> int:
        """Skipped images over all arrays."""
        return sum(int(mask.sum()) for mask in self.masks.values())

    def take_new(self) -> int:
        """How many images were skipped for the first time since the last call."""
        new, self.reported = self.total - self.reported, self.total
        return new

    def sync(self, all_reduce_sum: Callable[[Tensor], Tensor]) -> None:
        """Merge the masks of all processes (each marks only what its shard read):
        ``all_reduce_sum`` sums an int tensor over processes; every process calls this."""
        for name in sorted(self.masks):
            mask = self.masks[name]
            mask.copy_(all_reduce_sum(mask.to(torch.int32)).cpu() > 0)


class ImageFileDataset(Dataset):
    """Images read from ``root / key`` on demand, served as batch dicts.

    ``__getitem__`` returns ``None`` for an unreadable or corrupt image (marked in ``skipped``,
    a mask over all ``keys`` shared with the workers, and warned about for the first few);
    ``__getitems__`` decodes a whole batch and drops those markers. A training batch in which
    every image failed is refilled from random other images so it is never empty; an evaluation
    batch stays empty (:class:`NonEmptyBatches` drops it). Where no image can be decoded at all,
    :class:`~noisylabels.errors.InputError` says so. Crops are random where ``random_crop``
    (default: ``train``), centered otherwise; with ``views > 1`` a random-crop dataset crops
    every image that many times (``image``: ``(views, 3, S, S)`` per sample).
    """

    def __init__(
        self,
        root: Path,
        keys: np.ndarray,
        labels: Tensor,
        clean_labels: Tensor,
        indices: Tensor,
        train: bool,
        image_size: int = 224,
        resize_size: int = 256,
        random_crop: bool | None = None,
        skipped: Tensor | None = None,
        views: int = 1,
    ) -> None:
        self.root = Path(root)
        self.keys = keys
        self.labels = labels
        self.clean_labels = clean_labels
        self.indices = indices
        self.train = train
        self.image_size = image_size
        self.resize_size = resize_size
        self.random_crop = train if random_crop is None else random_crop
        self.skipped = torch.zeros(len(keys), dtype=torch.bool) if skipped is None else skipped
        self.views = views if self.random_crop else 1
        self._warned = 0

    def __len__(self) -> int:
        return len(self.indices)

    def key(self, position: int) -> str:
        """Image path (relative to the root) of the sample at ``position``."""
        return self.keys[int(self.indices[position])].decode("utf-8")

    def _decode(self, i: int) -> Tensor | None:
        key = self.keys[i].decode("utf-8")
        try:
            return load_image(
                self.root / key, self.image_size, self.resize_size, self.random_crop, self.views
            )
        except (RuntimeError, OSError, ValueError) as err:
            self.skipped[i] = True
            if self._warned < _MAX_ITEM_WARNINGS:
                self._warned += 1
                warn(
                    f"skipping unreadable or corrupt image {self.root / key}: {err}",
                    every_process=True,
                )
            return None

    def __getitem__(self, position: int) -> dict[str, Any] | None:
        i = int(self.indices[position])
        image = self._decode(i)
        if image is None:
            return None
        return {
            "image": image,
            "label": int(self.labels[i]),
            "clean_label": int(self.clean_labels[i]),
            "index": i,
        }

    def __getitems__(self, positions: list[int]) -> dict[str, Tensor]:
        items = [self[p] for p in positions]
        if items and all(item is None for item in items):
            for _ in range(_MAX_RETRIES):  # is anything decodable at all?
                item = self[int(torch.randint(len(self), ()))]
                if item is not None:
                    if self.train:  # never an empty training batch
                        items.append(item)
                    break
            else:
                raise InputError(
                    f"none of {len(items) + _MAX_RETRIES} images tried under {self.root} could "
                    "be decoded; check that --data.data_dir holds a complete copy of the "
                    "dataset with readable image files"
                )
        return collate_images(items, self.image_size, self.views)


class NonEmptyBatches(DataLoader):
    """A DataLoader that drops batches left empty because every image in them was unreadable
    (evaluation batches are not refilled: that would count other samples twice)."""

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            if not isinstance(batch, dict) or len(batch.get("index", (0,))) > 0:
                yield batch
