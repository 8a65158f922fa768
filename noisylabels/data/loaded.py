"""What a dataset's ``load`` hands to the shared data module."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor


@dataclass
class LoadedData:
    """What a dataset subclass hands to the base module.

    ``train_images``/``test_images`` are whatever the subclass's datasets index (uint8 NCHW
    tensors for in-memory data). ``train_noisy`` holds the real noisy labels of a dataset that
    ships them (read by the ``real`` label source; ``train_clean`` may then hold ``-1`` for
    unknown clean labels). ``val_images`` / ``val_labels`` give a separate clean validation set;
    then the whole training set is trained on and no noisy validation split is held out.
    """

    train_images: Any
    train_clean: Tensor
    test_images: Any
    test_labels: Tensor
    train_noisy: Tensor | None = None
    val_images: Any = None
    val_labels: Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)
