"""The data module every dataset shares: clean data in, noisy labels, split and loaders out.

Noise is generated once, over the full training set, from the *noise seed* (never the training
seed), then 10 % of the noisy training set is held out as noisy validation data, seeded by the
noise seed too. Every batch is a dict ``{"image", "label", "clean_label", "index"}`` where
``label`` is the (noisy) training label; ``clean_label`` is ``-1`` where the clean label is
unknown (real-world noise). Transition matrices are row-stochastic:
``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from noisylabels.data.distributed import ShardSampler
from noisylabels.data.transforms import BatchTransform
from noisylabels.noise import NOISE_TYPES, make_noisy_labels, noise_rate

UNKNOWN_LABEL = -1


@dataclass
class LoadedData:
    """What a dataset subclass hands to the base module.

    ``train_images``/``test_images`` are whatever the subclass's datasets index (uint8 NCHW
    tensors for in-memory data). ``train_noisy`` holds real noisy labels where the dataset ships
    them (then ``train_clean`` may hold ``-1`` for unknown clean labels). ``val_images`` /
    ``val_labels`` give a separate clean validation set; then the whole training set is trained on
    and no noisy validation split is held out.
    """

    train_images: Any
    train_clean: Tensor
    test_images: Any
    test_labels: Tensor
    train_noisy: Tensor | None = None
    val_images: Any = None
    val_labels: Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class TensorDictDataset(Dataset):
    """In-memory samples fetched a whole batch at a time through ``__getitems__``."""

    def __init__(self, images: Tensor, labels: Tensor, clean_labels: Tensor, indices: Tensor):
        self.images = images
        self.labels = labels
        self.clean_labels = clean_labels
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitems__(self, positions: list[int]) -> dict[str, Tensor]:
        idx = self.indices[torch.as_tensor(positions, dtype=torch.long)]
        return {
            "image": self.images[idx],
            "label": self.labels[idx],
            "clean_label": self.clean_labels[idx],
            "index": idx,
        }

    def __getitem__(self, position: int) -> dict[str, Tensor]:
        i = int(self.indices[position])
        return {
            "image": self.images[i],
            "label": self.labels[i],
            "clean_label": self.clean_labels[i],
            "index": torch.tensor(i),
        }


def collate_batch(batch: Any) -> dict[str, Tensor]:
    """Collate for loaders: batches from ``__getitems__`` are already stacked."""
    if isinstance(batch, dict):
        return batch
    return torch.utils.data.default_collate(batch)


class NoisyDataModule(L.LightningDataModule):
    """Base data module: loads clean data, corrupts the training labels, splits, serves batches.

    Args:
        data_dir: folder holding the dataset in its standard layout.
        batch_size: training batch size (per process under DDP).
        eval_batch_size: batch size for validation/test/prediction (default: ``batch_size``).
        num_workers: DataLoader worker processes (in-memory datasets are fastest with 0).
        noise_type: one of ``none, symmetric, pair, asymmetric, semantic, instance, file``.
        noise_rate: nominal noise rate ε in [0, 1) (pair noise: < 0.5).
        noise_seed: seed of the label corruption and of the train/val split; independent of the
            training seed, so ``--seed_everything`` never changes the noisy labels.
        noise_file: labels file for ``noise_type: file`` (``.pt`` tensor or dict, ``.npy``,
            ``.csv``/``.txt`` one label per line); e.g. CIFAR-10N's ``CIFAR-10_human.pt``.
        noise_file_key: key inside a dict-valued ``noise_file`` (e.g. ``worse_label``,
            ``aggre_label``, ``noisy_label``; a saved run's ``noise.pt`` uses ``noisy_labels``).
        val_fraction: fraction of the noisy training set held out as (noisy) validation data.
        augment: train-time augmentation; default: the dataset's standard one.
        download: fetch the dataset with torchvision's downloader where there is network.
    """

    name: ClassVar[str] = "base"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (1, 28, 28)
    mean: ClassVar[tuple[float, ...]] = (0.5,)
    std: ClassVar[tuple[float, ...]] = (0.5,)
    default_augment: ClassVar[bool] = False

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
        download: bool = False,
    ) -> None:
        super().__init__()
        if noise_type not in NOISE_TYPES:
            raise ValueError(f"unknown noise_type {noise_type!r}; choose one of {NOISE_TYPES}")
        if not 0.0 <= noise_rate < 1.0:
            raise ValueError(f"noise_rate must be in [0, 1), got {noise_rate}")
        if noise_type == "pair" and noise_rate >= 0.5:
            raise ValueError(
                f"pair noise needs noise_rate < 0.5 so the clean class stays the majority; "
                f"got {noise_rate}"
            )
        if noise_type == "file" and not noise_file:
            raise ValueError("noise_type 'file' needs --data.noise_file PATH")
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.save_hyperparameters()
        self.data_dir = Path(data_dir).expanduser()
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.noise_type = noise_type
        self.noise_rate_nominal = noise_rate
        self.noise_seed = noise_seed
        self.noise_file = noise_file
        self.noise_file_key = noise_file_key
        self.val_fraction = val_fraction
        self.augment = self.default_augment if augment is None else augment
        self.download = download
        self.transform = BatchTransform(self.mean, self.std, augment=self.augment)
        self.data: LoadedData | None = None
        self.transition: Tensor | None = None
        self.noisy_labels: Tensor | None = None
        self.train_indices: Tensor | None = None
        self.val_indices: Tensor | None = None

    # ------------------------------------------------------------------ subclass hooks
    def load(self) -> LoadedData:
        """Read the clean dataset (raise FileNotFoundError that spells out the layout)."""
        raise NotImplementedError

    def fetch(self) -> None:
        """Download the dataset into ``data_dir`` (only called with ``download: true``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be downloaded automatically")

    def make_dataset(
        self, images: Any, labels: Tensor, clean_labels: Tensor, indices: Tensor, train: bool
    ) -> Dataset:
        """Dataset over ``indices`` of ``images``; in-memory tensors by default."""
        return TensorDictDataset(images, labels, clean_labels, indices)

    def make_sampler(self, dataset: Dataset, shuffle: bool) -> Sampler | None:
        """Sampler of a loader; ``None`` (default) shuffles or keeps the order as ``shuffle``
        says. A custom sampler should define ``set_epoch`` and ``__len__`` so Lightning can
        shard it under DDP."""
        return None

    # ------------------------------------------------------------------ Lightning hooks
    def prepare_data(self) -> None:
        if self.download:
            self.fetch()

    def setup(self, stage: str | None = None) -> None:
        if self.data is not None:
            return
        data = self.load()
        clean = data.train_clean.long()
        if self.noise_type == "file":
            noisy = self._read_noise_file(len(clean))
            self.transition = None
        elif data.train_noisy is not None:
            noisy, self.transition = data.train_noisy.long(), None
        else:
            features = None
            if self.noise_type == "instance":
                features = data.train_images.reshape(len(clean), -1).float() / 255.0
            noisy, self.transition = make_noisy_labels(
                clean,
                self.noise_type,
                self.noise_rate_nominal,
                self.num_classes,
                seed=self.noise_seed,
                dataset=self.name,
                features=features,
            )
        self.noisy_labels = noisy
        self.data = data
        n = len(noisy)
        gen = torch.Generator().manual_seed(self.noise_seed + 1_000_003)
        perm = torch.randperm(n, generator=gen)
        n_val = 0 if data.val_labels is not None else int(math.floor(n * self.val_fraction))
        self.val_indices = perm[:n_val].sort().values
        self.train_indices = perm[n_val:].sort().values

    def _read_noise_file(self, n: int) -> Tensor:
        path = Path(self.noise_file).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"noise file {path} does not exist")
        if path.suffix in (".pt", ".pth"):
            # weights-only: a label file holds tensors and plain containers, never code to run
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError as err:
                raise ValueError(
                    f"{path} is not a plain tensor file (it holds Python objects that loading "
                    f"would have to execute); save the labels as a tensor, a dict of tensors, "
                    f".npy or .csv. Loader said: {str(err).splitlines()[0]}"
                ) from None
            if isinstance(obj, dict):
                key = self.noise_file_key or "noisy_labels"
                if key not in obj:
                    raise KeyError(
                        f"{path} holds keys {sorted(obj)}; choose one with --data.noise_file_key"
                    )
                obj = obj[key]
            labels = torch.as_tensor(obj)
        elif path.suffix == ".npy":
            import numpy as np

            try:
                array = np.load(path, allow_pickle=False)
            except ValueError as err:  # object arrays need pickle, which could run code
                raise ValueError(f"{path}: {err}; save the labels as an integer array") from None
            labels = torch.from_numpy(array)
        else:
            text = path.read_text().replace(",", " ").split()
            labels = torch.tensor([int(float(t)) for t in text])
        labels = labels.long().flatten()
        if len(labels) != n:
            raise ValueError(f"{path} has {len(labels)} labels; the training set has {n}")
        if labels.min() < 0 or labels.max() >= self.num_classes:
            raise ValueError(f"{path}: labels must lie in [0, {self.num_classes - 1}]")
        return labels

    # ------------------------------------------------------------------ facts about the noise
    @property
    def clean_labels(self) -> Tensor:
        assert self.data is not None, "call setup() first"
        return self.data.train_clean

    @property
    def noise_rate_actual(self) -> float | None:
        """Measured fraction of flipped training labels (``None`` if clean labels are unknown)."""
        if self.data is None or self.noisy_labels is None:
            return None
        known = self.data.train_clean >= 0
        if not bool(known.any()):
            return None
        return noise_rate(self.data.train_clean[known], self.noisy_labels[known])

    @property
    def clean_validation(self) -> bool:
        """Whether validation uses a separate clean-labelled set instead of the noisy split;
        methods then score validation with the clean posterior ``p`` rather than ``p @ T``."""
        return self.data is not None and self.data.val_labels is not None

    def noise_info(self) -> dict[str, Any]:
        """Summary of the noise for results and logs."""
        return {
            "type": self.noise_type,
            "rate_nominal": self.noise_rate_nominal,
            "rate_actual": self.noise_rate_actual,
            "seed": self.noise_seed,
            "file": self.noise_file,
        }

    def noise_state(self) -> dict[str, Any]:
        """Everything needed to re-create the noise exactly (saved as ``noise.pt``)."""
        assert self.data is not None, "call setup() first"
        return {
            "dataset": self.name,
            "noisy_labels": self.noisy_labels,
            "clean_labels": self.data.train_clean,
            "transition": self.transition,
            "train_indices": self.train_indices,
            "val_indices": self.val_indices,
            **self.noise_info(),
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
        if sampler is None and shards and shards.get("num_replicas", 1) > 1:
            sampler = ShardSampler(
                dataset,
                shards["num_replicas"],
                shards["rank"],
                shuffle=shuffle,
                seed=int(os.environ.get("PL_GLOBAL_SEED", 0)),  # Lightning's sampler seed
                batch_size=batch_size if shuffle else None,  # training: equal batch counts
            )
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle and sampler is None,
            sampler=sampler,
            num_workers=self.num_workers,
            collate_fn=collate_batch,
            persistent_workers=self.num_workers > 0,
            pin_memory=self.num_workers > 0 and torch.cuda.is_available(),
        )

    def _split_dataset(self, indices: Tensor, train: bool) -> Dataset:
        assert self.data is not None and self.noisy_labels is not None, "call setup() first"
        return self.make_dataset(
            self.data.train_images, self.noisy_labels, self.data.train_clean, indices, train
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._split_dataset(self.train_indices, True), self.batch_size, True)

    def val_dataloader(self) -> DataLoader:
        assert self.data is not None, "call setup() first"
        if self.data.val_labels is not None:
            labels = self.data.val_labels.long()
            dataset = self.make_dataset(
                self.data.val_images, labels, labels, torch.arange(len(labels)), False
            )
            return self._loader(dataset, self.eval_batch_size, False)
        return self._loader(
            self._split_dataset(self.val_indices, False), self.eval_batch_size, False
        )

    def test_dataloader(self) -> DataLoader:
        assert self.data is not None, "call setup() first"
        labels = self.data.test_labels.long()
        dataset = self.make_dataset(
            self.data.test_images, labels, labels, torch.arange(len(labels)), False
        )
        return self._loader(dataset, self.eval_batch_size, False)

    def train_eval_dataloader(self) -> DataLoader:
        """The training split in order, without augmentation (for T estimation and statistics)."""
        return self._loader(
            self._split_dataset(self.train_indices, False), self.eval_batch_size, False, False
        )

    def train_eval_batches(
        self,
        device: torch.device | str,
        limit: int | float | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> Iterator[dict[str, Tensor]]:
        """Batches of :meth:`train_eval_dataloader` on ``device``, normalized, never augmented:
        what T estimation and exact training statistics run the model over.

        Args:
            limit: as Lightning's ``limit_*_batches``: an int caps the number of batches, a
                float below 1 keeps that fraction of them (at least one).
            rank, world_size: keep every ``world_size``-th batch, starting at ``rank``.
        """
        loader = self.train_eval_dataloader()
        n = len(loader)
        if isinstance(limit, int):
            n = min(n, limit)
        elif limit is not None and limit < 1.0:
            n = max(1, int(n * limit))
        for b, batch in enumerate(loader):
            if b >= n:
                break
            if b % world_size != rank:
                continue
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            batch["image"] = self.transform(batch["image"], train=False)
            yield batch

    def predict_dataloader(self) -> DataLoader:
        return self.test_dataloader()

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Normalize (and, while training, augment) the whole batch on its device."""
        if isinstance(batch, dict) and "image" in batch:
            training = self.trainer is not None and self.trainer.training
            batch["image"] = self.transform(batch["image"], train=training)
        return batch
