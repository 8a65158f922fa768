"""ImageNet ResNet-50 (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016),
built from torchvision, with offline-only loading of pretrained weights."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn
from torchvision.models import ResNet50_Weights
from torchvision.models import resnet50 as tv_resnet50

from noisylabels.errors import InputError, MissingFileError, load_error_summary


def _cached_imagenet_weights_path() -> Path:
    """Expected location of the IMAGENET1K_V1 checkpoint in the local torch hub cache."""
    url = ResNet50_Weights.IMAGENET1K_V1.url
    filename = os.path.basename(url.split("?")[0])
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


def _load_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The state dict of the weights file ``path``, loaded weights-only: a file holding other
    Python objects (whose unpickling could run code) or a damaged one is an :class:`InputError`
    naming it."""
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch.load on arbitrary bytes raises about anything
        raise InputError(
            f"{path} cannot be read as a ResNet-50 state dict (truncated, not a torch file, or "
            f"holding Python objects, which are never loaded): {load_error_summary(err)}"
        ) from None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise InputError(f"{path} does not contain a state dict")
    return obj


def resnet50(
    num_classes: int,
    pretrained: bool = False,
    weights_path: str | None = None,
) -> nn.Module:
    """torchvision ResNet-50 with a fresh ``num_classes``-way linear head.

    When ``pretrained`` is true the 1000-class ImageNet weights are loaded first, either from
    ``weights_path`` or from torchvision's IMAGENET1K_V1 file in the local torch hub cache.
    Nothing is ever downloaded; if no weights are found a ``FileNotFoundError`` explains where
    to put the file.
    """
    model = tv_resnet50(weights=None)
    if pretrained:
        if weights_path is not None:
            if not Path(weights_path).is_file():
                raise MissingFileError(
                    f"ResNet-50 weights file not found: {weights_path!r} "
                    "(--model.network.weights_path)."
                )
            state = _load_state_dict(weights_path)
        else:
            cached = _cached_imagenet_weights_path()
            if not cached.is_file():
                raise MissingFileError(
                    "Pretrained ResNet-50 ImageNet weights are not available offline. "
                    f"Download {ResNet50_Weights.IMAGENET1K_V1.url} and place it at "
                    f"{cached} (file name {cached.name!r} inside torch.hub.get_dir()/checkpoints), "
                    "or pass --model.network.weights_path /path/to/resnet50_state_dict.pth, "
                    "or train from scratch with --model.network.pretrained false."
                )
            state = _load_state_dict(cached)
        model.load_state_dict(state)
    model.fc = nn.Linear(model.fc.in_features, num_classes)
    return model
