"""JoCoR (Wei et al., "Combating Noisy Labels by Agreement: A Joint Training Method with
Co-Regularization", CVPR 2020).

Two networks trained jointly. Every sample of a batch gets one joint loss

    l_i = (1 - lam) (CE(z1_i, y_i) + CE(z2_i, y_i)) + lam (KL(p2_i || p1_i) + KL(p1_i || p2_i))

with ``p1 = softmax(z1)``, ``p2 = softmax(z2)``; the symmetric KL, ``Σ_j (p1_j - p2_j)(log p1_j -
log p2_j)``, is the co-regularization that draws the two networks' predictions together, and its
gradient reaches both networks. The ``1 - tau_t`` fraction of the batch with the smallest joint
loss is kept, and both networks are updated from the mean joint loss of the kept samples (one
objective; each network's optimizer steps on its own parameters). ``tau_t`` ramps from 0 to
``tau`` over ``ramp_epochs`` epochs, with ``tau`` the noise rate, a number, or ``1 - mean(diag
T̂)`` of an estimated row-stochastic T̂ (``T̂[i, j] ≈ P(noisy=j | clean=i)``); see
:mod:`noisylabels.methods.selection`.

With ``alpha != 0`` the objective is the VRNL objective over the joint losses of the kept
samples, ``mean(l) - alpha Var(l)``: the loss the samples were selected by and the networks are
trained on. Both networks' steps are recorded with those losses and weights; network 0 is
validated and tested.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.selection import SmallLossMethod


def symmetric_kl(logits_a: Tensor, logits_b: Tensor) -> Tensor:
    """``KL(p_a || p_b) + KL(p_b || p_a)`` per sample, ``(B,)``, in float32, for ``p =
    softmax(logits)``; differentiable in both."""
    log_a = F.log_softmax(logits_a.float(), dim=1)
    log_b = F.log_softmax(logits_b.float(), dim=1)
    return ((log_a.exp() - log_b.exp()) * (log_a - log_b)).sum(1)


class JoCoR(SmallLossMethod):
    """JoCoR (Wei et al. 2020): both networks learn from the small joint-loss samples.

    Args:
        co_lambda: ``lam``, the weight of the co-regularization in the joint loss, in [0, 1]
            (the reference's default 0.1; its MNIST example 0.95, CIFAR-10 0.9, CIFAR-100 0.85).
        **kwargs: see :class:`~noisylabels.methods.selection.SmallLossMethod`.
    """

    def __init__(self, co_lambda: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= float(co_lambda) <= 1.0:
            raise InputError(f"--model.co_lambda must lie in [0, 1], got {co_lambda}")
        self.co_lambda = float(co_lambda)

    def joint_loss(self, logits: list[Tensor], batch: dict[str, Tensor]) -> Tensor:
        """The joint loss ``l_i`` of every sample, ``(B,)``, from both networks' logits."""
        lam = self.co_lambda
        ce = self.stage_loss_fn(logits[0], batch) + self.stage_loss_fn(logits[1], batch)
        return (1.0 - lam) * ce + lam * symmetric_kl(logits[0], logits[1])

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The VRNL objective of the joint losses of the small-joint-loss samples (in a
        warm-up: each network's plain cross-entropy on every sample)."""
        if self.in_warmup:
            return super().training_objective(batch)
        logits = [self.network_logits(batch["image"], k) for k in range(2)]
        joint = self.joint_loss(logits, batch)
        (used,) = self.small_loss_masks([joint.detach()])
        objective = self.vrnl(joint, logits[0], batch, used=used, network=0)
        step = dataclasses.replace(
            self._steps[-1], logits=self.speed.keep(logits[1].detach()), network=1
        )
        self.record_step(step)
        return objective
