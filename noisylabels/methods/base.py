"""The shared LightningModule of every method: backbone, optimization, metrics and VRNL.

A method subclasses :class:`NoisyLabelMethod` and defines :meth:`per_sample_loss`; it gets the
VRNL objective ``mean(l) - alpha * Var(l)`` (VRNL paper, Eq. 1) by setting ``alpha``. Methods that
model the noise with a transition matrix also override :meth:`noisy_posterior` (``q = p @ T``,
with ``T`` row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``) and :meth:`transition`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from noisylabels.methods.vrnl import SCOPES, vrnl_objective
from noisylabels.models import build_backbone

OPTIMIZERS = ("sgd", "adam")


class NoisyLabelMethod(L.LightningModule):
    """Base of all methods; trains on the VRNL objective of the method's per-sample losses.

    Args:
        backbone: network name (``lenet5``, ``mlp``, ``resnet18``, ``resnet32``, ``resnet34``,
            ``resnet50``).
        num_classes: number of classes (linked from the data module by the CLI).
        input_shape: ``(C, H, W)`` of the images (linked from the data module by the CLI).
        alpha: VRNL coefficient: ``> 0`` increases the loss variance, ``0`` is the base method,
            ``< 0`` penalizes the variance.
        variance_scope: ``global`` (variance over the batch of all DDP processes) or ``local``.
        optimizer: ``sgd`` (with ``momentum``) or ``adam``.
        lr, momentum, weight_decay: optimizer settings (paper: SGD 0.01, 0.9, 1e-4).
        milestones, lr_gamma: MultiStepLR epochs and factor (paper: 30, 60 and 0.1).
        pretrained: start from ImageNet weights (``resnet50`` only; from torchvision's local
            cache or ``weights_path``).
        weights_path: a state-dict file of pretrained backbone weights.
        backbone_kwargs: extra arguments of the backbone factory (e.g. ``hidden`` of ``mlp``).
        weight_warning: warn when more than this fraction of an epoch's samples get a
            non-positive VRNL weight ``1 + 2 alpha (mean(l) - l_i)``.
        channels_last: run convolutional backbones in channels-last memory format.
    """

    def __init__(
        self,
        backbone: str = "lenet5",
        num_classes: int = 10,
        input_shape: Sequence[int] = (1, 28, 28),
        alpha: float = 0.0,
        variance_scope: str = "global",
        optimizer: str = "sgd",
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        milestones: Sequence[int] = (30, 60),
        lr_gamma: float = 0.1,
        pretrained: bool = False,
        weights_path: str | None = None,
        backbone_kwargs: dict[str, Any] | None = None,
        weight_warning: float = 0.05,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        if variance_scope not in SCOPES:
            raise ValueError(f"variance_scope must be one of {SCOPES}, got {variance_scope!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}")
        self.save_hyperparameters()
        self.num_classes = num_classes
        self.alpha = float(alpha)
        self.variance_scope = variance_scope
        kwargs = dict(backbone_kwargs or {})
        if pretrained or weights_path:
            if backbone != "resnet50":
                raise ValueError(
                    f"pretrained weights are available for resnet50 only, not {backbone!r}; "
                    "set --model.pretrained false"
                )
            kwargs.update(pretrained=True, weights_path=weights_path)
        self.net = build_backbone(backbone, num_classes, tuple(input_shape), **kwargs)
        if channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        # [non-positive weights, samples] of the current epoch on this process
        self.register_buffer("weight_stats", torch.zeros(2), persistent=False)

    # ---------------------------------------------------------------- what a method defines
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Loss of each sample against its (noisy) label, shape ``(B,)``."""
        raise NotImplementedError

    def noisy_posterior(self, probs: Tensor) -> Tensor:
        """Map clean posteriors ``p`` to noisy-label posteriors (``p`` itself by default)."""
        return probs

    def transition(self) -> Tensor | None:
        """The method's current estimate of T (row-stochastic), or ``None``."""
        return None

    def extra_objective(self) -> Tensor | None:
        """A term added to the VRNL objective (e.g. VolMinNet's log-det), or ``None``."""
        return None

    @property
    def method_name(self) -> str:
        """Display name, with ``-VRNL`` where ``alpha`` is non-zero."""
        base = type(self).__name__
        return f"{base}-VRNL" if self.alpha != 0 else base

    # ---------------------------------------------------------------- Lightning
    def forward(self, images: Tensor) -> Tensor:
        if self.hparams.channels_last and images.ndim == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.net(images)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        logits = self(batch["image"])
        losses = self.per_sample_loss(logits, batch)
        out = vrnl_objective(losses, self.alpha, self.variance_scope)
        loss = out.objective
        extra = self.extra_objective()
        if extra is not None:
            loss = loss + extra
        self.weight_stats[0] += (out.weights <= 0).sum()
        self.weight_stats[1] += losses.numel()
        self.train_acc.update(logits.detach().argmax(1), batch["label"])
        self.log_dict(
            {"train/loss": out.mean, "train/loss_var": out.variance, "train/objective": loss},
            on_step=False,
            on_epoch=True,
            batch_size=losses.numel(),
        )
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True)
        return {
            "loss": loss,
            "losses": losses.detach(),
            "logits": logits.detach(),
            "weights": out.weights,
        }

    def on_train_epoch_start(self) -> None:
        self.weight_stats.zero_()

    def on_train_epoch_end(self) -> None:
        stats = self.trainer.strategy.reduce(self.weight_stats.clone(), reduce_op="sum")
        count, total = stats.tolist()
        frac = count / max(total, 1.0)
        self.log("train/nonpositive_weight_frac", frac)
        if frac > self.hparams.weight_warning and self.alpha != 0:
            warnings.warn(
                f"alpha={self.alpha}: {frac:.1%} of this epoch's samples got a non-positive VRNL "
                f"weight 1 + 2*alpha*(mean(l) - l_i); lower |alpha| so every weight stays positive",
                stacklevel=1,
            )

    def _eval_step(self, batch: dict[str, Tensor], metric: MulticlassAccuracy, stage: str) -> None:
        logits = self(batch["image"])
        probs = F.softmax(logits.float(), dim=1)
        if stage == "val":
            losses = self.per_sample_loss(logits, batch)
            preds = self.noisy_posterior(probs).argmax(1)
            self.log("val/loss", losses.mean(), batch_size=losses.numel(), sync_dist=True)
        else:
            preds = probs.argmax(1)
        metric(preds, batch["label"])
        self.log(f"{stage}/acc", metric, prog_bar=True)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.val_acc, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.test_acc, "test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return F.softmax(self(batch["image"]).float(), dim=1)

    # ---------------------------------------------------------------- optimization
    def make_optimizer(self, params: Any, name: str, lr: float, weight_decay: float) -> Any:
        """Build ``sgd`` (with the module's momentum) or ``adam`` over ``params``."""
        if name == "sgd":
            return torch.optim.SGD(
                params, lr=lr, momentum=self.hparams.momentum, weight_decay=weight_decay
            )
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)

    def make_scheduler(self, optimizer: Any) -> Any:
        """MultiStepLR with the module's milestones (shared by every optimizer of a method)."""
        return torch.optim.lr_scheduler.MultiStepLR(
            optimizer, milestones=list(self.hparams.milestones), gamma=self.hparams.lr_gamma
        )

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        opt = self.make_optimizer(self.net.parameters(), hp.optimizer, hp.lr, hp.weight_decay)
        return {"optimizer": opt, "lr_scheduler": self.make_scheduler(opt)}


class CE(NoisyLabelMethod):
    """Standard training: cross-entropy on the noisy labels (the baseline of every table)."""

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(logits.float(), batch["label"], reduction="none")


def frozen_buffer(module: nn.Module, name: str, value: Tensor) -> None:
    """Register (or overwrite in place) a persistent buffer, so it travels in checkpoints."""
    if name in module._buffers and module._buffers[name] is not None:
        module._buffers[name].copy_(value)
    else:
        module.register_buffer(name, value.clone())
