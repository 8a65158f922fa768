"""Food-101N (Lee, He, Zhang & Yang, "CleanNet: Transfer Learning for Scalable Image Classifier
Training with Label Noise", CVPR 2018): about 310k web images of Food-101's 101 classes whose
labels are the search queries that found them (real noise), a subset of them verified by people
(whether the label is right), tested on Food-101's test set (Bossard, Guillaumin & Van Gool,
"Food-101 - Mining Discriminative Components with Random Forests", ECCV 2014).

The datasets are never downloaded: point ``data_dir`` at the folder that holds both releases as
they unpack, ``Food-101N_release/`` (CleanNet's) and ``food-101/`` (Food-101's). This module
reads their list files; the images are decoded by the file-backed base
(:mod:`noisylabels.data.image_files`).

The noise is real (the ``real`` label source): no training image has a known clean label
(``clean_label`` is ``-1``; a verification says whether a label is right, not which class a
wrong one should have been), and there is no true transition matrix. The verification labels
of ``verified_train.tsv`` and ``verified_val.tsv`` measure the noise: ``noise.rate_actual`` in
``results.json`` is the fraction of the verified training images whose label the verification
marks wrong (``noise.verified`` counts them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from noisylabels.data.files import is_safe_key, key_array, warn_rejected_keys
from noisylabels.data.image_files import ImageFileDataModule
from noisylabels.data.loaded import LoadedData
from noisylabels.errors import InputError, MissingFileError

NUM_CLASSES = 101
RELEASE = "Food-101N_release"
FOOD101 = "food-101"
CLASSES = f"{RELEASE}/meta/classes.txt"
IMAGE_LIST = f"{RELEASE}/meta/imagelist.tsv"
VERIFIED = (f"{RELEASE}/meta/verified_train.tsv", f"{RELEASE}/meta/verified_val.tsv")
TEST_LIST = f"{FOOD101}/meta/test.txt"
HEADER = "class_name"
"""The first line of every Food-101N list begins with it (``class_name/key ...``)."""
UNVERIFIED = -1


def read_classes(path: Path) -> list[str]:
    """The class names of Food-101N's ``meta/classes.txt`` (after its ``class_name`` header),
    in class order."""
    names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    names = [n for n in names if n]
    if names and names[0] == HEADER:
        names = names[1:]
    return names


def read_tsv(path: Path, columns: int) -> list[tuple[int, list[str]]]:
    """``(line number, fields)`` of each line of a Food-101N list after its header, each with
    ``columns`` tab-separated fields (whitespace-separated where there is no tab); a line of
    another shape is an :class:`~noisylabels.errors.InputError` naming it."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            text = line.strip()
            if not text or (lineno == 1 and text.startswith(HEADER)):
                continue
            fields = text.split("\t") if "\t" in text else text.split()
            if len(fields) != columns:
                shape = "KEY" if columns == 1 else "KEY<tab>VERIFICATION"
                raise InputError(f"{path}, line {lineno}: expected {shape}, got {text!r}")
            rows.append((lineno, [f.strip() for f in fields]))
    return rows


def class_of(key: str, classes: dict[str, int], path: Path, lineno: int) -> int:
    """The class of a ``<class>/<name>`` key: its folder's index in ``classes``."""
    folder = key.split("/", 1)[0]
    if "/" not in key or folder not in classes:
        raise InputError(
            f"{path}, line {lineno}: {key!r} does not begin with one of the {len(classes)} class "
            "folders of meta/classes.txt (expected '<class>/<file>')"
        )
    return classes[folder]


def read_verification(
    path: Path, positions: dict[str, int], verification: Tensor
) -> tuple[int, int]:
    """Write the verification labels of ``path`` (``<class>/<file><tab>0|1``: 1 the label is
    right, 0 it is wrong) into ``verification`` at the training position of each key; return
    how many lines were read and how many of their keys are not in the training list."""
    read = unmatched = 0
    for lineno, (key, value) in read_tsv(path, 2):
        if value not in ("0", "1"):
            raise InputError(f"{path}, line {lineno}: verification label {value!r} is not 0 or 1")
        read += 1
        position = positions.get(key)
        if position is None:
            unmatched += 1
            continue
        verification[position] = int(value)
    return read, unmatched


class Food101NDataModule(ImageFileDataModule):
    """Food-101N (Lee et al. 2018), tested on Food-101's test set, from local copies of both
    releases in one folder::

        DATA_DIR/Food-101N_release/meta/classes.txt         "class_name", then the 101 classes
        DATA_DIR/Food-101N_release/meta/imagelist.tsv       "class_name/key", then "<class>/<file>"
        DATA_DIR/Food-101N_release/meta/verified_train.tsv  "<class>/<file><tab>0|1" (1: right)
        DATA_DIR/Food-101N_release/meta/verified_val.tsv    the same format
        DATA_DIR/Food-101N_release/images/<class>/<file>    the noisy training images
        DATA_DIR/food-101/meta/test.txt                     "<class>/<id>" per line
        DATA_DIR/food-101/images/<class>/<id>.jpg           Food-101's images

    Training: every image of ``imagelist.tsv``, labelled with its class folder (label source
    ``real``), ``val_fraction`` of them held out as noisy validation data. Test: Food-101's
    ``test.txt`` (25,250 images, 250 a class, with clean labels). The classes are those of
    ``classes.txt``, in its order.

    Args:
        data_dir: the folder that holds ``Food-101N_release/`` and ``food-101/``.
        batch_size: training batch size (32: the batch of PLC's Food-101N protocol).
        eval_batch_size: batch size of validation/test (default: ``batch_size``).
        num_workers: JPEG-decoding DataLoader workers (default ``min(8, CPUs)``).
        samples_per_class: per-epoch class-balanced subsampling (see
            :class:`~noisylabels.data.image_files.ImageFileDataModule`).
        noise_seed: seed of the noisy-validation split and of the subsampling.
        val_fraction: fraction of the training list held out as noisy validation data.
        augment: random crop + horizontal flip while training (default on).
        normalize: normalize by ImageNet's mean and std (default); false: pixels in [0, 1].
        image_size: crop size fed to the network (default 224).
        resize_size: the shorter image side is resized to this before cropping (default 256).
        max_skipped_fraction: largest fraction of unreadable test images a test accepts.
        views: augmented views of every training image (see
            :class:`~noisylabels.data.module.NoisyDataModule`).
        strong_views, strong_augment, cutout: strongly augmented views of every training
            image (see :class:`~noisylabels.data.module.NoisyDataModule`): each from a random crop
            of its own, the policy, the flip, the normalization and Cutout on the device.
    """

    name: ClassVar[str] = "food101n"
    num_classes: ClassVar[int] = NUM_CLASSES
    input_shape: ClassVar[tuple[int, int, int]] = (3, 224, 224)
    ships_noisy_labels: ClassVar[bool] = True

    def __init__(
        self,
        data_dir: str = "data",
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int | None = None,
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
        self.class_names: list[str] = []
        self.verification: Tensor | None = None
        """Per training image: 1 verified right, 0 verified wrong, -1 not verified."""
        self.verified_unmatched = 0

    # ------------------------------------------------------------------ reading the lists
    def load(self) -> LoadedData:
        root = self.data_dir
        expected = [CLASSES, IMAGE_LIST, *VERIFIED, TEST_LIST]
        missing = [name for name in expected if not (root / name).is_file()]
        for folder in (f"{RELEASE}/images", f"{FOOD101}/images"):
            if not (root / folder).is_dir():
                missing.append(f"{folder}/ (the JPEGs, one folder per class)")
        if missing:
            lines = "\n".join(f"  {root / n}" for n in missing)
            raise MissingFileError(
                f"Food-101N not found or incomplete under {root}; missing:\n{lines}\n"
                f"Unpack CleanNet's Food-101N release ({RELEASE}/, kuanghuei.github.io/Food-101N) "
                f"and Food-101 ({FOOD101}/, data.vision.ee.ethz.ch/cvl/datasets_extra/food-101) "
                "side by side in one folder; they cannot be downloaded automatically. Point "
                "--data.data_dir at that folder."
            )
        names = read_classes(root / CLASSES)
        if len(names) != self.num_classes or len(set(names)) != len(names):
            raise InputError(
                f"{root / CLASSES} lists {len(set(names))} distinct class names; Food-101N has "
                f"{self.num_classes}"
            )
        self.class_names = names
        classes = {name: k for k, name in enumerate(names)}

        train_file = root / IMAGE_LIST
        keys, labels, rejected = [], [], []
        for lineno, (key,) in read_tsv(train_file, 1):
            if not is_safe_key(key):
                rejected.append((lineno, key))
                continue
            labels.append(class_of(key, classes, train_file, lineno))
            keys.append(key)
        warn_rejected_keys(train_file, rejected)
        if not keys:
            raise InputError(f"{train_file} lists no training images")
        positions = {key: i for i, key in enumerate(keys)}
        verification = torch.full((len(keys),), UNVERIFIED, dtype=torch.long)
        self.verified_unmatched = 0
        for name in VERIFIED:
            _, unmatched = read_verification(root / name, positions, verification)
            self.verified_unmatched += unmatched
        self.verification = verification

        test_file = root / TEST_LIST
        test_keys, test_labels, rejected = [], [], []
        for lineno, (name,) in read_tsv(test_file, 1):
            if not is_safe_key(name):
                rejected.append((lineno, name))
                continue
            test_labels.append(class_of(name, classes, test_file, lineno))
            test_keys.append(f"{FOOD101}/images/{name}.jpg")
        warn_rejected_keys(test_file, rejected)
        if not test_keys:
            raise InputError(f"{test_file} lists no test images")
        return LoadedData(
            train_images=key_array([f"{RELEASE}/images/{k}" for k in keys]),
            train_clean=torch.full((len(keys),), -1, dtype=torch.long),
            test_images=key_array(test_keys),
            test_labels=torch.tensor(test_labels, dtype=torch.long),
            train_noisy=torch.tensor(labels, dtype=torch.long),
            extra={"class_names": names, "clean_known": 0},
        )

    # ------------------------------------------------------------------ the measured noise
    def verified_counts(self) -> tuple[int, int]:
        """``(verified, verified wrong)`` over the training list (its noisy validation split
        included, as the noise of the other datasets is measured)."""
        assert self.verification is not None, "call setup() first"
        return int((self.verification >= 0).sum()), int((self.verification == 0).sum())

    @property
    def rate_actual(self) -> float | None:
        """The fraction of the verified training images whose label is verified wrong."""
        if self.verification is None:
            return None
        verified, wrong = self.verified_counts()
        return wrong / verified if verified else None

    def noise_info(self) -> dict[str, Any]:
        """The real label source's summary with the noise measured by the verification labels:
        ``rate_actual`` (wrong / verified) and ``verified`` (``images``, ``wrong``, and
        ``unmatched``: verified keys that are not in ``imagelist.tsv``)."""
        info = super().noise_info()
        verified, wrong = self.verified_counts()
        info["rate_actual"] = self.rate_actual
        info["verified"] = {
            "images": verified,
            "wrong": wrong,
            "unmatched": self.verified_unmatched,
        }
        return info

    def noise_state(self) -> dict[str, Any]:
        """The base's record, with the ``verification`` of every training image (1 right, 0
        wrong, -1 not verified)."""
        return {**super().noise_state(), "verification": self.verification}
