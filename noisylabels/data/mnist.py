"""MNIST (LeCun et al. 1998, "Gradient-based learning applied to document recognition") from
torchvision's on-disk layout, read into memory as uint8 tensors."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from noisylabels.data.digits import DIGIT_FLIPS
from noisylabels.data.loaded import LoadedData
from noisylabels.data.memory import missing_files_message
from noisylabels.data.module import NoisyDataModule
from noisylabels.errors import InputError, MissingFileError

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049  # IDX: unsigned bytes, 3 and 1 dimensions


def read_idx(path: Path, magic: int) -> Tensor:
    """Read an uncompressed IDX file of unsigned bytes (MNIST's format) as a uint8 tensor.

    The header (magic number, then one big-endian size per dimension) must match ``magic`` and
    the file length must match the sizes; otherwise :class:`~noisylabels.errors.InputError`
    names the file and what is wrong (e.g. a truncated download).
    """
    data = path.read_bytes()
    what = "images" if magic == IMAGES_MAGIC else "labels"
    fix = "Delete it and download MNIST again (--data.download true), or replace the file."
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise InputError(
            f"{path} has {len(data)} bytes, fewer than an MNIST {what} header needs: the file "
            f"is truncated or empty. {fix}"
        )
    found = struct.unpack(">I", data[:4])[0]
    if found != magic:
        raise InputError(
            f"{path} is not an MNIST {what} file (IDX magic number {found}, expected {magic}); "
            f"is it still gzip-compressed, or a file of another kind? {fix}"
        )
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = header + math.prod(dims)
    if len(data) != expected:
        shape = " x ".join(str(d) for d in dims)
        raise InputError(
            f"{path} is truncated or corrupt: its header announces {shape} {what} "
            f"({expected} bytes with the header) but the file has {len(data)} bytes. {fix}"
        )
    return torch.frombuffer(bytearray(data[header:]), dtype=torch.uint8).view(*dims)


class MNISTDataModule(NoisyDataModule):
    """MNIST (LeCun et al. 1998) in torchvision's layout ``DATA_DIR/MNIST/raw/*-ubyte``."""

    name: ClassVar[str] = "mnist"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (1, 28, 28)
    mean: ClassVar[tuple[float, ...]] = (0.1307,)
    std: ClassVar[tuple[float, ...]] = (0.3081,)
    semantic_flips: ClassVar[dict[int, int] | None] = DIGIT_FLIPS
    files: ClassVar[dict[str, str]] = {
        "train_images": "train-images-idx3-ubyte",
        "train_labels": "train-labels-idx1-ubyte",
        "test_images": "t10k-images-idx3-ubyte",
        "test_labels": "t10k-labels-idx1-ubyte",
    }

    @property
    def raw_dir(self) -> Path:
        return self.data_dir / "MNIST" / "raw"

    def fetch(self) -> None:
        from torchvision.datasets import MNIST

        for train in (True, False):
            MNIST(str(self.data_dir), train=train, download=True)

    def load(self) -> LoadedData:
        paths = {k: self.raw_dir / v for k, v in self.files.items()}
        if not all(p.is_file() for p in paths.values()):
            message = missing_files_message("MNIST", self.raw_dir, list(self.files.values()))
            raise MissingFileError(message)
        train_x = read_idx(paths["train_images"], IMAGES_MAGIC).unsqueeze(1).contiguous()
        test_x = read_idx(paths["test_images"], IMAGES_MAGIC).unsqueeze(1).contiguous()
        train_y = read_idx(paths["train_labels"], LABELS_MAGIC).long()
        test_y = read_idx(paths["test_labels"], LABELS_MAGIC).long()
        for x, y, name in ((train_x, train_y, "train"), (test_x, test_y, "t10k")):
            if len(x) != len(y):
                raise InputError(
                    f"MNIST files in {self.raw_dir} disagree: {name}-images has {len(x)} images "
                    f"but {name}-labels has {len(y)} labels"
                )
        return LoadedData(train_x, train_y, test_x, test_y)
