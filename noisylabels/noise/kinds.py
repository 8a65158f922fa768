"""Noise kinds: one registry entry per value of ``--data.noise_type``, holding all that is
particular to it.

A :class:`NoiseKind` says

- where its labels come from (``origin``): generated here from the clean labels and the noise
  seed, read from a label file, or shipped with the dataset;
- whether it has a class-level transition matrix, and how it is built (``transition``);
- how it draws the noisy labels (``draw``): the kinds with a class-level T share one categorical
  draw from ``T[clean]``, instance-dependent noise has its own per-sample generator, ``none``
  keeps the clean labels, and labels that are read have no draw;
- what its options must satisfy (``rate_limit``, ``needs_flips``; :meth:`NoiseKind.check` adds
  what every kind is checked for, and for a kind with a class-level T that its clean class
  stays the majority of every row);
- its documentation line (``doc``), from which the data module's ``--data.noise_type`` help and
  the table in docs/data.md are made (:func:`noise_kinds_help`, :func:`noise_kinds_table`).

The data module, the label sources, the option checks and the help all look a kind up in
:data:`NOISE_KINDS`: adding a kind is adding one entry to :data:`NOISE_KINDS`.

Names of the rate: the option ``--data.noise_rate`` is the *nominal* rate, called
``rate_nominal`` in the code and in ``results.json`` (``noise.rate_nominal``); the rate measured
on the labels is ``rate_actual`` (``noise.rate_actual``,
:func:`~noisylabels.noise.corrupt.rate_actual`). Pure torch, no Lightning. Transition matrices
are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor

from noisylabels.errors import InputError

from .corrupt import _check_labels, corrupt_labels, instance_dependent_noise
from .learnable import check_transition_majority
from .matrices import (
    SINGLE_TARGET_LIMIT,
    _check_num_classes,
    _check_rate,
    asymmetric_transition,
    check_rate_below,
    pair_transition,
    semantic_transition,
    symmetric_limit,
    symmetric_transition,
)

__all__ = [
    "GENERATED",
    "FILE",
    "SHIPPED",
    "NOISE_KINDS",
    "NoiseKind",
    "RateLimit",
    "TransitionBuilder",
    "LabelDraw",
    "draw_from_transition",
    "noise_kind",
    "build_transition",
    "make_noisy_labels",
    "check_noise_options",
    "noise_kinds_help",
    "noise_kinds_table",
]

Origin = Literal["generated", "file", "shipped"]
GENERATED: Origin = "generated"
"""Labels drawn here from the clean labels, the nominal rate and the noise seed."""
FILE: Origin = "file"
"""Labels read from ``--data.noise_file``."""
SHIPPED: Origin = "shipped"
"""The noisy labels a dataset comes with (``ships_noisy_labels``)."""

Features = Tensor | Callable[[], Tensor]
"""One feature row per training sample, or a callable returning them (computed only for a kind
that ``needs_features``)."""


class TransitionBuilder(Protocol):
    """Builds a kind's class-level T (row-stochastic, ``T[i, j] = P(noisy=j | clean=i)``)."""

    def __call__(
        self,
        num_classes: int,
        rate_nominal: float,
        seed: int,
        flips: Mapping[int, int] | None,
    ) -> Tensor: ...


class LabelDraw(Protocol):
    """Draws one noisy label per clean label with ``generator`` (seeded by the noise seed);
    ``transition`` is the kind's class-level T, or ``None`` where it has none."""

    def __call__(
        self,
        clean: Tensor,
        num_classes: int,
        rate_nominal: float,
        transition: Tensor | None,
        generator: torch.Generator,
        features: Tensor | None,
    ) -> Tensor: ...


@dataclass(frozen=True)
class RateLimit:
    """``--data.noise_rate`` must stay below ``bound(C)``, written ``formula`` (``"0.5"``,
    ``"(C-1)/C"``): from there on the clean class is no longer the most frequent noisy label.
    A bound that ``depends_on_classes`` is checked once C is known."""

    formula: str
    bound: Callable[[int], float]
    depends_on_classes: bool = False

    def check(self, noise_type: str, rate_nominal: float, num_classes: int | None) -> None:
        """Refuse ``rate_nominal`` at or above the bound (:class:`InputError` naming
        ``--data.noise_rate``); nothing to compare where the bound needs an unknown C."""
        if self.depends_on_classes:
            if num_classes is not None:
                limit = self.bound(num_classes)
                check_rate_below(noise_type, rate_nominal, limit, self.formula, num_classes)
        else:
            check_rate_below(noise_type, rate_nominal, self.bound(0), self.formula)


# ------------------------------------------------------------------ transition builders
def _identity(
    num_classes: int, rate_nominal: float, seed: int, flips: Mapping[int, int] | None
) -> Tensor:
    return torch.eye(num_classes)


def _symmetric(
    num_classes: int, rate_nominal: float, seed: int, flips: Mapping[int, int] | None
) -> Tensor:
    return symmetric_transition(num_classes, rate_nominal)


def _pair(
    num_classes: int, rate_nominal: float, seed: int, flips: Mapping[int, int] | None
) -> Tensor:
    return pair_transition(num_classes, rate_nominal)


def _asymmetric(
    num_classes: int, rate_nominal: float, seed: int, flips: Mapping[int, int] | None
) -> Tensor:
    generator = torch.Generator().manual_seed(int(seed))
    return asymmetric_transition(num_classes, rate_nominal, generator)


def _semantic(
    num_classes: int, rate_nominal: float, seed: int, flips: Mapping[int, int] | None
) -> Tensor:
    if not flips:
        raise ValueError("semantic noise needs the dataset's flip map (flips=...)")
    return semantic_transition(flips, num_classes, rate_nominal)


# ------------------------------------------------------------------ label draws
def draw_from_transition(
    clean: Tensor,
    num_classes: int,
    rate_nominal: float,
    transition: Tensor | None,
    generator: torch.Generator,
    features: Tensor | None,
) -> Tensor:
    """The draw every kind with a class-level T shares: ``ỹ_i ~ Categorical(T[y_i])``."""
    assert transition is not None
    return corrupt_labels(clean, transition, generator)


def _keep_clean(
    clean: Tensor,
    num_classes: int,
    rate_nominal: float,
    transition: Tensor | None,
    generator: torch.Generator,
    features: Tensor | None,
) -> Tensor:
    return clean.clone()


def _instance(
    clean: Tensor,
    num_classes: int,
    rate_nominal: float,
    transition: Tensor | None,
    generator: torch.Generator,
    features: Tensor | None,
) -> Tensor:
    assert features is not None
    return instance_dependent_noise(features, clean, num_classes, rate_nominal, generator)


# ------------------------------------------------------------------ the kind
@dataclass(frozen=True)
class NoiseKind:
    """One value of ``--data.noise_type`` and all that is particular to it.

    Attributes:
        name: the value of ``--data.noise_type`` (and ``noise.type`` in ``results.json``).
        doc: one line saying what the noise is, for the help and the docs.
        origin: where the labels come from: :data:`GENERATED` (drawn here with the noise seed),
            :data:`FILE` (read from ``--data.noise_file``) or :data:`SHIPPED` (the dataset's
            own noisy labels).
        transition: builds the class-level T from ``(C, rate_nominal, seed, flips)``;
            ``None`` where the kind has none.
        draw: draws the noisy labels (generated kinds only): the shared categorical draw from
            T, or a generator of the kind's own.
        rate_limit: the bound ``--data.noise_rate`` must stay below, where it has a formula
            (a kind with a class-level T is also checked on the T it builds).
        needs_flips: the kind needs the dataset's class-pair flip map (``semantic_flips``).
        needs_features: the draw needs one feature row per training sample
            (the data module's ``noise_features``).
        uses_rate: whether ``--data.noise_rate`` changes the labels (labels that are read
            never use it).
    """

    name: str
    doc: str
    origin: Origin = GENERATED
    transition: TransitionBuilder | None = None
    draw: LabelDraw | None = None
    rate_limit: RateLimit | None = None
    needs_flips: bool = False
    needs_features: bool = False
    uses_rate: bool = True

    def __post_init__(self) -> None:
        if self.origin not in (GENERATED, FILE, SHIPPED):
            raise ValueError(f"noise kind {self.name!r}: unknown origin {self.origin!r}")
        if (self.origin == GENERATED) != (self.draw is not None):
            raise ValueError(
                f"noise kind {self.name!r}: a generated kind needs a draw, a read one has none"
            )
        if self.origin != GENERATED and (self.transition or self.needs_flips):
            raise ValueError(f"noise kind {self.name!r}: labels that are read have no T")

    @property
    def generated(self) -> bool:
        """Whether the labels are drawn here (else read from a file or the dataset)."""
        return self.origin == GENERATED

    def describe(self, rate_nominal: float) -> str:
        """What makes the labels, in the words of the options, for messages."""
        return f"{self.name} noise at --data.noise_rate {rate_nominal:g}"

    def build_transition(
        self,
        num_classes: int,
        rate_nominal: float,
        seed: int = 0,
        flips: Mapping[int, int] | None = None,
    ) -> Tensor | None:
        """The class-level T (row-stochastic, ``T[i, j] = P(noisy=j | clean=i)``), ``None``
        for a kind without one. Raises ``ValueError`` for fewer than 2 classes or a rate
        outside [0, 1), and :class:`InputError` for a rate at or above the kind's limit."""
        c = _check_num_classes(num_classes)
        rate_nominal = _check_rate(rate_nominal)
        if self.transition is None:
            return None
        return self.transition(c, rate_nominal, int(seed), flips)

    def make_labels(
        self,
        clean: Tensor,
        num_classes: int,
        rate_nominal: float,
        seed: int,
        flips: Mapping[int, int] | None = None,
        features: Features | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Draw the noisy labels of ``clean``: returns ``(noisy, T)`` with ``T`` the class-level
        transition matrix or ``None``. Randomness: ``torch.Generator().manual_seed(seed)``
        (the noise seed). ``ValueError`` for a kind whose labels are read, not generated."""
        if self.draw is None:
            raise ValueError(
                f"noise type {self.name!r} has no synthetic generator: its labels are read "
                "(from a label file, or shipped with the dataset), not generated"
            )
        c = _check_num_classes(num_classes)
        rate_nominal = _check_rate(rate_nominal)
        clean = _check_labels(clean, c)
        T = self.build_transition(c, rate_nominal, seed, flips)
        rows = None
        if self.needs_features:
            rows = features() if callable(features) else features
            if rows is None:
                raise ValueError(f"{self.name} noise needs the training features")
        generator = torch.Generator().manual_seed(int(seed))
        return self.draw(clean, c, rate_nominal, T, generator, rows), T

    def check(
        self,
        rate_nominal: float,
        *,
        num_classes: int | None = None,
        seed: int = 0,
        noise_file: str | None = None,
        flips: Mapping[int, int] | None = None,
        ships_labels: bool = False,
        dataset: str = "this dataset",
    ) -> None:
        """Refuse options this kind cannot work with, before any data is read: a rate outside
        [0, 1) or at or above the kind's limit, a missing or unread ``--data.noise_file``, a
        missing flip map or shipped labels, and, for a kind with a class-level T once C is
        known, a T in which the clean class is not the majority of some row
        (:func:`~noisylabels.noise.learnable.check_transition_majority`). Raises
        :class:`InputError` naming the option."""
        if not 0.0 <= rate_nominal < 1.0:  # also NaN
            raise InputError(f"--data.noise_rate must be in [0, 1), got {rate_nominal}")
        if self.origin == FILE and not noise_file:
            raise InputError(f"--data.noise_type {self.name} needs --data.noise_file PATH")
        if noise_file and self.origin != FILE:
            raise InputError(
                f"--data.noise_file {noise_file} is given, but --data.noise_type is "
                f"{self.name!r}, which does not read it (the run would train on other labels "
                "than the file's); add --data.noise_type file to train on the file's labels, "
                "or drop --data.noise_file (--data.noise_file null)"
            )
        if self.needs_flips and not flips:
            others = ", ".join(
                k.name for k in NOISE_KINDS.values() if k.generated and not k.needs_flips
            )
            raise InputError(
                f"--data.noise_type {self.name} needs a class-pair flip map, which {dataset} "
                f"does not declare (semantic_flips); choose one of {others}"
            )
        if self.origin == SHIPPED and not ships_labels:
            raise InputError(
                f"--data.noise_type {self.name} takes the noisy labels a dataset ships with; "
                f"{dataset} has none. Use a generated noise type, or --data.noise_type file "
                "with --data.noise_file"
            )
        if self.rate_limit is not None:
            self.rate_limit.check(self.name, rate_nominal, num_classes)
        if self.transition is not None and num_classes is not None:
            T = self.build_transition(num_classes, rate_nominal, seed, flips)
            assert T is not None
            check_transition_majority(
                T, self.describe(rate_nominal), rate_nominal, "Lower --data.noise_rate."
            )


NOISE_KINDS: dict[str, NoiseKind] = {
    kind.name: kind
    for kind in (
        NoiseKind(
            "none",
            "the clean labels, unchanged (T = I)",
            transition=_identity,
            draw=_keep_clean,
            uses_rate=False,
        ),
        NoiseKind(
            "symmetric",
            "each label flips with probability ε to one of the other C−1 classes, uniformly: "
            "T[i, i] = 1−ε, T[i, j] = ε/(C−1) (so a fraction ε of the labels flips)",
            transition=_symmetric,
            draw=draw_from_transition,
            rate_limit=RateLimit("(C-1)/C", symmetric_limit, depends_on_classes=True),
        ),
        NoiseKind(
            "pair",
            "pair flips (Han et al. 2018): each class flips with probability ε to the next, "
            "T[i, i] = 1−ε, T[i, (i+1) mod C] = ε",
            transition=_pair,
            draw=draw_from_transition,
            rate_limit=RateLimit(f"{SINGLE_TARGET_LIMIT:g}", lambda c: SINGLE_TARGET_LIMIT),
        ),
        NoiseKind(
            "asymmetric",
            "T[i, i] = 1−ε, the other entries of each row drawn U(0.1, 1) from the noise seed "
            "and rescaled to sum to ε (VolMinNet, Li et al. 2021)",
            transition=_asymmetric,
            draw=draw_from_transition,
        ),
        NoiseKind(
            "semantic",
            "the dataset's class pairs (its semantic_flips, e.g. MNIST 2→7, 3→8, 5↔6, 7→1, "
            "CIFAR-100 each class to the next of its super-class) flip with probability ε, the "
            "other classes keep their labels (Patrini et al. 2017)",
            transition=_semantic,
            draw=draw_from_transition,
            rate_limit=RateLimit(f"{SINGLE_TARGET_LIMIT:g}", lambda c: SINGLE_TARGET_LIMIT),
            needs_flips=True,
        ),
        NoiseKind(
            "instance",
            "instance-dependent noise of PTD (Xia et al. 2020): a flip rate per sample drawn "
            "around ε, a flip target from the sample's raw pixels, no class-level T",
            draw=_instance,
            needs_features=True,
        ),
        NoiseKind(
            "file",
            "labels read from --data.noise_file (entry --data.noise_file_key of a dict), in "
            "training-set order, e.g. CIFAR-10N's worse_label or a run's noise.pt",
            origin=FILE,
        ),
        NoiseKind(
            "real",
            "the noisy labels the dataset ships with (Clothing1M)",
            origin=SHIPPED,
        ),
    )
}
"""Every noise kind, by its ``--data.noise_type`` name."""


def noise_kind(noise_type: str) -> NoiseKind:
    """The registered kind called ``noise_type``; :class:`InputError` listing the kinds for an
    unknown one."""
    kind = NOISE_KINDS.get(noise_type)
    if kind is None:
        raise InputError(
            f"unknown noise_type {noise_type!r} (--data.noise_type); choose one of "
            f"{', '.join(NOISE_KINDS)}"
        )
    return kind


def build_transition(
    noise_type: str,
    num_classes: int,
    rate_nominal: float,
    seed: int = 0,
    flips: Mapping[int, int] | None = None,
) -> Tensor | None:
    """The class-level transition matrix of ``noise_type`` (row-stochastic,
    ``T[i, j] = P(noisy=j | clean=i)``): identity for ``none``, ``None`` for a kind without
    one (``instance``, ``file``, ``real``). ``asymmetric`` is drawn with
    ``torch.Generator().manual_seed(seed)``; ``semantic`` needs the dataset's ``flips``.
    Raises ``ValueError`` for an unknown type or a rate outside [0, 1)."""
    return noise_kind(noise_type).build_transition(num_classes, rate_nominal, seed, flips)


def make_noisy_labels(
    clean_labels: Tensor,
    noise_type: str,
    rate_nominal: float,
    num_classes: int,
    seed: int,
    flips: Mapping[int, int] | None = None,
    features: Features | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Corrupt ``clean_labels`` with the generated noise kind ``noise_type``.

    Returns ``(noisy_labels, T)`` where ``T`` is the row-stochastic class-level transition
    matrix (``T[i, j] = P(noisy=j | clean=i)``, see :func:`build_transition`) or ``None`` for
    ``instance`` noise (Xia et al. 2020, needs ``features``). ``semantic`` needs the dataset's
    ``flips`` (``{clean class: noisy class}``); ``none`` returns a clone of the clean labels
    with the identity T; ``file`` and ``real`` raise ``ValueError``: such labels are read, not
    generated. Randomness: ``torch.Generator().manual_seed(seed)`` (the noise seed).
    """
    kind = noise_kind(noise_type)
    return kind.make_labels(clean_labels, num_classes, rate_nominal, seed, flips, features)


def check_noise_options(
    noise_type: str,
    rate_nominal: float,
    noise_file: str | None = None,
    flips: Mapping[int, int] | None = None,
    ships_labels: bool = False,
    dataset: str = "this dataset",
    num_classes: int | None = None,
    seed: int = 0,
) -> None:
    """Refuse noise options that cannot work, before any data is read: an unknown type, and
    what the kind's :meth:`NoiseKind.check` refuses. Raises :class:`InputError` naming the
    option."""
    noise_kind(noise_type).check(
        rate_nominal,
        num_classes=num_classes,
        seed=seed,
        noise_file=noise_file,
        flips=flips,
        ships_labels=ships_labels,
        dataset=dataset,
    )


# ------------------------------------------------------------------ documentation
_ORIGIN_DOC = {
    GENERATED: "drawn with --data.noise_seed",
    FILE: "read from --data.noise_file",
    SHIPPED: "shipped with the dataset",
}


def _origin_doc(kind: NoiseKind) -> str:
    if kind.generated and not kind.uses_rate:
        return "the clean labels"
    return _ORIGIN_DOC[kind.origin]


def _rate_doc(kind: NoiseKind) -> str:
    if not (kind.generated and kind.uses_rate):
        return "not used"
    if kind.rate_limit is not None:
        return f"< {kind.rate_limit.formula}"
    if kind.transition is not None:
        return "below 1 / (1 + max S) of the T drawn (its clean-majority limit)"
    return "< 1"


def _needs_doc(kind: NoiseKind) -> str:
    needs = []
    if kind.needs_flips:
        needs.append("the dataset's semantic_flips")
    if kind.needs_features:
        needs.append("the training images (noise_features)")
    if kind.origin == FILE:
        needs.append("--data.noise_file (--data.noise_file_key)")
    if kind.origin == SHIPPED:
        needs.append("a dataset with noisy labels")
    return ", ".join(needs)


def noise_kinds_help() -> str:
    """One clause per kind (name, doc line, rate limit), for the ``--data.noise_type`` help."""
    clauses = []
    for kind in NOISE_KINDS.values():
        limit = f" (--data.noise_rate < {kind.rate_limit.formula})" if kind.rate_limit else ""
        clauses.append(f"``{kind.name}``: {kind.doc}{limit}")
    return "; ".join(clauses)


def noise_kinds_table() -> str:
    """The markdown table of the noise kinds in docs/data.md, one row per registered kind."""
    rows = [
        "| `noise_type` | labels | class-level T | `--data.noise_rate` | needs | what it is |",
        "|---|---|---|---|---|---|",
    ]
    for kind in NOISE_KINDS.values():
        cells = (
            f"`{kind.name}`",
            _origin_doc(kind),
            "yes" if kind.transition is not None else "no",
            _rate_doc(kind),
            _needs_doc(kind),
            kind.doc,
        )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
