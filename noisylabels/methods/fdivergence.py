"""f-divergence (Wei & Liu, "When Optimizing f-Divergence is Robust with Label Noise", ICLR 2021;
reference code UCSC-REAL/Robust-f-divergence-measures @ 93d9efe, one runner per dataset).

The classifier ``h`` maximizes the variational form of an f-divergence between the joint
distribution of its prediction and the noisy label and the product of their marginals,
``D_f ≥ E_joint[g(v)] − E_product[f*(g(v))]``, with ``v = p_y = softmax(h(x))_y``, the probability
the classifier gives label ``y``: under the joint, ``x`` and its own noisy label ``y~``; under
the product, the output of one sample scored against the label of another, independent one.
The paper shows the maximizer under noisy labels is that under clean ones (up to a bias term
the reference does not correct by default, and the paper finds negligible), which is why the
loss is robust. The loss minimized is its negative (CIFAR-10/runner.py:139-143):

    l_i = -ψ(p_{y~_i}(x_i)) + φ(p_{y~_{π2(i)}}(x_{π1(i)}))

``ψ`` is the reference's ``activation``, ``φ`` its ``conjugate``, which it applies to the
probability itself and which is ``f*(ψ(v))`` for every divergence but Neyman's
(CIFAR-10/runner.py:45-89, the same in every runner):

==================== ========================== ===================================
divergence           ψ(v)                        φ(v)
==================== ========================== ===================================
total_variation      tanh(v) / 2                 tanh(v) / 2            (:83-86)
jensen_shannon       log 2 − log(1 + e^{−v})     v + log(1 + e^{−v}) − log 2  (:78-81)
pearson              v                           v² / 4 + v             (:68-71)
kl                   v                           e^{v − 1}              (:48-51)
jeffrey              v                           v + v² / 4 + v³ / 16   (:58-61)
squared_hellinger    1 − e^{v}                   (1 − e^{v}) / e^{v}    (:63-66)
reverse_kl           −e^{v}                      −1 − v                 (:53-56)
neyman               1 − e^{v}                   2 − 2 √(1 − v)         (:73-76)
==================== ========================== ===================================

(the reference's names: ``Total-Variation``, ``Jenson-Shannon``, ``Pearson``, ``KL``,
``Jeffrey``, ``Squared-Hellinger``, ``Reverse-KL``, ``Neyman``; the README's suggested five are
the first five, CIFAR-10/README.md:25, CIFAR-100/README.md:33). ``v`` is the softmax
probability in float32 with no epsilon (CIFAR-10/runner.py:92-103; the CIFAR-100 runner alone
adds 1e-5 to it, CIFAR-100/runner.py:105, not kept here). Neyman's ``√(1 − v)`` takes ``1 − v``
floored at 1e-12 here, so that ``v = 1`` has a finite derivative (the reference's is infinite
there). For ``v ∈ [0, 1]`` every ``l_i`` is bounded: e.g. ``|l_i| ≤ tanh(1)/2 ≈ 0.38`` for
Total-Variation.

**The product-of-marginals ("peer") term.** The reference draws, at every step, a fresh iterator
of a second shuffled loader over the noisy training set and takes the images of its first batch
and the labels of its second (CIFAR-10/runner.py:127-138; MNIST/runner.py:131-137; the loaders
CIFAR-10/noise_data_cifar_10.py:213-228), one more forward pass; its loss is the batch mean of
``-ψ`` minus the batch mean of ``-φ`` over the peer batch. Here, as for Peer loss
(:func:`~noisylabels.methods.peer.draw_random_peers`), the peers are drawn within the step's
batch: ``π1`` and ``π2`` are two independent random permutations of the batch, from a generator
seeded by the run's seed and the step (a resumed run draws the same peers); the peer output
``x_{π1(i)}`` is that sample's logits, with gradient, and ``y~_{π2(i)}`` another sample's noisy
label. Under DDP with the global variance scope the permutations run over the global batch
(every process's logits, gathered with gradient, and labels), so a step is that of one process
with the global batch. **The per-sample losses handed to VRNL** are the ``l_i`` above: sample
``i``'s own joint term plus the peer term of the pair assigned to it, so that their mean is the
reference's batch loss (with equal batch and peer-batch sizes) and ``alpha · Var(l)`` is the
variance of these pair losses. A batch without drawn peers (validation) pairs sample ``i`` with
the output of sample ``i + 1`` and the label of sample ``i + 2``, as Peer loss does; the
validation loss is then the negative of the f-divergence estimate the reference selects its
model by (``--checkpoint.monitor val/loss --checkpoint.mode min``: CIFAR-10/runner.py:181-207,
:256-265; MNIST/runner.py:256-260).

**Protocols** (``--batchsize 128`` in every README command: CIFAR-10/README.md:19, :30):

- MNIST (the method group): no warm-up ("No need to warm-up with CE loss", MNIST/README.md:38;
  ``--warmup 0``), Adam without weight decay, a new one every epoch (MNIST/runner.py:231), 80
  epochs (:22), lr 1e-3, then 5e-4 from epoch 21 on (:209-217: the ``elif`` chain never reaches
  its lower rates).
- CIFAR-10 and CIFAR-100: a CE model trained first (README step 1, runner_CE.py): 240 epochs
  (CIFAR-10/runner_CE.py:20), SGD momentum 0.9, weight decay 5e-4, lr 0.1, ÷10 at 60, 120, 180
  (:110-117), the epoch of the best noisy-validation accuracy kept (:126-129); then (step 2,
  runner.py) that model loaded (CIFAR-10/runner.py:212) and the f-divergence trained from epoch 0
  (``--warmup 0``) for 100 epochs (:21), SGD momentum 0.9, weight decay 5e-4, a new optimizer
  every epoch, lr 0.01, ÷10 at 30, 60, 90 (:224-234). CIFAR-100 the same (CIFAR-100/runner_CE.py:
  21, :93-100; CIFAR-100/runner.py:210-220, :251), but its runner's ``num_epochs = 1``
  (CIFAR-100/runner.py:21), a leftover beside a plan to epoch 120: the preset trains CIFAR-10's
  100. Here: a CE warm-up of 240 epochs at ``warmup_lr`` 0.1 with ``warmup_milestones [60, 120,
  180]``, the best warm-up epoch (``warmup_model best``) restarted with a fresh optimizer
  (``main_stage_init restart``), then the f-divergence at ``lr`` 0.01.
- Clothing1M: ImageNet ResNet-50 (Clothing1M/runner_C1M.py:160-162), 40 epochs (:23), CE for
  the first 10 (:108, :116-118) at lr 0.002, then the f-divergence at 5e-5, 1e-5, 5e-6, 1e-6,
  5e-7, 1e-7 from epochs 10, 15, 20, 25, 30, 35 (:166-180), SGD momentum 0.9, weight decay 1e-3
  (:183), a class-balanced subset of 265,664 images (18,976 a class; Clothing1M/README.md:12,
  Clothing1M/dataloader.py:78-79, :107-111). Its peer labels are uniform draws over the 14
  classes (runner_C1M.py:112), on its balanced subset the noisy labels' marginal, which the
  batch's labels sample here. Here: 10 warm-up epochs at ``warmup_lr`` 0.002, the last one
  continued, then 30 epochs from 5e-5 with ``lr_gamma`` √0.1 every 5 epochs (a schedule has
  one factor: the reference's rates at epochs 20 and 30, within 1.6× of them in between),
  ``samples_per_class`` 18976 drawn anew every epoch (the reference's subset is fixed).

In a warm-up the step is plain CE (the reference's warm-up CE adds 1e-5 inside the log,
CIFAR-10/runner_CE.py:29-39). With ``alpha != 0`` (f-divergence-VRNL) the objective is
``mean(l) - alpha · Var(l)`` of the ``l_i`` above.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.warmup_lr import check_warmup_lr, warmup_lr_factor, warmup_lr_inert
from noisylabels.methods.peer import draw_random_peers

LOG2 = math.log(2.0)
NEYMAN_FLOOR = 1e-12
"""``1 - v`` is floored at this inside Neyman's square root (a finite derivative at ``v = 1``)."""

Pair = tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]
DIVERGENCES: dict[str, Pair] = {
    "total_variation": (lambda v: torch.tanh(v) / 2.0, lambda v: torch.tanh(v) / 2.0),
    "jensen_shannon": (
        lambda v: LOG2 - F.softplus(-v),
        lambda v: v + F.softplus(-v) - LOG2,
    ),
    "pearson": (lambda v: v, lambda v: v * v / 4.0 + v),
    "kl": (lambda v: v, lambda v: torch.exp(v - 1.0)),
    "jeffrey": (lambda v: v, lambda v: v + v * v / 4.0 + v * v * v / 16.0),
    "squared_hellinger": (
        lambda v: 1.0 - torch.exp(v),
        lambda v: (1.0 - torch.exp(v)) / torch.exp(v),
    ),
    "reverse_kl": (lambda v: -torch.exp(v), lambda v: -1.0 - v),
    "neyman": (
        lambda v: 1.0 - torch.exp(v),
        lambda v: 2.0 - 2.0 * torch.sqrt((1.0 - v).clamp_min(NEYMAN_FLOOR)),
    ),
}
"""``(ψ, φ)`` of each divergence: the reference's ``activation`` and ``conjugate`` (applied to
the probability ``v``), per element."""
REFERENCE_NAMES = {
    "total_variation": "Total-Variation",
    "jensen_shannon": "Jenson-Shannon",
    "pearson": "Pearson",
    "kl": "KL",
    "jeffrey": "Jeffrey",
    "squared_hellinger": "Squared-Hellinger",
    "reverse_kl": "Reverse-KL",
    "neyman": "Neyman",
}
"""The reference's ``--divergence`` name of each."""
BOUNDS = {
    "total_variation": (-math.tanh(1.0) / 2, math.tanh(1.0) / 2),
    "jensen_shannon": (
        -(LOG2 - math.log1p(math.exp(-1.0))),
        1.0 + math.log1p(math.exp(-1.0)) - LOG2,
    ),
    "pearson": (-1.0, 1.25),
    "kl": (math.exp(-1.0) - 1.0, 1.0),
    "jeffrey": (-1.0, 1.3125),
    "squared_hellinger": (math.exp(-1.0) - 1.0, math.e - 1.0),
    "reverse_kl": (-1.0, math.e - 1.0),
    "neyman": (0.0, math.e + 1.0),
}
"""``[m, M]``, the range of ``l_i = -ψ(v) + φ(v')`` over ``v, v' ∈ [0, 1]``."""


def label_probability(logits: Tensor, labels: Tensor) -> Tensor:
    """``softmax(z)_y`` per sample, float32."""
    return F.softmax(logits.float(), dim=1).gather(1, labels.unsqueeze(1)).squeeze(1)


def fdivergence_loss(
    logits: Tensor, labels: Tensor, peer_logits: Tensor, peer_labels: Tensor, divergence: str
) -> Tensor:
    """``-ψ(p_y(z)) + φ(p_{y'}(z'))`` per sample (``z'``, ``y'``: the peer's output and label),
    float32."""
    psi, phi = DIVERGENCES[divergence]
    own = label_probability(logits, labels)
    peer = label_probability(peer_logits, peer_labels)
    return -psi(own) + phi(peer)


class FDivergence(NoisyLabelMethod):
    """f-divergence: maximize the variational f-divergence between the joint distribution of
    prediction and noisy label and the product of their marginals (Wei & Liu 2021).

    Args:
        divergence: ``total_variation``, ``jensen_shannon``, ``pearson``, ``kl``, ``jeffrey``
            (the reference's suggested five), ``squared_hellinger``, ``reverse_kl`` or
            ``neyman``.
        warmup_lr: the learning rate of the CE warm-up (``schedule.warmup_epochs``); null: the
            optimizer's ``lr``. The reference trains its CE model at 0.1 (CIFAR) or 0.002
            (Clothing1M) and the f-divergence at 0.01 or 5e-5.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    config_name = "fdivergence"

    def __init__(
        self,
        divergence: str = "total_variation",
        warmup_lr: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if divergence not in DIVERGENCES:
            raise InputError(
                f"--model.divergence must be one of {tuple(DIVERGENCES)}, got {divergence!r}"
            )
        self.divergence = divergence
        self.warmup_lr = check_warmup_lr(warmup_lr)

    # ---------------------------------------------------------------- the loss
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The f-divergence loss of each sample with its peer; a batch without drawn peers
        (validation) pairs sample ``i`` with the output of sample ``i + 1`` and the label of
        sample ``i + 2``."""
        labels = batch["label"]
        peer_logits = batch.get("peer_logits")
        peer_labels = batch.get("peer_label")
        if peer_logits is None or peer_labels is None:
            peer_logits, peer_labels = logits.roll(-1, 0), labels.roll(-2, 0)
        return fdivergence_loss(logits, labels, peer_logits, peer_labels, self.divergence)

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The VRNL objective of the per-sample f-divergence losses (plain CE in a warm-up)."""
        logits = self(batch["image"])
        if self.in_warmup:
            return self.vrnl(self.stage_loss_fn(logits, batch), logits, batch)
        peer_logits, peer_labels = draw_random_peers(self, logits, batch["label"])
        peers = {"peer_logits": peer_logits, "peer_label": peer_labels}
        return self.vrnl(self.stage_loss_fn(logits, {**batch, **peers}), logits, batch)

    # ---------------------------------------------------------------- the warm-up's rate
    def lr_factor(self, epoch: int) -> float:
        """``warmup_lr / lr`` in the warm-up, 1 after it."""
        return warmup_lr_factor(self.warmup_lr, self.optim.lr, epoch, self.warmup_length())

    def inert_options(self) -> list[tuple[str, str]]:
        """``warmup_lr`` without a warm-up stage."""
        inert = super().inert_options()
        return inert + warmup_lr_inert(self.warmup_lr, self.schedule.warmup_epochs)
