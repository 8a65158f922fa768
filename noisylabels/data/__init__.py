"""Data modules: clean data in, noisy labels from a label source, split, batched transforms.

One module per dataset declares its facts (classes, statistics, semantic flip map); in-memory
datasets (digits, MNIST, CIFAR) and image-file datasets (Clothing1M, image folders) share the
base module, the samplers and the file decoding.
"""

from noisylabels.data.cifar import CIFAR10DataModule, CIFAR100DataModule
from noisylabels.data.clothing1m import Clothing1MDataModule
from noisylabels.data.digits import DigitsDataModule
from noisylabels.data.image_files import ImageFileDataModule
from noisylabels.data.image_folder import ImageFolderDataModule
from noisylabels.data.loaded import LoadedData
from noisylabels.data.memory import TensorDictDataset, collate_batch
from noisylabels.data.mnist import MNISTDataModule
from noisylabels.data.module import NoisyDataModule
from noisylabels.data.transforms import BatchTransform, random_crop, random_hflip

__all__ = [
    "BatchTransform",
    "CIFAR10DataModule",
    "CIFAR100DataModule",
    "Clothing1MDataModule",
    "DigitsDataModule",
    "ImageFileDataModule",
    "ImageFolderDataModule",
    "LoadedData",
    "MNISTDataModule",
    "NoisyDataModule",
    "TensorDictDataset",
    "collate_batch",
    "random_crop",
    "random_hflip",
]
