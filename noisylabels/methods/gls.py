"""GLS, generalized label smoothing (Wei, Liu, Liu, Niu & Liu, "To Smooth or Not? When Label
Smoothing Meets Noisy Labels", ICML 2022; reference code UCSC-REAL/negative-label-smoothing @
05078f6, loss.py and the three training scripts).

Cross-entropy against the smoothed target ``ỹ^GLS = (1 - r) · onehot(y~) + r / K``, with a
smoothing rate ``r`` that may be negative (loss.py:25-34; README.md:11-24):

    l_i = -Σ_j ỹ^GLS_j log p_j = (1 - r) · (-log p_{y~_i}) + r · mean_j(-log p_j)

``r > 0`` is positive label smoothing (PLS), ``r = 0`` cross-entropy, ``r < 0`` negative label
smoothing (NLS), which pushes the non-label classes' probabilities further to 0 and the model
towards confident predictions. The paper's rates run from 0.8 down to -8.0 (README.md:15); the
scripts' default is 0.1 (main_GLS_direct_train.py:32). The reference's ``wa`` (a weight of an
extra plain CE term, 0 by default: loss.py:31, main_GLS_direct_train.py:30-31) is not an option
here: ``wa = 0, wb = 1`` is GLS itself. ``log p`` is ``log_softmax(z)`` in float32, no epsilon
(loss.py:27).

The reference's two protocols (both batch 128 on CIFAR-10 and CIFAR-100, the same scripts with
``--dataset``; ResNet-34, here the data group's backbone):

- direct training (README.md:32-37, for CE and PLS at 20 % symmetric noise):
  main_GLS_direct_train.py, SGD lr 0.1, momentum 0.9, weight decay 1e-4, Nesterov (:123), 200
  epochs (:29), lr 0.1 / 0.01 / 0.001 for 100 / 50 / 50 epochs (:139), batch 128 (:105). The
  method group ``configs/method/gls.yaml`` (without Nesterov momentum, which the optimizer
  options do not have).
- CE warm-up, then GLS from it (README.md:38-48, "when noise rates are large", for PLS and
  NLS): main_warmup.py trains plain CE (``wa 1, wb 0, smooth_rate 0``: :30-32) for 120 epochs
  (:29), SGD without momentum or weight decay (:127), lr 0.1 / 0.01 / 0.001 for 40 epochs each
  (:144), saving the epoch of the best test accuracy (:84-91); main_GLS_load.py loads that
  model (:130-132) and trains GLS for 100 epochs (:29) with a new SGD, momentum 0.9, weight
  decay 1e-4, Nesterov (:134), at lr 1e-6 throughout (:151). Here: ``warmup_epochs 120``,
  ``warmup_momentum 0``, ``warmup_milestones [40, 80]``, ``warmup_model best`` (noisy-validation
  accuracy, not test accuracy), ``main_stage_init restart``, ``warmup_lr 0.1`` (:mod:`~noisylabels
  .methods.core.warmup_lr`) and ``optim.lr 1e-6`` (``configs/protocol/gls_warmup.yaml``; weight
  decay 0 in both stages: one value covers both, and 1e-4 at lr 1e-6 moves no weight).

With ``alpha != 0`` (GLS-VRNL) the objective is ``mean(l) - alpha · Var(l)`` of the per-sample
GLS losses ``l_i`` above. In a warm-up the step is plain CE (VRNL off). ``l_i >= 0`` for ``0 <=
r <= 1`` (both terms are); for ``r < 0`` it is unbounded below (``-r · mean_j(-log p_j)`` grows
without bound as the non-label probabilities go to 0).
"""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.warmup_lr import check_warmup_lr, warmup_lr_factor, warmup_lr_inert


def gls_loss(logits: Tensor, labels: Tensor, smooth_rate: float) -> Tensor:
    """``(1 - r) · (-log p_y) + r · mean_j(-log p_j)`` per sample, float32: the cross-entropy
    against ``(1 - r) · onehot(y) + r / K`` (reference loss.py:25-34)."""
    log_p = F.log_softmax(logits.float(), dim=1)
    nll = -log_p.gather(1, labels.unsqueeze(1)).squeeze(1)
    return (1.0 - smooth_rate) * nll + smooth_rate * (-log_p.mean(dim=1))


class GLS(NoisyLabelMethod):
    """Generalized label smoothing: CE against ``(1 - r) · onehot + r / K``, ``r`` positive
    (PLS) or negative (NLS) (Wei et al. 2022).

    Args:
        smooth_rate: the smoothing rate ``r < 1`` (the reference's ``--smooth_rate``; its
            default 0.1; the paper's rates 0.8 down to -8.0; 0: cross-entropy).
        warmup_lr: the learning rate of the CE warm-up (``schedule.warmup_epochs``); null: the
            optimizer's ``lr``. The reference's warm-up protocol trains CE at 0.1 and GLS at
            1e-6.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self, smooth_rate: float = 0.1, warmup_lr: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if not (math.isfinite(float(smooth_rate)) and float(smooth_rate) < 1.0):
            raise InputError(
                "--model.smooth_rate must be a finite number below 1 (1 - r weighs the label; "
                f"the paper's rates run from 0.8 down to -8.0), got {smooth_rate}"
            )
        self.smooth_rate = float(smooth_rate)
        self.warmup_lr = check_warmup_lr(warmup_lr)

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return gls_loss(logits, batch["label"], self.smooth_rate)

    def lr_factor(self, epoch: int) -> float:
        """``warmup_lr / lr`` in the warm-up, 1 after it."""
        return warmup_lr_factor(self.warmup_lr, self.optim.lr, epoch, self.warmup_length())

    def inert_options(self) -> list[tuple[str, str]]:
        """``warmup_lr`` without a warm-up stage."""
        inert = super().inert_options()
        return inert + warmup_lr_inert(self.warmup_lr, self.schedule.warmup_epochs)
