"""Whether noisy labels can be learned at all: checks made once, before any training.

Two properties of a training set's noisy labels decide whether a network can learn the clean
classes from them, whatever the method:

- **The clean class stays the majority of its noisy labels** (:func:`check_clean_majority`).
  Where the noise has a class-level transition matrix (symmetric, pair, asymmetric, semantic,
  none) every row's diagonal entry must exceed every other entry of that row,
  ``T[i, i] > T[i, j]``: past that, the most frequent label of class ``i``'s images is another
  class, and a network fitting the labels learns that class instead. For noise of the form
  ``(1 - ε) I + ε S`` (S: where a flipped label goes, rows summing to 1) this holds below the
  rate ``1 / (1 + max S)`` (:func:`clean_majority_limit`): ``(C - 1) / C`` for symmetric noise,
  0.5 for pair and semantic noise, a limit that depends on the drawn T for asymmetric noise.
  Where there is no class-level T but clean labels are known (instance-dependent noise, label
  files, labels shipped with a dataset), the same check runs on the measured T of the labels
  (over each class with at least :data:`MIN_MEASURED` samples of known clean label).
  Labels read from a file or shipped with a dataset (``real_labels``: those of real labellers)
  get one allowance: a class whose images are more often given a sibling's label passes as long
  as the samples labelled with it are still mostly its own. CIFAR-100N's human labels call more
  pine trees "oak tree" than "pine tree" (and more shrews "mouse", more streetcars "bus"), yet
  most images labelled "pine tree" are pine trees, and the data set is a standard benchmark;
  only a class that fails both ways is lost to such labels.
- **Every class occurs among the noisy labels of the training split**
  (:func:`check_class_coverage`): a class that no training sample is labelled with is never
  learned, however long the run.

Both raise :class:`~noisylabels.errors.InputError`, naming the classes, the numbers and the
options that caused them. Transition matrices are row-stochastic:
``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from noisylabels.errors import InputError

__all__ = [
    "majority_violations",
    "clean_majority_limit",
    "check_transition_majority",
    "check_clean_majority",
    "check_class_coverage",
]

_LISTED = 5
"""Classes spelled out in a message; the rest are counted."""
MIN_MEASURED = 20
"""A class of the measured T is judged only where at least this many of its samples have a
known clean label: fewer measure its row too coarsely (a class with one known sample, flipped,
would look lost)."""


def _listed(items: list[int]) -> str:
    more = f" and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return ", ".join(str(i) for i in items[:_LISTED]) + more


def majority_violations(T: Tensor) -> list[tuple[int, int]]:
    """The rows ``i`` of a row-stochastic ``T`` (``T[i, j] = P(noisy=j | clean=i)``) whose
    diagonal entry does not exceed every other entry of the row, each as ``(i, j)`` with ``j``
    the row's largest off-diagonal entry; empty where the clean class is the majority of every
    row."""
    T = torch.as_tensor(T).detach().double().cpu()
    off = T.masked_fill(torch.eye(T.shape[0], dtype=torch.bool), float("-inf"))
    largest, where = off.max(dim=1)
    bad = torch.nonzero(T.diagonal() <= largest).flatten().tolist()
    return [(i, int(where[i])) for i in bad]


def clean_majority_limit(T: Tensor, rate_nominal: float) -> float | None:
    """The noise rate below which the clean class stays the majority of every row, for noise
    of the form ``T = (1 - rate_nominal) I + rate_nominal S`` (symmetric, pair, asymmetric,
    semantic; ``S`` row-stochastic with a zero diagonal, the distribution of a flipped label):
    ``1 / (1 + max S)``. ``T`` is row-stochastic (``T[i, j] = P(noisy=j | clean=i)``); ``None``
    where ``rate_nominal`` is 0 (``S`` cannot be read off ``T``)."""
    if rate_nominal <= 0:
        return None
    T = torch.as_tensor(T).detach().double().cpu()
    share = T.masked_fill(torch.eye(T.shape[0], dtype=torch.bool), 0.0).max() / rate_nominal
    return float(1.0 / (1.0 + share))


def _measured_failures(
    clean: Tensor, noisy: Tensor, num_classes: int, real_labels: bool
) -> list[str]:
    """One clause per class whose clean class is not the majority of its noisy labels (with
    ``real_labels``: and whose label does not mostly mark its own images; see the module
    docstring), from the (clean, noisy) pairs with a known clean label."""
    c = num_classes
    known = clean >= 0
    counts = torch.bincount(clean[known] * c + noisy[known], minlength=c * c).view(c, c)
    eye = torch.eye(c, dtype=torch.bool)
    off = counts.masked_fill(eye, -1)
    row_max, row_arg = off.max(dim=1)
    col_max, col_arg = off.max(dim=0)
    diagonal = counts.diagonal()
    images = counts.sum(dim=1)
    failed = (images >= MIN_MEASURED) & (diagonal <= row_max)
    if real_labels:
        failed &= diagonal <= col_max
    clauses = []
    for i in torch.nonzero(failed).flatten().tolist():
        j, k = int(row_arg[i]), int(col_arg[i])
        n = int(images[i])
        row = (
            f"class {i}'s images are labelled {j} at least as often as {i} (T[{i}, {j}] = "
            f"{int(counts[i, j]) / n:.3g}, T[{i}, {i}] = {int(diagonal[i]) / n:.3g})"
        )
        if not real_labels:
            clauses.append(row)
        elif int(counts[:, i].sum()) == 0:
            clauses.append(f"{row}, and no sample is labelled {i}")
        else:
            clauses.append(
                f"{row}, and the samples labelled {i} are at least as often of class {k} "
                f"({int(counts[k, i])}) than of class {i} ({int(diagonal[i])})"
            )
    return clauses


def check_transition_majority(
    transition: Tensor,
    noise: str = "the noise",
    rate_nominal: float | None = None,
    remedy: str = "",
) -> None:
    """Refuse a class-level T in which the clean class is not the majority of some row: every
    row's diagonal entry must exceed the rest of the row. ``transition`` is row-stochastic
    (``T[i, j] = P(noisy=j | clean=i)``); ``noise`` says what made it, for the message
    (``"asymmetric noise at --data.noise_rate 0.99"``); ``rate_nominal`` names the limit
    (:func:`clean_majority_limit`); ``remedy`` ends the message. Needs no labels, so a noise
    kind with a class-level T checks it with its options, before any data is read. Raises
    :class:`~noisylabels.errors.InputError` naming the rows."""
    T = torch.as_tensor(transition).detach().double().cpu()
    bad = majority_violations(T)
    if not bad:
        return
    end = f" {remedy}" if remedy else ""
    i, j = bad[0]
    rows = f"row {i}" if len(bad) == 1 else f"rows {_listed([r for r, _ in bad])}"
    limit = None if rate_nominal is None else clean_majority_limit(T, rate_nominal)
    below = (
        ""
        if limit is None
        else f" With this noise the clean class stays the majority below a rate of "
        f"{limit:.4g}; the rate given is {rate_nominal:g}."
    )
    raise InputError(
        f"{noise}: another class is the most frequent noisy label of a clean class: "
        f"{rows} of T (T[i, j] = P(noisy=j | clean=i)) {'has' if len(bad) == 1 else 'have'} "
        f"no diagonal entry above the rest, e.g. T[{i}, {i}] = {T[i, i]:.4g} <= T[{i}, {j}] "
        f"= {T[i, j]:.4g}, so a network fitting the labels learns class {j} for images of "
        f"class {i}.{below}{end}"
    )


def check_clean_majority(
    noisy: Tensor,
    clean: Tensor,
    num_classes: int,
    transition: Tensor | None = None,
    noise: str = "the noisy labels",
    rate_nominal: float | None = None,
    remedy: str = "",
    real_labels: bool = False,
) -> None:
    """Refuse noisy labels whose clean class is not the majority of its noisy labels (see the
    module docstring).

    Args:
        noisy: the noisy label of every training sample.
        clean: their clean labels, ``-1`` where unknown.
        num_classes: C.
        transition: the class-level T the labels were drawn from (row-stochastic,
            ``T[i, j] = P(noisy=j | clean=i)``), checked row by row
            (:func:`check_transition_majority`); ``None``: the measured T
            of the samples with a known clean label is checked (nothing to check where none is
            known).
        noise: what made the labels, for the message (``"asymmetric noise at --data.noise_rate
            0.99"``).
        rate_nominal: the nominal noise rate, to name the limit (:func:`clean_majority_limit`).
        remedy: what to do, ending the message.
        real_labels: the labels are those of real labellers (a label file, labels shipped with
            a dataset): on the measured T, a class fails only where its label also marks
            another class's images more often than its own.

    Raises :class:`~noisylabels.errors.InputError` naming the rows or classes.
    """
    if transition is not None:
        check_transition_majority(transition, noise, rate_nominal, remedy)
        return
    end = f" {remedy}" if remedy else ""
    clean = torch.as_tensor(clean).long().cpu()
    noisy = torch.as_tensor(noisy).long().cpu()
    if not bool((clean >= 0).any()):
        return  # no clean label known: nothing to measure
    clauses = _measured_failures(clean, noisy, num_classes, real_labels)
    if not clauses:
        return
    n = len(clauses) - 1
    more = f" (and {n} more class{'es' if n > 1 else ''})" if n else ""
    what = (
        "the labels do not identify their classes"
        if real_labels
        else "another class is the most frequent noisy label of a clean class"
    )
    raise InputError(
        f"{noise}: {what}: in the measured T of the training labels (T[i, j] = P(noisy=j | "
        f"clean=i)), {clauses[0]}{more}; a network fitting these labels cannot learn such a "
        f"class.{end}"
    )


def check_class_coverage(
    noisy: Tensor,
    train_indices: Tensor,
    num_classes: int,
    clean: Tensor | None = None,
    noise: str = "the noisy labels",
    held_out: str = "the validation split",
) -> None:
    """Refuse a training split in which some class is no sample's noisy label: the network
    would never learn it.

    Args:
        noisy: the noisy label of every sample of the training set (both splits).
        train_indices: the indices of the training split.
        num_classes: C.
        clean: the clean labels of the training set (``-1`` where unknown), to tell whether the
            noise or the dataset is the cause.
        noise: what made the labels, for the message (``"the labels of --data.noise_file
            labels.csv"``).
        held_out: what holds out the rest of the training set as validation
            (``"--data.val_fraction 0.9"``), for the message.

    The message names the classes and, for each, what left it without a training label: the
    validation split (every sample labelled with it is held out) or the noise or label file (it
    labels no sample with it, whether or not the training set has images of it).
    """
    noisy = torch.as_tensor(noisy).long().cpu()
    train = noisy[torch.as_tensor(train_indices).long().cpu()]
    in_train = torch.bincount(train, minlength=num_classes)
    missing = torch.nonzero(in_train == 0).flatten().tolist()
    if not missing:
        return
    in_all = torch.bincount(noisy, minlength=num_classes)
    known = torch.zeros(num_classes, dtype=torch.long)
    if clean is not None:
        clean = torch.as_tensor(clean).long().cpu()
        known = torch.bincount(clean[clean >= 0], minlength=num_classes)
    split = [k for k in missing if int(in_all[k]) > 0]
    by_noise = [k for k in missing if int(in_all[k]) == 0 and int(known[k]) > 0]
    absent = [k for k in missing if int(in_all[k]) == 0 and int(known[k]) == 0]
    causes = []
    if split:
        causes.append(
            f"{held_out} holds out every sample labelled {_listed(split)} (lower it, or leave "
            "more samples of those classes)"
        )
    if by_noise:
        causes.append(
            f"no sample is labelled {_listed(by_noise)} by {noise}, though the training set has "
            f"images of {'that class' if len(by_noise) == 1 else 'those classes'}"
        )
    if absent:
        causes.append(f"no sample of the training set is labelled {_listed(absent)} by {noise}")
    n = len(missing)
    raise InputError(
        f"{n} of {num_classes} classes ({_listed(missing)}) have no sample in the training "
        f"split, so the network would never learn {'it' if n == 1 else 'them'}: "
        + "; ".join(causes)
        + "."
    )
