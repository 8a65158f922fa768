"""Forward loss correction (Patrini et al., "Making Deep Neural Networks Robust to Label Noise:
a Loss Correction Approach", CVPR 2017).

Per-sample loss ``l_i = -log(q_{y~_i} + 1e-12)`` with ``q = p @ T`` where ``p = softmax(z)`` and
``T`` is row-stochastic, ``T[i, j] = P(noisy = j | clean = i)``. With ``alpha != 0`` this is
Forward-VRNL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from noisylabels.methods.base import NoisyLabelMethod
from noisylabels.noise import load_transition

EPS = 1e-12


class TransitionMethod(NoisyLabelMethod):
    """A method that corrects with a fixed transition matrix ``T`` (row-stochastic).

    Args:
        transition: ``true`` uses the true T of the synthetic noise; a path loads a T file
            (``.pt``, ``.npy``, ``.csv``; row-stochastic, ``T[i, j] = P(noisy=j | clean=i)``).
        **kwargs: see :class:`~noisylabels.methods.base.NoisyLabelMethod`.
    """

    def __init__(self, transition: bool | str = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if transition is False:
            raise ValueError(
                "transition: false leaves nothing to correct with; use the CE method, "
                "transition: true (the true T), or a path to a T file"
            )
        if isinstance(transition, str) and not Path(transition).expanduser().is_file():
            raise FileNotFoundError(f"transition file {transition} does not exist")
        self.transition_source = transition
        self.register_buffer("T", torch.eye(self.num_classes))

    def setup(self, stage: str) -> None:
        if stage != "fit":
            return
        self.T.copy_(self.resolve_transition())

    def resolve_transition(self) -> Tensor:
        """The T this run corrects with, from the data module's noise or from a file."""
        source = self.transition_source
        if isinstance(source, str):
            return load_transition(source, self.num_classes)
        datamodule = getattr(self.trainer, "datamodule", None)
        true_t = getattr(datamodule, "transition", None)
        if true_t is None:
            noise = getattr(datamodule, "noise_type", "unknown")
            raise ValueError(
                f"transition: true needs the true T, which noise type {noise!r} does not have; "
                "pass --model.transition PATH to a T file instead"
            )
        return true_t.float()

    def transition(self) -> Tensor | None:
        return self.T

    def noisy_posterior(self, probs: Tensor) -> Tensor:
        return probs @ self.T


class Forward(TransitionMethod):
    """Forward correction: cross-entropy of the noisy posterior ``q = p @ T`` (Patrini 2017)."""

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        q = self.noisy_posterior(F.softmax(logits.float(), dim=1))
        return -torch.log(q.gather(1, batch["label"].unsqueeze(1)).squeeze(1) + EPS)
