"""Data modules: clean data in memory, noisy labels from the noise seed, batched transforms."""

from noisylabels.data.base import LoadedData, NoisyDataModule, TensorDictDataset, collate_batch
from noisylabels.data.clothing1m import Clothing1MDataModule
from noisylabels.data.datasets import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    DigitsDataModule,
    MNISTDataModule,
)
from noisylabels.data.transforms import BatchTransform, random_crop, random_hflip

__all__ = [
    "BatchTransform",
    "CIFAR10DataModule",
    "CIFAR100DataModule",
    "Clothing1MDataModule",
    "DigitsDataModule",
    "LoadedData",
    "MNISTDataModule",
    "NoisyDataModule",
    "TensorDictDataset",
    "collate_batch",
    "random_crop",
    "random_hflip",
]
