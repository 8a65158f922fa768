"""MNIST (LeCun et al. 1998, "Gradient-based learning applied to document recognition") from
torchvision's on-disk layout, read into memory as uint8 tensors."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from noisylabels.data.base import LoadedData, NoisyDataModule
from noisylabels.data.digits import DIGIT_FLIPS
from noisylabels.data.memory import missing_files_message
from noisylabels.errors import InputError, MissingFileError


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
        from torchvision.datasets.mnist import read_image_file, read_label_file

        paths = {k: self.raw_dir / v for k, v in self.files.items()}
        if not all(p.is_file() for p in paths.values()):
            message = missing_files_message("MNIST", self.raw_dir, list(self.files.values()))
            raise MissingFileError(message)
        train_x = read_image_file(str(paths["train_images"])).unsqueeze(1).contiguous()
        test_x = read_image_file(str(paths["test_images"])).unsqueeze(1).contiguous()
        train_y = read_label_file(str(paths["train_labels"])).long()
        test_y = read_label_file(str(paths["test_labels"])).long()
        if len(train_x) != len(train_y) or len(test_x) != len(test_y):
            raise InputError(f"MNIST files in {self.raw_dir} disagree on the number of samples")
        return LoadedData(train_x, train_y, test_x, test_y)
