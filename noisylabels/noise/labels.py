"""Where a run's noisy training labels come from: one abstraction, three kinds.

- :class:`SyntheticNoise`: clean labels corrupted by a synthetic noise type at a nominal rate,
  seeded by the noise seed (symmetric, pair, asymmetric, semantic, instance, none);
- :class:`FileLabels`: labels read from a file, e.g. CIFAR-10N's human labels or a run's
  ``noise.pt`` (see :func:`~noisylabels.noise.label_file.read_label_file`);
- :class:`ShippedLabels`: real noisy labels that come with the dataset (Clothing1M).

Each source produces the labels once (:meth:`LabelSource.make_labels`), which refuses labels
whose clean class is not the majority of its noisy labels
(:func:`~noisylabels.noise.learnable.check_clean_majority`: on the class-level T where there is
one, else on the measured T), and then describes them (:meth:`LabelSource.noise_info`), so
``results.json`` says what the noise was for every kind. Pure torch, no Lightning. Transition
matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from noisylabels.errors import InputError

from .corrupt import empirical_transition, make_noisy_labels, noise_rate
from .label_file import read_label_file
from .learnable import check_clean_majority
from .matrices import NOISE_TYPES, check_symmetric_rate

__all__ = [
    "LabelSource",
    "SyntheticNoise",
    "FileLabels",
    "ShippedLabels",
    "SYNTHETIC_TYPES",
    "check_noise_options",
]

SYNTHETIC_TYPES = tuple(t for t in NOISE_TYPES if t not in ("file", "real"))
"""Noise types :class:`SyntheticNoise` generates."""


def check_noise_options(
    noise_type: str,
    rate: float,
    noise_file: str | None = None,
    flips: Mapping[int, int] | None = None,
    ships_labels: bool = False,
    dataset: str = "this dataset",
    num_classes: int | None = None,
) -> None:
    """Refuse noise options that cannot work, before any data is read: an unknown type, a rate
    outside [0, 1) (pair noise: >= 0.5; symmetric noise: >= (C-1)/C with ``num_classes``
    given), ``file`` without a file, a file with another type (which would ignore it),
    ``semantic`` for a dataset without a flip map (``flips``), ``real`` for one that ships no
    noisy labels. Raises :class:`~noisylabels.errors.InputError` naming the option."""
    if noise_type not in NOISE_TYPES:
        raise InputError(
            f"unknown noise_type {noise_type!r} (--data.noise_type); choose one of {NOISE_TYPES}"
        )
    if not 0.0 <= rate < 1.0:
        raise InputError(f"--data.noise_rate must be in [0, 1), got {rate}")
    if noise_type == "pair" and rate >= 0.5:
        raise InputError(
            "pair noise needs --data.noise_rate < 0.5 so the clean class stays the majority; "
            f"got {rate}"
        )
    if noise_type == "symmetric" and num_classes is not None:
        check_symmetric_rate(rate, num_classes)
    if noise_type == "file" and not noise_file:
        raise InputError("noise_type 'file' needs --data.noise_file PATH")
    if noise_file and noise_type != "file":
        raise InputError(
            f"--data.noise_file {noise_file} is given, but --data.noise_type is {noise_type!r}, "
            "which does not read it (the run would train on other labels than the file's); add "
            "--data.noise_type file to train on the file's labels, or drop --data.noise_file "
            "(--data.noise_file null)"
        )
    if noise_type == "semantic" and not flips:
        raise InputError(
            f"noise_type 'semantic' needs a class-pair flip map, which {dataset} does not "
            "declare (semantic_flips); choose symmetric, pair, asymmetric or instance noise"
        )
    if noise_type == "real" and not ships_labels:
        raise InputError(
            f"noise_type 'real' takes the noisy labels a dataset ships with; {dataset} has none. "
            "Use a synthetic noise type, or noise_type 'file' with --data.noise_file"
        )


class LabelSource(ABC):
    """The origin of a training set's noisy labels, and the facts about them.

    ``make_labels(clean, num_classes)`` returns one noisy label per training sample (``clean``
    holds ``-1`` where the clean label is unknown); afterwards :attr:`transition` is the true
    class-level T where one exists (row-stochastic, ``T[i, j] = P(noisy=j | clean=i)``) and
    :meth:`noise_info` summarises the noise for results. :attr:`rate_nominal` is known before
    the labels are made; :attr:`rate_actual` is measured on them each time it is read.
    """

    kind: ClassVar[str] = "base"
    real_labels: ClassVar[bool] = False
    """Whether the labels are those of real labellers (read or shipped, not generated): the
    clean-majority check then allows a class more often labelled as another one whose own label
    still marks mostly its images (see :mod:`~noisylabels.noise.learnable`)."""

    def __init__(self) -> None:
        self.clean: Tensor | None = None
        self.noisy: Tensor | None = None
        self.num_classes: int | None = None
        self.transition: Tensor | None = None

    @abstractmethod
    def _make(self, clean: Tensor, num_classes: int) -> Tensor:
        """The noisy labels (and, where there is one, set :attr:`transition`)."""

    def make_labels(self, clean: Tensor, num_classes: int) -> Tensor:
        """Produce (or read) the noisy labels of the training set whose clean labels are
        ``clean``; returns a long tensor of the same length. Every label source passes here,
        so this is where labels that cannot be learned are refused
        (:func:`~noisylabels.noise.learnable.check_clean_majority`, raising
        :class:`~noisylabels.errors.InputError`)."""
        clean = torch.as_tensor(clean).long()
        noisy = self._make(clean, num_classes).long()
        check_clean_majority(
            noisy,
            clean,
            num_classes,
            transition=self.transition,
            noise=self.describe(),
            rate=self.rate_nominal,
            remedy=self.remedy(),
            real_labels=self.real_labels,
        )
        self.clean, self.noisy, self.num_classes = clean, noisy, num_classes
        return noisy

    def describe(self) -> str:
        """What made the labels, in the words of the options, for messages."""
        return f"the {self.kind} labels"

    def remedy(self) -> str:
        """What to do about labels that cannot be learned, for messages."""
        return ""

    def _require(self) -> tuple[Tensor, Tensor, int]:
        if self.clean is None or self.noisy is None or self.num_classes is None:
            raise RuntimeError("call make_labels() first")
        return self.clean, self.noisy, self.num_classes

    @property
    def clean_known(self) -> int:
        """How many training samples have a known clean label."""
        return int((self._require()[0] >= 0).sum())

    @property
    def rate_nominal(self) -> float | None:
        """The noise rate the source was asked for (``None`` by default: labels from a file or
        shipped with the dataset have none)."""
        return None

    @property
    def rate_actual(self) -> float | None:
        """Measured fraction of flipped labels among the samples with a known clean label
        (``None`` where no clean label is known). A pass over every label: read it for a
        summary, not per batch (:attr:`rate_nominal` costs nothing)."""
        clean, noisy, _ = self._require()
        known = clean >= 0
        return noise_rate(clean[known], noisy[known]) if bool(known.any()) else None

    def empirical_transition(self) -> Tensor | None:
        """Row-stochastic measured T over the samples with a known clean label (``None`` where
        there are none); see :func:`~noisylabels.noise.empirical_transition`."""
        clean, noisy, c = self._require()
        return empirical_transition(clean, noisy, c) if bool((clean >= 0).any()) else None

    @abstractmethod
    def noise_info(self) -> dict[str, Any]:
        """JSON-ready summary: at least ``type``, ``rate_nominal`` and ``rate_actual``."""


class SyntheticNoise(LabelSource):
    """Synthetic noise of ``noise_type`` at nominal ``rate``, drawn with the noise ``seed``.

    ``flips`` is the dataset's semantic flip map (``{clean class: noisy class}``, needed by
    ``semantic``); ``features`` (a tensor, or a callable returning one, so it is only computed
    when needed) feeds ``instance`` noise (PTD, Xia et al. 2020) with one feature row per sample
    at the raw pixel scale.
    """

    kind: ClassVar[str] = "synthetic"

    def __init__(
        self,
        noise_type: str,
        rate: float,
        seed: int,
        flips: Mapping[int, int] | None = None,
        features: Tensor | Callable[[], Tensor] | None = None,
    ) -> None:
        super().__init__()
        if noise_type not in SYNTHETIC_TYPES:
            raise InputError(
                f"noise type {noise_type!r} is not synthetic; choose one of {SYNTHETIC_TYPES}"
            )
        if noise_type == "semantic" and not flips:
            raise InputError("semantic noise needs the dataset's flip map; this one has none")
        self.noise_type = noise_type
        self.rate = float(rate)
        self.seed = int(seed)
        self.flips = dict(flips) if flips else None
        self._features = features

    def _make(self, clean: Tensor, num_classes: int) -> Tensor:
        features = None
        if self.noise_type == "instance":
            features = self._features() if callable(self._features) else self._features
        noisy, self.transition = make_noisy_labels(
            clean,
            self.noise_type,
            self.rate,
            num_classes,
            seed=self.seed,
            flips=self.flips,
            features=features,
        )
        return noisy

    @property
    def rate_nominal(self) -> float:
        """The configured rate ``rate``."""
        return self.rate

    def describe(self) -> str:
        return f"{self.noise_type} noise at --data.noise_rate {self.rate:g}"

    def remedy(self) -> str:
        return "Lower --data.noise_rate."

    def noise_info(self) -> dict[str, Any]:
        """``type``, ``rate_nominal``, ``rate_actual`` and the noise ``seed``."""
        return {
            "type": self.noise_type,
            "rate_nominal": self.rate_nominal,
            "rate_actual": self.rate_actual,
            "seed": self.seed,
        }


class FileLabels(LabelSource):
    """Noisy labels read from ``path`` (entry ``key`` of a dict-valued ``.pt`` file), in
    training-set order; e.g. CIFAR-10N's ``worse_label`` (Wei et al. 2022)."""

    kind: ClassVar[str] = "file"
    real_labels: ClassVar[bool] = True

    def __init__(self, path: str | Path, key: str | None = None) -> None:
        super().__init__()
        self.path = Path(path).expanduser()
        self.key = key

    def _make(self, clean: Tensor, num_classes: int) -> Tensor:
        return read_label_file(self.path, len(clean), num_classes, self.key, clean=clean)

    def describe(self) -> str:
        key = "" if self.key is None else f" (--data.noise_file_key {self.key})"
        return f"--data.noise_file {self.path}{key}"

    def remedy(self) -> str:
        return (
            "Check that the file was made for this dataset, in its training-set order, and "
            "that --data.noise_file_key selects its noisy labels."
        )

    def noise_info(self) -> dict[str, Any]:
        """``type: file``, the ``file`` and ``key``, no nominal rate, and the rate measured
        against the clean labels."""
        return {
            "type": "file",
            "file": str(self.path),
            "key": self.key,
            "rate_nominal": self.rate_nominal,
            "rate_actual": self.rate_actual,
        }


class ShippedLabels(LabelSource):
    """Real noisy labels that come with the dataset (e.g. Clothing1M, Xiao et al. 2015), in
    training-set order; the clean label of a sample may be unknown (``-1``)."""

    kind: ClassVar[str] = "real"
    real_labels: ClassVar[bool] = True

    def __init__(self, labels: Tensor, dataset: str = "the dataset") -> None:
        super().__init__()
        self.labels = torch.as_tensor(labels).long()
        self.dataset = dataset

    def _make(self, clean: Tensor, num_classes: int) -> Tensor:
        if len(self.labels) != len(clean):
            raise InputError(
                f"{self.dataset} ships {len(self.labels)} noisy labels for {len(clean)} "
                "training samples"
            )
        if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= num_classes):
            raise InputError(f"{self.dataset} ships noisy labels outside [0, {num_classes - 1}]")
        return self.labels

    def describe(self) -> str:
        return f"the noisy labels {self.dataset} ships (--data.noise_type real)"

    def remedy(self) -> str:
        return f"Check the label lists of {self.dataset}."

    def noise_info(self) -> dict[str, Any]:
        """``type: real``, no nominal rate, the rate over the samples with a known clean label
        and how many those are (``clean_known``)."""
        return {
            "type": "real",
            "rate_nominal": self.rate_nominal,
            "rate_actual": self.rate_actual,
            "clean_known": self.clean_known,
        }
