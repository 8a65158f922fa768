"""Where a run's noisy training labels come from: one abstraction, one class per origin of a
noise kind (:mod:`noisylabels.noise.kinds`), picked by :func:`label_source`.

- :class:`SyntheticNoise`: clean labels corrupted by a generated noise kind at a nominal rate,
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from noisylabels.errors import InputError

from . import corrupt
from .corrupt import empirical_transition
from .kinds import FILE, NOISE_KINDS, SHIPPED, Features, NoiseKind, noise_kind
from .label_file import read_label_file
from .learnable import check_clean_majority

__all__ = [
    "LabelSource",
    "SyntheticNoise",
    "FileLabels",
    "ShippedLabels",
    "label_source",
]


class LabelSource(ABC):
    """The origin of a training set's noisy labels, and the facts about them.

    ``make_labels(clean, num_classes)`` returns one noisy label per training sample (``clean``
    holds ``-1`` where the clean label is unknown); afterwards :attr:`transition` is the true
    class-level T where one exists (row-stochastic, ``T[i, j] = P(noisy=j | clean=i)``) and
    :meth:`noise_info` summarises the noise for results. :attr:`noise_type` names the noise
    kind (:data:`~noisylabels.noise.kinds.NOISE_KINDS`); :attr:`rate_nominal` is known before
    the labels are made; :attr:`rate_actual` is measured on them each time it is read.
    """

    real_labels: ClassVar[bool] = False
    """Whether the labels are those of real labellers (read or shipped, not generated): the
    clean-majority check then allows a class more often labelled as another one whose own label
    still marks mostly its images (see :mod:`~noisylabels.noise.learnable`)."""

    def __init__(self, noise_type: str) -> None:
        self.noise_type = noise_type
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
            rate_nominal=self.rate_nominal,
            remedy=self.remedy(),
            real_labels=self.real_labels,
        )
        self.clean, self.noisy, self.num_classes = clean, noisy, num_classes
        return noisy

    def describe(self) -> str:
        """What made the labels, in the words of the options, for messages."""
        return f"the {self.noise_type} labels"

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
        return corrupt.rate_actual(clean[known], noisy[known]) if bool(known.any()) else None

    def empirical_transition(self) -> Tensor | None:
        """Row-stochastic measured T over the samples with a known clean label (``None`` where
        there are none); see :func:`~noisylabels.noise.empirical_transition`."""
        clean, noisy, c = self._require()
        return empirical_transition(clean, noisy, c) if bool((clean >= 0).any()) else None

    @abstractmethod
    def noise_info(self) -> dict[str, Any]:
        """JSON-ready summary: at least ``type``, ``rate_nominal`` and ``rate_actual``."""


class SyntheticNoise(LabelSource):
    """Noise of the generated kind ``noise_type`` at ``rate_nominal``, drawn with the noise
    ``seed`` (:meth:`~noisylabels.noise.kinds.NoiseKind.make_labels`).

    ``flips`` is the dataset's semantic flip map (``{clean class: noisy class}``, for a kind
    that ``needs_flips``); ``features`` (a tensor, or a callable returning one, so it is only
    computed when needed) feeds a kind that ``needs_features`` (``instance``: PTD, Xia et al.
    2020) with one feature row per sample at the raw pixel scale.
    """

    def __init__(
        self,
        noise_type: str,
        rate_nominal: float,
        seed: int,
        flips: Mapping[int, int] | None = None,
        features: Features | None = None,
    ) -> None:
        super().__init__(noise_type)
        self.kind: NoiseKind = noise_kind(noise_type)
        if not self.kind.generated:
            generated = ", ".join(k.name for k in NOISE_KINDS.values() if k.generated)
            raise InputError(
                f"noise type {noise_type!r} is not generated; choose one of {generated}"
            )
        if self.kind.needs_flips and not flips:
            raise InputError(
                f"{noise_type} noise needs the dataset's flip map (semantic_flips); this one "
                "has none"
            )
        # a kind that draws without a rate (none: the clean labels) is noise at rate 0, whatever
        # --data.noise_rate holds: what the run records and methods read (Co-teaching's forget
        # rate) is the rate the labels were drawn at
        self._rate_nominal = float(rate_nominal) if self.kind.uses_rate else 0.0
        self.seed = int(seed)
        self.flips = dict(flips) if flips else None
        self._features = features

    def _make(self, clean: Tensor, num_classes: int) -> Tensor:
        noisy, self.transition = self.kind.make_labels(
            clean, num_classes, self._rate_nominal, self.seed, self.flips, self._features
        )
        return noisy

    @property
    def rate_nominal(self) -> float:
        """The rate the noise was asked for (``--data.noise_rate``; 0 for a kind that uses no
        rate)."""
        return self._rate_nominal

    def describe(self) -> str:
        return self.kind.describe(self._rate_nominal)

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

    real_labels: ClassVar[bool] = True

    def __init__(self, path: str | Path, key: str | None = None, noise_type: str = "file") -> None:
        super().__init__(noise_type)
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
            "type": self.noise_type,
            "file": str(self.path),
            "key": self.key,
            "rate_nominal": self.rate_nominal,
            "rate_actual": self.rate_actual,
        }


class ShippedLabels(LabelSource):
    """Real noisy labels that come with the dataset (e.g. Clothing1M, Xiao et al. 2015), in
    training-set order; the clean label of a sample may be unknown (``-1``)."""

    real_labels: ClassVar[bool] = True

    def __init__(
        self, labels: Tensor, dataset: str = "the dataset", noise_type: str = "real"
    ) -> None:
        super().__init__(noise_type)
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
        return f"the noisy labels {self.dataset} ships (--data.noise_type {self.noise_type})"

    def remedy(self) -> str:
        return f"Check the label lists of {self.dataset}."

    def noise_info(self) -> dict[str, Any]:
        """``type: real``, no nominal rate, the rate over the samples with a known clean label
        and how many those are (``clean_known``)."""
        return {
            "type": self.noise_type,
            "rate_nominal": self.rate_nominal,
            "rate_actual": self.rate_actual,
            "clean_known": self.clean_known,
        }


def label_source(
    noise_type: str,
    *,
    rate_nominal: float = 0.0,
    seed: int = 0,
    flips: Mapping[int, int] | None = None,
    features: Features | None = None,
    noise_file: str | Path | None = None,
    noise_file_key: str | None = None,
    shipped: Tensor | None = None,
    dataset: str = "the dataset",
) -> LabelSource:
    """The label source of the noise kind ``noise_type``, by its origin: :class:`FileLabels`
    (``noise_file``, ``noise_file_key``), :class:`ShippedLabels` (the dataset's ``shipped``
    labels) or :class:`SyntheticNoise` (``rate_nominal``, the noise ``seed``, the dataset's
    ``flips`` and training ``features`` where the kind needs them)."""
    kind = noise_kind(noise_type)
    if kind.origin == FILE:
        if not noise_file:
            raise InputError(f"--data.noise_type {kind.name} needs --data.noise_file PATH")
        return FileLabels(noise_file, noise_file_key, noise_type=kind.name)
    if kind.origin == SHIPPED:
        if shipped is None:
            raise InputError(f"{dataset} loaded no noisy labels")
        return ShippedLabels(shipped, dataset=dataset, noise_type=kind.name)
    return SyntheticNoise(kind.name, rate_nominal, seed, flips=flips, features=features)
