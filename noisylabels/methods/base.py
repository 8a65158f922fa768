"""The shared LightningModule of every method: backbone, optimization, stages, metrics and VRNL.

A method subclasses :class:`NoisyLabelMethod` and defines :meth:`~NoisyLabelMethod.per_sample_loss`;
it gets the VRNL objective ``mean(l) - alpha * Var(l)`` (VRNL paper, Eq. 1) by setting ``alpha``.
What the base owns, so that a method is a small file:

* the objective: :meth:`~NoisyLabelMethod.vrnl` turns per-sample losses (of all samples, or of
  the ones a method selects) into the VRNL objective and records a typed
  :class:`~noisylabels.methods.step.StepOutput` that the epoch statistics and callbacks read;
* the stage schedule: ``warmup_epochs`` of plain cross-entropy (VRNL off, never selected as
  the best checkpoint), an optional estimation point (:meth:`~NoisyLabelMethod.on_main_stage_start`,
  e.g. estimating T̂), then the method's own objective; LR milestones count from the start of
  the method's own stage (``milestones_from: main``) unless set otherwise;
* manual optimization: a method that sets ``automatic_optimization = False`` and returns several
  optimizers from ``configure_optimizers`` has them all stepped once per batch, through the
  precision plugin's loss scaler, with their LR schedulers stepped once per epoch;
* further networks: :meth:`~NoisyLabelMethod.add_network` gives a method a second (third, ...)
  backbone with its own optimizer, validated and tested beside network 0, which stays the one
  model selection and the clean test accuracy use.

Methods that model the noise with a transition matrix also override
:meth:`~NoisyLabelMethod.noisy_posterior` (``q = p @ T``, ``T`` row-stochastic:
``T[i, j] = P(noisy = j | clean = i)``) and :meth:`~NoisyLabelMethod.transition`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from noisylabels.errors import InputError
from noisylabels.methods.acceleration import Acceleration
from noisylabels.methods.networks import Networks
from noisylabels.methods.optim import OPTIMIZERS, Optimization
from noisylabels.methods.stages import StageSchedule
from noisylabels.methods.step import EpochStatistics, StepOutput
from noisylabels.methods.vrnl import SCOPES
from noisylabels.models import build_backbone

MILESTONES_FROM = ("main", "start")


class NoisyLabelMethod(StageSchedule, Optimization, Networks, Acceleration, L.LightningModule):
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
        milestones_from: ``main``: milestones count from the first epoch of the method's own
            stage, after any warm-up; ``start``: from epoch 0.
        warmup_epochs: epochs of plain cross-entropy (VRNL off) before the method's own
            objective, for methods with a warm-up stage.
        warmup_model: which warm-up model the estimation point (T̂) sees: ``last`` epoch's or
            ``best`` (highest noisy-validation accuracy, i.e. early stopping: T-Revision, Dual-T).
        main_stage_init: what the method's own stage starts from: ``continue`` (the last warm-up
            network and its optimizer state; the VRNL paper's Reweight), ``reinit`` (a newly
            initialised network, fresh optimizer state; Patrini's Forward, Dual-T) or
            ``restart`` (the estimation model, fresh optimizer state; T-Revision).
        warmup_momentum: SGD momentum during the warm-up (T-Revision and Dual-T: 0); ``None``
            keeps ``momentum``. The three warm-up options act only in runs with a warm-up.
        pretrained: start from ImageNet weights (``resnet50`` only; from torchvision's local
            cache or ``weights_path``).
        weights_path: a state-dict file of pretrained backbone weights.
        backbone_kwargs: extra arguments of the backbone factory (e.g. ``hidden`` of ``mlp``).
        weight_warning: warn when more than this fraction of an epoch's samples get a
            non-positive VRNL weight ``1 + 2 alpha (mean(l) - l_i)``.
        channels_last: run convolutional backbones in channels-last memory format; ``auto``:
            on CUDA (where it pays with mixed precision), not on the CPU.
        compile: ``torch.compile`` the networks, the per-sample loss and the VRNL arithmetic
            for training and evaluation (see :mod:`noisylabels.methods.acceleration`):
            ``auto`` (on CUDA with CUDA graphs, mode ``reduce-overhead``; not on the CPU,
            where it does not pay), ``true`` (also on the CPU), ``false``, or a mode:
            ``default``, ``reduce-overhead``, ``max-autotune``, ``max-autotune-no-cudagraphs``.
        compile_backend: ``torch.compile`` backend (``inductor``; ``aot_eager`` compiles in
            seconds without generating code, for checking a method under compilation).
    """

    abstract = True  # a base of methods, not one itself (see methods.registry)

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
        milestones_from: str = "main",
        warmup_epochs: int = 0,
        warmup_model: str = "last",
        main_stage_init: str = "continue",
        warmup_momentum: float | None = None,
        pretrained: bool = False,
        weights_path: str | None = None,
        backbone_kwargs: dict[str, Any] | None = None,
        weight_warning: float = 0.05,
        channels_last: bool | str = "auto",
        compile: bool | str = "auto",
        compile_backend: str = "inductor",
    ) -> None:
        super().__init__()
        if variance_scope not in SCOPES:
            raise InputError(
                f"--model.variance_scope must be one of {SCOPES}, got {variance_scope!r}"
            )
        if optimizer not in OPTIMIZERS:
            raise InputError(f"--model.optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if milestones_from not in MILESTONES_FROM:
            raise InputError(
                f"--model.milestones_from must be one of {MILESTONES_FROM}, got {milestones_from!r}"
            )
        if lr <= 0:
            raise InputError(f"--model.lr must be positive, got {lr}")
        if int(warmup_epochs) < 0:
            raise InputError(f"--model.warmup_epochs must be >= 0, got {warmup_epochs}")
        if warmup_momentum is not None and not 0.0 <= warmup_momentum < 1.0:
            raise InputError(f"--model.warmup_momentum must be in [0, 1), got {warmup_momentum}")
        if warmup_momentum is not None and optimizer != "sgd":
            raise InputError(
                f"--model.warmup_momentum is SGD's momentum; optimizer {optimizer!r} has none "
                "(set --model.warmup_momentum null)"
            )
        self.save_hyperparameters()
        self.num_classes = num_classes
        self.alpha = float(alpha)
        self.variance_scope = variance_scope
        self.init_acceleration()
        self.net = self.build_network()
        self.val_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.test_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.init_networks()
        self.val_loss = MeanMetric()
        self.init_stages()
        # epoch statistics live outside the module's buffers: DDP broadcasts buffers from
        # rank 0 before every training forward, which would overwrite the other processes' sums
        self.epoch_stats = EpochStatistics()
        self._steps: list[StepOutput] = []

    #: the name the clean test accuracy is logged under (``run.fit_and_test`` tests the
    #: last-epoch model as ``test/acc_last`` before the selected checkpoint as ``test/acc``)
    test_metric: str = "test/acc"

    def build_network(self) -> nn.Module:
        """A new backbone as the options describe, in the run's memory format (also used to
        add further networks and for fresh weights; ``add_network`` compiles what it adds)."""
        hp = self.hparams
        kwargs = dict(hp.backbone_kwargs or {})
        if hp.pretrained or hp.weights_path:
            if hp.backbone != "resnet50":
                raise InputError(
                    f"pretrained weights are available for resnet50 only, not {hp.backbone!r}; "
                    "set --model.pretrained false"
                )
            kwargs.update(pretrained=True, weights_path=hp.weights_path)
        net = build_backbone(hp.backbone, self.num_classes, tuple(hp.input_shape), **kwargs)
        return self.layout_network(net)

    # ---------------------------------------------------------------- what a method defines
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The method's loss of each sample against its (noisy) label, shape ``(B,)``."""
        raise NotImplementedError

    def noisy_posterior(self, probs: Tensor, index: Tensor | None = None) -> Tensor:
        """Map clean posteriors ``p`` (rows) to noisy-label posteriors (``p`` itself by default).
        ``index``: the samples' dataset indices, for methods whose T depends on the sample."""
        return probs

    def transition(self) -> Tensor | None:
        """The method's current estimate of T (row-stochastic), or ``None``."""
        return None

    @property
    def base_method_name(self) -> str:
        """The method's name without VRNL: its class name unless a variant says more."""
        return type(self).__name__

    @property
    def method_name(self) -> str:
        """Display name (``results.json``'s ``method``), with ``-VRNL`` where ``alpha`` is
        non-zero."""
        base = self.base_method_name
        return f"{base}-VRNL" if self.alpha != 0 else base

    # ---------------------------------------------------------------- the objective
    def vrnl(
        self,
        losses: Tensor,
        logits: Tensor,
        batch: dict[str, Tensor],
        *,
        used: Tensor | None = None,
        variance_losses: Tensor | None = None,
        extra: Tensor | None = None,
        network: int = 0,
    ) -> Tensor:
        """VRNL objective ``mean(l) - alpha * Var(l)`` (+ ``extra``) over the per-sample
        ``losses`` of the samples ``used`` (a boolean mask; all by default), recorded as this
        step's :class:`StepOutput` of ``network``. ``alpha`` is 0 during a warm-up.

        ``variance_losses``: the same losses through another graph, when the variance term must
        reach only some parameters (see :func:`~noisylabels.methods.vrnl.vrnl_objective`).
        """
        alpha = 0.0 if self.in_warmup else self.alpha
        out = self.vrnl_fn(losses, alpha, self.variance_scope, variance_losses, used)
        objective = out.objective if extra is None else out.objective + extra
        keep = self.keep  # the record outlives the step (CUDA graphs reuse their outputs)
        step = StepOutput(
            index=batch["index"],
            labels=batch["label"],
            logits=keep(logits.detach()),
            losses=keep(losses.detach()),
            weights=keep(out.weights),
            used=keep(used),
            objective=keep(objective.detach()),
            mean=keep(out.mean),
            variance=keep(out.variance),
            network=network,
        )
        self._steps.append(step)
        self.epoch_stats.add(step)
        return objective

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The objective of one training batch (with gradient): the VRNL objective of the
        current stage's per-sample losses. Methods with several networks or a sample selection
        override this and call :meth:`vrnl` once per network."""
        logits = self(batch["image"])
        return self.vrnl(self.stage_loss_fn(logits, batch), logits, batch)

    # ---------------------------------------------------------------- Lightning
    def forward(self, images: Tensor) -> Tensor:
        return self.net(self._network_input(images))

    def _network_input(self, images: Tensor) -> Tensor:
        if self.channels_last_active and images.ndim == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return images

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Any]:
        """Compute :meth:`training_objective` (and, under manual optimization, step every
        optimizer); return ``{"loss", "steps"}`` with this batch's :class:`StepOutput` records."""
        self._steps = []
        loss = self.training_objective(batch)
        if not self.automatic_optimization:
            self.manual_step(loss)
        return {"loss": loss, "steps": self._steps}

    def setup(self, stage: str) -> None:
        strategy = getattr(self.trainer, "strategy", None)  # none: the module's own device
        device = self.device if strategy is None else strategy.root_device
        self.resolve_acceleration(device, getattr(self.trainer, "world_size", 1))
        if stage == "fit":
            self.check_stages_fit()

    def on_train_start(self) -> None:
        self.maybe_start_main_stage()

    def on_train_epoch_start(self) -> None:
        self.epoch_stats.reset()
        self.maybe_start_main_stage()

    def on_train_epoch_end(self) -> None:
        by_network = self.epoch_stats.compute(
            lambda t: self.trainer.strategy.reduce(t, reduce_op="sum")
        )
        for network, metrics in by_network.items():
            prefix = "train/" if network == 0 else f"train/net{network}/"
            acc = metrics.pop("acc")
            self.log_dict({prefix + k: v for k, v in metrics.items()})
            self.log(prefix + "acc", acc, prog_bar=network == 0)
        frac = by_network.get(0, {}).get("nonpositive_weight_frac", 0.0)
        if frac > self.hparams.weight_warning and self.alpha != 0:
            warnings.warn(
                f"alpha={self.alpha}: {frac:.1%} of this epoch's samples got a non-positive VRNL "
                f"weight 1 + 2*alpha*(mean(l) - l_i); lower |alpha| so every weight stays positive",
                stacklevel=1,
            )
        if not self.automatic_optimization:
            self.step_schedulers()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Validation: the stage's loss, and the accuracy of ``noisy_posterior(p)`` against
        noisy labels (of ``p`` itself in a warm-up, or where the data module validates on clean
        labels): the accuracy of every network, the loss of network 0."""
        datamodule = getattr(self.trainer, "datamodule", None)
        noisy = not (self.in_warmup or getattr(datamodule, "clean_validation", False))
        for k, accuracy in enumerate(self._accuracies("val")):
            logits = self.network_logits(batch["image"], k)
            if k == 0:
                self.val_loss.update(self.stage_loss_fn(logits, batch))
            probs = F.softmax(logits.float(), dim=1)
            if noisy:
                probs = self.noisy_posterior(probs, batch.get("index"))
            accuracy.update(probs.argmax(1), batch["label"])

    def on_validation_epoch_end(self) -> None:
        self.record_warmup_score(self.val_acc.compute())
        self.log("val/loss", self.val_loss.compute())
        self.val_loss.reset()
        self._log_accuracies("val", prog_bar=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Clean test: accuracy of each network's clean posterior ``p`` against the clean
        labels (``test/acc``: network 0)."""
        for k, accuracy in enumerate(self._accuracies("test")):
            accuracy.update(self.network_logits(batch["image"], k).argmax(1), batch["label"])

    def on_test_epoch_end(self) -> None:
        self._log_accuracies("test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return F.softmax(self(batch["image"]).float(), dim=1)

    @torch.no_grad()
    def training_split_logits(
        self,
        limit: int | float | None = None,
        rank: int = 0,
        world_size: int = 1,
        split: str = "train",
    ) -> Iterator[tuple[dict[str, Tensor], Tensor]]:
        """``(batch, logits)`` over the training split in order, without augmentation, with the
        model in eval mode (restored afterwards): what T estimation and exact training
        statistics run on. ``limit``/``rank``/``world_size``/``split`` (``val``: the noisy
        validation split) as in the data module's ``train_eval_batches``."""
        trainer = self.trainer
        datamodule = trainer.datamodule
        if datamodule is None or not hasattr(datamodule, "train_eval_batches"):
            raise InputError(
                f"{type(self).__name__} needs a NoisyDataModule (with train_eval_batches) to run "
                "the model over the training split"
            )
        modes = {m: m.training for m in self.modules()}
        self.eval()
        try:
            batches = datamodule.train_eval_batches(self.device, limit, rank, world_size, split)
            for batch in batches:
                self.begin_step()
                with trainer.precision_plugin.forward_context():
                    logits = self(batch["image"])
                yield batch, self.keep(logits)
        finally:
            for module, mode in modes.items():
                module.train(mode)

    def configure_callbacks(self) -> list[L.Callback]:
        """The run's own callbacks, so ``Trainer.fit`` records what ``noisylabels fit`` does: the
        noise and its T (``noise.pt``, ``transition.csv``), T̂ and ε_T, the stop on a NaN/Inf
        loss, ``checkpoints/last.ckpt`` to resume from, and whatever the data module needs (e.g.
        a skipped-image report)."""
        from noisylabels.callbacks import (
            DivergenceGuard,
            LastCheckpoint,
            NoiseRecorder,
            TransitionMonitor,
        )

        callbacks: list[L.Callback] = [
            NoiseRecorder(),
            TransitionMonitor(),
            DivergenceGuard(),
            LastCheckpoint(),
        ]
        datamodule = getattr(self._trainer, "datamodule", None)
        extra = getattr(datamodule, "callbacks", None)
        if callable(extra):
            callbacks.extend(extra())
        return callbacks
