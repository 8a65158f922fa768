"""The facts of a run's training data that methods and callbacks may read, as one typed object.

A method needs to know some things about its data: the true transition matrix of synthetic
noise (``transition: true``, ε_T), the nominal noise rate (Co-teaching's τ), whether validation
is on clean labels, and batches of the training split without augmentation (T̂ estimation,
exact training statistics); the observers need the noisy and clean labels. A data module hands
them out as one :class:`DataFacts` (its ``data_facts()``), so nothing reads them by attribute
lookups on the trainer or the data module. Transition matrices are row-stochastic:
``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

UNKNOWN_LABEL = -1
"""The clean label of a sample whose clean label is not known (real-world noise)."""

EvalBatches = Callable[..., Iterator[dict[str, Tensor]]]
"""``(device, limit=None, rank=0, world_size=1, split="train")`` → batches of a split of the
training set in order, normalized and never augmented (``split``: ``train`` or ``val``, the
noisy validation split); ``limit`` as Lightning's ``limit_*_batches``; every
``world_size``-th batch from ``rank``."""


@dataclass(frozen=True)
class DataFacts:
    """What a method or callback may know of the training data of a run (after setup).

    Attributes:
        num_classes: number of classes C.
        noise_type: the label source (``symmetric``, ..., ``file``, ``real``, ``none``).
        rate_nominal: the nominal noise rate of generated noise (``--data.noise_rate``),
            ``None`` where there is none (labels read from a file or shipped with the data).
        transition: the true T (C x C, row-stochastic) of synthetic noise, else ``None``.
        clean_validation: validation is on a separate clean-labelled set (score it with the
            clean posterior ``p``, not ``p @ T``).
        noisy_labels: the training labels of every sample of the training set (training and
            noisy-validation split), by dataset index, ``(N,)``.
        clean_labels: their clean labels, :data:`UNKNOWN_LABEL` where unknown, ``(N,)``.
        train_indices: dataset indices of the training split.
        eval_batches: the training (or noisy-validation) split's batches without augmentation
            (see :data:`EvalBatches`).
        batch_size: the most samples a training batch of one process holds (the per-process
            batch size); ``None`` where unknown.
        val_labels: the labels validation accuracy is scored against (the noisy labels of the
            held-out split, or the clean labels of a separate validation set); ``None`` where
            unknown.
        views: augmented views of every image a training batch holds (``--data.views``; more
            than 1: under the batch key ``views``, ``(K, B, C, H, W)``).
        views_differ: the views are independent draws of a training augmentation; ``False``
            where the data is not augmented and every view is the same normalized image (a
            method may then pass one view through a network for all of them). ``True`` where
            unknown.
        strong_views: strongly augmented views of every image a training batch holds
            (``--data.strong_views``), under the batch key ``strong``, ``(S, B, C, H, W)``.
    """

    num_classes: int
    noise_type: str
    rate_nominal: float | None
    transition: Tensor | None
    clean_validation: bool
    noisy_labels: Tensor
    clean_labels: Tensor
    train_indices: Tensor
    eval_batches: EvalBatches
    batch_size: int | None = None
    val_labels: Tensor | None = None
    views: int = 1
    views_differ: bool = True
    strong_views: int = 0

    @property
    def num_samples(self) -> int:
        """Samples of the training set (both splits): the length of per-sample tables."""
        return len(self.noisy_labels)

    @cached_property
    def val_chance(self) -> float | None:
        """The validation accuracy of always predicting the most frequent validation label
        (what a network that learned nothing reaches at best); ``None`` without validation
        labels. Counted once per facts object."""
        return majority_fraction(self.val_labels) if self.val_labels is not None else None


def majority_fraction(labels: Tensor) -> float | None:
    """The fraction of ``labels`` (integer class labels) that are the most frequent one: the
    accuracy of always predicting it. ``None`` for no labels."""
    labels = labels.detach().long().cpu().flatten()
    labels = labels[labels >= 0]
    if labels.numel() == 0:
        return None
    return float(torch.bincount(labels).max()) / labels.numel()


@runtime_checkable
class ProvidesDataFacts(Protocol):
    """A data module that hands out :class:`DataFacts` (every noisylabels data module)."""

    def data_facts(self) -> DataFacts: ...


def data_facts_of(datamodule: Any) -> DataFacts | None:
    """The :class:`DataFacts` of a set-up data module, ``None`` for a data module that has none
    (one that is not a noisylabels data module, or none at all)."""
    return datamodule.data_facts() if isinstance(datamodule, ProvidesDataFacts) else None
