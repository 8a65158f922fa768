"""The networks of a method, by name: copies of their weights and in-place loads.

A method's networks are ``self.net`` (network 0) and those of ``add_network`` (Co-teaching,
MentorNet, Decoupling, ...), named ``net``, ``net1``, ``net2``, ...: what ``warmup_model: best``
keeps and ``main_stage_init: reinit`` re-initialises. Weights are always replaced in place
(``load_state_dict``), so compiled networks, their graphs and the optimizers stay valid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn


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
