"""SCE, symmetric cross-entropy (Wang, Ma, Chen, Luo, Yi & Bailey, "Symmetric Cross Entropy for
Robust Learning with Noisy Labels", ICCV 2019; reference code HanxunH/SCELoss-Reproduce @ c81fb33,
a PyTorch reproduction of the paper's TensorFlow code, README.md:3-4).

The per-sample loss is ``ce_weight · CE + rce_weight · RCE`` (the paper's ``α·CE + β·RCE``,
loss.py:26, whose batch mean is the reference's loss): ``CE = -log p_y`` of ``p = softmax(z)``
(loss.py:16, unclamped), and the reverse cross-entropy ``RCE = -Σ_k p_k log q_k`` of the one-hot
label ``q``, with the prediction clamped to ``[1e-7, 1]`` (loss.py:19-20) and the label to
``[1e-4, 1]`` (loss.py:21-22), so that ``log 0`` is ``A = log 1e-4 ≈ -9.21`` and
``RCE = -A · Σ_{k≠y} max(p_k, 1e-7)`` (loss.py:23): a multiple of ``1 - p_y``, bounded by about
``-A``, the robust (MAE-like) term; CE, unbounded, the term that fits. ``ce_weight`` and
``rce_weight`` are SCE's α and β, not VRNL's ``alpha``.

Reference constants and protocol (files at c81fb33):

- CIFAR-10: α 0.1, β 1.0 (README.md:28-29; slurm/sce_loss0.4.slurm:44-45); CIFAR-100: α 6.0,
  β 1.0 (README.md:39-40; slurm/sce_loss0.4.slurm:55-56). The paper gives β 0.1 for CIFAR-100,
  and so does the later HanxunH/Active-Passive-Losses @ 04bce53 (configs/cifar100/sym/
  sce.yaml:32-33): the reference this module follows runs β 1.0, which its README's CIFAR-100
  results come from. The reference has no MNIST or Clothing1M protocol (train.py:30 offers
  cifar10 and cifar100 only); Active-Passive-Losses runs MNIST at α 0.01, β 1.0
  (configs/mnist/sym/sce.yaml:32-33).
- SGD, lr 0.01 (train.py:15; README.md:34), momentum 0.9, Nesterov (train.py:234-237), weight
  decay 1e-2 (``--l2_reg 1e-2``, README.md:26, :37; and 0.01 on the CNN's ``fc1``,
  train.py:52-65, README.md:7), batch 128 (train.py:20), the gradient norm clipped at 5
  (train.py:17, :155).
- MultiStepLR [40, 80], γ 0.1, stepped after each epoch (train.py:239, :183): ÷10 after 40 and
  80 epochs; 120 epochs on CIFAR-10, 150 on CIFAR-100 (train.py:211-218), on an 8-layer CNN
  (CIFAR-10) and a ResNet-34 (CIFAR-100) (train.py:214, :218).
- CIFAR-100's augmentation adds a random rotation of 20° to the crop and flip
  (dataset.py:172-177; CIFAR-10: dataset.py:200-204). Reported: the best epoch's test accuracy
  (README.md:46; train.py:193).

With ``alpha != 0`` this is SCE-VRNL: ``mean(l) - alpha · Var(l)`` of the per-sample SCE losses
``l_i``. RCE is bounded, CE is not: with ``ce_weight > 0`` the VRNL objective is unbounded below
in its paper form (a sample's CE, pushed up by a negative weight ``1 + 2 alpha (mean(l) - l_i)``,
grows the variance without limit); ``vrnl_form: bounded`` floors those weights at 0. With
``ce_weight`` 0 (RCE alone) ``l_i ∈ [0, M]``, ``M = rce_weight · (-A) (1 + (K - 1) 1e-7)``, and
``mean - alpha · Var >= -alpha M² / 4``.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.losses import cross_entropy, reverse_cross_entropy


def sce_loss(logits: Tensor, labels: Tensor, ce_weight: float, rce_weight: float) -> Tensor:
    """``ce_weight · CE + rce_weight · RCE`` per sample, float32."""
    return ce_weight * cross_entropy(logits, labels) + rce_weight * reverse_cross_entropy(
        logits, labels
    )


def check_weights(names: tuple[str, str], values: tuple[float, float], what: str) -> None:
    """Refuse a weight of a two-term loss that is negative or not finite, or both at 0."""
    for name, value in zip(names, values, strict=True):
        if not (math.isfinite(value) and value >= 0):
            raise InputError(
                f"--model.{name} must be a finite number >= 0 (the weight of {what}), got {value}"
            )
    if not any(values):
        raise InputError(
            f"--model.{names[0]} and --model.{names[1]} are both 0: the loss would be 0 and "
            "train nothing; give at least one of them a positive weight"
        )


class SCE(NoisyLabelMethod):
    """Symmetric cross-entropy ``ce_weight · CE + rce_weight · RCE`` (Wang et al. 2019).

    Args:
        ce_weight: SCE's α, the weight of the cross-entropy (reference: 0.1 on CIFAR-10, 6.0
            on CIFAR-100). Not VRNL's ``alpha``.
        rce_weight: SCE's β, the weight of the reverse cross-entropy, whose ``log 0`` is
            ``A = log 1e-4`` (reference: 1.0). Not VRNL's ``alpha``.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(self, ce_weight: float = 0.1, rce_weight: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ce_weight, self.rce_weight = float(ce_weight), float(rce_weight)
        check_weights(
            ("ce_weight", "rce_weight"),
            (self.ce_weight, self.rce_weight),
            "SCE's cross-entropy or reverse cross-entropy, not VRNL's alpha",
        )

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return sce_loss(logits, batch["label"], self.ce_weight, self.rce_weight)
