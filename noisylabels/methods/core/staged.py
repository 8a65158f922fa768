"""A LightningModule of one or more networks trained in stages: the networks, and what happens
when the method's own stage begins.

:class:`StagedModule` is the base of :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
Network 0 is ``self.net``; :meth:`StagedModule.add_network` adds network 1, 2, ... (Co-teaching,
MentorNet, Decoupling), each with its own optimizer and accuracies. Its
:class:`~noisylabels.methods.core.stages.StageSchedule` (``self.schedule``) decides *when* a stage
begins and with which settings; this class does *what* a stage change needs: keep the best warm-up
model (``warmup_model: best``), run the estimation point (:meth:`StagedModule.on_main_stage_start`)
on the model the schedule names, re-initialise the networks or restart them from the estimation
model (``main_stage_init``), reset the optimizers and set the stage's momentum. The stage is a
checkpointed buffer, so a resumed run never repeats the estimation point.

A subclass provides ``self.net``, ``self.val_acc``, ``self.test_acc``, ``self.optim`` (its
:class:`~noisylabels.methods.core.optim.OptimizerOptions`) and
:meth:`StagedModule.build_network`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from noisylabels.errors import warn
from noisylabels.methods.core import optim
from noisylabels.methods.core.acceleration import module_setattr
from noisylabels.methods.core.losses import cross_entropy
from noisylabels.methods.core.networks import better_model, load_network_state, network_state
from noisylabels.methods.core.optim import OptimizerOptions
from noisylabels.methods.core.stages import StagedLR, StageSchedule

CHECKPOINT_KEY = "stage_schedule"


class StagedModule(L.LightningModule):
    """A LightningModule of one or more networks whose training has a warm-up stage, the
    method's own stage and a revision stage (each where the run has it)."""

    schedule: StageSchedule
    optim: OptimizerOptions
    net: nn.Module
    val_acc: MulticlassAccuracy
    test_acc: MulticlassAccuracy
    #: the name the clean test accuracy is logged under (``run.fit_and_test`` tests the
    #: last-epoch model as ``test/acc_last`` before the selected checkpoint as ``test/acc``)
    test_metric: str = "test/acc"
    #: the method predicts with the mean logits of its networks (DivideMix, ELR+); otherwise each
    #: network predicts on its own and the method's prediction is network 0's
    ensemble_prediction: bool = False
    __setattr__ = module_setattr  # Lightning's per-hook bookkeeping without nn.Module's checks

    # ---------------------------------------------------------------- what a subclass gives
    def build_network(self) -> nn.Module:
        """A newly initialised network (network 0, those of :meth:`add_network`, and
        ``main_stage_init: reinit``)."""
        raise NotImplementedError

    def compile_network(self, net: nn.Module) -> nn.Module:
        """``net`` laid out (and compiled) as the run's speed settings say."""
        return net

    def network_input(self, images: Tensor) -> Tensor:
        """``images`` in the memory format the networks run in."""
        return images

    @property
    def has_warmup_stage(self) -> bool:
        """Whether this run starts with a plain-CE warm-up stage (the schedule's
        ``warmup_epochs > 0``)."""
        return self.schedule.has_warmup

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The method's own per-sample loss."""
        raise NotImplementedError

    def on_main_stage_start(self) -> None:
        """Called once when the method's own stage begins after a warm-up (the estimation
        point, e.g. of T̂); the model is the warm-up model ``warmup_model`` names."""

    def on_revision_start(self) -> None:
        """Called once when the revision stage begins, on the model ``revision_model`` names
        (e.g. T-Revision sets ΔT to 0)."""

    def revision_parameters(self) -> list[nn.Parameter]:
        """What the revision stage's optimizer moves: every parameter of the method (the
        networks and, e.g., ΔT), as T-Revision's and PTD's revision stages do."""
        return list(self.parameters())

    # ---------------------------------------------------------------- networks
    def add_network(self) -> nn.Module:
        """Add network ``k = len(self.networks)``: a new :meth:`build_network` that the method
        trains beside ``self.net`` (network 0), with its own optimizer and accuracies (logged
        as ``val/net{k}/acc``, ``test/net{k}/acc``). The method then optimizes manually; as
        the networks share no parameter, its objective may be the sum of theirs."""
        net = self.compile_network(self.build_network())
        self.peers.append(net)
        metrics = {
            stage: MulticlassAccuracy(self.num_classes, average="micro", validate_args=False)
            for stage in ("val", "test")
        }
        self.peer_metrics.append(nn.ModuleDict(metrics))
        self.automatic_optimization = False  # one optimizer per network
        return net

    @property
    def networks(self) -> list[nn.Module]:
        """The method's networks: ``self.net`` (network 0), then those of :meth:`add_network`."""
        return [self.net, *self.peers]

    def network_logits(self, images: Tensor, network: int = 0) -> Tensor:
        """Logits of network ``network`` (0: :meth:`forward`)."""
        if network == 0:
            return self(images)
        return self.peers[network - 1](self.network_input(images))

    def prediction_logits(self, images: Tensor, logits: Sequence[Tensor] | None = None) -> Tensor:
        """Logits of the method's prediction: what the clean test scores as ``test/acc``, what
        ``noisylabels predict`` writes and what the test of the run's last epochs records
        first (:class:`~noisylabels.callbacks.tail_test.TailTest`). Network 0's, or with
        :attr:`ensemble_prediction` the mean of every network's; ``logits``: the networks'
        logits of ``images`` where already computed."""
        if not self.ensemble_prediction:
            return logits[0] if logits is not None else self.network_logits(images, 0)
        if logits is None:
            logits = [self.network_logits(images, k) for k in range(len(self.networks))]
        return torch.stack(list(logits)).mean(0)

    def _accuracies(self, stage: str) -> list[MulticlassAccuracy]:
        first = self.val_acc if stage == "val" else self.test_acc
        return [first, *(metrics[stage] for metrics in self.peer_metrics)]

    def _log_accuracies(self, stage: str, prog_bar: bool = False) -> None:
        first = self.test_metric if stage == "test" else f"{stage}/acc"
        for k, accuracy in enumerate(self._accuracies(stage)):
            name = first if k == 0 else first.replace(f"{stage}/", f"{stage}/net{k}/", 1)
            self.log(name, accuracy.compute(), prog_bar=prog_bar and k == 0)
            accuracy.reset()

    # ---------------------------------------------------------------- optimization
    def make_optimizer(
        self,
        params: Any,
        name: str | None = None,
        lr: float | None = None,
        weight_decay: float | None = None,
    ) -> Any:
        """``sgd`` (with the current stage's momentum) or ``adam`` over ``params``: the
        ``optim`` group's optimizer, learning rate and weight decay where not given."""
        o = self.optim
        return optim.make_optimizer(
            params,
            o.optimizer if name is None else name,
            o.lr if lr is None else lr,
            o.weight_decay if weight_decay is None else weight_decay,
            self.stage_momentum(),
        )

    def make_scheduler(self, optimizer: Any) -> Any:
        """The run's learning rate per epoch (:class:`~noisylabels.methods.core.stages.StagedLR`:
        warm-up milestones, then ``multistep`` or ``linear``), for every optimizer of the
        method's stage."""
        trainer = self._trainer
        max_epochs = None if trainer is None else trainer.max_epochs
        main_end = self.schedule.revision_start(max_epochs, self.revision_length())
        own = type(self).lr_factor is not StagedModule.lr_factor
        return StagedLR(
            optimizer,
            self.schedule,
            self.warmup_length(),
            main_end or max_epochs,
            self.lr_factor if own else None,
        )

    def lr_factor(self, epoch: int) -> float:
        """The method's own factor of the learning rate at (absolute) ``epoch``, on top of the
        schedule's (1: none; CORES² divides the rate by ``1 + β_t``)."""
        return 1.0

    def configure_optimizers(self) -> Any:
        """One optimizer (with its LR schedule) per network; several networks train by manual
        optimization, every optimizer stepping once per batch."""
        optimizers = [self.make_optimizer(net.parameters()) for net in self.networks]
        return self.with_revision(optimizers, [self.make_scheduler(o) for o in optimizers])

    def with_revision(self, optimizers: list[Any], schedulers: list[Any]) -> Any:
        """What ``configure_optimizers`` returns for ``optimizers`` and ``schedulers`` of the
        warm-up and the method's stage, with the revision stage's own optimizer (Adam at
        ``revision_lr`` over :meth:`revision_parameters`, constant rate) last where the run has
        a revision stage."""
        if self.has_revision_stage:
            o = self.optim
            params = self.revision_parameters()
            optimizers = [
                *optimizers,
                optim.make_optimizer(params, "adam", o.revision_lr, o.revision_weight_decay),
            ]
        if len(optimizers) == 1:
            return {"optimizer": optimizers[0], "lr_scheduler": schedulers[0]}
        return optimizers, schedulers

    def active_optimizers(self, count: int) -> list[int]:
        """Which of the ``count`` optimizers step in the current stage: the revision's alone in
        the revision stage, the others before it."""
        if not self.has_revision_stage:
            return list(range(count))
        return [count - 1] if self.in_revision else list(range(count - 1))

    # ---------------------------------------------------------------- state
    def init_stage_state(self) -> None:
        """Register the checkpointed stage flag (call in ``__init__`` once ``schedule`` is
        set)."""
        self.peers = nn.ModuleList()  # networks 1, 2, ... of add_network
        self.peer_metrics = nn.ModuleList()
        self.register_buffer("main_started", torch.tensor(False))
        self.register_buffer("revision_started", torch.tensor(False))
        self._main_started = self._revision_started = False
        # warmup_model: best: {"epoch", "score", "state"} of the best warm-up epoch so far;
        # revision_model: best: the same of the method's stage
        self._warmup_best: dict[str, Any] | None = None
        self._main_best: dict[str, Any] | None = None
        self.estimation_epoch: int | None = None
        self.estimate_details: dict[str, Any] | None = None  # what an estimation point found
        self._smoke_split = 0  # fast_dev_run: the batch at which the method's stage begins
        self.register_load_state_dict_post_hook(_sync_stage_flag)

    @property
    def in_warmup(self) -> bool:
        """``True`` while the run is in its warm-up stage: plain cross-entropy, VRNL off, and
        checkpoint selection skips these epochs."""
        return self.has_warmup_stage and not self._main_started

    @property
    def has_revision_stage(self) -> bool:
        """Whether the run ends with a revision stage (the schedule's ``revision_epochs > 0``)."""
        return int(self.schedule.revision_epochs) > 0

    @property
    def in_revision(self) -> bool:
        """``True`` in the revision stage."""
        return self._revision_started

    def revision_length(self) -> int:
        """Revision epochs of this run (none under ``fast_dev_run``)."""
        trainer = self._trainer
        return self.schedule.revision_length(trainer is not None and bool(trainer.fast_dev_run))

    def warmup_length(self) -> int:
        """Warm-up epochs of this run (0 without a warm-up stage, and under ``fast_dev_run`` so
        that every stage runs)."""
        trainer = self._trainer
        return self.schedule.warmup_length(trainer is not None and bool(trainer.fast_dev_run))

    def stage_momentum(self) -> float:
        """The SGD momentum of the current stage (``warmup_momentum`` in a warm-up, if set)."""
        return self.schedule.momentum_of(self.in_warmup, self.optim.momentum)

    def stage_milestones(self) -> list[int]:
        """The LR milestones as absolute epochs (shifted by the warm-up where they count from
        the method's own stage)."""
        return self.schedule.absolute_milestones(self.warmup_length())

    def stage_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Per-sample loss of the current stage: cross-entropy in the warm-up, then the
        method's ``per_sample_loss``."""
        if self.in_warmup:
            return cross_entropy(logits, batch["label"])
        return self.per_sample_loss(logits, batch)

    # ---------------------------------------------------------------- the best models
    def record_warmup_score(self, score: float | Tensor) -> None:
        """At the end of a validation epoch: keep a copy of the model if its noisy-validation
        accuracy ``score`` is the best of its stage so far (the earliest epoch wins a tie), in
        the warm-up with ``warmup_model: best`` and in the method's stage before a revision
        with ``revision_model: best``. A tensor ``score`` is read to the host only then."""
        trainer = self._trainer
        if trainer is not None and trainer.sanity_checking:
            return
        epoch, nets = self.current_epoch, self.networks
        if self.in_warmup and self.schedule.keeps_best_warmup:
            self._warmup_best = better_model(self._warmup_best, score, epoch, nets)
        elif (
            not self.in_warmup
            and not self.in_revision
            and self.revision_length() > 0
            and self.schedule.revision_model == "best"
        ):
            self._main_best = better_model(self._main_best, score, epoch, nets)

    def network_state(self, device: str | torch.device | None = None) -> dict[str, Any]:
        """A copy of the networks' weights and buffers by name."""
        return network_state(self.networks, device)

    def load_network_state(self, state: Mapping[str, Any]) -> None:
        """Load :meth:`network_state` output into the networks, in place."""
        load_network_state(self.networks, state)

    # ---------------------------------------------------------------- the stage change
    def plan_smoke_test(self) -> None:
        """At the start of training: under ``fast_dev_run`` with a warm-up stage, the method's
        own stage begins within the one epoch (:meth:`StageSchedule.smoke_warmup_batches`)."""
        trainer = self._trainer
        batches = trainer.num_training_batches if trainer and trainer.fast_dev_run else 0
        self._smoke_split = self.schedule.smoke_warmup_batches(batches)

    def maybe_start_main_stage(self, batch_idx: int | None = None) -> bool:
        """Begin the method's own stage if the warm-up is over: at a training epoch's start, or
        at the batch ``batch_idx`` a ``fast_dev_run`` planned (one comparison per step else).
        Returns whether it began now."""
        split = self._smoke_split
        if (batch_idx == split if split else batch_idx is None) and self.in_warmup:
            if split or self.schedule.main_starts(self.current_epoch, self.warmup_length()):
                self.start_main_stage()
                return True
        return False

    def start_main_stage(self) -> None:
        """Begin the method's own stage now: the estimation point on the warm-up model that
        ``warmup_model`` names, then the network and optimizer state that ``main_stage_init``
        names, with the main stage's momentum."""
        init = self.schedule.main_stage_init
        best, last = self._warmup_best, None
        self.estimation_epoch = self.current_epoch - 1 if self.warmup_length() > 0 else None
        if best is not None:
            if init == "continue":
                last = self.network_state()
            self.load_network_state(best["state"])
            self.estimation_epoch = best["epoch"]
            rank_zero_info(
                f"{type(self).__name__}: the warm-up model of epoch {best['epoch']} "
                f"(best noisy-validation accuracy, {best['score']:.4f}) is the estimation model"
            )
        elif self.schedule.keeps_best_warmup and self.warmup_length() > 0:
            warn(
                "warmup_model: best, but no warm-up epoch was validated; the last warm-up epoch's "
                "model is used (validate every epoch: --trainer.check_val_every_n_epoch 1)",
                every_process=True,
            )
        self.on_main_stage_start()
        if last is not None:
            self.load_network_state(last)
        if init == "reinit":
            self.reinit_networks()
        optimizers = self._torch_optimizers()
        if init != "continue":
            optim.reset_state(optimizers)
        optim.set_momentum(optimizers, self.optim.momentum)
        self._warmup_best = None
        self.main_started.fill_(True)
        self._main_started = True

    def maybe_start_revision_stage(self) -> None:
        """Begin the revision stage if its first epoch has come (at a training epoch's start)."""
        trainer = self._trainer
        if self.in_revision or self.in_warmup or trainer is None:
            return
        start = self.schedule.revision_start(trainer.max_epochs, self.revision_length())
        if start is not None and self.current_epoch >= start:
            self.start_revision_stage()

    def start_revision_stage(self) -> None:
        """Begin the revision stage now: the best (or last) model of the method's stage,
        :meth:`on_revision_start`, and a fresh state for the revision's own optimizer."""
        best = self._main_best
        if best is not None and self.schedule.revision_model == "best":
            self.load_network_state(best["state"])
            rank_zero_info(
                f"{type(self).__name__}: the revision starts from the model of epoch "
                f"{best['epoch']} (best noisy-validation accuracy, {best['score']:.4f})"
            )
        self.on_revision_start()
        optimizers = self._torch_optimizers()
        if optimizers:
            optim.reset_state(optimizers[-1:])
        self._main_best = None
        self.revision_started.fill_(True)
        self._revision_started = True

    def reinit_networks(self) -> None:
        """Give the networks newly initialised weights (:meth:`build_network`), in place (the
        optimizers keep their parameters) and identical on every process."""
        fresh = {
            f"net{k}" if k else "net": self.build_network().state_dict()
            for k in range(len(self.networks))
        }
        trainer = self._trainer
        if trainer is not None:
            fresh = trainer.strategy.broadcast(fresh, src=0)
        self.load_network_state(fresh)

    def _torch_optimizers(self) -> list[Any]:
        return list(self._trainer.optimizers) if self._trainer is not None else []

    def check_stages_fit(self) -> None:
        """Refuse a run that trains nothing or no epoch of its own stage (not fast_dev_run)."""
        trainer = self._trainer
        if trainer is None or trainer.fast_dev_run:
            return
        self.schedule.check_fits(
            self.warmup_length(),
            self.revision_length(),
            max_epochs=trainer.max_epochs,
            max_steps=getattr(trainer, "max_steps", -1),
            limit_train_batches=getattr(trainer, "limit_train_batches", None),
        )

    # ---------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # the best warm-up model so far (a run resumed in its warm-up still estimates from it)
        # and the epoch T̂ was estimated from
        checkpoint[CHECKPOINT_KEY] = {
            "warmup_best": self._warmup_best,
            "main_best": self._main_best,
            "estimation_epoch": self.estimation_epoch,
            "estimate_details": self.estimate_details,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # checkpoints written before the stage schedule was shared kept the flag as ``t_ready``
        state = checkpoint.get("state_dict")
        if state is not None and "main_started" not in state:
            state["main_started"] = state.pop("t_ready", torch.tensor(False))
        if state is not None:  # checkpoints from before the revision stage existed
            state.setdefault("revision_started", torch.tensor(False))
        saved = checkpoint.get(CHECKPOINT_KEY)
        if isinstance(saved, Mapping):
            self._warmup_best = saved.get("warmup_best")
            self._main_best = saved.get("main_best")
            self.estimation_epoch = saved.get("estimation_epoch")
            self.estimate_details = saved.get("estimate_details")


def _sync_stage_flag(module: nn.Module, incompatible_keys: Any) -> None:
    """After ``load_state_dict``: mirror the loaded stage buffers in the Python flags."""
    module._main_started = bool(module.main_started)
    module._revision_started = bool(module.revision_started)
