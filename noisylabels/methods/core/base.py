"""The shared LightningModule of every method: backbone(s), optimization, stages, metrics, VRNL.

A method subclasses :class:`NoisyLabelMethod` and defines :meth:`~NoisyLabelMethod.per_sample_loss`;
it gets the VRNL objective ``mean(l) - alpha * Var(l)`` (VRNL paper, Eq. 1) by setting ``alpha``:
:meth:`~NoisyLabelMethod.vrnl` turns per-sample losses (of all samples, or of those a method
selects) into the objective and records a typed :class:`~noisylabels.methods.core.step.StepOutput`
for the epoch statistics and callbacks. Networks, stages and optimizers are the base's base
(:mod:`~noisylabels.methods.core.staged`), speed an object it holds
(:mod:`~noisylabels.methods.core.acceleration`). A method reads its data's facts (true T, noise
rate, evaluation batches) through :meth:`~NoisyLabelMethod.data_facts`; what a run records is
attached by :mod:`noisylabels.run`. Methods with a transition matrix also override
:meth:`~NoisyLabelMethod.noisy_posterior` (``q = p @ T``, ``T`` row-stochastic:
``T[i, j] = P(noisy = j | clean = i)``) and :meth:`~NoisyLabelMethod.transition`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from noisylabels.errors import InputError
from noisylabels.methods.core import optim
from noisylabels.methods.core.acceleration import Acceleration, SpeedOptions
from noisylabels.methods.core.distributed import drop_gradients, with_zero_gradients, world
from noisylabels.methods.core.evaluation import TrainingPass, split_logits, training_pass
from noisylabels.methods.core.groups import option_group
from noisylabels.methods.core.inert import no_effect, refuse_inert
from noisylabels.methods.core.losses import cross_entropy
from noisylabels.methods.core.networks import NetworkOptions
from noisylabels.methods.core.optim import OptimizerOptions
from noisylabels.methods.core.staged import StagedModule
from noisylabels.methods.core.stages import StageSchedule
from noisylabels.methods.core.step import EpochStatistics, StepOutput, named_metrics
from noisylabels.methods.core.vrnl import (
    FORMS,
    SCOPES,
    check_variance_samples,
    warn_nonpositive_weights,
)
from noisylabels.noise import DataFacts, data_facts_of, estimation_error

OPTIM_DEFAULTS = {field.name: field.default for field in dataclasses.fields(OptimizerOptions)}


class NoisyLabelMethod(StagedModule):
    """Base of all methods; trains on the VRNL objective of the method's per-sample losses.

    Args:
        num_classes: number of classes (linked from the data module by the CLI).
        input_shape: ``(C, H, W)`` of the images (linked from the data module by the CLI).
        network: what each network is: the backbone, its own arguments, pretrained weights.
        alpha: VRNL coefficient: ``> 0`` increases the loss variance, ``0`` is the base method,
            ``< 0`` penalizes the variance.
        variance_scope: ``global`` (variance over the batch of all DDP processes) or ``local``.
        vrnl_form: ``paper`` (the gradient of ``mean(l) - alpha * Var(l)``) or ``bounded`` (the
            same objective with every sample's weight ``1 + 2 alpha (mean(l) - l_i)`` floored
            at 0 in its gradient, so that no sample's loss is pushed up).
        schedule: the stages (warm-up, the method's own, revision), their lengths and the
            learning rate of every epoch.
        optim: the optimizer (paper: SGD, lr 0.01, momentum 0.9, weight decay 1e-4).
        speed: how the networks run (compiled, channels-last); never what they compute.
        weight_warning: warn when more than this fraction of an epoch's samples get a
            non-positive VRNL weight ``1 + 2 alpha (mean(l) - l_i)``.

    The option groups are given as their dataclasses or as mappings of their options (a
    checkpoint's hyperparameters hold them as mappings).
    """

    abstract = True  # a base of methods, not one itself (see methods.core.registry)
    config_name: str | None = None
    """The stem of the method's config group (``configs/method/<name>.yaml``) where it is not the
    class name in lower case: its runs' default folder is ``runs/<dataset>_<name>``
    (:func:`noisylabels.compose.default_root_dir`). A class's own: a subclass names its own."""
    views_needed: int = 1
    """Augmented views of every image the method's training batches need (``--data.views``;
    DivideMix: 2); a run whose data serves fewer is refused before training."""
    strong_views_needed: int = 0
    """Strongly augmented views of every image the method's training batches need
    (``--data.strong_views``; SOP+: 1); a run whose data serves another number is refused."""

    @classmethod
    def data_options(cls) -> list[str]:
        """The command-line options the method's data needs beyond a dataset's defaults (its
        views, its strong views): what its config group sets, for runs composed without it."""
        options = []
        if cls.views_needed > 1:
            options += ["--data.views", str(cls.views_needed)]
        if cls.strong_views_needed > 0:
            options += ["--data.strong_views", str(cls.strong_views_needed)]
        return options

    def __init__(
        self,
        num_classes: int = 10,
        input_shape: Sequence[int] = (1, 28, 28),
        network: NetworkOptions = NetworkOptions(),
        alpha: float = 0.0,
        variance_scope: str = "global",
        vrnl_form: str = "paper",
        schedule: StageSchedule = StageSchedule(),
        optim: OptimizerOptions = OptimizerOptions(),
        speed: SpeedOptions = SpeedOptions(),
        weight_warning: float = 0.05,
    ) -> None:
        super().__init__()
        if variance_scope not in SCOPES:
            raise InputError(
                f"--model.variance_scope must be one of {SCOPES}, got {variance_scope!r}"
            )
        if vrnl_form not in FORMS:
            raise InputError(f"--model.vrnl_form must be one of {FORMS}, got {vrnl_form!r}")
        self.network_options = option_group("network", network)
        self.schedule = option_group("schedule", schedule)
        self.optim = option_group("optim", optim)
        speed = option_group("speed", speed)
        if self.schedule.warmup_momentum is not None and self.optim.optimizer != "sgd":
            raise InputError(
                "--model.schedule.warmup_momentum is SGD's momentum; --model.optim.optimizer "
                f"{self.optim.optimizer!r} has none (set --model.schedule.warmup_momentum null)"
            )
        for name in ("revision_lr", "revision_weight_decay"):
            value, default = getattr(self.optim, name), OPTIM_DEFAULTS[name]
            if value != default and int(self.schedule.revision_epochs) == 0:
                reason = "there is no revision stage (--model.schedule.revision_epochs 0)"
                raise no_effect(f"--model.optim.{name}", value, reason, default)
        self.save_hyperparameters()
        groups = {
            "network": self.network_options,
            "schedule": self.schedule,
            "optim": self.optim,
            "speed": speed,
        }
        # the groups as plain mappings: a checkpoint's hyperparameters load weights-only
        self.save_hyperparameters({k: dataclasses.asdict(v) for k, v in groups.items()})
        self.num_classes = num_classes
        self.alpha = float(alpha)
        self.variance_scope = variance_scope
        self.vrnl_form = vrnl_form
        self.speed = Acceleration(speed.compile, speed.compile_backend, speed.channels_last)
        self.stage_loss_fn = self.stage_loss
        self.net = self.build_network()
        self.val_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.test_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.val_loss = MeanMetric()
        self.init_stage_state()
        if self.has_revision_stage:
            self.automatic_optimization = False  # the revision's own optimizer
        # epoch statistics live outside the module's buffers: DDP broadcasts buffers from
        # rank 0 before every training forward, which would overwrite the other processes' sums
        self.epoch_stats = EpochStatistics()
        self._steps: list[StepOutput] = []

    def build_network(self) -> nn.Module:
        """A new backbone as the options describe, in the run's memory format (also used to
        add further networks and for fresh weights; ``add_network`` compiles what it adds)."""
        net = self.network_options.build(self.num_classes, self.hparams.input_shape)
        return self.speed.layout(net)

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

    # ---------------------------------------------------------------- data and T̂
    def data_facts(self) -> DataFacts | None:
        """What this method may know of the run's data (``None`` outside a run, or with a data
        module that is not a noisylabels one)."""
        trainer = self._trainer
        return None if trainer is None else data_facts_of(trainer.datamodule)

    def transition_estimate(self) -> Tensor | None:
        """The current T̂ (detached, float, CPU), or ``None`` if the method has none (yet)."""
        T = self.transition()
        return None if T is None else T.detach().float().cpu()

    def t_estimation_error(self, T_hat: Tensor | None = None) -> float | None:
        """ε_T = ‖T − T̂‖₁,₁ / ‖T‖₁,₁ between the data's true T and ``T_hat`` (default: the
        current T̂), or ``None`` where either is unknown. The one place ε_T is computed."""
        facts = self.data_facts()
        T_hat = self.transition_estimate() if T_hat is None else T_hat.detach().float().cpu()
        if facts is None or facts.transition is None or T_hat is None:
            return None
        return estimation_error(facts.transition.detach().float().cpu(), T_hat)

    # ---------------------------------------------------------------- the objective
    def samples_per_variance(self, batch_size: int) -> int:
        """How many losses the variance of one training step covers when a batch holds
        ``batch_size`` samples (all of them by default; a method that selects samples says how
        many it keeps)."""
        return batch_size

    def inert_options(self) -> list[tuple[str, str]]:
        """``(name, reason)`` of each of the method's own options that this run would never
        use, given its other options and the length of its stage (none by default; a method
        with conditional options lists them). :meth:`check_options_used` refuses those given a
        value other than their default (:mod:`~noisylabels.methods.core.inert`). The base's:
        the variance term's options where there is no variance term (``alpha`` 0)."""
        if self.alpha != 0:
            if self.vrnl_form == "bounded":
                reason = (
                    "vrnl_form is bounded: no weight is negative (each is floored at 0), so "
                    "there is nothing to warn of"
                )
                return [("weight_warning", reason)]
            return []
        reason = "alpha is 0: the base method, with no variance term"
        return [("variance_scope", reason), ("vrnl_form", reason), ("weight_warning", reason)]

    def val_loss_changes(self) -> str | None:
        """Why this run's validation loss (``val/loss``: the method's per-sample loss on the
        noisy validation set) is not one function of the model over the epochs of the method's
        stage — a term weighted by a schedule, a loss switched mid-stage —, so that the losses
        of two epochs do not compare and ``--checkpoint.monitor val/loss`` is refused
        (:class:`~noisylabels.run.checkpoints.WarmupAwareCheckpoint`); ``None`` (the default):
        it is."""
        return None

    def check_options_used(self) -> None:
        """Refuse an option given a value the run would never use (:meth:`inert_options`);
        not under ``fast_dev_run``, whose one epoch of each stage is no run of the method."""
        trainer = self._trainer
        if trainer is not None and trainer.fast_dev_run:
            return
        refuse_inert(self, self.inert_options())

    def check_views(self) -> None:
        """Refuse a run whose training batches hold fewer augmented views than
        :attr:`views_needed`, or more (drawn every step and never used)."""
        facts = self.data_facts()
        if facts is not None and facts.views < self.views_needed:
            raise InputError(
                f"{type(self).__name__} trains on {self.views_needed} augmented views of every "
                f"image, but the data serves {facts.views}: add --data.views "
                f"{self.views_needed} (the method's config group and presets set it)"
            )
        if facts is not None and facts.views > self.views_needed:
            raise InputError(
                f"--data.views {facts.views} would have no effect: {type(self).__name__} trains "
                f"on {self.views_needed} augmented view(s) of every image, and the others would "
                f"be drawn every step and never used. Give --data.views {self.views_needed}"
            )
        needed = self.strong_views_needed
        if facts is not None and facts.strong_views != needed:
            if needed == 0:
                raise InputError(
                    f"--data.strong_views {facts.strong_views} would have no effect: "
                    f"{type(self).__name__} trains on no strongly augmented view, and they "
                    "would be drawn every step and never used. Drop --data.strong_views (and "
                    "--data.strong_augment, --data.cutout)"
                )
            raise InputError(
                f"{type(self).__name__} trains on {needed} strongly augmented view(s) of every "
                f"image, but the data serves {facts.strong_views}: give --data.strong_views "
                f"{needed} (the method's config group and presets set it)"
            )

    def check_variance_samples(self, world_size: int = 1) -> None:
        """Refuse VRNL where the variance of a step's losses covers fewer than 2 samples
        (:func:`~noisylabels.methods.core.vrnl.check_variance_samples`)."""
        facts = self.data_facts()
        if self.alpha == 0 or facts is None or facts.batch_size is None:
            return
        check_variance_samples(
            self.alpha,
            int(facts.batch_size),
            world_size,
            self.variance_scope,
            self.samples_per_variance,
            type(self).__name__,
            self.base_method_name,
        )

    def batch_world(self) -> tuple[int, int]:
        """``(size, rank)`` of the processes whose batches make the step's batch for a rule
        that pairs or pools samples (mixup's permutation): every DDP process with the global
        variance scope, this process alone with the local one."""
        return world() if self.variance_scope == "global" else (1, 0)

    def batch_capacity(self, n: int) -> int:
        """The most samples a process's batch holds (the data's batch size, at least this
        process's ``n``): the rows per process of a pool of the step's batch."""
        facts = self.data_facts()
        capacity = n if facts is None or facts.batch_size is None else int(facts.batch_size)
        return max(capacity, n)

    def check_variance_accumulation(self, accumulate_grad_batches: int) -> None:
        """Refuse VRNL with gradient accumulation: the variance would be each accumulated
        part's, and the objective the mean of the parts' ``mean - alpha * Var`` rather than
        the batch's (the mean alone accumulates exactly)."""
        if self.alpha == 0 or int(accumulate_grad_batches) <= 1:
            return
        raise InputError(
            f"--trainer.accumulate_grad_batches {accumulate_grad_batches} with VRNL (--model."
            f"alpha {self.alpha:g}): each accumulated part of a batch would have a variance of "
            "its own, so the run would train on the mean of the parts' mean - alpha * Var, not "
            "on the batch's. Give the whole batch at once (--data.batch_size), or alpha 0"
        )

    def vrnl(
        self,
        losses: Tensor,
        logits: Tensor,
        batch: dict[str, Tensor],
        *,
        used: Tensor | None = None,
        variance_losses: Tensor | None = None,
        extra: Tensor | None = None,
        scale: Tensor | None = None,
        network: int = 0,
    ) -> Tensor:
        """VRNL objective ``mean(l) - alpha * Var(l)`` (times ``scale``, + ``extra``) over the
        per-sample ``losses`` of the samples ``used`` (a boolean mask; all by default),
        recorded as this step's :class:`StepOutput` of ``network``. ``alpha`` is 0 during a
        warm-up. ``scale``: a detached factor (DISC's share of the batch that is selected).

        ``variance_losses``: the same losses through another graph, when the variance term must
        reach only some parameters (see :func:`~noisylabels.methods.core.vrnl.vrnl_objective`).
        """
        alpha = 0.0 if self.in_warmup else self.alpha
        out = self.speed.vrnl_fn(
            losses, alpha, self.variance_scope, variance_losses, used, self.vrnl_form
        )
        objective = out.objective if scale is None else out.objective * scale
        objective = objective if extra is None else objective + extra
        keep = self.speed.keep  # the record outlives the step (CUDA graphs reuse outputs)
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
        self.record_step(step)
        return objective

    def record_step(self, step: StepOutput) -> None:
        """Hand ``step`` to this batch's records and the epoch statistics (:meth:`vrnl` does it
        for the objective it computes; a method whose one objective trains several networks,
        JoCoR, records each network's step)."""
        self._steps.append(step)
        self.epoch_stats.add(step)

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The objective of one training batch (with gradient): the VRNL objective of the
        current stage's per-sample losses. Methods with several networks or a sample selection
        override this and call :meth:`vrnl` once per network."""
        logits = self(batch["image"])
        return self.vrnl(self.stage_loss_fn(logits, batch), logits, batch)

    # ---------------------------------------------------------------- speed
    def compile_network(self, net: nn.Module) -> nn.Module:
        return self.speed.compile_network(net)

    def network_input(self, images: Tensor) -> Tensor:
        return self.speed.network_input(images)

    def resolve_acceleration(
        self, device: torch.device, world_size: int = 1, accumulate: int = 1
    ) -> None:
        """Resolve the speed options for ``device``, ``world_size`` processes and gradient
        accumulation over ``accumulate`` batches, and compile what they ask (once)."""
        collective = world_size > 1 and self.variance_scope == "global"
        self.stage_loss_fn = self.speed.resolve(
            device,
            self.networks,
            self.stage_loss,
            collective,
            type(self).__name__,
            world_size=world_size,
            accumulate=accumulate,
        )

    # ---------------------------------------------------------------- Lightning
    def forward(self, images: Tensor) -> Tensor:
        return self.net(self.speed.network_input(images))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Any]:
        """Compute :meth:`training_objective` (and, under manual optimization, step every
        optimizer); return ``{"loss", "steps"}`` with this batch's :class:`StepOutput` records."""
        self._steps = []
        loss = self.training_objective(batch)
        if world()[0] > 1:  # DDP's reducer expects a gradient of every parameter
            loss = with_zero_gradients(loss, self.unused_parameters())
        if not self.automatic_optimization:
            count = len(self.trainer.optimizers)
            optim.manual_step(self, loss, self.active_optimizers(count))
        return {"loss": loss, "steps": self._steps}

    def setup(self, stage: str) -> None:
        strategy = getattr(self.trainer, "strategy", None)  # none: the module's own device
        device = self.device if strategy is None else strategy.root_device
        world_size = getattr(self.trainer, "world_size", 1)
        accumulate = getattr(self.trainer, "accumulate_grad_batches", 1)
        self.resolve_acceleration(device, world_size, accumulate)
        if stage == "fit":
            self.check_stages_fit()
            self.check_options_used()
            self.check_views()
            self.check_variance_samples(world_size)
            self.speed.check_accumulation(accumulate)
            self.check_variance_accumulation(accumulate)

    def on_fit_start(self) -> None:  # after DDP's SyncBatchNorm swap
        self.speed.leave_collectives_eager(self.networks)

    def unused_parameters(self) -> list[nn.Parameter]:
        """Parameters this stage's objective does not reach (zero gradients under DDP)."""
        return []

    def on_after_backward(self) -> None:
        drop_gradients(self.unused_parameters() if world()[0] > 1 else [])

    def on_train_start(self) -> None:
        self.plan_smoke_test()
        self.maybe_start_main_stage()

    def on_train_epoch_start(self) -> None:
        self.epoch_stats.reset()
        self.maybe_start_main_stage()
        self.maybe_start_revision_stage()
        self.maybe_training_pass()

    def on_train_epoch_end(self) -> None:
        by_network = self.epoch_stats.compute(
            lambda t: self.trainer.strategy.reduce(t, reduce_op="sum")
        )
        for name, value in named_metrics(by_network).items():
            self.log(name, value, prog_bar=name == "train/acc")
        frac = by_network.get(0, {}).get("nonpositive_weight_frac", 0.0)
        if self.vrnl_form == "paper":  # the bounded form floors them at 0 by design
            warn_nonpositive_weights(frac, self.alpha, self.hparams.weight_warning)
        if not self.automatic_optimization:
            optim.step_schedulers(self)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """A ``fast_dev_run``'s planned main-stage start (with the pass over the training set
        where the method asks for one), then a CUDA-graph step boundary."""
        if self.maybe_start_main_stage(batch_idx):
            self.maybe_training_pass()
        self.speed.begin_step()

    # ---------------------------------------------------------------- a pass over the training set
    def wants_training_pass(self) -> bool:
        """Whether the current training epoch starts with a pass over the whole training split
        (:meth:`on_training_pass`); asked at the start of every training epoch, after any
        stage change (and where a ``fast_dev_run`` begins the method's stage mid-epoch). No
        method asks by default."""
        return False

    def training_pass_value(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The per-sample value the pass records of each network, ``(B,)``: the cross-entropy
        of the eval-mode, unaugmented logits against the noisy label."""
        return cross_entropy(logits, batch["label"])

    def on_training_pass(self, result: TrainingPass) -> None:
        """The pass's values of every network and training index, the same on every process
        (:func:`~noisylabels.methods.core.evaluation.training_pass`)."""

    def maybe_training_pass(self) -> None:
        """Run the pass over the training split and hand it to :meth:`on_training_pass` if the
        method asks for it now."""
        if self.wants_training_pass():
            facts = self.data_facts()
            self.on_training_pass(training_pass(self, facts, self.training_pass_value))

    def on_validation_batch_start(self, *args: Any) -> None:
        """A CUDA-graph step boundary before every evaluation batch."""
        self.speed.begin_step()

    on_test_batch_start = on_predict_batch_start = on_validation_batch_start

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Every network's accuracy of ``noisy_posterior(p)`` against noisy labels (of ``p`` in a
        warm-up or on clean validation labels), and network 0's stage loss. With
        :attr:`ensemble_prediction`: ``val/acc`` and ``val/loss`` (cross-entropy) of the
        method's prediction, the averaged logits, and each further network's accuracy."""
        if self.ensemble_prediction:
            self.ensemble_validation_step(batch)
            return
        facts = self.data_facts()
        noisy = not (self.in_warmup or (facts is not None and facts.clean_validation))
        for k, accuracy in enumerate(self._accuracies("val")):
            logits = self.network_logits(batch["image"], k)
            if k == 0:
                self.val_loss.update(self.stage_loss_fn(logits, batch))
            probs = F.softmax(logits.float(), dim=1)
            if noisy:
                probs = self.noisy_posterior(probs, batch.get("index"))
            accuracy.update(probs.argmax(1), batch["label"])

    def ensemble_validation_step(self, batch: dict[str, Tensor]) -> None:
        """Validation of a method whose prediction averages its networks' logits."""
        images, labels = batch["image"], batch["label"]
        logits = [self.network_logits(images, k) for k in range(len(self.networks))]
        ensemble = self.prediction_logits(images, logits)
        self.val_loss.update(cross_entropy(ensemble, labels))
        for k, accuracy in enumerate(self._accuracies("val")):
            accuracy.update((ensemble if k == 0 else logits[k]).argmax(1), labels)

    def on_validation_epoch_end(self) -> None:
        self.record_warmup_score(self.val_acc.compute())
        self.log("val/loss", self.val_loss.compute())
        self.val_loss.reset()
        self._log_accuracies("val", prog_bar=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Clean test: accuracy of the method's prediction (``test/acc``:
        :meth:`prediction_logits`) and of each further network's clean posterior ``p``
        (``test/net{k}/acc``) against the clean labels."""
        images = batch["image"]
        logits = [self.network_logits(images, k) for k in range(len(self.networks))]
        logits[0] = self.prediction_logits(images, logits)
        for k, accuracy in enumerate(self._accuracies("test")):
            accuracy.update(logits[k].argmax(1), batch["label"])

    def on_test_epoch_end(self) -> None:
        self._log_accuracies("test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return F.softmax(self.prediction_logits(batch["image"]).float(), dim=1)

    def training_split_logits(
        self, limit: float | None = None, rank: int = 0, world_size: int = 1, split: str = "train"
    ) -> Iterator[tuple[dict[str, Tensor], Tensor]]:
        """``(batch, logits)`` of network 0 over the training split (see
        :func:`~noisylabels.methods.core.evaluation.split_logits`)."""
        return split_logits(self, self.data_facts(), limit, rank, world_size, split)
