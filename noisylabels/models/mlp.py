"""Multi-layer perceptron (Rumelhart, Hinton & Williams, "Learning representations by
back-propagating errors", 1986) used for small tabular/image quickstarts such as sklearn digits."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Module):
    """Fully connected ReLU network that flattens its input.

    Args:
        input_dim: number of input features after flattening (e.g. 64 for 8x8 digits).
        num_classes: number of output logits.
        hidden: sizes of the hidden layers; empty gives a linear (softmax-regression) model.
        dropout: dropout probability applied after every hidden activation.
    """

    def __init__(
        self,
        input_dim: int,
        num_classes: int,
        hidden: Sequence[int] = (256,),
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = input_dim
        for width in hidden:
            layers.append(nn.Linear(prev, width))
            layers.append(nn.ReLU(inplace=True))
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            prev = width
        layers.append(nn.Linear(prev, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return logits ``(B, num_classes)`` for any input of shape ``(B, ...)``."""
        return self.net(torch.flatten(x, 1))
