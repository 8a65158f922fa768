"""Reading noisy training labels from a file, safely and with messages that name the file.

Supported: ``.pt``/``.pth`` (a tensor, or a dict of tensors or numpy arrays such as CIFAR-10N's
``CIFAR-10_human.pt`` with ``aggre_label``, ``worse_label``, ``random_label1..3`` or CIFAR-100N's
``CIFAR-100_human.pt`` with ``noisy_label``; Wei et al. 2022, "Learning with Noisy Labels
Revisited: A Study Using Real-World Human Annotations"), ``.npy`` and text ``.csv``/``.txt`` (one
label per line, or several separated by commas or whitespace). Nothing in a label file is ever
executed: ``.pt`` files load with ``torch.load(weights_only=True)`` (plus exactly the numpy
array and numeric dtype reconstructors that a dict of numpy arrays needs) and ``.npy`` files with
``allow_pickle=False``.
"""

from __future__ import annotations

import contextlib
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from noisylabels.errors import InputError, MissingFileError, load_error_summary

from .text_files import read_text

__all__ = ["LABEL_FILE_SUFFIXES", "DEFAULT_LABEL_KEY", "read_label_file"]

LABEL_FILE_SUFFIXES = (".pt", ".pth", ".npy", ".csv", ".txt")
DEFAULT_LABEL_KEY = "noisy_labels"
"""Key read from a dict-valued ``.pt`` file when none is given (a run's saved ``noise.pt``)."""

_KEY_OPTION = "--data.noise_file_key"


def _numpy_safe_globals() -> list[Any]:
    """What unpickling plain numeric numpy arrays needs: the ndarray reconstructor (under its
    numpy 1 and numpy 2 module names), ``ndarray``, ``dtype`` and the numeric dtype classes.
    None of them runs code; object and string dtypes stay refused."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    allowed: list[Any] = [np.ndarray, np.dtype, _reconstruct]
    for name in ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct"):
        allowed.append((_reconstruct, name))
    allowed += [type(np.dtype(code)) for code in "?bBhHiIlLqQefd"]
    return allowed


def load_pt(path: Path) -> Any:
    scope = getattr(torch.serialization, "safe_globals", None)
    context = scope(_numpy_safe_globals()) if scope else contextlib.nullcontext()
    try:
        with context:
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise InputError(
            f"{path} is not a plain label file: it holds Python objects that loading would have "
            "to execute (or arrays of objects or strings), so it is refused. Save the labels as "
            f"an integer tensor, a dict of integer tensors or arrays, .npy or .csv. "
            f"{load_error_summary(err)}"
        ) from None
    except Exception as err:  # torch.load on arbitrary bytes raises about anything
        raise InputError(
            f"{path} cannot be read as a torch file: {load_error_summary(err)}"
        ) from None


def _pick_key(path: Path, obj: Any, key: str | None) -> Any:
    if not isinstance(obj, dict):
        if key is not None:
            raise InputError(
                f"{path} holds a single array, not a dict of arrays; drop {_KEY_OPTION} {key}"
            )
        return obj
    keys = sorted(str(k) for k in obj)
    name = DEFAULT_LABEL_KEY if key is None else key
    if name not in obj:
        said = f"has no key {key!r}" if key is not None else "is a dict of arrays"
        raise InputError(
            f"{path} {said}; it holds keys {keys}. Choose one with {_KEY_OPTION} KEY "
            f"(e.g. {_KEY_OPTION} {keys[0] if keys else 'worse_label'})"
        )
    return obj[name]


def _read_text(path: Path) -> Tensor:
    values: list[int] = []
    for lineno, line in enumerate(read_text(path, "label file").splitlines(), start=1):
        for token in line.replace(",", " ").split():
            try:
                number = float(token)
            except ValueError:
                raise InputError(
                    f"{path}, line {lineno}: {token!r} is not a number; the file must hold one "
                    "integer class label per training sample (no header)"
                ) from None
            if not number.is_integer():
                raise InputError(f"{path}, line {lineno}: {token!r} is not an integer class label")
            values.append(int(number))
    return torch.tensor(values, dtype=torch.long)


def _as_labels(path: Path, obj: Any) -> Tensor:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise InputError(f"{path} holds an array of dtype {obj.dtype}; labels must be integers")
        obj = torch.from_numpy(np.ascontiguousarray(obj))
    if not isinstance(obj, Tensor):
        try:
            obj = torch.as_tensor(obj)
        except (TypeError, ValueError, RuntimeError):
            raise InputError(
                f"{path} holds a {type(obj).__name__}, not an array of integer labels"
            ) from None
    if obj.dtype == torch.bool or obj.is_complex():
        raise InputError(f"{path} holds {obj.dtype} values; labels must be integers")
    if obj.dim() > 1 and obj.numel() == obj.shape[0]:
        obj = obj.reshape(-1)  # a column vector
    if obj.dim() != 1:
        raise InputError(
            f"{path} holds an array of shape {tuple(obj.shape)}; expected one label per "
            "training sample (a 1-D array)"
        )
    if obj.is_floating_point():
        bad = ~torch.isfinite(obj) | (obj != obj.round())
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            raise InputError(
                f"{path}: label {obj[i].item()} at position {i} is not an integer class label"
            )
    return obj.long()


def _check_order(path: Path, obj: Any, clean: Tensor | None) -> None:
    """A CIFAR-N style file also ships the clean labels (``clean_label``): they must be the
    training set's, or the file's labels are not in training-set order."""
    if clean is None or not isinstance(obj, dict) or "clean_label" not in obj:
        return
    shipped = _as_labels(path, obj["clean_label"])
    known = clean >= 0
    if len(shipped) != len(clean):
        return  # the length check of the selected labels reports this
    mismatch = known & (shipped != clean)
    differ = int(mismatch.sum())
    if differ:
        first = int(torch.nonzero(mismatch)[0])
        raise InputError(
            f"{path}: its clean_label entry disagrees with the training set's labels at "
            f"{differ} of {int(known.sum())} positions, the first at index {first} (the file "
            f"says {int(shipped[first])}, the training set {int(clean[first])}), so its labels "
            "are not in this training set's order (or belong to another dataset); use the file "
            "made for this dataset"
        )


def read_label_file(
    path: str | Path,
    num_samples: int,
    num_classes: int,
    key: str | None = None,
    clean: Tensor | None = None,
) -> Tensor:
    """Read ``num_samples`` integer labels in ``[0, num_classes - 1]`` from ``path``.

    ``key`` selects an entry of a dict-valued ``.pt`` file (default ``noisy_labels``, what a
    run's ``noise.pt`` holds). The labels must be in training-set order; where the file also
    holds the clean labels (CIFAR-N's ``clean_label``) and ``clean`` is given, the two must
    agree. Raises
    :class:`~noisylabels.errors.MissingFileError` for a missing file and
    :class:`~noisylabels.errors.InputError`, naming the file, for: an unknown suffix, a missing
    key (listing the keys present), content that would need code to load, non-numeric or
    non-integer values (naming the line of a text file), a wrong number of labels, or labels
    outside the class range. Returns a long tensor.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingFileError(f"noise file {path} does not exist; check --data.noise_file")
    suffix = path.suffix.lower()
    if suffix in (".pt", ".pth"):
        obj = load_pt(path)
        labels = _as_labels(path, _pick_key(path, obj, key))
        _check_order(path, obj, clean)
    elif suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except ValueError as err:  # object arrays need pickle, which could run code
            raise InputError(f"{path}: {err}; save the labels as an integer array") from None
        except (EOFError, OSError) as err:  # an empty or truncated file
            raise InputError(
                f"{path} cannot be read as a .npy array ({err or type(err).__name__}): it is "
                "empty, truncated or not a .npy file; save the labels with numpy.save as an "
                "integer array"
            ) from None
        labels = _as_labels(path, _pick_key(path, array, key))
    elif suffix in (".csv", ".txt"):
        if key is not None:
            raise InputError(f"{path} is a text file of labels; drop {_KEY_OPTION} {key}")
        labels = _read_text(path)
    else:
        raise InputError(
            f"{path}: unsupported label file type {suffix!r}; use one of {LABEL_FILE_SUFFIXES}"
        )
    if len(labels) != num_samples:
        raise InputError(f"{path} has {len(labels)} labels; the training set has {num_samples}")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        bad = int(torch.nonzero((labels < 0) | (labels >= num_classes))[0])
        raise InputError(
            f"{path}: labels must lie in [0, {num_classes - 1}] for this dataset's "
            f"{num_classes} classes; label {int(labels[bad])} at position {bad} does not"
        )
    return labels
