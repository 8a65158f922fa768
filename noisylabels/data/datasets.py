"""In-memory datasets: sklearn's bundled digits, MNIST, CIFAR-10 and CIFAR-100.

Each keeps its images as one uint8 NCHW tensor; normalization and augmentation run batched on
the device (see :class:`~noisylabels.data.transforms.BatchTransform`).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from noisylabels.data.base import LoadedData, NoisyDataModule


def _missing(dataset: str, root: Path, expected: list[str], download_hint: bool = True) -> str:
    files = "\n".join(f"  {root / name}" for name in expected)
    hint = (
        "\nPass --data.download true to fetch it with torchvision's downloader (needs network),"
        " or point --data.data_dir at a folder that holds this layout."
        if download_hint
        else "\nPoint --data.data_dir at a folder that holds this layout."
    )
    return f"{dataset} not found or incomplete. Expected these files:\n{files}{hint}"


class DigitsDataModule(NoisyDataModule):
    """scikit-learn's bundled handwritten digits (8x8 grayscale, 1,797 images, no download).

    A seeded ``test_fraction`` of the images becomes the clean test set (seed: ``split_seed``);
    the rest is the training set that noise and the train/val split apply to.
    """

    name: ClassVar[str] = "digits"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (1, 8, 8)
    mean: ClassVar[tuple[float, ...]] = (0.3,)
    std: ClassVar[tuple[float, ...]] = (0.38,)

    def __init__(self, *args, test_fraction: float = 0.2, split_seed: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        self.test_fraction = test_fraction
        self.split_seed = split_seed

    def load(self) -> LoadedData:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = torch.from_numpy(np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8))
        images = images.unsqueeze(1).contiguous()
        labels = torch.from_numpy(bunch.target.astype(np.int64))
        perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(self.split_seed))
        n_test = int(round(len(labels) * self.test_fraction))
        test, train = perm[:n_test].sort().values, perm[n_test:].sort().values
        return LoadedData(images[train], labels[train], images[test], labels[test])

    def fetch(self) -> None:
        """The digits ship with scikit-learn: nothing to download."""


class MNISTDataModule(NoisyDataModule):
    """MNIST (LeCun et al. 1998) in torchvision's layout ``DATA_DIR/MNIST/raw/*-ubyte``."""

    name: ClassVar[str] = "mnist"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (1, 28, 28)
    mean: ClassVar[tuple[float, ...]] = (0.1307,)
    std: ClassVar[tuple[float, ...]] = (0.3081,)
    files: ClassVar[dict[str, str]] = {
        "train_images": "train-images-idx3-ubyte",
        "train_labels": "train-labels-idx1-ubyte",
        "test_images": "t10k-images-idx3-ubyte",
        "test_labels": "t10k-labels-idx1-ubyte",
    }

    @property
    def raw_dir(self) -> Path:
        return self.data_dir / "MNIST" / "raw"

    def fetch(self) -> None:
        from torchvision.datasets import MNIST

        for train in (True, False):
            MNIST(str(self.data_dir), train=train, download=True)

    def load(self) -> LoadedData:
        from torchvision.datasets.mnist import read_image_file, read_label_file

        paths = {k: self.raw_dir / v for k, v in self.files.items()}
        if not all(p.is_file() for p in paths.values()):
            raise FileNotFoundError(_missing("MNIST", self.raw_dir, list(self.files.values())))
        train_x = read_image_file(str(paths["train_images"])).unsqueeze(1).contiguous()
        test_x = read_image_file(str(paths["test_images"])).unsqueeze(1).contiguous()
        train_y = read_label_file(str(paths["train_labels"])).long()
        test_y = read_label_file(str(paths["test_labels"])).long()
        if len(train_x) != len(train_y) or len(test_x) != len(test_y):
            raise ValueError(f"MNIST files in {self.raw_dir} disagree on the number of samples")
        return LoadedData(train_x, train_y, test_x, test_y)


def read_cifar_batches(files: list[Path], label_key: str) -> tuple[Tensor, Tensor]:
    """Read CIFAR python pickles (``data``: N x 3072 uint8, labels under ``label_key``)."""
    images, labels = [], []
    for path in files:
        with open(path, "rb") as fh:
            entry = pickle.load(fh, encoding="latin1")
        images.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(entry[label_key], dtype=np.int64))
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


class CIFAR10DataModule(NoisyDataModule):
    """CIFAR-10 (Krizhevsky 2009) in torchvision's layout ``DATA_DIR/cifar-10-batches-py/``."""

    name: ClassVar[str] = "cifar10"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (3, 32, 32)
    mean: ClassVar[tuple[float, ...]] = (0.4914, 0.4822, 0.4465)
    std: ClassVar[tuple[float, ...]] = (0.2023, 0.1994, 0.2010)
    default_augment: ClassVar[bool] = True
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
            raise FileNotFoundError(_missing(type(self).__name__[:-10], root, names))
        train_x, train_y = read_cifar_batches([root / n for n in self.train_files], self.label_key)
        test_x, test_y = read_cifar_batches([root / n for n in self.test_files], self.label_key)
        return LoadedData(train_x, train_y, test_x, test_y)


class CIFAR100DataModule(CIFAR10DataModule):
    """CIFAR-100 (Krizhevsky 2009) in torchvision's layout ``DATA_DIR/cifar-100-python/``."""

    name: ClassVar[str] = "cifar100"
    num_classes: ClassVar[int] = 100
    mean: ClassVar[tuple[float, ...]] = (0.5071, 0.4865, 0.4409)
    std: ClassVar[tuple[float, ...]] = (0.2673, 0.2564, 0.2762)
    folder: ClassVar[str] = "cifar-100-python"
    train_files: ClassVar[tuple[str, ...]] = ("train",)
    test_files: ClassVar[tuple[str, ...]] = ("test",)
    label_key: ClassVar[str] = "fine_labels"

    def fetch(self) -> None:
        from torchvision.datasets import CIFAR100

        CIFAR100(str(self.data_dir), train=True, download=True)
