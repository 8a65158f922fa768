"""CIFAR-10 and CIFAR-100 (Krizhevsky 2009, "Learning Multiple Layers of Features from Tiny
Images") from torchvision's on-disk layout, read into memory as uint8 tensors."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from noisylabels.data.loaded import LoadedData
from noisylabels.data.memory import missing_files_message
from noisylabels.data.module import NoisyDataModule
from noisylabels.errors import InputError, MissingFileError
from noisylabels.noise import superclass_flips

CIFAR10_FLIPS: dict[int, int] = {9: 1, 2: 0, 4: 7, 3: 5, 5: 3}
"""Semantic flips of CIFAR-10 (Patrini et al. 2017): truck -> automobile, bird -> airplane,
deer -> horse, cat <-> dog."""

# CIFAR-100 fine -> coarse (super-class) label table, fine classes in the dataset's
# (alphabetical) order: 0 apple -> 4 fruit_and_vegetables, 1 aquarium_fish -> 1 fish, ...
CIFAR100_COARSE: tuple[int, ...] = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3,
    3, 14, 9, 18, 7, 11, 3, 9, 7, 11,
    6, 11, 5, 10, 7, 6, 13, 15, 3, 15,
    0, 11, 1, 10, 12, 14, 16, 9, 11, 5,
    5, 19, 8, 8, 15, 13, 14, 17, 18, 10,
    16, 4, 17, 4, 2, 0, 17, 4, 18, 17,
    10, 3, 2, 12, 12, 16, 12, 1, 9, 19,
    2, 10, 0, 1, 16, 12, 9, 13, 15, 13,
    16, 19, 2, 4, 6, 19, 5, 5, 8, 19,
    18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
)  # fmt: skip

_PIXELS = 3 * 32 * 32


def _read_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    fix = "Delete the folder and download CIFAR again (--data.download true)."
    try:
        with open(path, "rb") as fh:
            entry = pickle.load(fh, encoding="latin1")
    except Exception as err:  # truncated or not a pickle: any unpickling error means the same
        raise InputError(
            f"{path} is truncated or not a CIFAR batch file ({type(err).__name__}: {err}). {fix}"
        ) from None
    if not isinstance(entry, dict) or "data" not in entry or label_key not in entry:
        keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise InputError(
            f"{path} is not a CIFAR batch: expected a dict with 'data' and {label_key!r}, "
            f"found {keys}. {fix}"
        )
    data = np.asarray(entry["data"], dtype=np.uint8)
    labels = np.asarray(entry[label_key], dtype=np.int64)
    if data.size != len(labels) * _PIXELS:
        raise InputError(
            f"{path} holds {data.size} pixel values for {len(labels)} labels; a CIFAR batch "
            f"has {_PIXELS} per image. {fix}"
        )
    return data.reshape(-1, 3, 32, 32), labels


def read_cifar_batches(files: list[Path], label_key: str) -> tuple[Tensor, Tensor]:
    """Read CIFAR python batches (``data``: N x 3072 uint8, labels under ``label_key``).

    The batches are Python pickles by format (torchvision reads them the same way), and
    unpickling can run code: use the files of the official archive
    (``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz``), nothing else. A truncated file
    or one that is not a CIFAR batch raises :class:`~noisylabels.errors.InputError` naming it.
    """
    parts = [_read_batch(path, label_key) for path in files]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return torch.from_numpy(images), torch.from_numpy(labels)


class CIFAR10DataModule(NoisyDataModule):
    """CIFAR-10 (Krizhevsky 2009) in torchvision's layout ``DATA_DIR/cifar-10-batches-py/``."""

    name: ClassVar[str] = "cifar10"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (3, 32, 32)
    mean: ClassVar[tuple[float, ...]] = (0.4914, 0.4822, 0.4465)
    std: ClassVar[tuple[float, ...]] = (0.2023, 0.1994, 0.2010)
    default_augment: ClassVar[bool] = True
    semantic_flips: ClassVar[dict[int, int] | None] = CIFAR10_FLIPS
    folder: ClassVar[str] = "cifar-10-batches-py"
    train_files: ClassVar[tuple[str, ...]] = tuple(f"data_batch_{i}" for i in range(1, 6))
    test_files: ClassVar[tuple[str, ...]] = ("test_batch",)
    label_key: ClassVar[str] = "labels"

    def fetch(self) -> None:
        from torchvision.datasets import CIFAR10

        CIFAR10(str(self.data_dir), train=True, download=True)

    def load(self) -> LoadedData:
        root = self.data_dir / self.folder
        names = list(self.train_files) + list(self.test_files)
        if not all((root / n).is_file() for n in names):
            raise MissingFileError(missing_files_message(type(self).__name__[:-10], root, names))
        train_x, train_y = read_cifar_batches([root / n for n in self.train_files], self.label_key)
        test_x, test_y = read_cifar_batches([root / n for n in self.test_files], self.label_key)
        return LoadedData(train_x, train_y, test_x, test_y)


class CIFAR100DataModule(CIFAR10DataModule):
    """CIFAR-100 (Krizhevsky 2009) in torchvision's layout ``DATA_DIR/cifar-100-python/``.

    Semantic noise flips each fine class to the next fine class of its super-class
    (:data:`CIFAR100_COARSE`, Patrini et al. 2017)."""

    name: ClassVar[str] = "cifar100"
    num_classes: ClassVar[int] = 100
    mean: ClassVar[tuple[float, ...]] = (0.5071, 0.4865, 0.4409)
    std: ClassVar[tuple[float, ...]] = (0.2673, 0.2564, 0.2762)
    semantic_flips: ClassVar[dict[int, int] | None] = superclass_flips(CIFAR100_COARSE)
    folder: ClassVar[str] = "cifar-100-python"
    train_files: ClassVar[tuple[str, ...]] = ("train",)
    test_files: ClassVar[tuple[str, ...]] = ("test",)
    label_key: ClassVar[str] = "fine_labels"

    def fetch(self) -> None:
        from torchvision.datasets import CIFAR100

        CIFAR100(str(self.data_dir), train=True, download=True)
