"""LeNet-5 (LeCun et al., "Gradient-based learning applied to document recognition", 1998)."""

from __future__ import annotations

import torch
from torch import nn


class LeNet5(nn.Module):
    """Classic LeNet-5 for 28x28 inputs (MNIST-style), with ReLU and max-pooling.

    conv(in->6, 5x5, pad 2) - ReLU - maxpool2 - conv(6->16, 5x5) - ReLU - maxpool2 -
    FC 400->120 - ReLU - FC 120->84 - ReLU - FC 84->num_classes.
    With ``num_classes=10`` and ``in_channels=1`` it has exactly 61,706 parameters.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, kernel_size=5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(16 * 5 * 5, 120),
            nn.ReLU(inplace=True),
            nn.Linear(120, 84),
            nn.ReLU(inplace=True),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return logits of shape ``(B, num_classes)`` for input ``(B, C, 28, 28)``."""
        return self.classifier(torch.flatten(self.features(x), 1))
