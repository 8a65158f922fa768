"""The networks of a method: what each is (:class:`NetworkOptions`, the ``--model.network.*``
group), and by name, copies of their weights and in-place loads.

A method's networks are ``self.net`` (network 0) and those of ``add_network`` (Co-teaching,
MentorNet, Decoupling, ...), named ``net``, ``net1``, ``net2``, ...: what ``warmup_model: best``
keeps and ``main_stage_init: reinit`` re-initialises. Weights are always replaced in place
(``load_state_dict``), so compiled networks, their graphs and the optimizers stay valid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from noisylabels.errors import InputError
from noisylabels.models import BACKBONES, build_backbone

OPTION = "--model.network."
PRETRAINED = ("resnet50",)
"""The backbones with ImageNet weights to start from."""


@dataclasses.dataclass(frozen=True)
class NetworkOptions:
    """What each of a method's networks is (every network of a method is alike).

    Attributes:
        backbone: ``lenet5``, ``mlp``, ``resnet18``, ``resnet32``, ``resnet34``, ``resnet50``
            or ``vgg19_bn`` (``noisylabels.models.BACKBONES``).
        pretrained: start from ImageNet weights (``resnet50`` only; from torchvision's local
            cache or ``weights_path``).
        weights_path: a state-dict file of pretrained backbone weights (implies ``pretrained``).
        backbone_kwargs: extra arguments of the backbone factory (e.g. ``hidden`` of ``mlp``);
            ``null`` for the backbone's defaults.
    """

    backbone: str = "lenet5"
    pretrained: bool = False
    weights_path: str | None = None
    backbone_kwargs: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Refuse an unknown backbone, and pretrained weights for a backbone that has none."""
        if self.backbone not in BACKBONES:
            raise InputError(
                f"Unknown backbone {self.backbone!r} ({OPTION}backbone); "
                f"available: {', '.join(sorted(BACKBONES))}"
            )
        if (self.pretrained or self.weights_path) and self.backbone not in PRETRAINED:
            raise InputError(
                f"pretrained weights are available for {', '.join(PRETRAINED)} only, not "
                f"{self.backbone!r}; set {OPTION}pretrained false"
            )

    def build(self, num_classes: int, input_shape: Sequence[int]) -> nn.Module:
        """A new network with fresh (or the pretrained) weights."""
        kwargs = dict(self.backbone_kwargs or {})
        if self.pretrained or self.weights_path:
            kwargs.update(pretrained=True, weights_path=self.weights_path)
        return build_backbone(self.backbone, num_classes, tuple(input_shape), **kwargs)


def named_networks(networks: Sequence[nn.Module]) -> dict[str, nn.Module]:
    """``{"net": networks[0], "net1": networks[1], ...}``."""
    return {("net" if k == 0 else f"net{k}"): net for k, net in enumerate(networks)}


def network_state(
    networks: Sequence[nn.Module], device: str | torch.device | None = None
) -> dict[str, Any]:
    """A copy of the networks' weights and buffers by name (on ``device``, else where they
    are)."""
    return {
        name: {k: v.detach().to(device, copy=True) for k, v in net.state_dict().items()}
        for name, net in named_networks(networks).items()
    }


def load_network_state(networks: Sequence[nn.Module], state: Mapping[str, Any]) -> None:
    """Load :func:`network_state` output into the networks, in place."""
    for name, net in named_networks(networks).items():
        net.load_state_dict(state[name])


def better_model(
    best: dict[str, Any] | None, score: float | Any, epoch: int, networks: Sequence[nn.Module]
) -> dict[str, Any]:
    """``best`` (``{"epoch", "score", "state"}`` of the best model so far), or the networks'
    current state (a copy on the CPU) at ``epoch`` where ``score`` beats it (the earliest epoch
    wins a tie). A tensor ``score`` is read to the host here."""
    score = float(score)
    if best is None or score > best["score"]:
        return {"epoch": epoch, "score": score, "state": network_state(networks, "cpu")}
    return best
