"""When a method's stages begin: warm-up → estimation point → the method's own objective
(→ revision), and the learning rate of every epoch.

A run of a method with a warm-up stage trains ``warmup_epochs`` of plain cross-entropy on the
noisy labels (VRNL off; checkpoint selection skips these epochs), then reaches the estimation
point (e.g. of T̂) once and trains the method's own objective. Methods without a warm-up start
in their own stage. With ``revision_epochs > 0`` the last epochs of the run are a revision stage
(T-Revision, PTD: the transition matrix is revised together with the network by its own
optimizer, from the best or last model of the method's stage).

:class:`StageSchedule` is a plain object that *decides*: whether an epoch is a warm-up epoch,
when the method's own stage begins, the warm-up's momentum, the LR milestones as absolute epochs
and which model the estimation point and the method's stage start from. What happens at a stage
change (loading the best warm-up model, re-initialising networks, resetting optimizers) is the
method's (:class:`~noisylabels.methods.core.base.NoisyLabelMethod`); the schedule never calls
back into it.

Three options decide what the estimation point sees and what the method's own stage starts
from; the references of the field differ here (docs/methods.md):

* ``warmup_model``: ``last`` (the model of the last warm-up epoch) or ``best`` (the warm-up
  epoch with the best noisy-validation accuracy: early stopping, as T-Revision's and Dual-T's
  code estimate T̂);
* ``main_stage_init``: ``continue`` (the last warm-up network and its optimizer state; the VRNL
  paper's Reweight is "further optimized"), ``reinit`` (newly initialised network(s) and fresh
  optimizer state; Patrini et al.'s Forward and the Dual-T code) or ``restart`` (the network T̂
  was estimated from, fresh optimizer state; T-Revision);
* ``warmup_momentum``: the SGD momentum of the warm-up (T-Revision and Dual-T warm up without
  momentum); ``null`` keeps ``momentum``.

The learning rate (:class:`StagedLR`): constant in the warm-up but for ``warmup_milestones``
(Dual-T: ÷10 after 50 epochs); back to ``lr`` when the method's stage begins; then either
``multistep`` (``milestones``, ×``lr_gamma``, counted from the start of the method's stage or of
the run) or ``linear`` (Co-teaching: constant until ``decay_start`` epochs into the stage, then
linearly to 0 at the stage's end, Adam's β1 set to ``decay_beta1`` from there on).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from noisylabels.errors import InputError

WARMUP_MODELS = ("last", "best")
MAIN_STAGE_INITS = ("continue", "reinit", "restart")
MILESTONES_FROM = ("main", "start")
LR_SCHEDULES = ("multistep", "linear")
REVISION_MODELS = ("best", "last")


@dataclass(frozen=True)
class StageSchedule:
    """The stage options of a method and the decisions that follow from them.

    Args:
        warmup_epochs: plain cross-entropy epochs before the method's own stage (used only
            where the method has a warm-up stage at all, see ``active``).
        warmup_model: ``last`` or ``best`` (see the module docstring).
        main_stage_init: ``continue``, ``reinit`` or ``restart``.
        warmup_momentum: SGD momentum of the warm-up; ``None``: the main momentum.
        momentum: SGD momentum of the method's own stage.
        milestones: LR milestones in epochs, counted as ``milestones_from`` says.
        milestones_from: ``main`` (from the first epoch of the method's own stage) or
            ``start`` (from epoch 0).
        lr_gamma: the factor of every milestone.
        warmup_milestones: LR milestones of the warm-up, in epochs from 0.
        lr_schedule: ``multistep`` or ``linear`` (the method's own stage).
        decay_start: ``linear``: epochs into the method's stage before the decay starts.
        decay_beta1: ``linear``: Adam's β1 from ``decay_start`` on (``None``: unchanged).
        revision_epochs: epochs of a revision stage at the end of the run (0: none).
        revision_model: what the revision starts from: the ``best`` (noisy-validation accuracy)
            or the ``last`` model of the method's own stage.
    """

    warmup_epochs: int = 0
    warmup_model: str = "last"
    main_stage_init: str = "continue"
    warmup_momentum: float | None = None
    momentum: float = 0.9
    milestones: Sequence[int] = (30, 60)
    milestones_from: str = "main"
    lr_gamma: float = 0.1
    warmup_milestones: Sequence[int] = ()
    lr_schedule: str = "multistep"
    decay_start: int = 80
    decay_beta1: float | None = None
    revision_epochs: int = 0
    revision_model: str = "best"

    def __post_init__(self) -> None:
        if self.warmup_model not in WARMUP_MODELS:
            raise InputError(
                f"--model.warmup_model must be one of {WARMUP_MODELS}, got {self.warmup_model!r}"
            )
        if self.main_stage_init not in MAIN_STAGE_INITS:
            raise InputError(
                f"--model.main_stage_init must be one of {MAIN_STAGE_INITS}, "
                f"got {self.main_stage_init!r}"
            )
        if self.milestones_from not in MILESTONES_FROM:
            raise InputError(
                f"--model.milestones_from must be one of {MILESTONES_FROM}, "
                f"got {self.milestones_from!r}"
            )
        if int(self.warmup_epochs) < 0:
            raise InputError(f"--model.warmup_epochs must be >= 0, got {self.warmup_epochs}")
        if self.warmup_momentum is not None and not 0.0 <= self.warmup_momentum < 1.0:
            raise InputError(
                f"--model.warmup_momentum must be in [0, 1), got {self.warmup_momentum}"
            )
        if self.lr_schedule not in LR_SCHEDULES:
            raise InputError(
                f"--model.lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}"
            )
        if int(self.decay_start) < 0:
            raise InputError(f"--model.decay_start must be >= 0, got {self.decay_start}")
        if self.decay_beta1 is not None and not 0.0 <= self.decay_beta1 < 1.0:
            raise InputError(f"--model.decay_beta1 must be in [0, 1), got {self.decay_beta1}")
        if int(self.revision_epochs) < 0:
            raise InputError(f"--model.revision_epochs must be >= 0, got {self.revision_epochs}")
        if self.revision_model not in REVISION_MODELS:
            raise InputError(
                f"--model.revision_model must be one of {REVISION_MODELS}, "
                f"got {self.revision_model!r}"
            )

    def warmup_length(self, active: bool, fast_dev_run: bool = False) -> int:
        """Warm-up epochs of a run: 0 without a warm-up stage (``active`` false), and under
        ``fast_dev_run`` so that every stage runs."""
        return int(self.warmup_epochs) if active and not fast_dev_run else 0

    def revision_length(self, fast_dev_run: bool = False) -> int:
        """Revision epochs of a run (none under ``fast_dev_run``, whose one epoch is the method's
        own stage)."""
        return 0 if fast_dev_run else int(self.revision_epochs)

    def momentum_of(self, in_warmup: bool) -> float:
        """The SGD momentum of a stage (``warmup_momentum`` in a warm-up, if set)."""
        if in_warmup and self.warmup_momentum is not None:
            return float(self.warmup_momentum)
        return float(self.momentum)

    def main_starts(self, epoch: int, warmup_length: int) -> bool:
        """Whether a run still in its warm-up begins the method's own stage at ``epoch``."""
        return epoch >= warmup_length

    @property
    def keeps_best_warmup(self) -> bool:
        """Whether the estimation point sees the best warm-up epoch's model (early stopping)."""
        return self.warmup_model == "best"

    def absolute_milestones(self, warmup_length: int) -> list[int]:
        """The LR milestones as absolute epochs: shifted by the warm-up when they count from
        the method's own stage (``milestones_from: main``)."""
        shift = warmup_length if self.milestones_from == "main" else 0
        return [int(m) + shift for m in self.milestones]

    def leaves_no_main_epoch(
        self, warmup_length: int, max_epochs: int | None, revision_length: int = 0
    ) -> bool:
        """Whether a warm-up of ``warmup_length`` and a revision of ``revision_length`` epochs
        leave no epoch of the method's own stage in a run of ``max_epochs`` (``None`` or
        negative: unbounded)."""
        bounded = max_epochs is not None and max_epochs >= 0
        return bounded and warmup_length + revision_length >= max_epochs

    def check_fits(
        self,
        warmup_length: int,
        revision_length: int,
        max_epochs: int | None,
        max_steps: int = -1,
        limit_train_batches: int | float | None = None,
    ) -> None:
        """Refuse a run that trains nothing (``max_epochs``, ``max_steps`` or
        ``limit_train_batches`` 0: it would test an untrained network), or whose warm-up and
        revision leave no epoch of the method's own stage; :class:`InputError` naming the
        options."""
        for option, value in (
            ("max_epochs", max_epochs),
            ("max_steps", max_steps),
            ("limit_train_batches", limit_train_batches),
        ):
            if value == 0:
                raise InputError(
                    f"--trainer.{option} 0 trains nothing: the run would test an untrained "
                    f"network and report it as a result; give --trainer.{option} a positive "
                    "value (or leave it out)"
                )
        if not self.leaves_no_main_epoch(warmup_length, max_epochs, revision_length):
            return
        stages = f"warmup_epochs={warmup_length} leaves"
        options = "--model.warmup_epochs"
        if revision_length:
            stages = f"warmup_epochs={warmup_length} and revision_epochs={revision_length} leave"
            options = "--model.warmup_epochs or --model.revision_epochs"
        raise InputError(
            f"{stages} no epoch of the method's own stage with max_epochs={max_epochs}; "
            f"lower {options} or raise --trainer.max_epochs"
        )

    def smoke_warmup_batches(self, active: bool, num_batches: int | float) -> int:
        """How many of a ``fast_dev_run``'s ``num_batches`` training batches are warm-up in a
        run with a warm-up stage (``active``): the first half, rounded down, so the smoke test
        runs the warm-up, the estimation point and the method's own stage in its one epoch
        (0: the method's stage from the start)."""
        if not active or not math.isfinite(num_batches):
            return 0
        return int(num_batches) // 2

    def revision_start(self, max_epochs: int | None, revision_length: int) -> int | None:
        """The first epoch of the revision stage (``None`` without one)."""
        if revision_length <= 0 or max_epochs is None or max_epochs < 0:
            return None
        return max_epochs - revision_length


class StagedLR(torch.optim.lr_scheduler.LRScheduler):
    """The learning rate of every epoch of a staged run (see the module docstring), stepped once
    per epoch. Multiplicative like ``MultiStepLR`` (a milestone multiplies the current rate), so
    a run without warm-up milestones has exactly MultiStepLR's rates.

    Args:
        optimizer: the optimizer whose groups it sets.
        schedule: the run's :class:`StageSchedule`.
        warmup_length: warm-up epochs of this run (0: none).
        main_end: the epoch after the method's own stage (the revision's first epoch, or
            ``max_epochs``); needed by ``linear``.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        schedule: StageSchedule,
        warmup_length: int,
        main_end: int | None,
    ) -> None:
        self.schedule = schedule
        self.warmup_length = warmup_length
        self.main_end = main_end
        self.base_betas = [group.get("betas") for group in optimizer.param_groups]
        super().__init__(optimizer)

    def _milestones(self) -> dict[int, int]:
        """Absolute epoch -> how many milestones fall on it (warm-up and main stage)."""
        counts: dict[int, int] = {}
        warm = self.warmup_length
        epochs = [int(m) for m in self.schedule.warmup_milestones if int(m) < warm]
        if self.schedule.lr_schedule == "multistep":
            epochs += self.schedule.absolute_milestones(warm)
        for epoch in epochs:
            counts[epoch] = counts.get(epoch, 0) + 1
        return counts

    def get_lr(self) -> list[float]:
        epoch, schedule = self.last_epoch, self.schedule
        groups = self.optimizer.param_groups
        if self.warmup_length > 0 and epoch == self.warmup_length:
            return list(self.base_lrs)  # the method's own stage starts at lr
        if schedule.lr_schedule == "linear" and epoch >= self.warmup_length:
            return self._linear(epoch)
        count = self._milestones().get(epoch, 0)
        return [group["lr"] * schedule.lr_gamma**count for group in groups]

    def _linear(self, epoch: int) -> list[float]:
        """Co-teaching's plan: ``lr`` until ``decay_start`` epochs into the stage, then
        ``lr * (end - e) / (end - start)``; Adam's β1 ``decay_beta1`` from the start."""
        start = self.warmup_length + int(self.schedule.decay_start)
        end = self.main_end
        decaying = end is not None and epoch >= start and end > start
        beta1 = self.schedule.decay_beta1
        for group, betas in zip(self.optimizer.param_groups, self.base_betas, strict=True):
            if betas is not None and beta1 is not None:
                group["betas"] = (beta1, betas[1]) if decaying else tuple(betas)
        if not decaying:
            return list(self.base_lrs)
        return [lr * (end - epoch) / (end - start) for lr in self.base_lrs]

    def state_dict(self) -> dict[str, Any]:
        """Plain values only (the schedule is rebuilt from the options on resume)."""
        return {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("optimizer", "schedule", "base_betas", "warmup_length", "main_end")
        }
