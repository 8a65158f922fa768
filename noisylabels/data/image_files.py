"""The shared base of data modules whose images are files on disk (Clothing1M, image folders).

Workers decode the files (:mod:`noisylabels.data.files`); on the device only the flip and the
normalization run. Unreadable images are skipped and counted per split: a warning at the end of
every epoch, ``data_info()["skipped_images"]`` in ``results.json``, and a test whose skipped
fraction exceeds ``max_skipped_fraction`` is refused rather than reported.
"""

from __future__ import annotations

from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from noisylabels.data.files import (
    ImageFileDataset,
    NonEmptyBatches,
    SkippedImages,
    default_num_workers,
    load_image,
)
from noisylabels.data.module import NoisyDataModule
from noisylabels.data.samplers import ClassBalancedSampler
from noisylabels.data.transforms import BatchTransform
from noisylabels.errors import InputError, warn


class ImageFileDataModule(NoisyDataModule):
    """Base of file-backed data modules: ``LoadedData`` image fields are key arrays (see
    :func:`~noisylabels.data.files.key_array`) of paths relative to ``data_dir``.

    It takes every option of :class:`~noisylabels.data.module.NoisyDataModule` (as keywords),
    and these:

    Args:
        num_workers: image-decoding DataLoader workers (default ``min(8, CPUs)``).
        image_size: crop size fed to the network (default 224).
        resize_size: the shorter image side is resized to this before cropping (default 256).
        samples_per_class: per-epoch class-balanced subsampling: each epoch trains on up to
            this many images of each noisy class, drawn anew every epoch (seed
            ``noise_seed + epoch``); ``None`` trains on the whole training split every epoch.
        max_skipped_fraction: a test run in which a larger fraction of the test images could
            not be read fails instead of reporting an accuracy over the rest (default 0.01).
    """

    loader_class: ClassVar[type[DataLoader]] = NonEmptyBatches
    mean: ClassVar[tuple[float, ...]] = (0.485, 0.456, 0.406)  # ImageNet statistics
    std: ClassVar[tuple[float, ...]] = (0.229, 0.224, 0.225)
    default_augment: ClassVar[bool] = True

    def __init__(
        self,
        *,
        num_workers: int | None = None,
        image_size: int = 224,
        resize_size: int = 256,
        samples_per_class: int | None = None,
        max_skipped_fraction: float = 0.01,
        **kwargs: Any,
    ) -> None:
        if image_size < 1 or resize_size < image_size:
            raise InputError(
                f"need 1 <= image_size <= resize_size, got image_size={image_size}, "
                f"resize_size={resize_size}"
            )
        if samples_per_class is not None and samples_per_class < 1:
            raise InputError(f"samples_per_class must be positive, got {samples_per_class}")
        if num_workers is not None and num_workers < 0:
            raise InputError(f"num_workers must be >= 0, got {num_workers}")
        if not 0.0 <= max_skipped_fraction <= 1.0:
            raise InputError(f"max_skipped_fraction must be in [0, 1], got {max_skipped_fraction}")
        workers = default_num_workers() if num_workers is None else num_workers
        super().__init__(num_workers=workers, **kwargs)
        self.image_size = image_size
        self.resize_size = resize_size
        self.samples_per_class = samples_per_class
        self.max_skipped_fraction = max_skipped_fraction
        self.input_shape = (3, image_size, image_size)
        # the per-item crop happened in the workers: on the device only flip and normalize
        mean, std = (self.mean, self.std) if self.hparams.normalize else self.unit_statistics()
        self.transform = BatchTransform(mean, std, augment=self.augment, crop_padding=0)
        self.skipped = SkippedImages()

    def callbacks(self) -> list[L.Callback]:
        """The skipped-image report (attached to every run by ``noisylabels.run``)."""
        return [SkippedImageReport()]

    def _array(self, split: str) -> str:
        """Which image array a split's dataset reads: ``test``, the separate clean ``val`` set,
        or the training set (training, noisy validation and un-augmented training passes)."""
        if split == "test" or (split == "val" and self.clean_validation):
            return split
        return "train"

    def make_dataset(
        self, images: Any, labels: Tensor, clean_labels: Tensor, indices: Tensor, split: str
    ) -> ImageFileDataset:
        """File-backed dataset over ``indices`` of the keys ``images``."""
        return ImageFileDataset(
            self.data_dir,
            images,
            labels,
            clean_labels,
            indices,
            train=split == "train",
            image_size=self.image_size,
            resize_size=self.resize_size,
            random_crop=split == "train" and self.augment,
            skipped=self.skipped.mask(self._array(split), len(images)),
            views=self.views + self.strong_views if split == "train" else 1,
        )

    def make_sampler(self, dataset: Dataset, shuffle: bool) -> Sampler | None:
        """The class-balanced per-epoch subsample for training when ``samples_per_class`` is
        set; otherwise the base behaviour."""
        if not shuffle or self.samples_per_class is None:
            return None
        assert isinstance(dataset, ImageFileDataset)
        labels = dataset.labels[dataset.indices]
        return ClassBalancedSampler(labels, self.samples_per_class, seed=self.noise_seed)

    def noise_features(self, images: Any) -> Tensor:
        """Raw pixels (uint8, 0-255) of the center crop of every training image, flattened, for
        instance-dependent noise: ``N x 3·image_size²`` bytes in memory. An unreadable image
        gets zero features (and counts as skipped)."""
        size = self.image_size
        features = torch.zeros(len(images), 3 * size * size, dtype=torch.uint8)
        mask = self.skipped.mask("train", len(images))
        for i, key in enumerate(images):
            path = self.data_dir / key.decode("utf-8")
            try:
                image = load_image(path, size, self.resize_size, train=False)
            except (RuntimeError, OSError, ValueError):
                mask[i] = True
                continue
            features[i] = image.reshape(-1)
        return features

    # ------------------------------------------------------------------ skipped images
    @property
    def skipped_images(self) -> int:
        """Images that could not be read so far, over all splits."""
        return self.skipped.total

    def report_skipped(self, phase: str) -> int:
        """Warn about the images skipped for the first time since the last report; return
        their number."""
        new = self.skipped.take_new()
        if new:
            warn(
                f"{new} unreadable or corrupt {self.name} image(s) were skipped during {phase} "
                f"({self.skipped_images} in all so far); the first ones are named in earlier "
                "warnings",
                every_process=True,
            )
        return new

    def skipped_per_split(self) -> dict[str, int]:
        """Images of each split that could not be read so far."""
        if self.clean_validation:
            val = self.skipped.count("val")
        else:
            val = self.skipped.count("train", self.val_indices)
        return {
            "train": self.skipped.count("train", self.train_indices),
            "val": val,
            "test": self.skipped.count("test"),
        }

    def check_test_skips(self) -> None:
        """After a test pass: warn if test images were skipped, and refuse the test (raise
        :class:`~noisylabels.errors.InputError`) when their fraction exceeds
        ``max_skipped_fraction``."""
        assert self.data is not None, "call setup() first"
        n, total = self.skipped.count("test"), len(self.data.test_labels)
        if n == 0:
            return
        fraction = n / max(1, total)
        message = (
            f"{n} of the {total} {self.name} test images ({fraction:.2%}) could not be read and "
            "were left out of the test accuracy"
        )
        if fraction > self.max_skipped_fraction:
            raise InputError(
                f"{message}: more than --data.max_skipped_fraction {self.max_skipped_fraction:g}, "
                "so the test is refused. Repair or replace those images (the first ones are "
                "named in earlier warnings), or raise --data.max_skipped_fraction."
            )
        warn(message, every_process=True)

    def data_info(self) -> dict[str, Any]:
        """Split sizes and the images skipped in each split (``skipped_images``)."""
        return {**super().data_info(), "skipped_images": self.skipped_per_split()}


class SkippedImageReport(L.Callback):
    """Merge the skipped-image masks of all processes and warn at the end of each epoch how many
    images a file-backed data module skipped; after a test, apply its skipped-fraction limit."""

    @staticmethod
    def _datamodule(trainer: L.Trainer, pl_module: L.LightningModule) -> Any:
        datamodule = getattr(trainer, "datamodule", None)
        if not isinstance(datamodule, ImageFileDataModule):
            return None
        if trainer.world_size > 1:
            device = pl_module.device
            datamodule.skipped.sync(
                lambda t: trainer.strategy.reduce(t.to(device), reduce_op="sum")
            )
        return datamodule

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = self._datamodule(trainer, pl_module)
        if datamodule is not None:
            datamodule.report_skipped(f"training epoch {trainer.current_epoch}")

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":  # during fit, the training epoch's report covers it
            return
        datamodule = self._datamodule(trainer, pl_module)
        if datamodule is not None:
            datamodule.report_skipped("validation")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = self._datamodule(trainer, pl_module)
        if datamodule is not None:
            datamodule.report_skipped("test")
            datamodule.check_test_skips()

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = self._datamodule(trainer, pl_module)
        if datamodule is not None:
            datamodule.report_skipped("prediction")
