"""Clothing1M (Xiao et al., "Learning from Massive Noisy Labeled Data for Image Classification",
CVPR 2015): 1M web images of clothing in 14 classes with real (not synthetic) noisy labels, plus
small clean-labelled subsets.

The dataset is distributed on request, so it is never downloaded: point ``data_dir`` at a copy in
its standard layout (``images/`` and the annotation files, keys are image paths relative to the
root). Images stay on disk; DataLoader workers read and decode the JPEGs with torchvision's
decoder, resize the shorter side and crop (random crop for training, center crop otherwise) on
uint8 tensors; the horizontal flip and the normalization run batched on the device.

The noise is real, so there is no true transition matrix (``transition`` is ``None``). Where a
training image also has a clean label (the overlap of ``noisy_label_kv.txt`` and
``clean_label_kv.txt``) the batches carry it as ``clean_label``; elsewhere ``clean_label`` is
``-1``. Transition matrices follow the project convention: row-stochastic,
``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Sampler, get_worker_info

from noisylabels.data.base import LoadedData, NoisyDataModule
from noisylabels.data.transforms import BatchTransform

NUM_CLASSES = 14
ANNOTATION_FILES: tuple[str, ...] = (
    "noisy_label_kv.txt",
    "clean_label_kv.txt",
    "noisy_train_key_list.txt",
    "clean_train_key_list.txt",
    "clean_val_key_list.txt",
    "clean_test_key_list.txt",
    "category_names_eng.txt",
)
PROTOCOLS = ("noisy_val", "clean_val")
_DRIVE = re.compile(r"^[A-Za-z]:")
_MAX_ITEM_WARNINGS = 5
_MAX_RETRIES = 50


def default_num_workers() -> int:
    """``min(8, number of CPUs)``: enough JPEG decoders to feed one GPU without oversubscribing."""
    return max(1, min(8, os.cpu_count() or 1))


def is_safe_key(key: str) -> bool:
    """Whether ``key`` is a relative path that stays inside the dataset root.

    Rejected: empty keys, absolute paths (``/x``, ``\\x``, ``C:x``), any ``..`` component (with
    either separator) and NUL characters. The check is lexical; nothing is opened.
    """
    if not key or "\0" in key or key[0] in "/\\" or _DRIVE.match(key):
        return False
    return ".." not in re.split(r"[\\/]", key)


def _warn_rejected(path: Path, rejected: list[tuple[int, str]]) -> None:
    if not rejected:
        return
    shown = ", ".join(f"line {n}: {k!r}" for n, k in rejected[:3])
    more = f" and {len(rejected) - 3} more" if len(rejected) > 3 else ""
    warnings.warn(
        f"{path}: ignored {len(rejected)} key(s) that point outside the dataset root "
        f"(absolute paths or '..'): {shown}{more}",
        stacklevel=3,
    )


def read_key_list(path: Path) -> list[str]:
    """Keys of a ``*_key_list.txt`` file (one image path per line), unsafe keys dropped."""
    keys: list[str] = []
    rejected: list[tuple[int, str]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            key = line.strip()
            if not key:
                continue
            if is_safe_key(key):
                keys.append(key)
            else:
                rejected.append((lineno, key))
    _warn_rejected(path, rejected)
    return keys


def read_label_kv(path: Path, num_classes: int = NUM_CLASSES) -> dict[str, int]:
    """``key -> label`` of a ``*_label_kv.txt`` file (lines ``images/0/00/x.jpg 3``).

    Raises ``ValueError`` naming the line for a malformed line or a label outside
    ``0..num_classes-1``; keys that point outside the root are dropped with a warning.
    """
    labels: dict[str, int] = {}
    rejected: list[tuple[int, str]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            text = line.strip()
            if not text:
                continue
            parts = text.rsplit(maxsplit=1)
            if len(parts) != 2:
                raise ValueError(f"{path}, line {lineno}: expected 'KEY LABEL', got {text!r}")
            key, value = parts
            try:
                label = int(value)
            except ValueError:
                raise ValueError(
                    f"{path}, line {lineno}: label {value!r} is not an integer"
                ) from None
            if not 0 <= label < num_classes:
                raise ValueError(
                    f"{path}, line {lineno}: label {label} is outside 0-{num_classes - 1}"
                )
            if not is_safe_key(key):
                rejected.append((lineno, key))
                continue
            labels[key] = label
    _warn_rejected(path, rejected)
    return labels


def _labels_for(keys: list[str], table: dict[str, int], keys_file: Path, kv_file: Path) -> Tensor:
    missing = [k for k in keys if k not in table]
    if missing:
        raise ValueError(
            f"{len(missing)} key(s) of {keys_file} have no label in {kv_file}, e.g. "
            f"{missing[:3]}; the annotation files do not belong together"
        )
    return torch.tensor([table[k] for k in keys], dtype=torch.long)


def _key_array(keys: list[str]) -> np.ndarray:
    """Keys as one fixed-width bytes array: cheap to share with forked DataLoader workers."""
    return np.array([k.encode("utf-8") for k in keys], dtype=np.bytes_)


def load_image(path: Path, image_size: int, resize_size: int, train: bool) -> Tensor:
    """Read and decode one image to uint8 RGB ``(3, image_size, image_size)``.

    The shorter side is resized to ``resize_size`` (antialiased bilinear), then a random
    (``train``) or center crop of ``image_size`` is taken; the result is a view into the resized
    image (:func:`collate_images` copies it into the batch once).
    """
    from torchvision.io import ImageReadMode, decode_image, read_file
    from torchvision.transforms.v2 import functional as TF

    image = decode_image(read_file(str(path)), mode=ImageReadMode.RGB)
    image = TF.resize(image, [resize_size], antialias=True)
    _, h, w = image.shape
    if train:
        top = int(torch.randint(0, h - image_size + 1, ()))
        left = int(torch.randint(0, w - image_size + 1, ()))
        image = TF.crop(image, top, left, image_size, image_size)
    else:
        image = TF.center_crop(image, [image_size, image_size])
    return image


def _image_batch(n: int, image_size: int) -> Tensor:
    """Empty uint8 ``(n, 3, image_size, image_size)``; inside a DataLoader worker it lives in
    shared memory, so handing the batch to the main process copies nothing more."""
    shape = (n, 3, image_size, image_size)
    if get_worker_info() is None:
        return torch.empty(shape, dtype=torch.uint8)
    storage = torch.UntypedStorage._new_shared(n * 3 * image_size * image_size)
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape)


def collate_images(items: list[dict[str, Any] | None], image_size: int) -> dict[str, Tensor]:
    """Stack decoded samples into a batch dict, dropping the ``None`` markers of bad images."""
    kept = [item for item in items if item is not None]
    if not kept:
        return {
            "image": torch.zeros(0, 3, image_size, image_size, dtype=torch.uint8),
            "label": torch.zeros(0, dtype=torch.long),
            "clean_label": torch.zeros(0, dtype=torch.long),
            "index": torch.zeros(0, dtype=torch.long),
        }
    images = _image_batch(len(kept), image_size)
    return {
        "image": torch.stack([item["image"] for item in kept], out=images),
        "label": torch.tensor([item["label"] for item in kept], dtype=torch.long),
        "clean_label": torch.tensor([item["clean_label"] for item in kept], dtype=torch.long),
        "index": torch.tensor([item["index"] for item in kept], dtype=torch.long),
    }


class ImageFileDataset(Dataset):
    """Images read from ``root / key`` on demand, served as batch dicts.

    ``__getitem__`` returns ``None`` for an unreadable or corrupt image (counted in the shared
    :attr:`skipped` tensor, one slot per worker, and warned about for the first few);
    ``__getitems__`` decodes a whole batch and drops those markers. A training batch in which
    every image failed is refilled from random other images so it is never empty. Crops are
    random where ``random_crop`` (default: ``train``), centered otherwise.
    """

    def __init__(
        self,
        root: Path,
        keys: np.ndarray,
        labels: Tensor,
        clean_labels: Tensor,
        indices: Tensor,
        train: bool,
        image_size: int = 224,
        resize_size: int = 256,
        num_workers: int = 0,
        random_crop: bool | None = None,
    ) -> None:
        self.root = Path(root)
        self.keys = keys
        self.labels = labels
        self.clean_labels = clean_labels
        self.indices = indices
        self.train = train
        self.image_size = image_size
        self.resize_size = resize_size
        self.random_crop = train if random_crop is None else random_crop
        self.skipped = torch.zeros(num_workers + 1, dtype=torch.long).share_memory_()
        self.reported = 0
        self._warned = 0

    def __len__(self) -> int:
        return len(self.indices)

    def key(self, position: int) -> str:
        """Image path (relative to the root) of the sample at ``position``."""
        return self.keys[int(self.indices[position])].decode("utf-8")

    def _skip(self, key: str, err: Exception) -> None:
        info = get_worker_info()
        slot = 0 if info is None else (info.id + 1) % len(self.skipped)
        self.skipped[slot] += 1
        if self._warned < _MAX_ITEM_WARNINGS:
            self._warned += 1
            warnings.warn(
                f"skipping unreadable or corrupt image {self.root / key}: {err}", stacklevel=2
            )

    def __getitem__(self, position: int) -> dict[str, Any] | None:
        i = int(self.indices[position])
        key = self.keys[i].decode("utf-8")
        try:
            image = load_image(self.root / key, self.image_size, self.resize_size, self.random_crop)
        except (RuntimeError, OSError, ValueError) as err:
            self._skip(key, err)
            return None
        return {
            "image": image,
            "label": int(self.labels[i]),
            "clean_label": int(self.clean_labels[i]),
            "index": i,
        }

    def __getitems__(self, positions: list[int]) -> dict[str, Tensor]:
        items = [self[p] for p in positions]
        if self.train and items and all(item is None for item in items):
            for _ in range(_MAX_RETRIES):
                item = self[int(torch.randint(len(self), ()))]
                if item is not None:
                    items.append(item)
                    break
            else:
                raise RuntimeError(
                    f"none of {len(items) + _MAX_RETRIES} images tried under {self.root} could "
                    "be decoded; check that --data.data_dir holds a complete Clothing1M copy"
                )
        return collate_images(items, self.image_size)


class ClassBalancedSampler(Sampler[int]):
    """Per-epoch class-balanced subsample of a training set.

    Every epoch draws up to ``samples_per_class`` positions of each (noisy) class without
    replacement and shuffles them, seeded by ``seed + epoch`` (``set_epoch`` is called by
    Lightning before each epoch, also through its DDP sampler wrapper, so every process draws
    the same subsample and each gets its own shard).
    """

    def __init__(self, labels: Tensor, samples_per_class: int, seed: int = 0) -> None:
        if samples_per_class < 1:
            raise ValueError(f"samples_per_class must be positive, got {samples_per_class}")
        labels = torch.as_tensor(labels).long()
        self.by_class = [
            torch.nonzero(labels == c).flatten() for c in labels.unique(sorted=True).tolist()
        ]
        self.samples_per_class = samples_per_class
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the subsample of ``epoch``."""
        self.epoch = epoch

    def __len__(self) -> int:
        return sum(min(len(pos), self.samples_per_class) for pos in self.by_class)

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        chosen = [
            pos[torch.randperm(len(pos), generator=gen)[: self.samples_per_class]]
            for pos in self.by_class
        ]
        picked = torch.cat(chosen) if chosen else torch.zeros(0, dtype=torch.long)
        return iter(picked[torch.randperm(len(picked), generator=gen)].tolist())


class SkippedImageReport(L.Callback):
    """Warn at the end of each epoch how many images the Clothing1M loaders skipped."""

    @staticmethod
    def _report(trainer: L.Trainer, phase: str) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        if isinstance(datamodule, Clothing1MDataModule):
            datamodule.report_skipped(phase)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, f"training epoch {trainer.current_epoch}")

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != "fit":  # during fit, the training epoch's report covers it
            self._report(trainer, "validation")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, "test")

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, "prediction")


class Clothing1MDataModule(NoisyDataModule):
    """Clothing1M (Xiao et al. 2015) from a local copy in its standard distribution layout::

        DATA_DIR/images/...                 the JPEGs (keys are paths relative to DATA_DIR)
        DATA_DIR/noisy_label_kv.txt         "KEY LABEL" lines, the noisy labels
        DATA_DIR/clean_label_kv.txt         "KEY LABEL" lines, the clean labels
        DATA_DIR/noisy_train_key_list.txt   one key per line: the noisy training set
        DATA_DIR/clean_{train,val,test}_key_list.txt
        DATA_DIR/category_names_eng.txt     the 14 class names

    Args:
        data_dir: the dataset root.
        batch_size: training batch size (paper: 64).
        eval_batch_size: batch size of validation/test (default: ``batch_size``).
        num_workers: JPEG-decoding DataLoader workers (default ``min(8, CPUs)``).
        protocol: ``noisy_val`` (the VRNL paper: train on the noisy training list, hold out
            ``val_fraction`` of it as noisy validation data, test on the clean test list; no
            clean data is used) or ``clean_val`` (train on the whole noisy list and validate
            on the clean validation list).
        samples_per_class: per-epoch class-balanced subsampling: each epoch trains on up to
            this many images of each noisy class, drawn anew every epoch (seed
            ``noise_seed + epoch``); ``None`` trains on the whole training split every epoch.
        noise_seed: seed of the noisy-validation split and of the subsampling.
        val_fraction: fraction of the noisy training list held out (``noisy_val`` only).
        augment: random crop + horizontal flip while training (default on).
        image_size: crop size fed to the network (default 224).
        resize_size: the shorter image side is resized to this before cropping (default 256).
    """

    name: ClassVar[str] = "clothing1m"
    num_classes: ClassVar[int] = NUM_CLASSES
    input_shape: ClassVar[tuple[int, int, int]] = (3, 224, 224)
    mean: ClassVar[tuple[float, ...]] = (0.485, 0.456, 0.406)
    std: ClassVar[tuple[float, ...]] = (0.229, 0.224, 0.225)
    default_augment: ClassVar[bool] = True

    def __init__(
        self,
        data_dir: str = "data/clothing1m",
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int | None = None,
        protocol: str = "noisy_val",
        samples_per_class: int | None = None,
        noise_seed: int = 0,
        val_fraction: float = 0.1,
        augment: bool | None = None,
        image_size: int = 224,
        resize_size: int = 256,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        if samples_per_class is not None and samples_per_class < 1:
            raise ValueError(f"samples_per_class must be positive, got {samples_per_class}")
        if image_size < 1 or resize_size < image_size:
            raise ValueError(
                f"need 1 <= image_size <= resize_size, got image_size={image_size}, "
                f"resize_size={resize_size}"
            )
        if num_workers is not None and num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        super().__init__(
            data_dir=data_dir,
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            num_workers=default_num_workers() if num_workers is None else num_workers,
            noise_type="none",  # the labels are real; the base module takes them as given
            noise_rate=0.0,
            noise_seed=noise_seed,
            val_fraction=val_fraction,
            augment=augment,
        )
        self.protocol = protocol
        self.samples_per_class = samples_per_class
        self.image_size = image_size
        self.resize_size = resize_size
        self.input_shape = (3, image_size, image_size)
        # the per-item crop happened in the workers: on the device only flip and normalize
        self.transform = BatchTransform(self.mean, self.std, augment=self.augment, crop_padding=0)
        self.class_names: list[str] = []
        self._datasets: list[ImageFileDataset] = []

    # ------------------------------------------------------------------ reading the annotations
    def load(self) -> LoadedData:
        root = self.data_dir
        # the clean training list is part of the layout but never read
        needed = [n for n in ANNOTATION_FILES if n != "clean_train_key_list.txt"]
        if self.protocol != "clean_val":
            needed.remove("clean_val_key_list.txt")
        missing = [name for name in needed if not (root / name).is_file()]
        if not (root / "images").is_dir():
            missing.insert(0, "images/ (the folder of the JPEGs)")
        if missing:
            lines = "\n".join(f"  {root / n}" for n in missing)
            raise FileNotFoundError(
                f"Clothing1M not found or incomplete under {root}; missing:\n{lines}\n"
                "Clothing1M is distributed on request by its authors and cannot be downloaded "
                "automatically. Point --data.data_dir at your copy: the folder that holds "
                f"images/ and {', '.join(needed)}."
            )
        names = [
            line.strip()
            for line in (root / "category_names_eng.txt").read_text(encoding="utf-8").splitlines()
        ]
        names = [n for n in names if n]
        if len(names) != self.num_classes:
            raise ValueError(
                f"{root / 'category_names_eng.txt'} lists {len(names)} class names; "
                f"Clothing1M has {self.num_classes}"
            )
        self.class_names = names
        noisy_kv = root / "noisy_label_kv.txt"
        clean_kv = root / "clean_label_kv.txt"
        noisy_table = read_label_kv(noisy_kv, self.num_classes)
        clean_table = read_label_kv(clean_kv, self.num_classes)

        train_file = root / "noisy_train_key_list.txt"
        train_keys = read_key_list(train_file)
        if not train_keys:
            raise ValueError(f"{train_file} lists no training images")
        train_noisy = _labels_for(train_keys, noisy_table, train_file, noisy_kv)
        train_clean = torch.tensor([clean_table.get(k, -1) for k in train_keys], dtype=torch.long)

        test_file = root / "clean_test_key_list.txt"
        test_keys = read_key_list(test_file)
        test_labels = _labels_for(test_keys, clean_table, test_file, clean_kv)
        val_keys: np.ndarray | None = None
        val_labels: Tensor | None = None
        if self.protocol == "clean_val":
            val_file = root / "clean_val_key_list.txt"
            keys = read_key_list(val_file)
            if not keys:
                raise ValueError(f"{val_file} lists no images; protocol clean_val needs them")
            val_labels = _labels_for(keys, clean_table, val_file, clean_kv)
            val_keys = _key_array(keys)
        return LoadedData(
            train_images=_key_array(train_keys),
            train_clean=train_clean,
            test_images=_key_array(test_keys),
            test_labels=test_labels,
            train_noisy=train_noisy,
            val_images=val_keys,
            val_labels=val_labels,
            extra={"class_names": names, "clean_known": int((train_clean >= 0).sum())},
        )

    def fetch(self) -> None:
        raise NotImplementedError(
            "Clothing1M is distributed on request by its authors and cannot be downloaded "
            "automatically; point --data.data_dir at your copy"
        )

    # ------------------------------------------------------------------ datasets and loaders
    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        trainer = self.trainer
        if trainer is not None and not any(
            isinstance(cb, SkippedImageReport) for cb in trainer.callbacks
        ):
            trainer.callbacks.append(SkippedImageReport())

    def make_dataset(
        self, images: Any, labels: Tensor, clean_labels: Tensor, indices: Tensor, train: bool
    ) -> ImageFileDataset:
        """File-backed dataset over ``indices`` of the keys ``images``."""
        dataset = ImageFileDataset(
            self.data_dir,
            images,
            labels,
            clean_labels,
            indices,
            train=train,
            image_size=self.image_size,
            resize_size=self.resize_size,
            num_workers=self.num_workers,
            random_crop=train and self.augment,
        )
        self._datasets.append(dataset)
        return dataset

    def make_sampler(self, dataset: Dataset, shuffle: bool) -> Sampler | None:
        """The class-balanced per-epoch subsample for training when ``samples_per_class`` is
        set; otherwise the base behaviour."""
        if not shuffle or self.samples_per_class is None:
            return None
        assert isinstance(dataset, ImageFileDataset)
        labels = dataset.labels[dataset.indices]
        return ClassBalancedSampler(labels, self.samples_per_class, seed=self.noise_seed)

    def report_skipped(self, phase: str) -> int:
        """Warn about the images skipped since the last report; return their number."""
        new = 0
        for dataset in self._datasets:
            total = int(dataset.skipped.sum())
            new += total - dataset.reported
            dataset.reported = total
        if new:
            warnings.warn(
                f"{new} unreadable or corrupt Clothing1M image(s) were skipped during {phase} "
                f"({self.skipped_images} in all so far); the first ones are named in earlier "
                "warnings",
                stacklevel=2,
            )
        return new

    @property
    def skipped_images(self) -> int:
        """Images skipped so far by all of this module's loaders."""
        return sum(int(d.skipped.sum()) for d in self._datasets)

    # ------------------------------------------------------------------ facts about the noise
    def noise_info(self) -> dict[str, Any]:
        """Real noise: no nominal rate; the measured rate is over the images that have both a
        noisy and a clean label."""
        known = None if self.data is None else int((self.data.train_clean >= 0).sum())
        return {
            "type": "real",
            "rate_nominal": None,
            "rate_actual": self.noise_rate_actual,
            "seed": self.noise_seed,
            "file": None,
            "clean_known": known,
            "protocol": self.protocol,
        }
