"""Mini-WebVision: the Google images of WebVision 1.0's first 50 classes (Li et al., "WebVision
Database: Visual Learning and Understanding from Web Data", 2017), the benchmark of DivideMix (Li,
Socher & Hoi, ICLR 2020) and of the work it compares with: about 66k web images whose labels are
the search queries that found them (real noise), tested on WebVision's validation images of
those classes and, as a second test, on ILSVRC2012's validation images of the same classes.

The dataset is never downloaded: point ``data_dir`` at WebVision 1.0 as its resized release
unpacks (``info.tar``, ``google_resized_256.tar``, ``val_images_256.tar``), with ILSVRC2012's
validation images of the 50 classes under ``imagenet/val/`` in class folders. This module reads
the list files; the images are decoded by the file-backed base
(:mod:`noisylabels.data.image_files`).

The noise is real (the ``real`` label source): no training image has a known clean label
(``clean_label`` is ``-1``) and there is no true transition matrix. The main test accuracy
(``test/acc``, ``results.json``'s ``test_acc``) is WebVision's; ILSVRC2012's is logged as
``test/imagenet/acc`` (``test/imagenet/acc_last`` for the last epoch's model) and recorded in
``results.json`` as ``data.imagenet_val``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor

from noisylabels.data.files import ImageFileDataset, key_array, read_label_kv
from noisylabels.data.image_files import ImageFileDataModule
from noisylabels.data.image_folder import IMAGE_SUFFIXES
from noisylabels.data.loaded import LoadedData
from noisylabels.data.transforms import evaluation_batches
from noisylabels.errors import InputError, MissingFileError

NUM_CLASSES = 50
"""Mini-WebVision: WebVision's classes 0-49 (the first 50 of ILSVRC2012's synsets)."""
WEBVISION_CLASSES = 1000
TRAIN_LIST = "info/train_filelist_google.txt"
VAL_LIST = "info/val_filelist.txt"
SYNSETS = "info/synsets.txt"
VAL_IMAGES = "val_images_256"
IMAGENET_VAL = "imagenet/val"
TEST_ARRAY = "imagenet"
"""The skipped-image mask of the ILSVRC2012 test images."""


def read_synsets(path: Path) -> list[str]:
    """The WordNet ids of WebVision's ``info/synsets.txt`` (``n01440764 tench, ...`` per line),
    in class order: line ``k`` is class ``k``."""
    wnids = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        wnid = line.split()[0]
        if not (wnid.startswith("n") and wnid[1:].isdigit()):
            raise InputError(f"{path}, line {lineno}: {wnid!r} is not a WordNet id (nXXXXXXXX)")
        wnids.append(wnid)
    return wnids


def first_classes(
    table: dict[str, int], num_classes: int = NUM_CLASSES
) -> tuple[list[str], Tensor]:
    """The keys (in list order) and labels of a ``KEY LABEL`` table whose label is below
    ``num_classes``."""
    keys = [k for k, y in table.items() if y < num_classes]
    return keys, torch.tensor([table[k] for k in keys], dtype=torch.long)


class MiniWebVisionDataModule(ImageFileDataModule):
    """Mini-WebVision from a local copy of WebVision 1.0 (resized release) in its layout::

        DATA_DIR/info/train_filelist_google.txt   "google/q0001/00000001.jpg 0" per line
        DATA_DIR/info/val_filelist.txt            "val000001.jpg 0" per line
        DATA_DIR/info/synsets.txt                 the 1000 WordNet ids in class order
        DATA_DIR/google/...                       the Google training images (the keys)
        DATA_DIR/val_images_256/...               the validation images
        DATA_DIR/imagenet/val/<c>/*.JPEG          ILSVRC2012 val images of class c (0-49), or
        DATA_DIR/imagenet/val/<wnid>/*.JPEG       in folders named by synset (info/synsets.txt)

    Training: the lines of ``train_filelist_google.txt`` with a label below 50 (noisy labels,
    label source ``real``), ``val_fraction`` of them held out as noisy validation data. Test:
    the lines of ``val_filelist.txt`` with a label below 50 (clean, ``test/acc``), and with
    ``imagenet_test`` the ILSVRC2012 validation images of the 50 classes (``test/imagenet/acc``).

    Args:
        data_dir: the WebVision root.
        batch_size: training batch size (DivideMix: 32 labeled + 32 unlabeled images, its
            warm-up 64: 64 here).
        eval_batch_size: batch size of validation/test (default: ``batch_size``).
        num_workers: JPEG-decoding DataLoader workers (default ``min(8, CPUs)``).
        imagenet_test: also test on ILSVRC2012's validation images of the 50 classes (needs
            ``imagenet/val/``); ``false``: WebVision's validation set only.
        samples_per_class: per-epoch class-balanced subsampling (see
            :class:`~noisylabels.data.image_files.ImageFileDataModule`).
        noise_seed: seed of the noisy-validation split and of the subsampling.
        val_fraction: fraction of the training list held out as noisy validation data.
        augment: random crop + horizontal flip while training (default on).
        normalize: normalize by ImageNet's mean and std (default); false: pixels in [0, 1].
        image_size: crop size fed to the network (DivideMix: 227).
        resize_size: the shorter side is resized to this before cropping (256: the resized
            release's size, so the training crop is DivideMix's random 227 crop of it).
        max_skipped_fraction: largest fraction of unreadable test images a test accepts (each
            test set on its own).
        views: augmented views of every training image (see
            :class:`~noisylabels.data.module.NoisyDataModule`).
        strong_views, strong_augment, cutout: strongly augmented views of every training
            image (see :class:`~noisylabels.data.module.NoisyDataModule`): each from a random crop
            of its own, the policy, the flip, the normalization and Cutout on the device.
    """

    name: ClassVar[str] = "miniwebvision"
    num_classes: ClassVar[int] = NUM_CLASSES
    input_shape: ClassVar[tuple[int, int, int]] = (3, 227, 227)
    ships_noisy_labels: ClassVar[bool] = True

    def __init__(
        self,
        data_dir: str = "data/webvision",
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int | None = None,
        imagenet_test: bool = True,
        samples_per_class: int | None = None,
        noise_seed: int = 0,
        val_fraction: float = 0.1,
        augment: bool | None = None,
        normalize: bool = True,
        image_size: int = 227,
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
        self.imagenet_test = imagenet_test
        self.imagenet_keys: list[str] = []
        self.imagenet_labels: Tensor | None = None
        self.imagenet_acc: dict[str, float] = {}
        """The ILSVRC2012 test accuracies measured so far, by metric name."""

    # ------------------------------------------------------------------ reading the lists
    def _missing(self) -> list[str]:
        root = self.data_dir
        missing = [name for name in (TRAIN_LIST, VAL_LIST) if not (root / name).is_file()]
        if not (root / VAL_IMAGES).is_dir():
            missing.append(f"{VAL_IMAGES}/ (the validation images)")
        if self.imagenet_test and not (root / IMAGENET_VAL).is_dir():
            missing.append(
                f"{IMAGENET_VAL}/ (ILSVRC2012's validation images of classes 0-49, one folder "
                f"per class named 0-49 or by its WordNet id of {SYNSETS})"
            )
        return missing

    def load(self) -> LoadedData:
        root = self.data_dir
        missing = self._missing()
        train_file = root / TRAIN_LIST
        if train_file.is_file():
            train_keys, train_noisy = first_classes(read_label_kv(train_file, WEBVISION_CLASSES))
            folders = sorted({key.split("/", 1)[0] for key in train_keys if "/" in key})
            missing += [
                f"{folder}/ (the training images {TRAIN_LIST} lists, from google_resized_256.tar)"
                for folder in folders
                if not (root / folder).is_dir()
            ]
        if missing:
            lines = "\n".join(f"  {root / n}" for n in missing)
            raise MissingFileError(
                f"Mini-WebVision not found or incomplete under {root}; missing:\n{lines}\n"
                "It is WebVision 1.0's resized release (info.tar, google_resized_256.tar, "
                "val_images_256.tar from data.vision.ee.ethz.ch/cvl/webvision) unpacked in one "
                f"folder, with ILSVRC2012's validation images of the 50 classes under "
                f"{IMAGENET_VAL}/; it cannot be downloaded automatically. Point --data.data_dir "
                f"at that folder, or pass --data.imagenet_test false to test on WebVision's "
                "validation images only."
            )
        if not train_keys:
            raise InputError(f"{train_file} lists no image of classes 0-{NUM_CLASSES - 1}")
        val_file = root / VAL_LIST
        test_names, test_labels = first_classes(read_label_kv(val_file, WEBVISION_CLASSES))
        if not test_names:
            raise InputError(f"{val_file} lists no image of classes 0-{NUM_CLASSES - 1}")
        test_keys = [f"{VAL_IMAGES}/{name}" for name in test_names]
        if self.imagenet_test:
            self.imagenet_keys, self.imagenet_labels = self._read_imagenet()
        n = len(train_keys)
        return LoadedData(
            train_images=key_array(train_keys),
            train_clean=torch.full((n,), -1, dtype=torch.long),
            test_images=key_array(test_keys),
            test_labels=test_labels,
            train_noisy=train_noisy,
            extra={"clean_known": 0},
        )

    def _class_folders(self) -> list[Path]:
        """The ILSVRC2012 validation folder of each class 0-49: ``imagenet/val/<c>`` where it
        exists, else ``imagenet/val/<wnid>`` by ``info/synsets.txt``."""
        val = self.data_dir / IMAGENET_VAL
        synsets_file = self.data_dir / SYNSETS
        wnids: list[str] | None = None
        folders, lacking = [], []
        for c in range(NUM_CLASSES):
            folder = val / str(c)
            if not folder.is_dir():
                if wnids is None:
                    wnids = read_synsets(synsets_file) if synsets_file.is_file() else []
                if c < len(wnids):
                    folder = val / wnids[c]
            if folder.is_dir():
                folders.append(folder)
            else:
                lacking.append(c if wnids is None or c >= len(wnids) else f"{c} ({wnids[c]})")
        if lacking:
            shown = ", ".join(map(str, lacking[:5])) + (" ..." if len(lacking) > 5 else "")
            where = (
                f"folders named by class number or, with {synsets_file}, by WordNet id"
                if wnids
                else f"folders named by class number (or by WordNet id, which needs {synsets_file})"
            )
            raise MissingFileError(
                f"{val} lacks the ILSVRC2012 validation images of {len(lacking)} of the "
                f"{NUM_CLASSES} classes (class {shown}): it needs one folder per class 0-"
                f"{NUM_CLASSES - 1}, {where}, each holding that class's validation images. Lay "
                "them out so, or pass --data.imagenet_test false."
            )
        return folders

    def _read_imagenet(self) -> tuple[list[str], Tensor]:
        keys: list[str] = []
        labels: list[int] = []
        for c, folder in enumerate(self._class_folders()):
            files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            keys += [p.relative_to(self.data_dir).as_posix() for p in files]
            labels += [c] * len(files)
        if not keys:
            raise InputError(
                f"{self.data_dir / IMAGENET_VAL}'s class folders hold no "
                f"{'/'.join(IMAGE_SUFFIXES)} images"
            )
        return keys, torch.tensor(labels, dtype=torch.long)

    # ------------------------------------------------------------------ the second test set
    def callbacks(self) -> list[L.Callback]:
        """The skipped-image report, and with ``imagenet_test`` the ILSVRC2012 test."""
        extra = [ImageNetTest()] if self.imagenet_test else []
        return [*super().callbacks(), *extra]

    def imagenet_dataset(self) -> ImageFileDataset:
        """The ILSVRC2012 validation images of the 50 classes, centre-cropped (as DivideMix's
        ``imagenet`` loader: shorter side to ``resize_size``, an ``image_size`` crop)."""
        if self.imagenet_labels is None:
            raise InputError("the ILSVRC2012 test needs --data.imagenet_test true and setup()")
        n = len(self.imagenet_labels)
        return ImageFileDataset(
            self.data_dir,
            key_array(self.imagenet_keys),
            self.imagenet_labels,
            self.imagenet_labels,
            torch.arange(n),
            train=False,
            image_size=self.image_size,
            resize_size=self.resize_size,
            skipped=self.skipped.mask(TEST_ARRAY, n),
        )

    def imagenet_counts(self, model: L.LightningModule, trainer: L.Trainer) -> Tensor:
        """``(correct, images)`` of ``model``'s prediction (its ``predict_step``: the method's
        prediction, as the clean test scores it) over this process's share of the ILSVRC2012
        images, summed over the processes; as many batches as the trainer's
        ``limit_test_batches`` lets the main test run (one under ``fast_dev_run``)."""
        loader = self._loader(self.imagenet_dataset(), self.eval_batch_size, False, shard=False)
        limit = getattr(trainer, "limit_test_batches", None)
        rank, world_size = trainer.global_rank, trainer.world_size
        batches = evaluation_batches(loader, self.transform, model.device, limit, rank, world_size)
        counts = torch.zeros(2, dtype=torch.long, device=model.device)
        with torch.no_grad():
            for b, batch in enumerate(batches):
                model.on_test_batch_start(batch, b)  # the module's step boundary (CUDA graphs)
                with trainer.precision_plugin.forward_context():
                    scores = model.predict_step(batch, b)
                counts[0] += (scores.argmax(1) == batch["label"]).sum()
                counts[1] += len(batch["label"])
        return trainer.strategy.reduce(counts, reduce_op="sum")

    def check_imagenet_skips(self) -> None:
        """Refuse the ILSVRC2012 test (:class:`~noisylabels.errors.InputError`) when more than
        ``max_skipped_fraction`` of its images could not be read."""
        assert self.imagenet_labels is not None
        n, total = self.skipped.count(TEST_ARRAY), len(self.imagenet_labels)
        if n / max(1, total) > self.max_skipped_fraction:
            raise InputError(
                f"{n} of the {total} ILSVRC2012 test images under {self.data_dir / IMAGENET_VAL} "
                f"could not be read: more than --data.max_skipped_fraction "
                f"{self.max_skipped_fraction:g}, so that test is refused. Repair or replace those "
                "images (the first ones are named in earlier warnings), or raise "
                "--data.max_skipped_fraction."
            )

    def data_info(self) -> dict[str, Any]:
        """Split sizes, skipped images per split and, with ``imagenet_test``, the ILSVRC2012
        test (``imagenet_val``: its size, skipped images and the accuracies measured)."""
        info = super().data_info()
        if self.imagenet_labels is not None:
            info["imagenet_val"] = {
                "size": len(self.imagenet_labels),
                "skipped": self.skipped.count(TEST_ARRAY),
                "test_acc": self.imagenet_acc.get("test/imagenet/acc"),
                "test_acc_last": self.imagenet_acc.get("test/imagenet/acc_last"),
            }
        return info


class ImageNetTest(L.Callback):
    """After every test pass on WebVision's validation set, the same model on ILSVRC2012's
    validation images of the 50 classes: logged as the test's metric with ``imagenet/`` after
    ``test/`` (``test/imagenet/acc``, ``test/imagenet/acc_last`` for the last epoch's model)."""

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        if not isinstance(datamodule, MiniWebVisionDataModule) or not datamodule.imagenet_test:
            return
        counts = datamodule.imagenet_counts(pl_module, trainer).tolist()
        if trainer.world_size > 1:  # each process marked the images of its own share
            device = pl_module.device
            datamodule.skipped.sync(
                lambda t: trainer.strategy.reduce(t.to(device), reduce_op="sum")
            )
        datamodule.report_skipped("the ILSVRC2012 test")
        datamodule.check_imagenet_skips()
        if counts[1] == 0:
            return
        main = getattr(pl_module, "test_metric", "test/acc")
        name = main.replace("test/", "test/imagenet/", 1)
        accuracy = counts[0] / counts[1]
        datamodule.imagenet_acc[name] = accuracy
        pl_module.log(name, accuracy, sync_dist=True)  # the same value on every process
