"""Class-level noise transition matrices.

Convention used throughout this package: a transition matrix ``T`` is **row-stochastic**,
``T[i, j] = P(noisy = j | clean = i)``, so every row sums to 1 and the noisy posterior of a
clean posterior row vector ``p`` is ``q = p @ T``. The VRNL paper and cleanlab write the
transposed, column-stochastic convention ``T_col[j, i] = P(noisy = j | clean = i)``; use
:func:`to_column_stochastic` / :func:`from_column_stochastic` to convert.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from noisylabels.errors import InputError, MissingFileError, load_error_summary

from .text_files import read_text

__all__ = [
    "symmetric_transition",
    "symmetric_limit",
    "check_rate_below",
    "pair_transition",
    "asymmetric_transition",
    "semantic_transition",
    "superclass_flips",
    "check_transition",
    "to_column_stochastic",
    "from_column_stochastic",
    "load_transition",
    "save_transition",
]

SINGLE_TARGET_LIMIT = 0.5
"""The rate from which a class that flips to one other class (pair and semantic noise) is no
longer the majority of its noisy labels."""


def _check_num_classes(num_classes: int) -> int:
    if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    return int(num_classes)


def _check_rate(rate_nominal: float) -> float:
    rate_nominal = float(rate_nominal)
    if not (0.0 <= rate_nominal < 1.0):  # also rejects NaN
        raise ValueError(f"noise rate must be in [0, 1), got {rate_nominal}")
    return rate_nominal


def symmetric_limit(num_classes: int) -> float:
    """The symmetric noise rate ``(C - 1) / C`` at which a noisy label is drawn uniformly over
    all C classes: from there on the clean class is no longer the most frequent label."""
    return (num_classes - 1) / num_classes


def check_rate_below(
    noise_type: str,
    rate_nominal: float,
    limit: float,
    formula: str,
    num_classes: int | None = None,
) -> None:
    """Refuse a nominal rate at or above ``limit`` (written ``formula`` in the message, with its
    value for ``num_classes`` classes where it depends on them): from there on the clean class
    is no longer the most frequent noisy label. Raises :class:`~noisylabels.errors.InputError`
    naming ``--data.noise_rate``."""
    if rate_nominal >= limit:
        value = "" if num_classes is None else f" = {limit:.4g} for C = {num_classes} classes"
        raise InputError(
            f"{noise_type} noise needs --data.noise_rate < {formula}{value} so the clean class "
            f"stays the most frequent label; got {rate_nominal}"
        )


def symmetric_transition(num_classes: int, rate_nominal: float) -> Tensor:
    """Symmetric (uniform) noise, e.g. Patrini et al. 2017 / Han et al. 2018.

    Returns a row-stochastic ``T`` (``T[i, j] = P(noisy=j | clean=i)``) with
    ``T[i, i] = 1 - rate_nominal`` and ``T[i, j] = rate_nominal / (C - 1)`` for ``j != i``. The
    true class is excluded from the flip targets, so the expected fraction of flipped labels
    equals ``rate_nominal`` (libraries that include it flip only ``rate_nominal * (C - 1) / C``).
    ``rate_nominal`` must be below ``(C - 1) / C`` (:func:`symmetric_limit`; else
    :class:`~noisylabels.errors.InputError`).
    """
    c = _check_num_classes(num_classes)
    rate_nominal = _check_rate(rate_nominal)
    check_rate_below("symmetric", rate_nominal, symmetric_limit(c), "(C-1)/C", c)
    T = torch.full((c, c), rate_nominal / (c - 1))
    T.fill_diagonal_(1.0 - rate_nominal)
    return T


def pair_transition(num_classes: int, rate_nominal: float) -> Tensor:
    """Pair-flip noise (Han et al. 2018, Co-teaching).

    Returns a row-stochastic ``T`` (``T[i, j] = P(noisy=j | clean=i)``) with
    ``T[i, i] = 1 - rate_nominal`` and ``T[i, (i + 1) % C] = rate_nominal``. ``rate_nominal``
    must be < 0.5 (:data:`SINGLE_TARGET_LIMIT`) so the clean class stays the majority of each
    row; else :class:`~noisylabels.errors.InputError`.
    """
    c = _check_num_classes(num_classes)
    rate_nominal = _check_rate(rate_nominal)
    check_rate_below("pair", rate_nominal, SINGLE_TARGET_LIMIT, f"{SINGLE_TARGET_LIMIT:g}")
    idx = torch.arange(c)
    T = torch.zeros(c, c)
    T[idx, idx] = 1.0 - rate_nominal
    T[idx, (idx + 1) % c] = rate_nominal
    return T


def asymmetric_transition(
    num_classes: int, rate_nominal: float, generator: torch.Generator
) -> Tensor:
    """Random asymmetric noise as in VolMinNet (Li et al. 2021), but seeded.

    Returns a row-stochastic ``T`` (``T[i, j] = P(noisy=j | clean=i)``):
    ``T[i, i] = 1 - rate_nominal``; the off-diagonal entries of each row are drawn from
    U(0.1, 1) with ``generator`` and rescaled to sum to ``rate_nominal``. (The reference
    implementation draws them from an unseeded global RNG.)
    """
    c = _check_num_classes(num_classes)
    rate_nominal = _check_rate(rate_nominal)
    off = torch.rand(c, c, generator=generator, dtype=torch.float64) * 0.9 + 0.1
    off.fill_diagonal_(0.0)
    off = off / off.sum(dim=1, keepdim=True) * rate_nominal
    T = off + torch.eye(c, dtype=torch.float64) * (1.0 - rate_nominal)
    return T.float()


def superclass_flips(coarse: Sequence[int]) -> dict[int, int]:
    """Semantic flips inside super-classes, from a fine -> coarse label table.

    ``coarse[i]`` is the super-class of fine class ``i``; each fine class flips to the next fine
    class (by index, cyclically) of its super-class. This is the CIFAR-100 semantic noise of
    Patrini et al. 2017 (its table lives with the CIFAR data module).
    """
    groups: dict[int, list[int]] = {}
    for fine, group in enumerate(coarse):
        groups.setdefault(int(group), []).append(fine)
    flips: dict[int, int] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        for k, fine in enumerate(members):
            flips[fine] = members[(k + 1) % len(members)]
    return flips


def semantic_transition(flips: Mapping[int, int], num_classes: int, rate_nominal: float) -> Tensor:
    """Semantic class-pair flips (Patrini et al. 2017, their "asymmetric" noise).

    Returns a row-stochastic ``T`` (``T[i, j] = P(noisy=j | clean=i)``) where each class ``i``
    with a partner ``j = flips[i]`` flips to it with probability ``rate_nominal``
    (``T[i, i] = 1 - rate_nominal``, ``T[i, j] = rate_nominal``) and every other class keeps
    ``T[i, i] = 1``. Each data module declares its own map (``semantic_flips``, e.g. MNIST
    2->7, 3->8, 5<->6, 7->1).
    """
    c = _check_num_classes(num_classes)
    rate_nominal = _check_rate(rate_nominal)
    if not flips:
        raise ValueError("semantic noise needs a non-empty flip map {clean class: noisy class}")
    T = torch.eye(c)
    for src, dst in flips.items():
        if not (0 <= int(src) < c and 0 <= int(dst) < c) or int(src) == int(dst):
            raise ValueError(
                f"semantic flip {src} -> {dst} is not a pair of different classes in "
                f"[0, {c - 1}] (num_classes={c})"
            )
        T[src, src] = 1.0 - rate_nominal
        T[src, dst] = rate_nominal
    return T


def check_transition(T: Tensor, num_classes: int | None = None, atol: float = 1e-4) -> Tensor:
    """Validate a row-stochastic transition matrix (``T[i, j] = P(noisy=j | clean=i)``).

    Checks that ``T`` is a finite C x C matrix (C = ``num_classes`` when given) with non-negative
    entries whose rows sum to 1 within ``atol``; raises ``ValueError`` describing the problem
    (naming the offending rows) otherwise. Returns ``T`` as a float tensor.
    """
    T = torch.as_tensor(T)
    if T.dim() != 2 or T.shape[0] != T.shape[1]:
        raise InputError(f"transition matrix must be square C x C, got shape {tuple(T.shape)}")
    if num_classes is not None and T.shape[0] != num_classes:
        raise InputError(
            f"transition matrix is {T.shape[0]} x {T.shape[1]}, expected {num_classes} x "
            f"{num_classes} for num_classes={num_classes}"
        )
    if not T.is_floating_point():
        T = T.float()
    if not bool(torch.isfinite(T).all()):
        raise InputError("transition matrix has non-finite entries (nan or inf)")
    if bool((T < 0).any()):
        neg = torch.nonzero(T < 0)[:10].tolist()
        raise InputError(f"transition matrix has negative entries at (row, col) {neg}")
    sums = T.sum(dim=1, dtype=torch.float64)
    bad = torch.nonzero((sums - 1.0).abs() > atol).flatten().tolist()
    if bad:
        detail = ", ".join(f"row {i}: {sums[i].item():.6g}" for i in bad[:10])
        more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
        raise InputError(
            "transition matrix must be row-stochastic (T[i, j] = P(noisy=j | clean=i), rows sum "
            f"to 1 within {atol}); rows {bad[:10]}{more} do not: {detail}"
        )
    return T


def to_column_stochastic(T: Tensor) -> Tensor:
    """Convert row-stochastic ``T[i, j] = P(noisy=j | clean=i)`` (ours) to the column-stochastic
    convention ``T_col[j, i] = P(noisy=j | clean=i)`` of the VRNL paper and cleanlab's
    ``noise_matrix``. It is the transpose; columns of the result sum to 1."""
    T = torch.as_tensor(T)
    if T.dim() != 2 or T.shape[0] != T.shape[1]:
        raise ValueError(f"transition matrix must be square C x C, got shape {tuple(T.shape)}")
    return T.transpose(0, 1).contiguous()


def from_column_stochastic(T_col: Tensor) -> Tensor:
    """Convert a column-stochastic ``T_col[j, i] = P(noisy=j | clean=i)`` (VRNL paper, cleanlab)
    to our row-stochastic ``T[i, j] = P(noisy=j | clean=i)``. It is the transpose."""
    T_col = torch.as_tensor(T_col)
    if T_col.dim() != 2 or T_col.shape[0] != T_col.shape[1]:
        raise ValueError(f"transition matrix must be square C x C, got shape {tuple(T_col.shape)}")
    return T_col.transpose(0, 1).contiguous()


def _read_text_matrix(path: Path) -> Tensor:
    rows: list[list[float]] = []
    for lineno, line in enumerate(read_text(path, "transition matrix file").splitlines(), 1):
        line = line.split("#", 1)[0].strip().strip(",")
        if not line:
            continue
        try:
            rows.append([float(v) for v in re.split(r"[,\s]+", line)])
        except ValueError as err:
            raise InputError(f"{path}: line {lineno} is not a row of numbers: {err}") from None
    if not rows:
        raise InputError(f"{path}: no transition matrix rows found")
    if len({len(r) for r in rows}) != 1:
        raise InputError(f"{path}: rows have different lengths {[len(r) for r in rows]}")
    return torch.tensor(rows, dtype=torch.float64)


def _as_matrix(path: Path, obj: object) -> Tensor:
    """``obj`` (what a T file held) as a tensor of numbers; :class:`InputError` naming the file
    for strings, objects and anything else that is not a numeric array."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise InputError(
                f"{path} holds an array of dtype {obj.dtype}; a transition matrix is a C x C "
                "array of numbers"
            )
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, Tensor):
        return obj
    if isinstance(obj, (list, tuple)):
        try:
            return torch.as_tensor(obj, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise InputError(
        f"{path} holds a {type(obj).__name__}, not a C x C matrix of numbers; save T as a plain "
        "tensor (torch.save(T, path)), .npy or .csv"
    )


def load_transition(path: str | Path, num_classes: int) -> Tensor:
    """Load a row-stochastic transition matrix (``T[i, j] = P(noisy=j | clean=i)``) from a file.

    Supports ``.pt``/``.pth`` (a tensor, or a dict with key ``"transition"``), ``.npy``, and text
    ``.csv``/``.txt`` (comma or whitespace separated, ``#`` comments). A file written in the
    column-stochastic convention must be converted with :func:`from_column_stochastic` first.
    Validates with :func:`check_transition`; a missing file raises ``FileNotFoundError``.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"transition matrix file not found: {path}")
    suffix = path.suffix.lower()
    if suffix in (".pt", ".pth"):
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch.load on arbitrary bytes raises about anything
            raise InputError(
                f"{path} cannot be read as a transition matrix file (truncated, not a torch "
                "file, or holding Python objects, which are never loaded): "
                f"{load_error_summary(err)}. Save T as a plain tensor, .npy or .csv."
            ) from None
        if isinstance(obj, dict):
            if "transition" not in obj:
                raise InputError(f"{path}: dict has no 'transition' key (keys: {list(obj)})")
            obj = obj["transition"]
        T = _as_matrix(path, obj)
    elif suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise InputError(
                f"{path} cannot be read as a numeric .npy transition matrix: {err}"
            ) from None
        T = _as_matrix(path, array)
    elif suffix in (".csv", ".txt"):
        T = _read_text_matrix(path)
    else:
        raise InputError(
            f"{path}: unsupported transition file type {suffix!r} (use .pt, .pth, .npy, .csv, .txt)"
        )
    try:
        return check_transition(T.float(), num_classes)
    except ValueError as err:
        raise InputError(f"{path}: {err}") from None


def save_transition(T: Tensor, path: str | Path) -> None:
    """Save a row-stochastic transition matrix (``T[i, j] = P(noisy=j | clean=i)``).

    The format follows the suffix: ``.pt``/``.pth`` (the tensor), ``.csv`` (comma separated) or
    ``.txt`` (whitespace separated), ``.npy``. Readable back with :func:`load_transition`.
    """
    T = check_transition(T).detach().cpu().float()
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".pt", ".pth", ".csv", ".txt", ".npy"):
        raise InputError(
            f"{path}: unsupported transition file type {suffix!r} (use .pt, .pth, .npy, .csv, .txt)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix in (".pt", ".pth"):
        torch.save(T.clone(), path)
    elif suffix == ".npy":
        np.save(path, T.numpy())
    else:
        sep = "," if suffix == ".csv" else " "
        # repr of the float64 value round-trips the float32 entry exactly
        lines = [sep.join(repr(float(v)) for v in row) for row in T.tolist()]
        path.write_text("\n".join(lines) + "\n")


def revise_transition(T_hat: Tensor, delta: Tensor) -> Tensor:
    """``rownorm(max(T̂ + ΔT, 0))``: the revised, row-stochastic transition matrix (a row
    clipped to all zeros falls back to uniform); also per sample, for ``T̂`` of shape
    ``(n, C, C)``."""
    revised = (T_hat + delta).clamp_min(0.0)
    sums = revised.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(revised, 1.0 / revised.shape[-1])
    return torch.where(sums > 0, revised / sums.clamp_min(1e-12), uniform)
