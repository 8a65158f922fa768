"""CIFAR-style residual networks (He et al., "Deep Residual Learning for Image Recognition",
CVPR 2016).

``resnet18``/``resnet34`` use the ImageNet stage widths (64/128/256/512) with a 3x3 stride-1
stem and no max-pool, as is common for 32x32 inputs. ``resnet32`` is the original 3-stage CIFAR
network of Section 4.2 (16/32/64 channels, 6n+2 layers with n=5), here with projection shortcuts
(1x1 conv + BN, option B) where the shape changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity or projection shortcut."""

    expansion: int = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """Generic CIFAR ResNet: 3x3 stride-1 stem, residual stages, global avg pool, linear head.

    Args:
        num_blocks: number of BasicBlocks in each stage.
        widths: channel width of each stage; stages after the first downsample by 2.
        num_classes: number of output logits.
        in_channels: number of input image channels.
    """

    def __init__(
        self,
        num_blocks: Sequence[int],
        widths: Sequence[int],
        num_classes: int = 10,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if len(num_blocks) != len(widths):
            raise ValueError("num_blocks and widths must have the same length")
        stem_width = widths[0]
        self.conv1 = nn.Conv2d(in_channels, stem_width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem_width)
        self.relu = nn.ReLU(inplace=True)
        stages: list[nn.Module] = []
        in_planes = stem_width
        for i, (n, width) in enumerate(zip(num_blocks, widths, strict=True)):
            blocks: list[nn.Module] = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(BasicBlock(in_planes, width, stride))
                in_planes = width
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)
        self.feature_dim = in_planes
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Return pooled features of shape ``(B, feature_dim)``."""
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        return torch.flatten(self.avgpool(out), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return logits of shape ``(B, num_classes)``."""
        return self.fc(self.forward_features(x))


def resnet18(num_classes: int = 10, in_channels: int = 3) -> CifarResNet:
    """ResNet-18 for 32x32 inputs: BasicBlock x [2, 2, 2, 2], widths 64/128/256/512."""
    return CifarResNet([2, 2, 2, 2], [64, 128, 256, 512], num_classes, in_channels)


def resnet34(num_classes: int = 10, in_channels: int = 3) -> CifarResNet:
    """ResNet-34 for 32x32 inputs: BasicBlock x [3, 4, 6, 3], widths 64/128/256/512."""
    return CifarResNet([3, 4, 6, 3], [64, 128, 256, 512], num_classes, in_channels)


def resnet32(num_classes: int = 10, in_channels: int = 3) -> CifarResNet:
    """ResNet-32 (He et al. 2016, Sec. 4.2): 3 stages of 5 BasicBlocks, widths 16/32/64."""
    return CifarResNet([5, 5, 5], [16, 32, 64], num_classes, in_channels)
