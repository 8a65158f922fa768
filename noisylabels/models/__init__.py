"""Backbone networks (plain ``torch.nn`` modules) and a name-based registry."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from torch import nn

from noisylabels.errors import InputError
from noisylabels.models.lenet import LeNet5
from noisylabels.models.mlp import MLP
from noisylabels.models.resnet_cifar import CifarResNet, resnet18, resnet32, resnet34
from noisylabels.models.resnet_imagenet import resnet50
from noisylabels.models.vgg import vgg19_bn

BackboneFactory = Callable[..., nn.Module]


def _lenet5(num_classes: int, input_shape: tuple[int, int, int], **kwargs: Any) -> nn.Module:
    net = LeNet5(num_classes=num_classes, in_channels=input_shape[0], **kwargs)
    if tuple(input_shape[1:]) != (28, 28):  # its first linear layer is sized for 28x28
        raise InputError(
            f"lenet5 is LeNet-5 for 28x28 images (MNIST), and this dataset's are "
            f"{'x'.join(map(str, input_shape))}; choose a backbone for them "
            f"(--model.network.backbone: {', '.join(sorted(BACKBONES))})"
        )
    return net


def _mlp(num_classes: int, input_shape: tuple[int, int, int], **kwargs: Any) -> nn.Module:
    return MLP(input_dim=math.prod(input_shape), num_classes=num_classes, **kwargs)


def _conv(factory: Callable[..., nn.Module]) -> BackboneFactory:
    def build(num_classes: int, input_shape: tuple[int, int, int], **kwargs: Any) -> nn.Module:
        return factory(num_classes=num_classes, in_channels=input_shape[0], **kwargs)

    build.__doc__ = factory.__doc__
    return build


def _resnet50(num_classes: int, input_shape: tuple[int, int, int], **kwargs: Any) -> nn.Module:
    if input_shape[0] != 3:
        raise InputError(f"resnet50 expects 3 input channels, got input_shape={input_shape}")
    return resnet50(num_classes=num_classes, **kwargs)


def _vgg19_bn(num_classes: int, input_shape: tuple[int, int, int], **kwargs: Any) -> nn.Module:
    if input_shape[0] != 3 or min(input_shape[1:]) < 32:
        raise InputError(
            f"vgg19_bn expects 3 input channels and images of at least 32 px (five 2x2 "
            f"max-pools), got input_shape={input_shape}"
        )
    return vgg19_bn(num_classes=num_classes, **kwargs)


BACKBONES: dict[str, BackboneFactory] = {
    "lenet5": _lenet5,
    "mlp": _mlp,
    "resnet18": _conv(resnet18),
    "resnet32": _conv(resnet32),
    "resnet34": _conv(resnet34),
    "resnet50": _resnet50,
    "vgg19_bn": _vgg19_bn,
}
"""Registry: name -> ``factory(num_classes, input_shape, **kwargs)``."""


def build_backbone(
    name: str, num_classes: int, input_shape: tuple[int, int, int], **kwargs: Any
) -> nn.Module:
    """Build the backbone registered as ``name`` for ``input_shape = (C, H, W)``.

    Extra keyword arguments are forwarded to the architecture (e.g. ``hidden``/``dropout`` for
    ``mlp``, ``pretrained``/``weights_path`` for ``resnet50``).
    """
    try:
        factory = BACKBONES[name]
    except KeyError:
        raise InputError(
            f"Unknown backbone {name!r} (--model.network.backbone); "
            f"available: {', '.join(sorted(BACKBONES))}"
        ) from None
    try:
        return factory(num_classes, tuple(input_shape), **kwargs)
    except TypeError as err:
        if not kwargs or "unexpected keyword argument" not in str(err):
            raise
        raise InputError(
            f"--model.network.backbone_kwargs {kwargs} do not fit backbone {name!r} ({err}); "
            f"give the arguments of {name!r}, or --model.network.backbone_kwargs '{{}}' for "
            "none (a config composed for another backbone leaves its own here)"
        ) from None


__all__ = [
    "BACKBONES",
    "MLP",
    "CifarResNet",
    "LeNet5",
    "build_backbone",
    "resnet18",
    "resnet32",
    "resnet34",
    "resnet50",
    "vgg19_bn",
]
