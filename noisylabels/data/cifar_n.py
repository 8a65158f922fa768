"""CIFAR-10N and CIFAR-100N (Wei, Zhu, Cheng, Liu, Niu & Liu, "Learning with Noisy Labels
Revisited: A Study Using Real-World Human Annotations", ICLR 2022): CIFAR's training images with
the labels Amazon Mechanical Turk workers gave them, from the label files the authors distribute
(UCSC-REAL/cifar-10-100n, ``data/CIFAR-10_human.pt`` and ``data/CIFAR-100_human.pt``).

Each file is a dict of 50,000 labels in CIFAR's training order: ``clean_label`` (CIFAR's own),
and the label sets, named here as users know them:

- ``aggre`` (``aggre_label``): CIFAR-10N, the majority vote of three workers' labels;
- ``random1``, ``random2``, ``random3`` (``random_label1`` ...): CIFAR-10N, one worker's label;
- ``worse`` (``worse_label``): CIFAR-10N, a wrong label among the three wherever there is one;
- ``noisy`` (``noisy_label``): CIFAR-100N, one worker's fine label (100 classes);
- ``noisy_coarse`` (``noisy_coarse_label``): CIFAR-100N, one worker's super-class label (20
  classes, against CIFAR-100's ``coarse_labels``).

The clean labels the file ships must be CIFAR's training labels, index by index: a file that
disagrees is refused, naming the first index that differs (it belongs to another dataset, or its
order is not CIFAR's). The noise rate is measured against CIFAR's own labels and recorded as
``rate_actual`` beside the published one (``rate_published``), with the label set, in
the run's ``noise`` record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from noisylabels.data.cifar import CIFAR10DataModule, CIFAR100DataModule, read_cifar_batches
from noisylabels.data.loaded import LoadedData
from noisylabels.data.memory import missing_files_message
from noisylabels.errors import InputError, MissingFileError
from noisylabels.noise.label_file import load_pt, read_label_file

LABEL_SUBFOLDERS = ("", "CIFAR-N")
"""Where under ``data_dir`` a label file is looked for, in order: the data folder itself, then
its ``CIFAR-N/`` folder."""


class _CIFARNMixin:
    """What CIFAR-10N and CIFAR-100N share: the label set, the label file, the checks."""

    label_file_name: ClassVar[str]
    label_sets: ClassVar[dict[str, str]]
    """``{label set: key in the label file}``."""
    published_rates: ClassVar[dict[str, float | None]]
    """The noise rate (%) the CIFAR-N paper gives for each label set (``None``: not given)."""
    default_label_set: ClassVar[str]
    """The label set of ``label_set: null``."""
    ships_noisy_labels: ClassVar[bool] = True

    def __init__(
        self,
        data_dir: str = "data",
        label_set: str | None = None,
        label_file: str | None = None,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        noise_type: str = "real",
        noise_rate: float = 0.0,
        noise_seed: int = 0,
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
        _check_real(type(self).__name__, noise_type, noise_rate)
        super().__init__(  # type: ignore[call-arg]
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
            download=download,
            on_device=on_device,
            views=views,
            strong_views=strong_views,
            strong_augment=strong_augment,
            cutout=cutout,
        )
        self._init_labels(self.default_label_set if label_set is None else label_set, label_file)

    def resolved_defaults(self) -> dict[str, Any]:
        """The data's null resolutions (:meth:`NoisyDataModule.resolved_defaults`) and the
        label set of ``label_set: null``."""
        return {**super().resolved_defaults(), "label_set": self.default_label_set}

    def _init_labels(self, label_set: str, label_file: str | None) -> None:
        if label_set not in self.label_sets:
            raise InputError(
                f"--data.label_set must be one of {', '.join(self.label_sets)} for "
                f"{type(self).__name__}, got {label_set!r}"
            )
        self.label_set = label_set
        self.label_file = None if label_file is None else Path(label_file).expanduser()

    def label_file_path(self) -> Path:
        """The label file: ``label_file`` where given, else the first of
        ``DATA_DIR/<file>`` and ``DATA_DIR/CIFAR-N/<file>`` that exists."""
        if self.label_file is not None:
            if not self.label_file.is_file():
                raise MissingFileError(
                    f"--data.label_file {self.label_file} does not exist; it is CIFAR-N's "
                    f"{self.label_file_name} (UCSC-REAL/cifar-10-100n, data/)"
                )
            return self.label_file
        places = [self.data_dir / sub / self.label_file_name for sub in LABEL_SUBFOLDERS]
        for place in places:
            if place.is_file():
                return place
        tried = "\n".join(f"  {p}" for p in places)
        raise MissingFileError(
            f"{type(self).__name__} needs CIFAR-N's label file {self.label_file_name} (from "
            "github.com/UCSC-REAL/cifar-10-100n, its data/ folder), found at none of:\n"
            f"{tried}\nPut it in one of these places, or give its path with --data.label_file."
        )

    def read_labels(self, train_clean: torch.Tensor, num_classes: int, clean_key: str) -> Any:
        """The label set's labels, checked against ``train_clean`` (CIFAR's labels)."""
        path = self.label_file_path()
        self._check_layout(path, (clean_key, self.label_key_of_set))
        shipped = read_label_file(path, len(train_clean), num_classes, key=clean_key)
        differ = torch.nonzero(shipped != train_clean)
        if len(differ):
            i = int(differ[0])
            raise InputError(
                f"{path}: its {clean_key} disagrees with the CIFAR training labels under "
                f"{self.data_dir} at {len(differ)} of {len(train_clean)} indices, the first at "
                f"index {i} (the file says {int(shipped[i])}, CIFAR {int(train_clean[i])}): the "
                "label file is not for these CIFAR files, or not in their order. Use the file "
                "the CIFAR-N authors distribute with the official CIFAR batches."
            )
        return read_label_file(path, len(train_clean), num_classes, key=self.label_key_of_set)

    def _check_layout(self, path: Path, keys: tuple[str, ...]) -> None:
        """Refuse a file that is not the authors' ``.pt`` dict with ``keys``, naming what it
        holds and the label sets (the label file reader's advice names options of the label
        file source, which this module does not take)."""
        layout = (
            f"a {type(self).__name__} label file is the CIFAR-N authors' {self.label_file_name}: "
            f"a .pt dict whose keys include {', '.join(sorted(set(self.label_sets.values())))}, "
            f"one per --data.label_set ({', '.join(self.label_sets)})"
        )
        if path.suffix.lower() not in (".pt", ".pth"):
            raise InputError(
                f"--data.label_file {path} is a {path.suffix or 'suffix-less'} file; {layout}"
            )
        content = load_pt(path)
        if not isinstance(content, dict):
            raise InputError(f"--data.label_file {path} holds a single array, not a dict; {layout}")
        missing = [key for key in keys if key not in content]
        if missing:
            raise InputError(
                f"--data.label_file {path} has no {' and no '.join(map(repr, missing))} (label "
                f"set {self.label_set!r} reads {self.label_key_of_set!r}, checked against "
                f"{keys[0]!r}); it holds {sorted(map(str, content))}; {layout}"
            )

    @property
    def label_key_of_set(self) -> str:
        return self.label_sets[self.label_set]

    def noise_info(self) -> dict[str, Any]:
        """The real noise's summary with the label set and its published rate
        (``rate_published``, a fraction; ``None`` where none is published) beside the measured
        ``rate_actual``."""
        info = super().noise_info()  # type: ignore[misc]
        return {**info, "label_set": self.label_set, "rate_published": self.published_noise_rate()}

    def published_noise_rate(self) -> float | None:
        """The CIFAR-N paper's rate of the label set, as a fraction (``None``: not given)."""
        rate = self.published_rates.get(self.label_set)
        return None if rate is None else rate / 100.0

    def data_info(self) -> dict[str, Any]:
        """Split sizes, the label set and the label file read."""
        info = super().data_info()  # type: ignore[misc]
        return {**info, "label_set": self.label_set, "label_file": str(self.label_file_path())}


class CIFAR10NDataModule(_CIFARNMixin, CIFAR10DataModule):
    """CIFAR-10N (Wei et al. 2022): CIFAR-10's images with human labels from
    ``CIFAR-10_human.pt``; CIFAR-10 in torchvision's layout ``DATA_DIR/cifar-10-batches-py/``.

    Args:
        data_dir: the folder of ``cifar-10-batches-py/`` (and of the label file, directly or
            in ``CIFAR-N/``).
        label_set: ``aggre``, ``random1``, ``random2``, ``random3`` or ``worse`` (published noise
            rates 9.03, 17.23, 18.12, 17.64 and 40.21 %); null: ``worse``.
        label_file: the path of ``CIFAR-10_human.pt`` where it is not in ``data_dir``.
        noise_type: ``real`` (the label set's labels; the only kind: the noise is the
            workers').
        noise_rate: unused with real noise (0).
        Others: see :class:`~noisylabels.data.module.NoisyDataModule`.
    """

    name: ClassVar[str] = "cifar10n"
    default_label_set: ClassVar[str] = "worse"
    label_file_name: ClassVar[str] = "CIFAR-10_human.pt"
    label_sets: ClassVar[dict[str, str]] = {
        "aggre": "aggre_label",
        "random1": "random_label1",
        "random2": "random_label2",
        "random3": "random_label3",
        "worse": "worse_label",
    }
    published_rates: ClassVar[dict[str, float | None]] = {
        "aggre": 9.03,
        "random1": 17.23,
        "random2": 18.12,
        "random3": 17.64,
        "worse": 40.21,
    }

    def load(self) -> LoadedData:
        data = super().load()
        data.train_noisy = self.read_labels(data.train_clean, self.num_classes, "clean_label")
        return data


class CIFAR100NDataModule(_CIFARNMixin, CIFAR100DataModule):
    """CIFAR-100N (Wei et al. 2022): CIFAR-100's images with human labels from
    ``CIFAR-100_human.pt``; CIFAR-100 in torchvision's layout ``DATA_DIR/cifar-100-python/``.

    Args:
        data_dir: the folder of ``cifar-100-python/`` (and of the label file, directly or in
            ``CIFAR-N/``).
        label_set: ``noisy`` (the 100 fine classes; published noise rate 40.20 %; null: it) or
            ``noisy_coarse`` (the 20 super-classes: the network has 20 outputs, and the clean
            training and test labels are CIFAR-100's ``coarse_labels``).
        label_file: the path of ``CIFAR-100_human.pt`` where it is not in ``data_dir``.
        noise_type: ``real`` (the only kind).
        noise_rate: unused with real noise (0).
        Others: see :class:`~noisylabels.data.module.NoisyDataModule`.
    """

    name: ClassVar[str] = "cifar100n"
    default_label_set: ClassVar[str] = "noisy"
    label_file_name: ClassVar[str] = "CIFAR-100_human.pt"
    label_sets: ClassVar[dict[str, str]] = {
        "noisy": "noisy_label",
        "noisy_coarse": "noisy_coarse_label",
    }
    published_rates: ClassVar[dict[str, float | None]] = {"noisy": 40.20, "noisy_coarse": None}

    def resolved_defaults(self) -> dict[str, Any]:
        """The data's null resolutions (:meth:`NoisyDataModule.resolved_defaults`) and the
        label set of ``label_set: null``."""
        return {**super().resolved_defaults(), "label_set": self.default_label_set}

    def _init_labels(self, label_set: str, label_file: str | None) -> None:
        super()._init_labels(label_set, label_file)
        if label_set == "noisy_coarse":
            self.num_classes = 20  # the super-classes (an instance value over the class's 100)

    @property
    def coarse(self) -> bool:
        return self.label_set == "noisy_coarse"

    def load(self) -> LoadedData:
        if not self.coarse:
            data = super().load()
            data.train_noisy = self.read_labels(data.train_clean, 100, "clean_label")
            return data
        root = self.data_dir / self.folder
        names = list(self.train_files) + list(self.test_files)
        if not all((root / n).is_file() for n in names):
            raise MissingFileError(missing_files_message("CIFAR100", root, names))
        train_x, train_y = read_cifar_batches([root / n for n in self.train_files], "coarse_labels")
        test_x, test_y = read_cifar_batches([root / n for n in self.test_files], "coarse_labels")
        data = LoadedData(train_x, train_y, test_x, test_y)
        data.train_noisy = self.read_labels(data.train_clean, 20, "clean_coarse_label")
        return data


def _check_real(dataset: str, noise_type: str, noise_rate: float) -> None:
    """Refuse synthetic noise, and a noise rate, which the workers' labels would leave unused."""
    if noise_type != "real":
        raise InputError(
            f"{dataset}'s noisy labels are the workers' (--data.noise_type real, the only kind; "
            f"got {noise_type!r}); for synthetic noise on these images use the CIFAR data "
            "module (configs/data/cifar10.yaml, cifar100.yaml)"
        )
    if noise_rate != 0:
        raise InputError(
            f"--data.noise_rate {noise_rate:g} would have no effect on {dataset}: its rate is "
            "the workers' labels', measured against the clean ones and recorded in "
            "results.json; leave it at 0 (configs/data/cifar10n.yaml and cifar100n.yaml set it)"
        )
