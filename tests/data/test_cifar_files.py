"""CIFAR batch files: read in every form the official archives and Python 3 write them, and a
file holding anything else (a pickled payload above all) refused before anything in it is built."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from noisylabels.data import CIFAR10DataModule, CIFAR100DataModule
from noisylabels.errors import InputError

from conftest import make_cifar


class _RunsCode:
    """A pickled object whose loading would run a command (the payload of a hostile file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# ------------------------------------------------- the official files' format, byte for byte
def _py2_str(text: str | bytes) -> bytes:
    """A Python 2 ``str`` (SHORT_BINSTRING / BINSTRING), which Python 3 reads as latin-1."""
    raw = text.encode("latin1") if isinstance(text, str) else text
    if len(raw) < 256:
        return b"U" + bytes([len(raw)]) + raw
    return b"T" + struct.pack("<i", len(raw)) + raw


def _py2_int(n: int) -> bytes:
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if 0 <= n < 65536:
        return b"M" + struct.pack("<H", n)
    return b"J" + struct.pack("<i", n)


def _py2_value(value: Any) -> bytes:
    if isinstance(value, np.ndarray):  # numpy's ndarray.__reduce__ under Python 2
        assert value.dtype == np.uint8
        shape = b"".join(_py2_int(n) for n in value.shape) + {1: b"\x85", 2: b"\x86"}[value.ndim]
        dtype = (
            b"cnumpy\ndtype\n" + _py2_str("u1") + _py2_int(0) + _py2_int(1) + b"\x87R"
            + b"(" + _py2_int(3) + _py2_str("|") + b"NNN" + struct.pack("<ci", b"J", -1)
            + struct.pack("<ci", b"J", -1) + _py2_int(0) + b"tb"
        )  # fmt: skip
        return (
            b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n"
            + _py2_int(0) + b"\x85" + _py2_str("b") + b"\x87R"
            + b"(" + _py2_int(1) + shape + dtype + b"\x89" + _py2_str(value.tobytes()) + b"tb"
        )  # fmt: skip
    if isinstance(value, list):
        return b"](" + b"".join(_py2_value(v) for v in value) + b"e"
    if isinstance(value, int):
        return _py2_int(value)
    return _py2_str(value)


def python2_pickle(entry: dict[str, Any]) -> bytes:
    """``entry`` as the official CIFAR batches are: ``cPickle.dump(entry, f, 2)`` under Python 2
    with numpy, a dict of ``str`` keys, uint8 arrays, lists of ints and strings."""
    items = b"".join(_py2_str(k) + _py2_value(v) for k, v in entry.items())
    return b"\x80\x02}(" + items + b"u."


def _rewrite(root: Path, write) -> None:
    """Rewrite every batch of the tiny CIFAR-10 under ``root`` with ``write(entry) -> bytes``."""
    folder = root / "cifar-10-batches-py"
    for path in sorted(folder.iterdir()):
        with open(path, "rb") as fh:
            entry = pickle.load(fh)
        path.write_bytes(write({"batch_label": f"batch {path.name}", **entry}))


FORMATS = {
    "python2-protocol2": python2_pickle,  # the official archives
    "protocol2-bytes-keys": lambda e: pickle.dumps(
        {k.encode(): v for k, v in e.items()}, protocol=2
    ),
    "protocol4-str-keys": lambda e: pickle.dumps(e, protocol=4),
}


def test_the_python2_writer_is_what_the_standard_unpickler_reads() -> None:
    """The hand-written Python 2 pickle is valid: stdlib unpickling gives the entry back."""
    entry = {"batch_label": "b", "data": np.arange(12, dtype=np.uint8).reshape(2, 6),
             "labels": [3, 300, 70000], "filenames": ["a.png", "b.png"]}  # fmt: skip
    loaded = pickle.loads(python2_pickle(entry), encoding="latin1")
    assert sorted(loaded) == sorted(entry)
    assert loaded["data"].dtype == np.uint8 and (loaded["data"] == entry["data"]).all()
    assert loaded["labels"] == entry["labels"] and loaded["filenames"] == entry["filenames"]


@pytest.mark.parametrize("form", FORMATS)
def test_cifar_batches_are_read_in_every_form(tmp_path: Path, form: str) -> None:
    reference = CIFAR10DataModule(data_dir=str(make_cifar(tmp_path / "ref")))
    reference.setup("fit")
    root = make_cifar(tmp_path / "rewritten")
    _rewrite(root, FORMATS[form])
    dm = CIFAR10DataModule(data_dir=str(root))
    dm.setup("fit")
    assert dm.data.train_images.dtype == reference.data.train_images.dtype
    assert (dm.data.train_images == reference.data.train_images).all()
    assert (dm.data.test_images == reference.data.test_images).all()
    assert (dm.noisy_labels == reference.noisy_labels).all()


def test_cifar100_in_the_official_format(tmp_path: Path) -> None:
    root = make_cifar(tmp_path, 100, n_train=100, n_test=20)
    for path in (root / "cifar-100-python").iterdir():
        with open(path, "rb") as fh:
            entry = pickle.load(fh)
        path.write_bytes(python2_pickle(entry))
    data = CIFAR100DataModule(data_dir=str(root)).load()  # read, not split (1 image a class)
    assert data.train_images.shape == (100, 3, 32, 32)


def _payloads(marker: Path) -> dict[str, Any]:
    data = np.zeros((2, 3072), dtype=np.uint8)
    return {
        "value": {"data": data, "labels": [1, 2], "extra": _RunsCode(marker)},
        "in-a-list": {"data": data, "labels": [1, _RunsCode(marker)]},
        "top-level": _RunsCode(marker),
        "object-array": {"data": np.array([_RunsCode(marker)], dtype=object), "labels": [1]},
        "bytes-keys-protocol-2": {b"data": data, b"labels": [1, 2], b"x": _RunsCode(marker)},
    }


@pytest.mark.parametrize("where", list(_payloads(Path("m"))))
def test_a_batch_that_would_run_code_is_refused(tmp_path: Path, where: str) -> None:
    marker = tmp_path / "payload_ran"
    root = make_cifar(tmp_path / "data")
    path = root / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(pickle.dumps(_payloads(marker)[where], protocol=2))
    with pytest.raises(InputError, match="is not a CIFAR batch: it holds") as err:
        CIFAR10DataModule(data_dir=str(root)).setup("fit")
    assert str(path) in str(err.value)
    assert not marker.exists(), "unpickling the batch ran its payload"
    assert "posix.system" in str(err.value) or "dtype 'O8'" in str(err.value)


@pytest.mark.parametrize(
    ("content", "held"),
    [
        ({"data": np.zeros((1, 3072), dtype=np.float32), "labels": [1]}, "dtype 'f4'"),
        ({"data": np.zeros((1, 3072), dtype=np.uint8), "labels": {1, 2}}, "a set under 'labels'"),
        ({"data": np.zeros((1, 3072), dtype=np.uint8), "labels": [1.5]}, "list of float"),
        ({"data": np.zeros((1, 3072), dtype=np.uint8), "labels": np.int64(1)}, "scalar"),
    ],
    ids=["float-pixels", "a-set", "float-labels", "numpy-scalar"],
)
def test_a_batch_holding_more_than_the_official_ones_is_named(
    tmp_path: Path, content: Any, held: str
) -> None:
    root = make_cifar(tmp_path)
    path = root / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(pickle.dumps(content, protocol=4))
    with pytest.raises(InputError, match="test_batch is not a CIFAR batch: it holds") as err:
        CIFAR10DataModule(data_dir=str(root)).setup("fit")
    assert held in str(err.value)
