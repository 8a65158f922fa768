"""scikit-learn's bundled handwritten digits: a tiny in-memory dataset that needs no download."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from noisylabels.data.loaded import LoadedData
from noisylabels.data.module import NoisyDataModule
from noisylabels.errors import InputError

DIGIT_FLIPS: dict[int, int] = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}
"""Semantic flips of handwritten digits (Patrini et al. 2017): 2->7, 3->8, 5<->6, 7->1."""


class DigitsDataModule(NoisyDataModule):
    """scikit-learn's bundled handwritten digits (8x8 grayscale, 1,797 images, no download;
    the UCI optical recognition of handwritten digits test set, Alpaydin & Kaynak 1998).

    A seeded ``test_fraction`` of the images becomes the clean test set (seed: ``split_seed``);
    the rest is the training set that noise and the train/val split apply to.
    """

    name: ClassVar[str] = "digits"
    num_classes: ClassVar[int] = 10
    input_shape: ClassVar[tuple[int, int, int]] = (1, 8, 8)
    mean: ClassVar[tuple[float, ...]] = (0.3,)
    std: ClassVar[tuple[float, ...]] = (0.38,)
    semantic_flips: ClassVar[dict[int, int] | None] = DIGIT_FLIPS

    def __init__(self, *args, test_fraction: float = 0.2, split_seed: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not 0.0 < test_fraction < 1.0:
            raise InputError(f"test_fraction must be in (0, 1), got {test_fraction}")
        self.test_fraction = test_fraction
        self.split_seed = split_seed

    def load(self) -> LoadedData:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = torch.from_numpy(np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8))
        images = images.unsqueeze(1).contiguous()
        labels = torch.from_numpy(bunch.target.astype(np.int64))
        perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(self.split_seed))
        n_test = int(round(len(labels) * self.test_fraction))
        test, train = perm[:n_test].sort().values, perm[n_test:].sort().values
        return LoadedData(images[train], labels[train], images[test], labels[test])

    def fetch(self) -> None:
        """The digits ship with scikit-learn: nothing to download."""
