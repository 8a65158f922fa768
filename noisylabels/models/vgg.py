"""VGG-19 with batch normalization (Simonyan & Zisserman, "Very Deep Convolutional Networks for
Large-Scale Image Recognition", ICLR 2015), built from torchvision: the network of ANIMAL-10N's
protocol (Song, Kim & Lee, "SELFIE: Refurbishing Unclean Samples for Robust Deep Learning",
ICML 2019), as the PyTorch code after it trains it (torchvision's layers, from scratch)."""

from __future__ import annotations

from torch import nn
from torchvision.models import vgg19_bn as tv_vgg19_bn


def vgg19_bn(num_classes: int) -> nn.Module:
    """torchvision's VGG-19-BN with a ``num_classes``-way head, randomly initialized.

    Sixteen 3x3 convolutions with batch norm in five max-pooled blocks, the features pooled to
    7x7 (``AdaptiveAvgPool2d``, so any input of at least 32 px fits: a 64 px image reaches it
    as 2x2), then 4096-4096-``num_classes`` fully connected layers with dropout 0.5.
    """
    return tv_vgg19_bn(weights=None, num_classes=num_classes)
