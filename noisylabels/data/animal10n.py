"""ANIMAL-10N (Song, Kim & Lee, "SELFIE: Refurbishing Unclean Samples for Robust Deep Learning",
ICML 2019): 55,000 64x64 online images of ten easily confused animals, labelled by people with
a noise rate its authors estimate at 8 % (real noise); 50,000 for training, 5,000 for testing.
Each image's label is the number its file name begins with, ``<label>_<index>.jpg``.

The dataset is distributed by its authors (dm.kaist.ac.kr/datasets/animal-10n) and never
downloaded: point ``data_dir`` at the folder that holds its ``training/`` and ``testing/``.
The images are decoded by the file-backed base (:mod:`noisylabels.data.image_files`), as for
Clothing1M. No training image has a known clean label (``clean_label`` is ``-1``) and there is
no true transition matrix; the test is scored against the test images' file-name labels, as
SELFIE and the work after it score it.
"""

from __future__ import annotations

import re
from typing import ClassVar

import torch
from torch import Tensor

from noisylabels.data.files import key_array
from noisylabels.data.image_files import ImageFileDataModule
from noisylabels.data.image_folder import IMAGE_SUFFIXES
from noisylabels.data.loaded import LoadedData
from noisylabels.errors import InputError, MissingFileError, warn

NUM_CLASSES = 10
SPLITS = {"training": 50_000, "testing": 5_000}
"""The release's folders and how many images each holds."""
PUBLISHED_RATE = 0.08
"""The noise rate SELFIE's authors estimate for the training labels (their README, section 4)."""
FILE_NAME = re.compile(r"^(\d+)_[^/]+$")


def label_of(name: str, num_classes: int = NUM_CLASSES) -> int:
    """The label an ANIMAL-10N file name carries: the number before its first ``_``
    (``3_01428.jpg`` is class 3). A name without one, or one outside ``0..num_classes-1``, is an
    :class:`~noisylabels.errors.InputError` naming it."""
    match = FILE_NAME.match(name)
    if match is None:
        raise InputError(
            f"{name!r} does not carry a label: ANIMAL-10N's images are named "
            "<label>_<index>.jpg (e.g. 3_01428.jpg)"
        )
    label = int(match.group(1))
    if not 0 <= label < num_classes:
        raise InputError(f"{name!r} carries label {label}, outside 0-{num_classes - 1}")
    return label


class Animal10NDataModule(ImageFileDataModule):
    """ANIMAL-10N (Song et al. 2019) from a local copy in its distribution layout::

        DATA_DIR/training/<label>_<index>.jpg    50,000 training images, noisy labels
        DATA_DIR/testing/<label>_<index>.jpg     5,000 test images

    The images of each folder are read in sorted order (the order a label file or a run's
    ``noise.pt`` follows); other files (not ``.jpg``/``.jpeg``/``.png``) are ignored. A copy
    with another number of images than the release's is read, with a warning. Training: the
    ``training/`` images with their file-name labels (label source ``real``), ``val_fraction``
    of them held out as noisy validation data; test: ``testing/``.

    Args:
        data_dir: the folder that holds ``training/`` and ``testing/``.
        batch_size: training batch size (SELFIE: 128).
        eval_batch_size: batch size of validation/test (default: ``batch_size``).
        num_workers: JPEG-decoding DataLoader workers (default ``min(8, CPUs)``).
        samples_per_class: per-epoch class-balanced subsampling (see
            :class:`~noisylabels.data.image_files.ImageFileDataModule`).
        noise_seed: seed of the noisy-validation split and of the subsampling.
        val_fraction: fraction of the training images held out as noisy validation data.
        augment: horizontal flip while training (default on; the crop of a 64 px image at
            ``image_size`` 64 is the whole image).
        normalize: normalize by ImageNet's mean and std (default); false: pixels in [0, 1].
        image_size: crop size fed to the network (default 64, the images' size).
        resize_size: the shorter image side is resized to this before cropping (default 64).
        max_skipped_fraction: largest fraction of unreadable test images a test accepts.
        views: augmented views of every training image (see
            :class:`~noisylabels.data.module.NoisyDataModule`).
        strong_views, strong_augment, cutout: strongly augmented views of every training
            image (see :class:`~noisylabels.data.module.NoisyDataModule`): each from a random crop
            of its own, the policy, the flip, the normalization and Cutout on the device.
    """

    name: ClassVar[str] = "animal10n"
    num_classes: ClassVar[int] = NUM_CLASSES
    input_shape: ClassVar[tuple[int, int, int]] = (3, 64, 64)
    ships_noisy_labels: ClassVar[bool] = True

    def __init__(
        self,
        data_dir: str = "data/animal10n",
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int | None = None,
        samples_per_class: int | None = None,
        noise_seed: int = 0,
        val_fraction: float = 0.1,
        augment: bool | None = None,
        normalize: bool = True,
        image_size: int = 64,
        resize_size: int = 64,
        max_skipped_fraction: float = 0.01,
        views: int = 1,
        strong_views: int = 0,
        strong_augment: str | None = None,
        cutout: int | None = None,
    ) -> None:
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

    def _read_split(self, split: str) -> tuple[list[str], Tensor]:
        folder = self.data_dir / split
        files = sorted(
            p.name
            for p in folder.iterdir()
            if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
        )
        if not files:
            raise InputError(
                f"{folder} holds no {'/'.join(IMAGE_SUFFIXES)} images; ANIMAL-10N's are named "
                "<label>_<index>.jpg"
            )
        labels = []
        for name in files:
            try:
                labels.append(label_of(name, self.num_classes))
            except InputError as err:
                raise InputError(f"{folder}: {err}") from None
        if len(files) != SPLITS[split]:
            warn(
                f"{folder} holds {len(files)} images; ANIMAL-10N's {split}/ holds "
                f"{SPLITS[split]:,}. Reading them; check the copy is complete if that is not "
                "meant.",
                every_process=True,
            )
        return [f"{split}/{name}" for name in files], torch.tensor(labels, dtype=torch.long)

    def load(self) -> LoadedData:
        root = self.data_dir
        missing = [
            f"{split}/ ({n:,} images named <label>_<index>.jpg)"
            for split, n in SPLITS.items()
            if not (root / split).is_dir()
        ]
        if missing:
            lines = "\n".join(f"  {root / n}" for n in missing)
            raise MissingFileError(
                f"ANIMAL-10N not found or incomplete under {root}; missing:\n{lines}\n"
                "It is distributed by its authors (dm.kaist.ac.kr/datasets/animal-10n) and "
                "cannot be downloaded automatically: unpack it so that one "
                "folder holds training/ (50,000 images) and testing/ (5,000), each image named "
                "<label>_<index>.jpg, and point --data.data_dir at that folder."
            )
        train_keys, train_noisy = self._read_split("training")
        test_keys, test_labels = self._read_split("testing")
        return LoadedData(
            train_images=key_array(train_keys),
            train_clean=torch.full((len(train_keys),), -1, dtype=torch.long),
            test_images=key_array(test_keys),
            test_labels=test_labels,
            train_noisy=train_noisy,
            extra={"clean_known": 0},
        )

    def published_noise_rate(self) -> float:
        """The noise rate SELFIE's authors estimate for the dataset (``noise.rate_published``
        in results.json, as CIFAR-N's)."""
        return PUBLISHED_RATE
