"""The data module every dataset shares: clean data in, noisy labels, split and loaders out.

The noisy training labels come from one label source (:mod:`noisylabels.noise.labels`):
synthetic noise generated once, over the full training set, from the *noise seed* (never the
training seed), a label file, or the noisy labels a dataset ships with. Then 10 % of the noisy
training set is held out as noisy validation data, seeded by the noise seed too. Labels that
cannot be learned are refused before any training: those whose clean class is not the majority
of its noisy labels (by the label source), and a training split without a label of some class.
Every batch is a dict ``{"image", "label", "clean_label", "index"}`` where ``label`` is the
(noisy) label and ``clean_label`` is ``-1`` where the clean label is unknown (real-world noise).
With ``views: K > 1`` a training batch also holds ``"views"``, ``(K, B, C, H, W)``: ``K``
independently augmented views of every image (``views[0]`` is ``"image"``), for methods that
compare or mix several views of one sample (DivideMix); with ``strong_views: S > 0`` it holds
``"strong"``, ``(S, B, C, H, W)``: ``S`` strongly augmented views (:mod:`noisylabels.data.strong`;
SOP+).
Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler, SequentialSampler

from noisylabels.data.loaded import LoadedData
from noisylabels.data.memory import (
    ON_DEVICE,
    DeviceBatches,
    TensorDictDataset,
    batch_device,
    collate_batch,
)
from noisylabels.data.samplers import shard_sampler
from noisylabels.data.strong import AFTER_CROP, POLICIES, POLICY_FUNCTIONS, SampleRandom, cutout
from noisylabels.data.transforms import BatchTransform, evaluation_batches
from noisylabels.errors import InputError, MissingFileError, NoisyLabelsError
from noisylabels.noise import (
    UNKNOWN_LABEL,
    DataFacts,
    LabelSource,
    check_class_coverage,
    check_noise_options,
    label_source,
    noise_kinds_help,
)

__all__ = ["UNKNOWN_LABEL", "NoisyDataModule"]


class NoisyDataModule(L.LightningDataModule):
    """Base data module: loads clean data, takes noisy labels from its label source, splits,
    serves batches.

    Args:
        data_dir: folder holding the dataset in its standard layout.
        batch_size: training batch size (per process under DDP).
        eval_batch_size: batch size for validation/test/prediction (default: ``batch_size``).
        num_workers: DataLoader worker processes (in-memory datasets are fastest with 0).
        noise_type: the noise kind: NOISE_KINDS_HELP.
        noise_rate: the nominal noise rate ε in [0, 1) of generated noise (``rate_nominal`` in
            the code and in results.json, beside the measured ``rate_actual``); some kinds
            need less (see ``noise_type``).
        noise_seed: seed of the label corruption and of the train/val split; independent of the
            training seed, so ``--seed_everything`` never changes the noisy labels.
        noise_file: labels file for ``noise_type: file`` (``.pt`` tensor or dict, ``.npy``,
            ``.csv``/``.txt`` one label per line); e.g. CIFAR-10N's ``CIFAR-10_human.pt``.
        noise_file_key: key inside a dict-valued ``noise_file`` (e.g. ``worse_label``,
            ``aggre_label``, ``noisy_label``; a saved run's ``noise.pt`` uses ``noisy_labels``).
        val_fraction: fraction of the noisy training set held out as (noisy) validation data.
        augment: train-time augmentation; default: the dataset's standard one.
        normalize: scale pixels to [0, 1] and normalize them by the dataset's mean and std
            (default); ``false``: [0, 1] only (the Co-teaching reference's MNIST input).
        download: fetch the dataset with torchvision's downloader where there is network.
        on_device: keep in-memory data (uint8 images, labels) on the training device and draw
            every batch there (:class:`~noisylabels.data.memory.DeviceBatches`): no per-batch
            gather on the host and copy. ``auto``: on a GPU (any accelerator), not on the CPU;
            ``true`` also on the CPU; ``false``: host ``DataLoader``. File-backed datasets
            always load on the host (``true`` is refused for them).
        views: augmented views of every training image: 1 (default) serves ``"image"`` alone;
            ``K > 1`` adds ``"views"`` ``(K, B, C, H, W)`` to every training batch, each view
            an independent draw of the augmentation (``views[0]`` is ``"image"``; without
            augmentation the views are equal). Validation, test and evaluation batches have
            one view.
        strong_views: strongly augmented views of every training image (default 0: none):
            ``S > 0`` adds ``"strong"`` ``(S, B, C, H, W)`` to every training batch, each view
            an independent draw of ``strong_augment``, then the dataset's augmentation and
            normalization, then ``cutout`` (:mod:`noisylabels.data.strong`).
        strong_augment: the policy of the strong views: ``autoaugment-cifar10`` (the default
            where ``strong_views`` > 0: AutoAugment's CIFAR-10 policy with the SOP+
            reference's magnitudes), ``randaugment-disc-m5`` or ``randaugment-disc-m10``
            (DISC's RandAugment, two of its 16 operations at levels below 5 or 10 and a grey
            Cutout of 15 % of the width, on the crop and flip). Refused without strong views.
        cutout: side in pixels (even) of the square Cutout zeroes in every strong view after
            the normalization (default 0 where ``strong_views`` > 0: none; SOP+'s CIFAR
            reference: 16). Refused without strong views.

    Subclasses declare their facts as class attributes (``name``, ``num_classes``,
    ``input_shape``, ``mean``/``std``, ``semantic_flips`` for semantic noise,
    ``ships_noisy_labels`` for real noise) and implement :meth:`load`.
    """

    name: ClassVar[str] = "base"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (1, 28, 28)
    mean: ClassVar[tuple[float, ...]] = (0.5,)
    std: ClassVar[tuple[float, ...]] = (0.5,)
    default_augment: ClassVar[bool] = False
    semantic_flips: ClassVar[dict[int, int] | None] = None
    """Semantic noise: ``{clean class: noisy class}`` (Patrini et al. 2017); ``None`` refuses it."""
    ships_noisy_labels: ClassVar[bool] = False
    """Whether :meth:`load` returns real noisy labels (``LoadedData.train_noisy``)."""
    classes_from_files: ClassVar[bool] = False
    """Whether the number of classes is found in the files (image folders), so ``num_classes``
    is not known when the options are checked; such a module checks what depends on it (the
    symmetric noise limit) itself."""
    loader_class: ClassVar[type[DataLoader]] = DataLoader

    def __init__(
        self,
        data_dir: str = "data",
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        noise_type: str = "symmetric",
        noise_rate: float = 0.2,
        noise_seed: int = 0,
        noise_file: str | None = None,
        noise_file_key: str | None = None,
        val_fraction: float = 0.1,
        augment: bool | None = None,
        normalize: bool = True,
        download: bool = False,
        on_device: bool | str = "auto",
        views: int = 1,
        strong_views: int = 0,
        strong_augment: str | None = None,
        cutout: int | None = None,
    ) -> None:
        super().__init__()
        if on_device not in ON_DEVICE:
            raise InputError(f"--data.on_device must be auto, true or false, got {on_device!r}")
        if int(views) < 1:
            raise InputError(f"--data.views must be >= 1, got {views}")
        self.strong_views, self.strong_augment, self.cutout = check_strong_options(
            strong_views, strong_augment, cutout
        )
        self.noise_type = noise_type
        self.rate_nominal = noise_rate
        self.noise_seed = noise_seed
        self.noise_file = noise_file
        self.noise_file_key = noise_file_key
        self.check_noise_options(None if self.classes_from_files else self.num_classes)
        if not 0.0 <= val_fraction < 1.0:
            raise InputError(f"--data.val_fraction must be in [0, 1), got {val_fraction}")
        if batch_size < 1:
            raise InputError(f"--data.batch_size must be positive, got {batch_size}")
        self.save_hyperparameters()
        self.data_dir = Path(data_dir).expanduser()
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.val_fraction = val_fraction
        self.augment = self.default_augment if augment is None else augment
        self.download = download
        self.on_device = on_device
        self.views = int(views)
        self._device_copies: dict[int, Any] = {}
        mean, std = (self.mean, self.std) if normalize else self.unit_statistics()
        self.transform = BatchTransform(mean, std, augment=self.augment)
        self.data: LoadedData | None = None
        self.label_source: LabelSource | None = None
        self.transition: Tensor | None = None
        self.noisy_labels: Tensor | None = None
        self.train_indices: Tensor | None = None
        self.val_indices: Tensor | None = None

    def check_noise_options(self, num_classes: int | None) -> None:
        """Refuse noise options that cannot work with this dataset, before any data is read
        (:meth:`~noisylabels.noise.NoiseKind.check` of the kind ``noise_type`` names): with
        ``num_classes`` known, also the limits that depend on C and a class-level T whose
        clean class is not the majority of some row. A module whose class count is found in
        its files (``classes_from_files``) calls it again once it knows C."""
        check_noise_options(
            self.noise_type,
            self.rate_nominal,
            self.noise_file,
            flips=self.semantic_flips,
            ships_labels=self.ships_noisy_labels,
            dataset=type(self).__name__,
            num_classes=num_classes,
            seed=self.noise_seed,
        )

    def unit_statistics(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Mean 0 and std 1 per channel: the transform then only scales to [0, 1]."""
        channels = len(self.mean)
        return (0.0,) * channels, (1.0,) * channels

    # ------------------------------------------------------------------ subclass hooks
    def load(self) -> LoadedData:
        """Read the clean dataset (raise ``MissingFileError`` that spells out the layout)."""
        raise NotImplementedError

    def fetch(self) -> None:
        """Download the dataset into ``data_dir`` (only called with ``download: true``)."""
        raise InputError(
            f"{type(self).__name__} cannot be downloaded automatically: put its files under "
            f"--data.data_dir ({self.data_dir}) and drop --data.download"
        )

    def make_dataset(
        self, images: Any, labels: Tensor, clean_labels: Tensor, indices: Tensor, split: str
    ) -> Dataset:
        """Dataset over ``indices`` of ``images`` for ``split`` (``train``, ``train_eval``,
        ``val`` or ``test``; only ``train`` is augmented); in-memory tensors by default."""
        return TensorDictDataset(images, labels, clean_labels, indices)

    def make_sampler(self, dataset: Dataset, shuffle: bool) -> Sampler | None:
        """Sampler of a loader; ``None`` (default) shuffles or keeps the order as ``shuffle``
        says. A custom sampler should define ``set_epoch`` and ``__len__`` so Lightning can
        shard it under DDP."""
        return None

    def noise_features(self, images: Any) -> Tensor:
        """One feature row per training image for instance-dependent noise (PTD, Xia et al.
        2020): the raw pixel values (uint8, 0-255) flattened, without rescaling."""
        return torch.as_tensor(images).reshape(len(images), -1)

    def callbacks(self) -> list[L.Callback]:
        """Callbacks this data module needs in every run (none by default); the run attaches
        them (:func:`noisylabels.run.run_callbacks`), from the command line and from
        ``noisylabels.run.fit_and_test`` alike."""
        return []

    def make_label_source(self, data: LoadedData) -> LabelSource:
        """The label source of the noise kind the options name
        (:func:`~noisylabels.noise.label_source`): a label file, the dataset's own noisy
        labels, or noise generated with the noise seed."""
        return label_source(
            self.noise_type,
            rate_nominal=self.rate_nominal,
            seed=self.noise_seed,
            flips=self.semantic_flips,
            features=lambda: self.noise_features(data.train_images),
            noise_file=self.noise_file,
            noise_file_key=self.noise_file_key,
            shipped=data.train_noisy,
            dataset=type(self).__name__,
        )

    # ------------------------------------------------------------------ Lightning hooks
    def prepare_data(self) -> None:
        """With ``download``, fetch the dataset (:meth:`fetch`); a download that fails (no
        network, a server that refuses) is a :class:`~noisylabels.errors.MissingFileError`
        saying where to put the files instead."""
        if not self.download:
            return
        try:
            self.fetch()
        except NoisyLabelsError:
            raise
        except (OSError, RuntimeError, ValueError) as err:  # urllib's, torchvision's checks
            reason = " ".join(str(err).split())[:200] or type(err).__name__
            try:
                self.load()
            except MissingFileError as missing:
                layout = str(missing).split("\nPass --data.download")[0]
            else:
                return  # the files are there after all
            raise MissingFileError(
                f"--data.download true could not fetch {type(self).__name__} ({reason}): this "
                "machine has no network, or the server refused. Download it where there is "
                "network and copy it here, then run without --data.download.\n"
                f"{layout}\nPoint --data.data_dir at the folder that holds this layout."
            ) from None

    def setup(self, stage: str | None = None) -> None:
        if self.data is not None:
            return
        data = self.load()
        source = self.make_label_source(data)
        self.noisy_labels = source.make_labels(data.train_clean.long(), self.num_classes)
        self.transition = source.transition
        self.label_source = source
        self.data = data
        n = len(self.noisy_labels)
        gen = torch.Generator().manual_seed(self.noise_seed + 1_000_003)
        perm = torch.randperm(n, generator=gen)
        n_val = 0 if data.val_labels is not None else int(math.floor(n * self.val_fraction))
        self.val_indices = perm[:n_val].sort().values
        self.train_indices = perm[n_val:].sort().values
        check_class_coverage(
            self.noisy_labels,
            self.train_indices,
            self.num_classes,
            clean=data.train_clean,
            noise=source.describe(),
            held_out=f"--data.val_fraction {self.val_fraction:g}",
        )

    # ------------------------------------------------------------------ facts about the noise
    @property
    def clean_labels(self) -> Tensor:
        assert self.data is not None, "call setup() first"
        return self.data.train_clean

    @property
    def rate_actual(self) -> float | None:
        """Measured fraction of flipped training labels (``None`` if clean labels are unknown)."""
        return None if self.label_source is None else self.label_source.rate_actual

    @property
    def clean_validation(self) -> bool:
        """Whether validation uses a separate clean-labelled set instead of the noisy split;
        methods then score validation with the clean posterior ``p`` rather than ``p @ T``."""
        return self.data is not None and self.data.val_labels is not None

    def resolved_defaults(self) -> dict[str, Any]:
        """What each option given null resolves to (``augment``: the dataset's default; with
        strong views ``strong_augment`` and ``cutout``), whatever this module was given: a
        run's identity records it (:func:`noisylabels.run.identity.of_objects`), so that null
        and that value spelled out are one experiment, and any other value another."""
        out: dict[str, Any] = {"augment": bool(self.default_augment)}
        if self.strong_views > 0:
            out.update(strong_augment=POLICIES[0], cutout=0)
        return out

    def data_facts(self) -> DataFacts:
        """What methods and callbacks may know of this data (:class:`~noisylabels.noise.DataFacts`):
        classes, the noise, the true T, the labels and the training split's evaluation
        batches."""
        assert self.data is not None and self.label_source is not None, "call setup() first"
        assert self.noisy_labels is not None and self.train_indices is not None
        rate = self.label_source.rate_nominal  # read per evaluation batch: nothing measured
        return DataFacts(
            num_classes=self.num_classes,
            noise_type=self.noise_type,
            rate_nominal=None if rate is None else float(rate),
            transition=self.transition,
            clean_validation=self.clean_validation,
            noisy_labels=self.noisy_labels,
            clean_labels=self.data.train_clean,
            train_indices=self.train_indices,
            eval_batches=self.train_eval_batches,
            batch_size=self.batch_size,
            val_labels=self.validation_labels(),
            views=self.views,
            views_differ=self.augment,
            strong_views=self.strong_views,
        )

    def validation_labels(self) -> Tensor:
        """The labels validation accuracy is scored against: the noisy labels of the held-out
        split, or the clean labels of a separate validation set."""
        assert self.data is not None and self.noisy_labels is not None, "call setup() first"
        if self.data.val_labels is not None:
            return self.data.val_labels.long()
        assert self.val_indices is not None
        return self.noisy_labels[self.val_indices]

    def noise_info(self) -> dict[str, Any]:
        """Summary of the noise for results and logs, from the label source (synthetic: type,
        nominal and actual rate, seed; file: the file, key and measured rate; real: the rate
        over the samples with a known clean label). ``seed`` is the noise seed, which also
        seeds the train/val split. Real noise whose rate its authors publish also records
        that rate (``rate_published``, a fraction; :meth:`published_noise_rate`)."""
        assert self.label_source is not None, "call setup() first"
        info = self.label_source.noise_info()
        info.setdefault("seed", self.noise_seed)
        published = self.published_noise_rate()
        if published is not None:
            info["rate_published"] = published
        return info

    def published_noise_rate(self) -> float | None:
        """The noise rate the dataset's authors publish for the labels the run trains on (a
        fraction), or ``None`` (default: none published, or synthetic noise, whose rate is
        ``rate_nominal``). Recorded as ``noise.rate_published``, one name for every dataset."""
        return None

    def noise_state(self) -> dict[str, Any]:
        """Everything needed to re-create the noise exactly (saved as ``noise.pt``), plus the
        measured row-stochastic T (``empirical_transition``, ``T[i, j] = P(noisy=j | clean=i)``
        over the samples with a known clean label)."""
        assert self.data is not None and self.label_source is not None, "call setup() first"
        return {
            "dataset": self.name,
            "noisy_labels": self.noisy_labels,
            "clean_labels": self.data.train_clean,
            "transition": self.transition,
            "empirical_transition": self.label_source.empirical_transition(),
            "train_indices": self.train_indices,
            "val_indices": self.val_indices,
            **self.noise_info(),
        }

    def data_info(self) -> dict[str, Any]:
        """Facts about the data of the run for results: the size of each split."""
        assert self.data is not None, "call setup() first"
        assert self.train_indices is not None and self.val_indices is not None
        val = self.data.val_labels
        return {
            "sizes": {
                "train": len(self.train_indices),
                "val": len(self.val_indices) if val is None else len(val),
                "test": len(self.data.test_labels),
            }
        }

    # ------------------------------------------------------------------ loaders
    def _loader(
        self, dataset: Dataset, batch_size: int, shuffle: bool, shard: bool = True
    ) -> DataLoader:
        """A loader of ``dataset``. Under DDP a ``shard`` loader (those Lightning iterates) gives
        this process its :class:`ShardSampler` share, so each sample is seen once per epoch
        across processes; loaders a method iterates itself on every process pass
        ``shard=False``."""
        sampler = self.make_sampler(dataset, shuffle)
        shards = getattr(self.trainer, "distributed_sampler_kwargs", None) if shard else None
        if sampler is None:
            sampler = shard_sampler(dataset, shards, shuffle, batch_size)
        device = batch_device(self.on_device, dataset, self.trainer, type(self).__name__)
        if device is not None:
            if sampler is None:  # one process, in order (a shuffled order is a ShardSampler's)
                sampler = SequentialSampler(dataset)
            return DeviceBatches(dataset, sampler, batch_size, device, self._device_copies)
        return self.loader_class(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle and sampler is None,
            sampler=sampler,
            num_workers=self.num_workers,
            collate_fn=collate_batch,
            persistent_workers=self.num_workers > 0,
            pin_memory=self.num_workers > 0 and torch.cuda.is_available(),
        )

    def _split_dataset(self, indices: Tensor, split: str) -> Dataset:
        assert self.data is not None and self.noisy_labels is not None, "call setup() first"
        return self.make_dataset(
            self.data.train_images, self.noisy_labels, self.data.train_clean, indices, split
        )

    def train_dataloader(self) -> DataLoader:
        dataset = self._split_dataset(self.train_indices, "train")
        return self._loader(dataset, self.batch_size, True)

    def _clean_dataset(self, images: Any, labels: Tensor, split: str) -> Dataset:
        labels = labels.long()
        return self.make_dataset(images, labels, labels, torch.arange(len(labels)), split)

    def val_dataloader(self) -> DataLoader:
        assert self.data is not None, "call setup() first"
        if self.data.val_labels is not None:
            dataset = self._clean_dataset(self.data.val_images, self.data.val_labels, "val")
        else:
            dataset = self._split_dataset(self.val_indices, "val")
        return self._loader(dataset, self.eval_batch_size, False)

    def test_dataloader(self) -> DataLoader:
        assert self.data is not None, "call setup() first"
        dataset = self._clean_dataset(self.data.test_images, self.data.test_labels, "test")
        return self._loader(dataset, self.eval_batch_size, False)

    def train_eval_dataloader(self, split: str = "train") -> DataLoader:
        """The training split in order, without augmentation (for T estimation and statistics);
        ``split="val"``: the noisy validation split of the training set, likewise; ``"test"``:
        the clean test set, unsharded."""
        if split == "test":
            assert self.data is not None, "call setup() first"
            dataset = self._clean_dataset(self.data.test_images, self.data.test_labels, "test")
            return self._loader(dataset, self.eval_batch_size, False, False)
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
        indices = self.train_indices if split == "train" else self.val_indices
        name = "train_eval" if split == "train" else "val"
        return self._loader(self._split_dataset(indices, name), self.eval_batch_size, False, False)

    def train_eval_batches(
        self,
        device: torch.device | str,
        limit: int | float | None = None,
        rank: int = 0,
        world_size: int = 1,
        split: str = "train",
    ) -> Iterator[dict[str, Tensor]]:
        """Batches of :meth:`train_eval_dataloader` on ``device``, normalized, never augmented:
        what T estimation and exact training statistics run the model over (see
        :func:`~noisylabels.data.transforms.evaluation_batches`)."""
        loader = self.train_eval_dataloader(split)
        return evaluation_batches(loader, self.transform, device, limit, rank, world_size)

    def predict_dataloader(self) -> DataLoader:
        return self.test_dataloader()

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Normalize (and, while training, augment) the whole batch on its device; while
        training with ``views > 1``, every view in one call (:func:`augmented_views`), and
        with ``strong_views``, the strong views (:func:`strong_views`)."""
        if isinstance(batch, dict) and "image" in batch:
            training = self.trainer is not None and self.trainer.training
            strong = None
            if training and self.strong_views > 0:
                strong = batch["image"]
                if strong.ndim == 5:  # file-backed: the workers' crops, the weak ones first
                    weak = strong[:, : self.views]
                    batch["image"] = weak if self.views > 1 else weak[:, 0]
                    strong = strong[:, self.views :]
            if training and self.views > 1:
                batch["views"] = augmented_views(batch["image"], self.transform, self.views)
                batch["image"] = batch["views"][0]
            else:
                batch["image"] = self.transform(batch["image"], train=training)
            if strong is not None:  # after the weak views: they draw as without strong ones
                batch["strong"] = strong_views(
                    strong,
                    batch["index"],
                    self.transform,
                    self.strong_views,
                    self.strong_augment,
                    self.cutout,
                    epoch=self.trainer.current_epoch,
                )
        return batch


def augmented_views(images: Tensor, transform: BatchTransform, views: int) -> Tensor:
    """``(K, B, C, H, W)``: ``views`` (K) independently augmented, normalized views of a batch.

    ``images`` is ``(B, C, H, W)`` (in-memory data: each view is a new draw of the batched
    augmentation over the repeated batch, in one call) or ``(B, K, C, H, W)`` (file-backed data
    whose workers cropped each image ``K`` times; the device adds the flip of each view)."""
    if images.ndim == 5:
        if images.shape[1] != views:
            raise ValueError(f"expected {views} views per image, got {images.shape[1]}")
        stacked = images.transpose(0, 1).reshape(-1, *images.shape[2:])
    else:
        stacked = images.repeat(views, *([1] * (images.ndim - 1)))
    out = transform(stacked, train=True)
    return out.view(views, -1, *out.shape[1:])


def check_strong_options(
    strong_views: int, strong_augment: str | None, cutout: int | None
) -> tuple[int, str, int]:
    """``(strong_views, strong_augment, cutout)`` resolved, or an :class:`InputError` for a
    bad value and for a policy or Cutout given without strong views (it would change
    nothing)."""
    if not _whole(strong_views) or strong_views < 0:
        raise InputError(f"--data.strong_views must be an integer >= 0, got {strong_views!r}")
    if strong_augment is not None and strong_augment not in POLICIES:
        raise InputError(
            f"--data.strong_augment must be one of {', '.join(POLICIES)}, got {strong_augment!r}"
        )
    if cutout is not None and (not _whole(cutout) or cutout < 0 or cutout % 2):
        raise InputError(
            f"--data.cutout must be an even number of pixels >= 0, got {cutout!r}: the "
            "square spans centre - side/2 to centre + side/2 (the reference's Cutout, whose "
            "odd sides cut one pixel less)"
        )
    if int(strong_views) == 0:
        for name, value in (("strong_augment", strong_augment), ("cutout", cutout)):
            if value is not None:
                raise InputError(
                    f"--data.{name} {value} would have no effect: it shapes the strong views, "
                    "and --data.strong_views is 0 (none are drawn). Give --data.strong_views "
                    f"(the method's config group sets it where the method uses them), or drop "
                    f"--data.{name}"
                )
    return int(strong_views), strong_augment or POLICIES[0], int(cutout or 0)


def _whole(value: Any) -> bool:
    """An integer, not a bool (a float with an integer value, as YAML may give, counts)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and int(value) == value


def strong_views(
    images: Tensor,
    index: Tensor,
    transform: BatchTransform,
    views: int,
    policy: str,
    cutout_length: int,
    *,
    epoch: int,
    seed: int | None = None,
) -> Tensor:
    """``(S, B, C, H, W)``: ``views`` (S) strongly augmented, normalized views of a batch:
    ``policy`` (:data:`~noisylabels.data.strong.POLICY_FUNCTIONS`), then the dataset's
    training augmentation and normalization (``transform``), then Cutout; a policy of
    :data:`~noisylabels.data.strong.AFTER_CROP` acts on the crop and flip instead, before the
    normalization.

    The policy's and Cutout's draws are keyed by ``seed`` (default: the run's,
    ``torch.initial_seed()``), ``epoch``, the view and the samples' dataset ``index``
    (:class:`~noisylabels.data.strong.SampleRandom`); the crop and flip of ``transform`` are
    those of the weak views. ``images`` is ``(B, C, H, W)`` (in-memory data) or
    ``(B, S, C, H, W)`` (file-backed data whose workers cropped each image for every strong
    view)."""
    if images.ndim == 5 and images.shape[1] != views:
        raise ValueError(f"expected {views} strong views per image, got {images.shape[1]}")
    seed = torch.initial_seed() if seed is None else seed
    out = []
    for view in range(views):
        image = images[:, view] if images.ndim == 5 else images
        random = SampleRandom(index, seed, epoch, view)
        apply = POLICY_FUNCTIONS[policy]
        if policy in AFTER_CROP:  # on the crop and flip (DISC's order)
            augmented = transform.normalize(apply(transform.augmented(image), random))
        else:
            augmented = transform(apply(image, random), train=True)
        out.append(cutout(augmented, cutout_length, random))
    return torch.stack(out)


# the help of --data.noise_type lists the registered noise kinds
NoisyDataModule.__doc__ = (NoisyDataModule.__doc__ or "").replace(
    "NOISE_KINDS_HELP", noise_kinds_help()
)
