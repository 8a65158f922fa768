"""CIFAR-10 and CIFAR-100 (Krizhevsky 2009, "Learning Multiple Layers of Features from Tiny
Images") from torchvision's on-disk layout, read into memory as uint8 tensors."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from noisylabels.data.loaded import LoadedData
from noisylabels.data.memory import missing_files_message
from noisylabels.data.module import NoisyDataModule
from noisylabels.errors import InputError, MissingFileError
from noisylabels.noise import superclass_flips

CIFAR10_FLIPS: dict[int, int] = {9: 1, 2: 0, 4: 7, 3: 5, 5: 3}
"""Semantic flips of CIFAR-10 (Patrini et al. 2017): truck -> automobile, bird -> airplane,
deer -> horse, cat <-> dog."""

# CIFAR-100 fine -> coarse (super-class) label table, fine classes in the dataset's
# (alphabetical) order: 0 apple -> 4 fruit_and_vegetables, 1 aquarium_fish -> 1 fish, ...
CIFAR100_COARSE: tuple[int, ...] = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3,
    3, 14, 9, 18, 7, 11, 3, 9, 7, 11,
    6, 11, 5, 10, 7, 6, 13, 15, 3, 15,
    0, 11, 1, 10, 12, 14, 16, 9, 11, 5,
    5, 19, 8, 8, 15, 13, 14, 17, 18, 10,
    16, 4, 17, 4, 2, 0, 17, 4, 18, 17,
    10, 3, 2, 12, 12, 16, 12, 1, 9, 19,
    2, 10, 0, 1, 16, 12, 9, 13, 15, 13,
    16, 19, 2, 4, 6, 19, 5, 5, 8, 19,
    18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
)  # fmt: skip

_PIXELS = 3 * 32 * 32
_FIX = "Delete the folder and download CIFAR again (--data.download true)."


class _Refused(Exception):
    """What a CIFAR batch file holds that the official batches never do (nothing was built)."""


class _Uint8Dtype:
    """The ``numpy.dtype('u1')`` of an array being unpickled; its state is checked."""

    def __setstate__(self, state: Any) -> None:
        plain = (
            isinstance(state, tuple)
            and 7 <= len(state) <= 9
            and isinstance(state[0], int)
            and state[1] in ("|", "<", ">", "=", b"|", b"<", b">", b"=")
            and all(item is None for item in state[2:5])  # no sub-array, names or fields
            and all(item is None or isinstance(item, int) for item in state[5:])
        )
        if not plain:
            raise _Refused(f"a uint8 dtype with the state {_brief(state)}")


class _PendingArray:
    """A uint8 array being unpickled: built by :meth:`__setstate__` from checked raw bytes."""

    array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 5 and isinstance(state[0], int):
            state = state[1:]  # (version, shape, dtype, is_fortran, raw)
        if not (isinstance(state, tuple) and len(state) == 4):
            raise _Refused(f"an array with the state {_brief(state)}")
        shape, dtype, fortran, raw = state
        if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)):
            raise _Refused(f"an array of shape {_brief(shape)}")
        if not isinstance(dtype, _Uint8Dtype):
            raise _Refused(f"an array of dtype {_brief(dtype)} (CIFAR pixels are uint8)")
        if isinstance(raw, str):  # a Python 2 string, read as latin-1
            try:
                raw = raw.encode("latin1")
            except UnicodeEncodeError:
                raise _Refused("an array whose data is text, not bytes") from None
        if not isinstance(raw, bytes) or len(raw) != int(np.prod(shape, dtype=np.int64)):
            raise _Refused(f"an array of shape {shape} with {_brief(raw)} as its data")
        order = "F" if fortran else "C"
        self.array = np.frombuffer(raw, dtype=np.uint8).reshape(shape, order=order)


class _Global:
    """A global an official batch refers to, as the unpickler sees it: a call to the stand-in
    function, no attributes and no state (so a file cannot change it for later reads)."""

    __slots__ = ("name", "function")

    def __init__(self, name: str, function: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "function", function)

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)

    def __setattr__(self, key: str, value: Any) -> None:
        raise _Refused(f"an attribute set on {self.name}")

    def __setstate__(self, state: Any) -> None:
        raise _Refused(f"a state given to {self.name}")


def _ndarray(*args: Any) -> Any:
    raise _Refused("numpy.ndarray called directly")


_NDARRAY = _Global("numpy.ndarray", _ndarray)


def _reconstruct(cls: Any, shape: Any, typecode: Any) -> _PendingArray:
    """numpy's ``_reconstruct(ndarray, (0,), b'b')``: an empty array that BUILD then fills."""
    if cls is not _NDARRAY:
        raise _Refused(f"numpy's array reconstructor called on {_brief(cls)}")
    return _PendingArray()


def _dtype(spec: Any, align: Any = False, copy: Any = False) -> _Uint8Dtype:
    if spec not in ("u1", b"u1"):
        raise _Refused(f"a numpy dtype {_brief(spec)} (CIFAR pixels are uint8)")
    return _Uint8Dtype()


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    """``_codecs.encode(text, 'latin1')``: how protocol 2 writes ``bytes`` from Python 3."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise _Refused(f"_codecs.encode with the encoding {_brief(encoding)}")
    return text.encode("latin1")


# Every global an official CIFAR batch refers to (a dict of str keys, uint8 arrays, lists of
# ints and strings, pickled by Python 2 with protocol 2), under numpy 1's and 2's module names,
# and ``_codecs.encode``, which protocol 2 uses for ``bytes`` written by Python 3.
_GLOBALS: dict[tuple[str, str], _Global] = {
    ("numpy.core.multiarray", "_reconstruct"): _Global("numpy's _reconstruct", _reconstruct),
    ("numpy._core.multiarray", "_reconstruct"): _Global("numpy's _reconstruct", _reconstruct),
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Global("numpy.dtype", _dtype),
    ("_codecs", "encode"): _Global("_codecs.encode", _encode),
}


def _brief(value: Any) -> str:
    text = repr(value) if isinstance(value, (str, bytes, int, tuple, type(None))) else ""
    return text if text and len(text) <= 40 else type(value).__name__


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles what the official CIFAR batches hold and nothing else: any other global (a
    class or function, the way a pickle runs code) is refused before it is looked up, and the
    numpy arrays are built here from their checked shape, dtype and bytes, never by numpy's own
    unpickling."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _GLOBALS[(module, name)]
        except KeyError:
            raise _Refused(f"the Python global {module}.{name}") from None

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused(f"a persistent reference {_brief(pid)}")


def _plain(value: Any, key: str) -> Any:
    """A value of a batch as plain data: an array, a list of ints or strings, a string, an int."""
    if isinstance(value, _PendingArray):
        if value.array is None:
            raise _Refused(f"an array without data under {key!r}")
        return value.array
    if isinstance(value, (str, bytes)) or type(value) is int:
        return value
    if isinstance(value, list) and all(
        type(item) is int or isinstance(item, (str, bytes)) for item in value
    ):
        return value
    kinds = sorted({type(item).__name__ for item in value}) if isinstance(value, list) else None
    held = f"a list of {', '.join(kinds)}" if kinds else f"a {type(value).__name__}"
    raise _Refused(f"{held} under {key!r}")


def _unpickle_batch(fh: Any) -> Any:
    """The content of a CIFAR batch file, with bytes keys read as str; raises :class:`_Refused`
    for anything an official batch does not hold."""
    entry = _CifarUnpickler(fh, encoding="latin1").load()
    if not isinstance(entry, dict):
        if isinstance(entry, (_PendingArray, _Uint8Dtype, _Global)):
            raise _Refused("a bare numpy object instead of a dict")
        return entry  # not a dict: named by the caller
    plain = {}
    for key, value in entry.items():
        if not isinstance(key, (str, bytes)):
            raise _Refused(f"a dict key {_brief(key)}")
        name = key.decode("latin1") if isinstance(key, bytes) else key
        plain[name] = _plain(value, name)
    return plain


def _read_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as fh:
            entry = _unpickle_batch(fh)
    except _Refused as err:
        raise InputError(
            f"{path} is not a CIFAR batch: it holds {err}, which the official batches never "
            f"do, and was refused without being loaded (unpickling it could run code). {_FIX}"
        ) from None
    except Exception as err:  # truncated or not a pickle: any unpickling error means the same
        raise InputError(
            f"{path} is truncated or not a CIFAR batch file ({type(err).__name__}: {err}). {_FIX}"
        ) from None
    if not isinstance(entry, dict) or "data" not in entry or label_key not in entry:
        keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise InputError(
            f"{path} is not a CIFAR batch: expected a dict with 'data' and {label_key!r}, "
            f"found {keys}. {_FIX}"
        )
    try:
        data = np.asarray(entry["data"], dtype=np.uint8)
        labels = np.asarray(entry[label_key], dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as err:
        raise InputError(
            f"{path} is not a CIFAR batch: its 'data' or {label_key!r} are not numbers "
            f"({err}). {_FIX}"
        ) from None
    if data.size != len(labels) * _PIXELS:
        raise InputError(
            f"{path} holds {data.size} pixel values for {len(labels)} labels; a CIFAR batch "
            f"has {_PIXELS} per image. {_FIX}"
        )
    return data.reshape(-1, 3, 32, 32), labels


def read_cifar_batches(files: list[Path], label_key: str) -> tuple[Tensor, Tensor]:
    """Read CIFAR python batches (``data``: N x 3072 uint8, labels under ``label_key``).

    The batches are Python pickles by format, and unpickling can run code; unlike
    torchvision's reader this one admits only what the official archives
    (``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz``) hold: a dict of string keys,
    uint8 numpy arrays, lists of ints and strings. A file holding anything else (any other
    class or function), a truncated file or one that is not a CIFAR batch raises
    :class:`~noisylabels.errors.InputError` naming it; nothing in it is executed.
    """
    parts = [_read_batch(path, label_key) for path in files]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return torch.from_numpy(images), torch.from_numpy(labels)


class CIFAR10DataModule(NoisyDataModule):
    """CIFAR-10 (Krizhevsky 2009) in torchvision's layout ``DATA_DIR/cifar-10-batches-py/``."""

    name: ClassVar[str] = "cifar10"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (3, 32, 32)
    mean: ClassVar[tuple[float, ...]] = (0.4914, 0.4822, 0.4465)
    std: ClassVar[tuple[float, ...]] = (0.2023, 0.1994, 0.2010)
    default_augment: ClassVar[bool] = True
    semantic_flips: ClassVar[dict[int, int] | None] = CIFAR10_FLIPS
    folder: ClassVar[str] = "cifar-10-batches-py"
    train_files: ClassVar[tuple[str, ...]] = tuple(f"data_batch_{i}" for i in range(1, 6))
    test_files: ClassVar[tuple[str, ...]] = ("test_batch",)
    label_key: ClassVar[str] = "labels"

    def fetch(self) -> None:
        from torchvision.datasets import CIFAR10

        CIFAR10(str(self.data_dir), train=True, download=True)

    def load(self) -> LoadedData:
        root = self.data_dir / self.folder
        names = list(self.train_files) + list(self.test_files)
        if not all((root / n).is_file() for n in names):
            raise MissingFileError(missing_files_message(type(self).__name__[:-10], root, names))
        train_x, train_y = read_cifar_batches([root / n for n in self.train_files], self.label_key)
        test_x, test_y = read_cifar_batches([root / n for n in self.test_files], self.label_key)
        return LoadedData(train_x, train_y, test_x, test_y)


class CIFAR100DataModule(CIFAR10DataModule):
    """CIFAR-100 (Krizhevsky 2009) in torchvision's layout ``DATA_DIR/cifar-100-python/``.

    Semantic noise flips each fine class to the next fine class of its super-class
    (:data:`CIFAR100_COARSE`, Patrini et al. 2017)."""

    name: ClassVar[str] = "cifar100"
    num_classes: ClassVar[int] = 100
    mean: ClassVar[tuple[float, ...]] = (0.5071, 0.4865, 0.4409)
    std: ClassVar[tuple[float, ...]] = (0.2673, 0.2564, 0.2762)
    semantic_flips: ClassVar[dict[int, int] | None] = superclass_flips(CIFAR100_COARSE)
    folder: ClassVar[str] = "cifar-100-python"
    train_files: ClassVar[tuple[str, ...]] = ("train",)
    test_files: ClassVar[tuple[str, ...]] = ("test",)
    label_key: ClassVar[str] = "fine_labels"

    def fetch(self) -> None:
        from torchvision.datasets import CIFAR100

        CIFAR100(str(self.data_dir), train=True, download=True)
