"""Clothing1M (Xiao et al., "Learning from Massive Noisy Labeled Data for Image Classification",
CVPR 2015): 1M web images of clothing in 14 classes with real (not synthetic) noisy labels, plus
small clean-labelled subsets.

The dataset is distributed on request, so it is never downloaded: point ``data_dir`` at a copy in
its standard layout (``images/`` and the annotation files, keys are image paths relative to the
root). This module reads the annotation files; the images are decoded by the file-backed base
(:mod:`noisylabels.data.image_files`).

The noise is real (the ``real`` label source), so there is no true transition matrix
(``transition`` is ``None``). Where a
training image also has a clean label (the overlap of ``noisy_label_kv.txt`` and
``clean_label_kv.txt``) the batches carry it as ``clean_label``; elsewhere ``clean_label`` is
``-1``. Transition matrices follow the project convention: row-stochastic,
``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from noisylabels.data.files import key_array, read_key_list
from noisylabels.data.files import read_label_kv as _read_label_kv
from noisylabels.data.image_files import ImageFileDataModule
from noisylabels.data.loaded import LoadedData
from noisylabels.errors import InputError, MissingFileError

NUM_CLASSES = 14
ANNOTATION_FILES: tuple[str, ...] = (
    "noisy_label_kv.txt",
    "clean_label_kv.txt",
    "noisy_train_key_list.txt",
    "clean_train_key_list.txt",
    "clean_val_key_list.txt",
    "clean_test_key_list.txt",
    "category_names_eng.txt",
)
PROTOCOLS = ("noisy_val", "clean_val")


def read_label_kv(path: Path, num_classes: int = NUM_CLASSES) -> dict[str, int]:
    """``key -> label`` of a ``*_label_kv.txt`` file (lines ``images/0/00/x.jpg 3``); see
    :func:`noisylabels.data.files.read_label_kv`."""
    return _read_label_kv(path, num_classes)


def _labels_for(keys: list[str], table: dict[str, int], keys_file: Path, kv_file: Path) -> Tensor:
    missing = [k for k in keys if k not in table]
    if missing:
        raise InputError(
            f"{len(missing)} key(s) of {keys_file} have no label in {kv_file}, e.g. "
            f"{missing[:3]}; the annotation files do not belong together"
        )
    return torch.tensor([table[k] for k in keys], dtype=torch.long)


class Clothing1MDataModule(ImageFileDataModule):
    """Clothing1M (Xiao et al. 2015) from a local copy in its standard distribution layout::

        DATA_DIR/images/...                 the JPEGs (keys are paths relative to DATA_DIR)
        DATA_DIR/noisy_label_kv.txt         "KEY LABEL" lines, the noisy labels
        DATA_DIR/clean_label_kv.txt         "KEY LABEL" lines, the clean labels
        DATA_DIR/noisy_train_key_list.txt   one key per line: the noisy training set
        DATA_DIR/clean_{train,val,test}_key_list.txt
        DATA_DIR/category_names_eng.txt     the 14 class names

    The noisy labels are the ones the dataset ships (label source ``real``).

    Args:
        data_dir: the dataset root.
        batch_size: training batch size (paper: 64).
        eval_batch_size: batch size of validation/test (default: ``batch_size``).
        num_workers: JPEG-decoding DataLoader workers (default ``min(8, CPUs)``).
        protocol: ``noisy_val`` (the VRNL paper: train on the noisy training list, hold out
            ``val_fraction`` of it as noisy validation data, test on the clean test list; no
            clean data is used) or ``clean_val`` (train on the whole noisy list and validate
            on the clean validation list).
        samples_per_class: per-epoch class-balanced subsampling (see
            :class:`~noisylabels.data.image_files.ImageFileDataModule`).
        noise_seed: seed of the noisy-validation split and of the subsampling.
        val_fraction: fraction of the noisy training list held out (``noisy_val`` only).
        augment: random crop + horizontal flip while training (default on).
        normalize: normalize by ImageNet's mean and std (default); false: pixels in [0, 1].
        image_size: crop size fed to the network (default 224).
        resize_size: the shorter image side is resized to this before cropping (default 256).
        max_skipped_fraction: largest fraction of unreadable test images a test accepts.
        views: augmented views of every training image (see
            :class:`~noisylabels.data.module.NoisyDataModule`): each a random crop of the one
            decoded image, flipped on the device.
        strong_views, strong_augment, cutout: strongly augmented views of every training
            image (see :class:`~noisylabels.data.module.NoisyDataModule`): each from a random crop
            of its own, the policy, the flip, the normalization and Cutout on the device.
    """

    name: ClassVar[str] = "clothing1m"
    num_classes: ClassVar[int] = NUM_CLASSES
    input_shape: ClassVar[tuple[int, int, int]] = (3, 224, 224)
    ships_noisy_labels: ClassVar[bool] = True

    def __init__(
        self,
        data_dir: str = "data/clothing1m",
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int | None = None,
        protocol: str = "noisy_val",
        samples_per_class: int | None = None,
        noise_seed: int = 0,
        val_fraction: float = 0.1,
        augment: bool | None = None,
        normalize: bool = True,
        image_size: int = 224,
        resize_size: int = 256,
        max_skipped_fraction: float = 0.01,
        views: int = 1,
        strong_views: int = 0,
        strong_augment: str | None = None,
        cutout: int | None = None,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise InputError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        super().__init__(
            data_dir=data_dir,
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            num_workers=num_workers,
            noise_type="real",
            noise_rate=0.0,
            noise_seed=noise_seed,
            val_fraction=val_fraction,
            augment=augment,
            normalize=normalize,
            image_size=image_size,
            resize_size=resize_size,
            samples_per_class=samples_per_class,
            max_skipped_fraction=max_skipped_fraction,
            views=views,
            strong_views=strong_views,
            strong_augment=strong_augment,
            cutout=cutout,
        )
        self.protocol = protocol
        self.class_names: list[str] = []

    # ------------------------------------------------------------------ reading the annotations
    def load(self) -> LoadedData:
        root = self.data_dir
        # the clean training list is part of the layout but never read
        needed = [n for n in ANNOTATION_FILES if n != "clean_train_key_list.txt"]
        if self.protocol != "clean_val":
            needed.remove("clean_val_key_list.txt")
        missing = [name for name in needed if not (root / name).is_file()]
        if not (root / "images").is_dir():
            missing.insert(0, "images/ (the folder of the JPEGs)")
        if missing:
            lines = "\n".join(f"  {root / n}" for n in missing)
            raise MissingFileError(
                f"Clothing1M not found or incomplete under {root}; missing:\n{lines}\n"
                "Clothing1M is distributed on request by its authors and cannot be downloaded "
                "automatically. Point --data.data_dir at your copy: the folder that holds "
                f"images/ and {', '.join(needed)}."
            )
        names = [
            line.strip()
            for line in (root / "category_names_eng.txt").read_text(encoding="utf-8").splitlines()
        ]
        names = [n for n in names if n]
        if len(names) != self.num_classes:
            raise InputError(
                f"{root / 'category_names_eng.txt'} lists {len(names)} class names; "
                f"Clothing1M has {self.num_classes}"
            )
        self.class_names = names
        noisy_kv = root / "noisy_label_kv.txt"
        clean_kv = root / "clean_label_kv.txt"
        noisy_table = read_label_kv(noisy_kv, self.num_classes)
        clean_table = read_label_kv(clean_kv, self.num_classes)

        train_file = root / "noisy_train_key_list.txt"
        train_keys = read_key_list(train_file)
        if not train_keys:
            raise InputError(f"{train_file} lists no training images")
        train_noisy = _labels_for(train_keys, noisy_table, train_file, noisy_kv)
        train_clean = torch.tensor([clean_table.get(k, -1) for k in train_keys], dtype=torch.long)

        test_file = root / "clean_test_key_list.txt"
        test_keys = read_key_list(test_file)
        test_labels = _labels_for(test_keys, clean_table, test_file, clean_kv)
        val_keys: np.ndarray | None = None
        val_labels: Tensor | None = None
        if self.protocol == "clean_val":
            val_file = root / "clean_val_key_list.txt"
            keys = read_key_list(val_file)
            if not keys:
                raise InputError(f"{val_file} lists no images; protocol clean_val needs them")
            val_labels = _labels_for(keys, clean_table, val_file, clean_kv)
            val_keys = key_array(keys)
        return LoadedData(
            train_images=key_array(train_keys),
            train_clean=train_clean,
            test_images=key_array(test_keys),
            test_labels=test_labels,
            train_noisy=train_noisy,
            val_images=val_keys,
            val_labels=val_labels,
            extra={"class_names": names, "clean_known": int((train_clean >= 0).sum())},
        )

    def fetch(self) -> None:
        raise NotImplementedError(
            "Clothing1M is distributed on request by its authors and cannot be downloaded "
            "automatically; point --data.data_dir at your copy"
        )

    def data_info(self) -> dict[str, Any]:
        """Split sizes, skipped images per split and the validation ``protocol``."""
        return {**super().data_info(), "protocol": self.protocol}
