"""mixup (Zhang, Cisse, Dauphin & Lopez-Paz, "mixup: Beyond Empirical Risk Minimization",
ICLR 2018; reference code facebookresearch/mixup-cifar10 @ eaff31a, train.py).

Every training batch is replaced by convex combinations of its images with those of a random
permutation ``π`` of the batch, with one ``λ ~ Beta(a, a)`` per batch (train.py:119-134):
``x̃_i = λ x_i + (1 - λ) x_π(i)``, trained on the per-sample loss

    l_i = λ · CE(f(x̃_i), y~_i) + (1 - λ) · CE(f(x̃_i), y~_π(i))

(train.py:137-138, whose batch mean is the reference's loss of mean-reduced cross-entropies).
``a`` is :attr:`mixup_alpha` (the reference's ``--alpha``, default 1, train.py:39); for ``a <=
0`` the reference takes ``λ = 1`` (train.py:121-124), plain cross-entropy, which is what the
step then computes. Validation, test and prediction use the plain network on unmixed images;
the validation loss is the plain cross-entropy (the mixed loss needs a partner).

``λ`` and ``π`` are drawn from a torch generator seeded by the run's seed and the step (not the
global random state), so a resumed run draws what the uninterrupted run draws; the permutation
is a few keys drawn on the host and moved to the device with the batch (no synchronization).
Under DDP with the global variance scope ``π`` runs over the step's global batch (each process
mixes its images with partners from every process's, gathered without gradient), so a step is
that of one process with the global batch; with ``variance_scope: local`` each process mixes
within its own batch. The step records each sample under its own dataset index and label
``y~_i``, with the logits of its mixed image and its mixed loss ``l_i``.

With ``alpha != 0`` (mixup-VRNL) the objective is ``mean(l) - alpha · Var(l)`` over the mixed
per-sample losses ``l_i``. In a warm-up (none by default) the step is plain CE, unmixed.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.distributed import gather_rows_with_grad
from noisylabels.methods.core.losses import cross_entropy

PARTNER_KEY = "mixup_partner_label"
"""The batch key under which a training step hands the partners' labels ``y~_π(i)`` to the
loss."""
LAMBDA_KEY = "mixup_lambda"
"""The batch key of the step's ``λ`` (a float32 device scalar)."""


def beta_draw(a: float, generator: torch.Generator) -> float:
    """One ``λ ~ Beta(a, a)`` from ``generator`` (as ``G_1 / (G_1 + G_2)`` of two
    ``Gamma(a, 1)`` draws, in float64); 0.5 where both underflow to 0 (tiny ``a``)."""
    gammas = torch._standard_gamma(torch.full((2,), float(a), dtype=torch.float64), generator)
    total = float(gammas.sum())
    return float(gammas[0]) / total if total > 0 else 0.5


def mixup_loss(logits: Tensor, labels: Tensor, partner_labels: Tensor, lam: Tensor) -> Tensor:
    """``λ · CE(z, y) + (1 - λ) · CE(z, y_π)`` per sample, float32."""
    lam = lam.float()
    return lam * cross_entropy(logits, labels) + (1.0 - lam) * cross_entropy(logits, partner_labels)


def draw_partners(
    n: int,
    capacity: int,
    world_rank: tuple[int, int],
    gen: torch.Generator,
    device: torch.device,
    members: Tensor | None = None,
) -> Tensor:
    """A mixup partner for each of this process's ``n`` samples: positions in the
    :func:`pool_rows` of the step's batch (of ``world_rank = (size, rank)`` processes of at most
    ``capacity`` samples each), a random bijection of the batch's samples drawn from ``gen``
    (the same draw on every process, and as one process with the global batch draws it). The
    keys are drawn on the host and moved to the device with the batch (no synchronization).
    ``members`` (boolean ``(n,)``): the bijection is one of the members of the step's batch
    (DISC mixes within its selected set), and the others are paired among themselves."""
    size, rank = world_rank
    slots = size * capacity
    count = torch.full((1,), float(n), device=device)
    counts = gather_rows_with_grad(count, 1) if size > 1 else count  # every process's n
    # slot j * size + r holds process r's sample j where j < its count
    valid = (torch.arange(capacity, device=device)[:, None] < counts[None, :]).reshape(-1)
    tier = torch.where(valid, 0, 2)  # padding slots last
    if members is not None:
        member = members.float()
        pooled = gather_rows_with_grad(member, capacity) if size > 1 else member
        if size == 1:
            pooled = torch.cat([pooled, pooled.new_zeros(slots - n)])
        tier = torch.where(valid & (pooled == 0), 1, tier)  # the others among themselves
    keys = torch.rand(slots, generator=gen).to(device, non_blocking=True)
    shuffled = (tier * 2 + keys).argsort()  # each tier's slots together, shuffled
    in_order = torch.argsort(tier, stable=True)  # each tier's slots together, in order
    partner = torch.empty_like(in_order)
    partner[in_order] = shuffled  # a random bijection of each tier's slots
    own = torch.arange(n, device=device) * size + rank
    return partner[own]


def pool_rows(rows: Tensor, capacity: int, size: int) -> Tensor:
    """The ``(size · capacity, ...)`` rows of the step's batch over ``size`` processes from this
    process's ``(n, ...)`` rows, without gradient, padded with zeros (one process: its rows,
    which hold every valid slot)."""
    if size > 1:
        return gather_rows_with_grad(rows.detach(), capacity)
    return rows.detach()


class Mixup(NoisyLabelMethod):
    """mixup: cross-entropy on convex combinations of image pairs and of their labels,
    λ ~ Beta(a, a) per batch (Zhang et al. 2018).

    Args:
        mixup_alpha: ``a`` of ``Beta(a, a)`` (the reference's ``--alpha``: 1); ``<= 0``:
            ``λ = 1``, no mixing (the reference's rule). Not VRNL's ``alpha``.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(self, mixup_alpha: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not math.isfinite(float(mixup_alpha)):
            raise InputError(
                f"--model.mixup_alpha must be a finite number (> 0: Beta(a, a); <= 0: no "
                f"mixing), got {mixup_alpha}"
            )
        self.mixup_alpha = float(mixup_alpha)

    @property
    def mixes(self) -> bool:
        """Whether this step mixes: in the method's stage with ``mixup_alpha > 0``."""
        return self.mixup_alpha > 0 and not self.in_warmup

    # ---------------------------------------------------------------- the loss
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The mixed loss of a training batch mixed by :meth:`training_objective`; the plain
        cross-entropy of any other (validation, the unmixed step of ``mixup_alpha <= 0``)."""
        if PARTNER_KEY not in batch:
            return cross_entropy(logits, batch["label"])
        return mixup_loss(logits, batch["label"], batch[PARTNER_KEY], batch[LAMBDA_KEY])

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The VRNL objective of the mixed batch's per-sample losses, recorded under the
        batch's own indices and labels."""
        if not self.mixes:
            return super().training_objective(batch)
        images, labels = batch["image"], batch["label"]
        partners, lam = self.mix_draw(len(labels), images.device)
        capacity = self.batch_capacity(len(labels))
        partner_images = self.pool(images, capacity)[partners]
        partner_labels = self.pool(labels.float(), capacity)[partners].round().long()
        lam_t = torch.tensor(lam, dtype=torch.float32).to(images.device, non_blocking=True)
        mixed = lam_t.to(images.dtype) * images + (1.0 - lam_t.to(images.dtype)) * partner_images
        mixed_batch = {**batch, "image": mixed, PARTNER_KEY: partner_labels, LAMBDA_KEY: lam_t}
        logits = self(mixed)
        return self.vrnl(self.stage_loss_fn(logits, mixed_batch), logits, batch)

    # ---------------------------------------------------------------- the draw
    def mix_draw(self, n: int, device: torch.device) -> tuple[Tensor, float]:
        """This step's partners of this process's ``n`` samples (positions in the
        :meth:`pool` of the batch) and ``λ``. Drawn from the run's seed and the step, the same
        on every process and as one process with the global batch draws them."""
        seed = (torch.initial_seed() * 1_000_003 + self.global_step) % 2**63
        gen = torch.Generator().manual_seed(seed)
        partners = draw_partners(n, self.batch_capacity(n), self.batch_world(), gen, device)
        return partners, beta_draw(self.mixup_alpha, gen)

    def pool(self, rows: Tensor, capacity: int) -> Tensor:
        """The ``(W · capacity, ...)`` rows of the step's (global) batch from this process's
        ``(n, ...)`` rows, without gradient (see :func:`pool_rows`)."""
        return pool_rows(rows, capacity, self.batch_world()[0])
