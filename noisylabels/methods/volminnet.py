"""VolMinNet (Li et al., "Provably End-to-end Label-Noise Learning without Anchor Points",
ICML 2021): the transition matrix is learned with the classifier, and the volume of T is
minimized.

Parameterization: ``W`` (C x C) starts at ``-kappa``; ``A = I + sigmoid(W) ⊙ (1 - I)`` (diagonal
fixed at 1) and ``T = A`` with each row divided by its sum, so T is row-stochastic
(``T[i, j] = P(noisy=j | clean=i)``) and each diagonal entry is its row's maximum.

Per-sample loss ``l_i = -log((p @ T)_{y~_i} + 1e-12)``; objective
``mean(l) + lam · log|det T| - alpha · Var(l)`` (the variance covers the cross-entropy part
only and its gradient reaches the classifier, not T, as in the VRNL paper; ``alpha != 0`` is
VolMinNet-VRNL). T has its own optimizer (Adam or SGD, lr 0.01, no weight
decay) with the model's LR milestones; both step on every batch (manual optimization).
Validation uses ``p @ T`` against the noisy labels; the test accuracy uses the clean ``p``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.losses import apply_transition, forward_loss
from noisylabels.methods.core.optim import OPTIMIZERS


class VolMinNet(NoisyLabelMethod):
    """Learn T jointly with the classifier, minimizing ``log|det T|`` (Li et al. 2021).

    Args:
        kappa: initial value ``-kappa`` of every entry of ``W`` (paper: 2; 4.5 on CIFAR-100).
        lam: weight λ of ``log|det T|`` (paper: 1e-4).
        t_optimizer: optimizer of T, ``adam`` (MNIST, CIFAR-100) or ``sgd`` (CIFAR-10; with the
            optimizer group's ``momentum``).
        t_lr: learning rate of T (paper: 0.01).
        t_weight_decay: weight decay of T (paper: 0).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.

    Both optimizers step on every batch through the base's shared manual-optimization step; a
    batch counts as one step of Lightning's ``global_step``.
    """

    config_name = "volmin"  # configs/method/volmin.yaml, runs/<dataset>_volmin

    def __init__(
        self,
        kappa: float = 2.0,
        lam: float = 1e-4,
        t_optimizer: str = "adam",
        t_lr: float = 0.01,
        t_weight_decay: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if t_optimizer not in OPTIMIZERS:
            raise InputError(
                f"--model.t_optimizer must be one of {OPTIMIZERS}, got {t_optimizer!r}"
            )
        if t_lr <= 0:
            raise InputError(f"--model.t_lr must be positive, got {t_lr}")
        if lam < 0:
            raise InputError(f"--model.lam (the log-det weight λ) must be >= 0, got {lam}")
        self.automatic_optimization = False
        self.W = nn.Parameter(torch.full((self.num_classes, self.num_classes), -float(kappa)))
        self.register_buffer("off_diagonal", 1.0 - torch.eye(self.num_classes), persistent=False)

    def transition(self) -> Tensor:
        """The current T (row-stochastic, differentiable in ``W``)."""
        A = torch.sigmoid(self.W) * self.off_diagonal + (1.0 - self.off_diagonal)
        return A / A.sum(dim=1, keepdim=True)

    def noisy_posterior(self, probs: Tensor, index: Tensor | None = None) -> Tensor:
        return apply_transition(probs, self.transition())

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return forward_loss(F.softmax(logits.float(), dim=1), self.transition(), batch["label"])

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """``mean(l) + lam · log|det T| - alpha · Var(l)``; the variance term sees the losses
        through a detached T, so VRNL regularizes the classifier only and T learns from
        ``mean(l) + lam · log|det T|`` (VRNL paper, "Work with VolMinNet")."""
        if self.in_warmup:  # a warm-up, where one is asked for, is plain cross-entropy
            return super().training_objective(batch)
        logits = self(batch["image"])
        probs = F.softmax(logits.float(), dim=1)
        T = self.transition()
        labels = batch["label"]
        losses = forward_loss(probs, T, labels)
        # the variance term's own softmax node, so the classifier's gradient sums in the same
        # order as it did when the two losses were computed apart
        detached = (
            forward_loss(F.softmax(logits.float(), dim=1), T.detach(), labels)
            if self.alpha != 0
            else None
        )
        return self.vrnl(losses, logits, batch, variance_losses=detached, extra=self.volume_term())

    def unused_parameters(self) -> list[nn.Parameter]:
        """T's parameters ``W`` in a warm-up (plain cross-entropy)."""
        return [self.W] if self.in_warmup else []

    def volume_term(self) -> Tensor:
        """``lam · log|det T|`` of the current T: minimizing it shrinks the volume of T."""
        return self.hparams.lam * torch.linalg.slogdet(self.transition()).logabsdet

    def configure_optimizers(self) -> Any:
        """The classifier's optimizer and T's own (both step on every batch, with the same
        LR milestones)."""
        hp = self.hparams
        opt_net = self.make_optimizer(self.net.parameters())
        opt_t = self.make_optimizer([self.W], hp.t_optimizer, hp.t_lr, hp.t_weight_decay)
        return [opt_net, opt_t], [self.make_scheduler(opt_net), self.make_scheduler(opt_t)]
