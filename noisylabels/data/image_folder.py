"""Any image-classification dataset in torchvision's ``ImageFolder`` layout (one folder per class),
with synthetic noise or a label file like every other dataset."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from noisylabels.data.files import key_array
from noisylabels.data.image_files import ImageFileDataModule
from noisylabels.data.loaded import LoadedData
from noisylabels.errors import InputError, MissingFileError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")

_LAYOUT = """    DATA_DIR/train/<class>/*.jpg|*.png   training images, one folder per class
    DATA_DIR/test/<class>/...            clean test images (class folders as under train/)
    DATA_DIR/val/<class>/...             optional clean validation images"""


class ImageFolderDataModule(ImageFileDataModule):
    """Images in the ``ImageFolder`` layout of torchvision::

        DATA_DIR/train/<class>/*.jpg|*.jpeg|*.png
        DATA_DIR/test/<class>/...
        DATA_DIR/val/<class>/...      (optional)

    The classes are the sorted folder names under ``train/`` (class ``k`` is the ``k``-th name);
    images are found recursively inside each class folder. Noise (any generated kind but
    ``semantic``, which needs a dataset's flip map, or a label file in the sorted order of the
    training files) applies to the training labels; the test set (and ``val/``) is clean.
    Images are decoded by workers as for Clothing1M: shorter side resized to ``resize_size``,
    crop of ``image_size``, ImageNet normalization.

    It takes every option of :class:`~noisylabels.data.module.NoisyDataModule` and
    :class:`~noisylabels.data.image_files.ImageFileDataModule` (as keywords), and these:

    Args:
        batch_size: training batch size (per process under DDP); 64 here, for images of
            ImageNet size.
        use_val_folder: validate on ``val/`` (clean labels) when it exists; ``false`` holds out
            ``val_fraction`` of the noisy training set instead, as for the other datasets.
    """

    name: ClassVar[str] = "image_folder"
    classes_from_files: ClassVar[bool] = True

    def __init__(self, *, batch_size: int = 64, use_val_folder: bool = True, **kwargs: Any) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.use_val_folder = use_val_folder
        self.class_names = self._find_classes()
        self.num_classes = len(self.class_names)
        self.check_noise_options(self.num_classes)

    def _find_classes(self) -> list[str]:
        train = self.data_dir / "train"
        if not train.is_dir() or not (self.data_dir / "test").is_dir():
            raise MissingFileError(
                f"no image folder dataset under {self.data_dir}: expected\n{_LAYOUT}\n"
                "Point --data.data_dir at the folder that holds train/ and test/."
            )
        names = sorted(p.name for p in train.iterdir() if p.is_dir())
        if len(names) < 2:
            raise InputError(
                f"{train} holds {len(names)} class folder(s); a classification dataset needs at "
                "least 2 (one folder of images per class)"
            )
        return names

    def _read_split(self, split: str) -> tuple[list[str], Tensor]:
        folder = self.data_dir / split
        unknown = sorted(
            p.name for p in folder.iterdir() if p.is_dir() and p.name not in self.class_names
        )
        if unknown:
            raise InputError(
                f"{folder} has class folder(s) {unknown} that {self.data_dir / 'train'} lacks; "
                "every split must use the classes of train/"
            )
        keys: list[str] = []
        labels: list[int] = []
        for label, name in enumerate(self.class_names):
            files = sorted(
                p
                for p in (folder / name).rglob("*")
                if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
            )
            keys += [p.relative_to(self.data_dir).as_posix() for p in files]
            labels += [label] * len(files)
        if not keys:
            raise InputError(
                f"{folder} holds no {'/'.join(IMAGE_SUFFIXES)} images in its class folders"
            )
        return keys, torch.tensor(labels, dtype=torch.long)

    def load(self) -> LoadedData:
        train_keys, train_labels = self._read_split("train")
        test_keys, test_labels = self._read_split("test")
        val_images: Any = None
        val_labels: Tensor | None = None
        if self.use_val_folder and (self.data_dir / "val").is_dir():
            val_keys, val_labels = self._read_split("val")
            val_images = key_array(val_keys)
        return LoadedData(
            train_images=key_array(train_keys),
            train_clean=train_labels,
            test_images=key_array(test_keys),
            test_labels=test_labels,
            val_images=val_images,
            val_labels=val_labels,
            extra={"class_names": list(self.class_names)},
        )
