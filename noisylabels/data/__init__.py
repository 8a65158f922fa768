"""Data modules: clean data in, noisy labels from a label source, split, batched transforms.

One module per dataset declares its facts (classes, statistics, semantic flip map); in-memory
datasets (digits, MNIST, CIFAR) and image-file datasets (Clothing1M, image folders) share the
base module, the samplers and the file decoding.
"""

from noisylabels.data.animal10n import Animal10NDataModule
from noisylabels.data.cifar import CIFAR10DataModule, CIFAR100DataModule
from noisylabels.data.cifar_n import CIFAR10NDataModule, CIFAR100NDataModule
from noisylabels.data.clothing1m import Clothing1MDataModule
from noisylabels.data.digits import DigitsDataModule
from noisylabels.data.food101n import Food101NDataModule
from noisylabels.data.image_files import ImageFileDataModule
from noisylabels.data.image_folder import ImageFolderDataModule
from noisylabels.data.loaded import LoadedData
from noisylabels.data.memory import TensorDictDataset, collate_batch
from noisylabels.data.mnist import MNISTDataModule
from noisylabels.data.module import NoisyDataModule
from noisylabels.data.transforms import BatchTransform, random_crop, random_hflip
from noisylabels.data.webvision import MiniWebVisionDataModule

__all__ = [
    "Animal10NDataModule",
    "BatchTransform",
    "CIFAR10DataModule",
    "CIFAR10NDataModule",
    "CIFAR100DataModule",
    "CIFAR100NDataModule",
    "Clothing1MDataModule",
    "DigitsDataModule",
    "Food101NDataModule",
    "ImageFileDataModule",
    "ImageFolderDataModule",
    "LoadedData",
    "MNISTDataModule",
    "MiniWebVisionDataModule",
    "NoisyDataModule",
    "TensorDictDataset",
    "collate_batch",
    "random_crop",
    "random_hflip",
]
