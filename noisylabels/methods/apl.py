"""APL, active-passive losses (Ma, Huang, Wang, Romano, Erfani & Bailey, "Normalized Loss
Functions for Deep Learning with Noisy Labels", ICML 2020; reference code
HanxunH/Active-Passive-Losses @ 04bce53).

A normalized loss ``L(p, y) / Σ_k L(p, k)`` is robust to symmetric noise but, alone, fits too
little; APL adds a passive loss to an active one: ``l = active_weight · active + passive_weight ·
passive`` (the paper's ``α·L_active + β·L_passive``; loss.py:167-176 and :179-188, :390-411,
whose batch mean is the reference's loss). ``losses`` names the pair as the reference's configs
do (``nce+rce`` there, ``nce_rce`` here):

- ``NCE = log p_y / Σ_k log p_k`` (loss.py:86-90), in ``[0, 1]``;
- ``NFL = (1 - p_y)^γ log p_y / Σ_k (1 - p_k)^γ log p_k``, the normalized focal loss
  (loss.py:362-375), in ``[0, 1]``; the reference computes the factors ``(1 - p)^γ`` from the
  detached probabilities (``logpt.data``, loss.py:365, :368), so its gradient flows through the
  ``log p`` alone, and so does this one's; ``γ`` 0.5 (loss.py:404; every config, e.g.
  configs/cifar10/sym/nfl+rce.yaml:32). With ``γ = 0``, NFL is NCE;
- ``RCE = -Σ_k p_k log q_k`` with ``p`` clamped to ``[1e-7, 1]`` and the one-hot ``q`` to
  ``[1e-4, 1]`` (loss.py:52-57), i.e. ``-A · Σ_{k≠y} max(p_k, 1e-7)`` with ``A = log 1e-4``, in
  ``[0, -A (1 + (K - 1) 1e-7)]`` (about ``[0, 9.21]``), the same as SCE's RCE
  (:func:`~noisylabels.methods.core.losses.reverse_cross_entropy`);
- ``MAE = 1 - p_y`` (loss.py:137-147, the reference's halved MAE), in ``[0, 1]``.

``active_weight`` and ``passive_weight`` are APL's α and β, not VRNL's ``alpha``.

Reference constants and protocol (configs/<dataset>/sym/<pair>.yaml at 04bce53; the asymmetric
configs are the same):

- CIFAR-10: α 1, β 1 for every pair (nce+rce.yaml:32-33, nfl+rce.yaml:33-34, nce+mae.yaml:32-33,
  nfl+mae.yaml:33-34); SGD lr 0.01, momentum 0.9, weight decay 1e-4 (nce+rce.yaml:19-22), a
  cosine from 0.01 to 0 over 120 epochs (CosineAnnealingLR ``T_max`` the epochs, stepped after
  each epoch: nce+rce.yaml:1, :25-27; main.py:70), batch 128 (nce+rce.yaml:8), on an 8-layer
  CNN (nce+rce.yaml:14-16; models.py:29-52).
- CIFAR-100: α 10, β 0.1 with RCE (nce+rce.yaml:32-33, nfl+rce.yaml:33-34), β 1.0 with MAE
  (nce+mae.yaml:32-33, nfl+mae.yaml:33-34); SGD lr 0.1, momentum 0.9, weight decay 1e-5
  (nce+rce.yaml:19-22), cosine to 0 over 200 epochs (:1, :25-27), on a ResNet-50 (:14-16);
  augmentation crop, flip and a 20° rotation (dataset.py:258-263).
- MNIST: α 1, β 10 for every pair (nce+rce.yaml:33-34, nfl+rce.yaml:34-35, nce+mae.yaml:33-34,
  nfl+mae.yaml:34-35); SGD lr 0.01, momentum 0.9 (Nesterov), weight decay 1e-2
  (nce+rce.yaml:19-23), cosine from 0.01 to 1e-3 over 50 epochs (:1, :26-28), on a 2-layer CNN
  (models.py:53-66), normalized, no augmentation (dataset.py:230-239).
- Every config clips the gradient norm at 5 (``grad_bound``, e.g. configs/cifar10/sym/
  nce+rce.yaml:2; trainer.py:44). The reference logs the last and the best epoch's test accuracy
  (main.py:79-80). Clothing1M has a launcher (script/submit_clothing1m.sh) but no config.

With ``alpha != 0`` this is APL-VRNL: ``mean(l) - alpha · Var(l)`` of the per-sample losses
``l_i``. Every term is bounded, so ``l_i ∈ [0, M]`` with ``M = active_weight + passive_weight ·
M_passive`` (``M_passive`` 1 for MAE, ``-A (1 + (K - 1) 1e-7)`` for RCE), and by Popoviciu's
inequality ``Var(l) <= M² / 4``: the objective is bounded below by ``-alpha M² / 4`` in either
VRNL form. It can still reward spreading the losses: a sample whose loss lies more than
``1 / (2 alpha)`` above the batch mean gets a negative weight in the paper form, and its loss
is pushed up towards ``M`` (``vrnl_form: bounded`` floors those weights at 0).
"""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.losses import RCE_LOG_ZERO, RCE_PROB_FLOOR, reverse_cross_entropy
from noisylabels.methods.sce import check_weights

LOSSES = ("nce_rce", "nfl_rce", "nce_mae", "nfl_mae")
"""The active-passive pairs: ``<active>_<passive>``, the reference's ``<active>+<passive>``."""


def normalized_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """``log p_y / Σ_k log p_k`` per sample, float32, in ``[0, 1]``."""
    log_p = F.log_softmax(logits.float(), dim=1)
    return log_p.gather(1, labels.unsqueeze(1)).squeeze(1) / log_p.sum(dim=1)


def normalized_focal_loss(logits: Tensor, labels: Tensor, gamma: float) -> Tensor:
    """``(1 - p_y)^γ log p_y / Σ_k (1 - p_k)^γ log p_k`` per sample, float32, in ``[0, 1]``,
    the factors ``(1 - p)^γ`` detached (the reference's gradient)."""
    log_p = F.log_softmax(logits.float(), dim=1)
    focal = (1.0 - log_p.detach().exp()).clamp_min(0.0).pow(gamma)
    weighted = focal * log_p
    return weighted.gather(1, labels.unsqueeze(1)).squeeze(1) / weighted.sum(dim=1)


def mean_absolute_error(logits: Tensor, labels: Tensor) -> Tensor:
    """``1 - p_y`` per sample, float32, in ``[0, 1]`` (the reference's MAE, half of
    ``Σ_k |p_k - q_k|``)."""
    probs = F.softmax(logits.float(), dim=1)
    return 1.0 - probs.gather(1, labels.unsqueeze(1)).squeeze(1)


def passive_bound(passive: str, num_classes: int) -> float:
    """The largest value of the passive loss with weight 1."""
    if passive == "mae":
        return 1.0
    return -RCE_LOG_ZERO * (1.0 + (num_classes - 1) * RCE_PROB_FLOOR)


class APL(NoisyLabelMethod):
    """Active-passive loss ``active_weight · active + passive_weight · passive`` (Ma et al. 2020).

    Args:
        losses: the pair ``<active>_<passive>``: ``nce_rce`` (normalized cross-entropy + reverse
            cross-entropy), ``nfl_rce`` (normalized focal loss + RCE), ``nce_mae`` or
            ``nfl_mae`` (+ mean absolute error ``1 - p_y``).
        active_weight: APL's α, the weight of the active loss (reference: 1 on MNIST and
            CIFAR-10, 10 on CIFAR-100). Not VRNL's ``alpha``.
        passive_weight: APL's β, the weight of the passive loss (reference: 10 on MNIST, 1 on
            CIFAR-10; CIFAR-100: 0.1 with RCE, 1 with MAE). Not VRNL's ``alpha``.
        focal_gamma: ``γ`` of the normalized focal loss (reference: 0.5); ``nfl_*`` pairs only.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self,
        losses: str = "nce_rce",
        active_weight: float = 1.0,
        passive_weight: float = 1.0,
        focal_gamma: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if losses not in LOSSES:
            raise InputError(f"--model.losses must be one of {LOSSES}, got {losses!r}")
        self.active_weight, self.passive_weight = float(active_weight), float(passive_weight)
        check_weights(
            ("active_weight", "passive_weight"),
            (self.active_weight, self.passive_weight),
            "APL's active or passive loss, not VRNL's alpha",
        )
        if not (math.isfinite(focal_gamma) and focal_gamma >= 0):
            raise InputError(
                f"--model.focal_gamma must be a finite number >= 0 (the normalized focal loss's "
                f"exponent), got {focal_gamma}"
            )
        self.active, _, self.passive = losses.partition("_")
        self.focal_gamma = float(focal_gamma)

    def inert_options(self) -> list[tuple[str, str]]:
        """``focal_gamma`` with an NCE pair (no focal loss)."""
        inert = super().inert_options()
        if self.active != "nfl":
            inert.append(("focal_gamma", f"losses is {self.hparams.losses}, without a focal loss"))
        return inert

    def loss_bound(self) -> float:
        """``M``, the largest per-sample loss: every ``l_i`` lies in ``[0, M]``."""
        bound = passive_bound(self.passive, self.num_classes)
        return self.active_weight + self.passive_weight * bound

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        labels = batch["label"]
        if self.active == "nce":
            active = normalized_cross_entropy(logits, labels)
        else:
            active = normalized_focal_loss(logits, labels, self.focal_gamma)
        if self.passive == "rce":
            passive = reverse_cross_entropy(logits, labels)
        else:
            passive = mean_absolute_error(logits, labels)
        return self.active_weight * active + self.passive_weight * passive
