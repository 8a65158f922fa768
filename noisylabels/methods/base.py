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
from torchmetrics import MeanMetric
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
        self.val_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.test_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.val_loss = MeanMetric()
        # this process's epoch sums: [loss·n, var·n, objective·n, non-positive weights, n,
        # correct predictions]; not a buffer: DDP broadcasts buffers from rank 0 before every
        # training forward, which would overwrite the other processes' sums
        self.epoch_sums = torch.zeros(6)

    # ---------------------------------------------------------------- what a method defines
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Loss of each sample against its (noisy) label, shape ``(B,)``."""
        raise NotImplementedError

    def variance_losses(
        self, logits: Tensor, batch: dict[str, Tensor], losses: Tensor
    ) -> Tensor | None:
        """The losses whose variance VRNL changes, when its gradient must reach only some
        parameters; ``None`` (default) uses ``losses`` themselves."""
        return None

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
    def in_warmup(self) -> bool:
        """``True`` while the method trains in a plain-CE warm-up stage before its own objective
        (VRNL is off then, and checkpoint selection skips those epochs); ``False`` by default."""
        return False

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
        return self.training_objective(batch)

    def training_objective(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Objective of one training batch, logged: VRNL of the per-sample losses (``alpha`` 0
        during a warm-up) plus :meth:`extra_objective`. Returns ``{"loss", "losses" (detached),
        "logits" (detached), "weights"}``; methods with manual optimization backpropagate
        ``loss`` themselves."""
        logits = self(batch["image"])
        losses = self.per_sample_loss(logits, batch)
        alpha = 0.0 if self.in_warmup else self.alpha
        variance_losses = self.variance_losses(logits, batch, losses) if alpha != 0 else None
        out = vrnl_objective(losses, alpha, self.variance_scope, variance_losses)
        loss = out.objective
        extra = self.extra_objective()
        if extra is not None:
            loss = loss + extra
        # epoch statistics accumulate on the device and are logged once per epoch: per-step
        # self.log calls would cost more than a small model's whole step
        n = losses.new_tensor(float(losses.numel()))
        with torch.no_grad():
            correct = (logits.argmax(1) == batch["label"]).sum()
            step = [out.mean * n, out.variance * n, loss.detach() * n]
            step += [(out.weights <= 0).sum(), n, correct]
            self.epoch_sums += torch.stack([v.float() for v in step])
        return {
            "loss": loss,
            "losses": losses.detach(),
            "logits": logits.detach(),
            "weights": out.weights,
        }

    def on_train_epoch_start(self) -> None:
        self.epoch_sums = torch.zeros(6, device=self.device)

    def on_train_epoch_end(self) -> None:
        sums = self.trainer.strategy.reduce(self.epoch_sums.clone(), reduce_op="sum")
        loss_sum, var_sum, objective_sum, count, total, correct = sums.tolist()
        total = max(total, 1.0)
        frac = count / total
        metrics = {
            "train/loss": loss_sum / total,
            "train/loss_var": var_sum / total,
            "train/objective": objective_sum / total,
            "train/nonpositive_weight_frac": frac,
        }
        self.log_dict(metrics)
        self.log("train/acc", correct / total, prog_bar=True)
        if frac > self.hparams.weight_warning and self.alpha != 0:
            warnings.warn(
                f"alpha={self.alpha}: {frac:.1%} of this epoch's samples got a non-positive VRNL "
                f"weight 1 + 2*alpha*(mean(l) - l_i); lower |alpha| so every weight stays positive",
                stacklevel=1,
            )

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Validation: the method's loss, and the accuracy of ``noisy_posterior(p)`` against
        noisy labels (of ``p`` itself where the data module validates on clean labels)."""
        logits = self(batch["image"])
        self.val_loss.update(self.per_sample_loss(logits, batch))
        probs = F.softmax(logits.float(), dim=1)
        datamodule = getattr(self.trainer, "datamodule", None)
        if not getattr(datamodule, "clean_validation", False):
            probs = self.noisy_posterior(probs)
        self.val_acc.update(probs.argmax(1), batch["label"])

    def on_validation_epoch_end(self) -> None:
        self.log("val/loss", self.val_loss.compute())
        self.log("val/acc", self.val_acc.compute(), prog_bar=True)
        self.val_loss.reset()
        self.val_acc.reset()

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Clean test: accuracy of the clean posterior ``p`` against the clean labels."""
        logits = self(batch["image"])
        self.test_acc.update(logits.argmax(1), batch["label"])

    def on_test_epoch_end(self) -> None:
        self.log("test/acc", self.test_acc.compute())
        self.test_acc.reset()

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
