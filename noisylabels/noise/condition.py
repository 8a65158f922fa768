"""How usable a transition matrix is for a correction: its smallest diagonal entry, its
all-zero columns and its rank.

Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``. Forward
correction scores a sample of noisy label ``y`` by ``(p @ T)_y`` and importance reweighting
(Liu & Tao 2016) weights it by ``β = p_y / (p @ T)_y <= 1 / T[y, y]``. A zero column ``j``
says no sample is ever labelled ``j`` (its Forward loss is the constant ``-log 1e-12``, its
weight unbounded), a small diagonal entry lets ``β`` grow as ``1 / T[y, y]``, and a singular
``T`` (rank below C) cannot be inverted by reweighting. These checks run once per T (when it is
given or estimated, and in the message of a diverged run), never per training step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["ZERO", "RANK_RTOL", "CHANCE_ATOL", "TransitionCondition", "transition_condition"]

ZERO = 1e-6
"""A column whose largest entry is below this counts as all zero."""
RANK_RTOL = 1e-6
"""Singular values below this fraction of the largest count as zero for the rank (float32
entries carry about 7 significant digits)."""
CHANCE_ATOL = 1e-6
"""A diagonal entry within this of ``1 / C`` counts as at chance (``0.1`` read as float32 is
``0.10000000149``)."""
_LISTED = 10


def _listed(items: list[int]) -> str:
    more = f" and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return ", ".join(str(i) for i in items[:_LISTED]) + more


@dataclass(frozen=True)
class TransitionCondition:
    """The condition of a C x C transition matrix (see :func:`transition_condition`).

    Attributes:
        size: C.
        finite: every entry is finite.
        min_diagonal: the smallest diagonal entry ``T[i, i]`` and ``min_diagonal_row`` its row.
        zero_columns: the columns ``j`` whose every entry is below :data:`ZERO`.
        rank: the numerical rank (relative tolerance :data:`RANK_RTOL`).
        dependent_rows: where ``rank < C``, the rows that are linear combinations of each other
            (those with weight in a vector of the left null space).
    """

    size: int
    finite: bool
    min_diagonal: float
    min_diagonal_row: int
    zero_columns: tuple[int, ...]
    rank: int
    dependent_rows: tuple[int, ...]

    @property
    def singular(self) -> bool:
        """Whether ``T`` has rank below C."""
        return self.rank < self.size

    @property
    def below_chance(self) -> bool:
        """Whether a diagonal entry is at or below ``1 / C``: a clean class no more likely to
        keep its label than a label drawn at random."""
        return self.min_diagonal <= 1.0 / self.size + CHANCE_ATOL

    @property
    def degenerate(self) -> bool:
        """Whether a correction with ``T`` is ill-posed: non-finite entries, a zero column, rank
        below C, or a diagonal entry at or below chance (``1 / C``)."""
        return not self.finite or bool(self.zero_columns) or self.singular or self.below_chance

    def describe(self) -> str:
        """One clause: ``smallest diagonal entry 0.41 (row 3), no all-zero column, rank 10 of
        10``, naming the zero columns and the dependent rows where there are any."""
        if not self.finite:
            return "non-finite entries (nan or inf)"
        parts = [f"smallest diagonal entry {self.min_diagonal:.3g} (row {self.min_diagonal_row})"]
        if self.zero_columns:
            n = len(self.zero_columns)
            parts.append(
                f"{n} all-zero column{'s' if n > 1 else ''} ({_listed(list(self.zero_columns))})"
            )
        else:
            parts.append("no all-zero column")
        rank = f"rank {self.rank} of {self.size}"
        if self.singular and self.dependent_rows:
            rank += f" (rows {_listed(list(self.dependent_rows))} are linearly dependent)"
        parts.append(rank)
        return ", ".join(parts)


def transition_condition(T: Tensor) -> TransitionCondition:
    """The :class:`TransitionCondition` of a square transition matrix ``T`` (row-stochastic,
    ``T[i, j] = P(noisy=j | clean=i)``), computed in float64 on the CPU."""
    T = torch.as_tensor(T).detach().double().cpu()
    c = int(T.shape[0])
    if not bool(torch.isfinite(T).all()):
        return TransitionCondition(c, False, float("nan"), 0, (), 0, ())
    diagonal = T.diagonal()
    row = int(diagonal.argmin())
    zero = tuple(int(j) for j in torch.nonzero(T.abs().amax(dim=0) < ZERO).flatten())
    U, S, _ = torch.linalg.svd(T)
    tolerance = RANK_RTOL * float(S[0]) if len(S) else 0.0
    rank = int((S > tolerance).sum())
    dependent: tuple[int, ...] = ()
    if rank < c:
        null = U[:, rank:]  # left null space: u^T T = 0
        weight = null.abs().amax(dim=1)
        dependent = tuple(int(i) for i in torch.nonzero(weight > 1e-6).flatten())
    return TransitionCondition(c, True, float(diagonal[row]), row, zero, rank, dependent)
