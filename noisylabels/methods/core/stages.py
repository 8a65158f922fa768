"""When a method's stages begin and how long they last: warm-up → estimation point → the method's
own objective (→ revision), and the learning rate of every epoch.

:class:`StageSchedule` is the method's ``schedule`` option group (``--model.schedule.*``, in YAML
``model: init_args: schedule: {warmup_epochs: 15}``): every stage option is declared, defaulted,
checked and documented there, once. A run with ``warmup_epochs > 0`` trains that many epochs of
plain cross-entropy on the noisy labels (VRNL off; checkpoint selection skips these epochs), then
reaches the estimation point (e.g. of T̂) once and trains the method's own objective for
``main_epochs``; with ``revision_epochs > 0`` a revision stage ends the run (T-Revision, PTD: the
transition matrix is revised together with the network by its own optimizer, from the best or last
model of the method's stage). The command line trains :attr:`StageSchedule.total_epochs` epochs
unless ``--trainer.max_epochs`` is given; a ``Trainer`` built in Python takes the caller's
``max_epochs`` (``L.Trainer(max_epochs=method.schedule.total_epochs)``).

The schedule is a plain object that *decides*: whether an epoch is a warm-up epoch, when the
method's own stage begins, the warm-up's momentum, the LR milestones as absolute epochs and which
model the estimation point and the method's stage start from. What happens at a stage change
(loading the best warm-up model, re-initialising networks, resetting optimizers) is the method's
(:class:`~noisylabels.methods.core.staged.StagedModule`); the schedule never calls back into it.
The references of the field differ in what the estimation point sees and what the method's own
stage starts from (``warmup_model``, ``main_stage_init``, ``warmup_momentum``; docs/methods.md).

The learning rate (:class:`StagedLR`): constant in the warm-up but for ``warmup_milestones``
(Dual-T: ÷10 after 50 epochs); back to ``lr`` when the method's stage begins; then either
``multistep`` (``milestones``, ×``lr_gamma``, counted from the start of the method's stage or of
the run), ``linear`` (Co-teaching: constant until ``decay_start`` epochs into the stage, then
linearly to 0 at the stage's end, Adam's β1 set to ``decay_beta1`` from there on) or ``cosine``
(from ``lr`` to ``min_lr`` over the stage, or over every ``cosine_period`` epochs with warm
restarts: ELR, SOP). A method may scale every epoch's rate by a factor of its own
(``lr_factor``: CORES² divides it by ``1 + β_t``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from noisylabels.errors import InputError
from noisylabels.methods.core.inert import no_effect

WARMUP_MODELS = ("last", "best")
MAIN_STAGE_INITS = ("continue", "reinit", "restart")
MILESTONES_FROM = ("main", "start")
LR_SCHEDULES = ("multistep", "linear", "cosine")
REVISION_MODELS = ("best", "last")
OPTION = "--model.schedule."


@dataclass(frozen=True)
class StageSchedule:
    """The stages of a run: how long each lasts, what the method's own stage starts from, and
    the learning rate of every epoch.

    Attributes:
        warmup_epochs: epochs of plain cross-entropy on the noisy labels (VRNL off, never
            selected as the best checkpoint) before the method's own stage; 0: none. A method
            that estimates from the warm-up model (``transition: estimate``, PTD,
            ``forget_rate: estimate``) needs at least 1; one correcting with a given T, none.
        main_epochs: epochs of the method's own stage. The run trains ``warmup_epochs +
            main_epochs + revision_epochs`` epochs unless ``--trainer.max_epochs`` is given (the
            method's stage then gets what the warm-up and the revision leave).
        revision_epochs: epochs of a revision stage that ends the run (T-Revision, PTD); 0: none.
        warmup_model: the warm-up model the estimation point (T̂) sees: the ``last`` epoch's or
            the ``best`` (highest noisy-validation accuracy, i.e. early stopping: T-Revision,
            Dual-T).
        warmup_momentum: SGD momentum of the warm-up (T-Revision, Dual-T: 0); null: the
            optimizer's ``momentum``.
        warmup_milestones: LR milestones within the warm-up, in epochs from 0 (Dual-T: [50]);
            the method's own stage starts at ``lr`` again.
        main_stage_init: what the method's own stage starts from: ``continue`` (the last
            warm-up network and its optimizer state; the VRNL paper's Reweight), ``reinit`` (a
            newly initialised network, fresh optimizer state; Patrini's Forward, Dual-T) or
            ``restart`` (the estimation model, fresh optimizer state; T-Revision).
        lr_schedule: the learning rate of the method's own stage: ``multistep``
            (``milestones``), ``linear`` (Co-teaching: ``lr`` until ``decay_start``, then
            linearly to 0 at the stage's end) or ``cosine`` (``min_lr + (lr - min_lr)(1 +
            cos(π t / P)) / 2`` at epoch ``t`` of the stage; ELR, SOP).
        milestones: MultiStepLR epochs (the paper: 30, 60), counted as ``milestones_from``
            says; the learning rate is multiplied by ``lr_gamma`` at each.
        milestones_from: ``main``: milestones count from the first epoch of the method's own
            stage, after any warm-up; ``start``: from epoch 0.
        lr_gamma: the factor of every milestone (the paper: 0.1).
        decay_start: ``linear``: epochs into the method's own stage before the decay starts.
        decay_beta1: ``linear``: Adam's β1 from ``decay_start`` on; null: unchanged.
        cosine_period: ``cosine``: the period ``P`` in epochs, restarting at ``lr`` every
            ``P`` epochs (ELR's CIFAR-10: 10); null: the method's own stage, without restart.
        min_lr: ``cosine``: the learning rate the cosine ends at (ELR's CIFAR-10: 1e-3).
        revision_model: what the revision starts from: the ``best`` (noisy-validation accuracy)
            or the ``last`` model of the method's own stage.
    """

    warmup_epochs: int = 0
    main_epochs: int = 80
    revision_epochs: int = 0
    warmup_model: str = "last"
    warmup_momentum: float | None = None
    warmup_milestones: Sequence[int] = ()
    main_stage_init: str = "continue"
    lr_schedule: str = "multistep"
    milestones: Sequence[int] = (30, 60)
    milestones_from: str = "main"
    lr_gamma: float = 0.1
    decay_start: int = 80
    decay_beta1: float | None = None
    cosine_period: int | None = None
    min_lr: float = 0.0
    revision_model: str = "best"

    def __post_init__(self) -> None:
        for name in ("milestones", "warmup_milestones"):  # lists from a config, as tuples
            object.__setattr__(self, name, tuple(int(m) for m in getattr(self, name)))
        for name, allowed in (
            ("warmup_model", WARMUP_MODELS),
            ("main_stage_init", MAIN_STAGE_INITS),
            ("lr_schedule", LR_SCHEDULES),
            ("milestones_from", MILESTONES_FROM),
            ("revision_model", REVISION_MODELS),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise InputError(f"{OPTION}{name} must be one of {allowed}, got {value!r}")
        for name, least in (
            ("warmup_epochs", 0),
            ("main_epochs", 1),
            ("revision_epochs", 0),
            ("decay_start", 0),
        ):
            value = getattr(self, name)
            if int(value) < least:
                raise InputError(f"{OPTION}{name} must be >= {least}, got {value}")
        if self.cosine_period is not None and int(self.cosine_period) < 1:
            period = self.cosine_period
            raise InputError(f"{OPTION}cosine_period must be >= 1 or null, got {period}")
        if not self.min_lr >= 0:
            raise InputError(f"{OPTION}min_lr must be >= 0, got {self.min_lr}")
        for name in ("warmup_momentum", "decay_beta1"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise InputError(f"{OPTION}{name} must be in [0, 1), got {value}")
        inert = self.inert_options()
        if inert:
            name, reason = inert[0]
            empty = ", or give it as []" if isinstance(_DEFAULTS[name], tuple) else ""
            raise no_effect(OPTION + name, getattr(self, name), reason, _DEFAULTS[name], empty)

    def inert_options(self) -> list[tuple[str, str]]:
        """The options given a value other than their default that this schedule would never
        use, each with the reason: an option is applied or refused, never silently dropped.
        An empty milestone list counts as not given."""
        # a warm-up switched off (warmup_epochs 0) is switched off with its options: a given T
        # runs no warm-up under a group written for an estimated one
        warm = int(self.warmup_epochs)
        uses = {
            "warmup_milestones": (
                not warm or all(int(m) < warm for m in self.warmup_milestones),
                f"they must lie within the warm-up's {warm} epochs",
            ),
            "revision_model": (int(self.revision_epochs) > 0, "there is no revision stage"),
        }
        multistep = self.lr_schedule == "multistep"
        for name in ("milestones", "milestones_from"):
            uses[name] = (multistep, f"lr_schedule is {self.lr_schedule}, not multistep")
        if multistep:
            last = int(self.main_epochs) + (
                int(self.warmup_epochs) if self.milestones_from == "start" else 0
            )
            uses["milestones"] = (
                all(int(m) < last for m in self.milestones),
                f"a milestone at or past epoch {last} ({self.main_epochs} epochs of the method's "
                f"own stage, counted from {self.milestones_from}) is never reached",
            )
        lowers = (multistep and bool(self.milestones)) or bool(warm and self.warmup_milestones)
        uses["lr_gamma"] = (lowers, "there is no milestone to multiply the learning rate at")
        for name in ("decay_start", "decay_beta1"):
            uses[name] = (
                self.lr_schedule == "linear",
                f"lr_schedule is {self.lr_schedule}, not linear",
            )
        if self.lr_schedule == "linear":
            uses["decay_start"] = (
                int(self.decay_start) < int(self.main_epochs),
                f"the method's own stage ends after {self.main_epochs} epochs, before the decay",
            )
        for name in ("cosine_period", "min_lr"):
            uses[name] = (
                self.lr_schedule == "cosine",
                f"lr_schedule is {self.lr_schedule}, not cosine",
            )
        return [
            (name, reason)
            for name, (used, reason) in uses.items()
            if not used and _given(name, getattr(self, name))
        ]

    @property
    def total_epochs(self) -> int:
        """The epochs of a run of this schedule: warm-up, the method's own stage and revision
        (what the command line trains unless ``--trainer.max_epochs`` is given)."""
        return int(self.warmup_epochs) + int(self.main_epochs) + int(self.revision_epochs)

    @property
    def has_warmup(self) -> bool:
        """Whether a run starts with a plain-CE warm-up stage (``warmup_epochs > 0``)."""
        return int(self.warmup_epochs) > 0

    def require_warmup(self, what: str, hint: str = "") -> None:
        """Refuse a schedule without warm-up epochs for a method that estimates ``what`` from
        the warm-up model (it would come from an untrained network); :class:`InputError`
        naming the option, with ``hint`` (e.g. the paper's value) after it."""
        if not self.has_warmup:
            raise InputError(
                f"{what} is estimated from the warm-up model, but {OPTION}warmup_epochs is 0, "
                "so it would come from an untrained network (the run would end far below what "
                f"the method reaches, without an error). Set {OPTION}warmup_epochs N{hint}"
            )

    def warmup_length(self, fast_dev_run: bool = False) -> int:
        """Warm-up epochs of a run (none under ``fast_dev_run``, whose one epoch runs every
        stage)."""
        return 0 if fast_dev_run else int(self.warmup_epochs)

    def revision_length(self, fast_dev_run: bool = False) -> int:
        """Revision epochs of a run (none under ``fast_dev_run``, whose one epoch is the method's
        own stage)."""
        return 0 if fast_dev_run else int(self.revision_epochs)

    def momentum_of(self, in_warmup: bool, momentum: float) -> float:
        """The SGD momentum of a stage: ``warmup_momentum`` in a warm-up (if set), else the
        optimizer's ``momentum``."""
        if in_warmup and self.warmup_momentum is not None:
            return float(self.warmup_momentum)
        return float(momentum)

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
        options = f"{OPTION}warmup_epochs"
        if revision_length:
            stages = f"warmup_epochs={warmup_length} and revision_epochs={revision_length} leave"
            options = f"{OPTION}warmup_epochs or {OPTION}revision_epochs"
        raise InputError(
            f"{stages} no epoch of the method's own stage with max_epochs={max_epochs}; "
            f"lower {options} or raise --trainer.max_epochs (or leave it out: the schedule's "
            f"{self.total_epochs} epochs)"
        )

    def smoke_warmup_batches(self, num_batches: int | float) -> int:
        """How many of a ``fast_dev_run``'s ``num_batches`` training batches are warm-up in a
        run with a warm-up stage: the first half, rounded down, so the smoke test runs the
        warm-up, the estimation point and the method's own stage in its one epoch (0: the
        method's stage from the start)."""
        if not self.has_warmup or not math.isfinite(num_batches):
            return 0
        return int(num_batches) // 2

    def ends_with_the_run(self) -> str | None:
        """Why this schedule's plan depends on the run's last epoch, so that a run given
        another ``max_epochs`` half-way follows neither plan (``None``: its milestones and
        stages count from the start): the ``linear`` decay and the ``cosine`` without a period
        end at the method's stage's end, and a revision stage is the run's last epochs."""
        if int(self.revision_epochs) > 0:
            return f"its revision stage is the run's last {int(self.revision_epochs)} epochs"
        if self.lr_schedule == "linear":
            return "its learning rate decays linearly to 0 at the run's last epoch"
        if self.lr_schedule == "cosine" and self.cosine_period is None:
            return "its cosine learning rate ends at the run's last epoch"
        return None

    def revision_start(self, max_epochs: int | None, revision_length: int) -> int | None:
        """The first epoch of the revision stage (``None`` without one)."""
        if revision_length <= 0 or max_epochs is None or max_epochs < 0:
            return None
        return max_epochs - revision_length


_DEFAULTS = {field.name: field.default for field in fields(StageSchedule)}


def _given(name: str, value: Any) -> bool:
    """Whether ``value`` of the schedule option ``name`` is other than its default (an empty
    milestone list is none given)."""
    if isinstance(_DEFAULTS[name], tuple) and not value:
        return False
    return value != _DEFAULTS[name]


class StagedLR(torch.optim.lr_scheduler.LRScheduler):
    """The learning rate of every epoch of a staged run (see the module docstring), stepped once
    per epoch. Multiplicative like ``MultiStepLR`` (a milestone multiplies the current rate), so
    a run without warm-up milestones has exactly MultiStepLR's rates.

    Args:
        optimizer: the optimizer whose groups it sets.
        schedule: the run's :class:`StageSchedule`.
        warmup_length: warm-up epochs of this run (0: none).
        main_end: the epoch after the method's own stage (the revision's first epoch, or
            ``max_epochs``); needed by ``linear`` and by ``cosine`` without a period.
        factor: the method's own factor of every epoch's rate (by absolute epoch; none: 1).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        schedule: StageSchedule,
        warmup_length: int,
        main_end: int | None,
        factor: Callable[[int], float] | None = None,
    ) -> None:
        self.schedule = schedule
        self.warmup_length = warmup_length
        self.main_end = main_end
        self.factor = factor
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

    def _factor(self, epoch: int) -> float:
        return 1.0 if self.factor is None or epoch < 0 else float(self.factor(epoch))

    def get_lr(self) -> list[float]:
        epoch, schedule = self.last_epoch, self.schedule
        groups = self.optimizer.param_groups
        factor = self._factor(epoch)
        if self.warmup_length > 0 and epoch == self.warmup_length:
            return [lr * factor for lr in self.base_lrs]  # the method's own stage starts at lr
        if schedule.lr_schedule == "linear" and epoch >= self.warmup_length:
            return [lr * factor for lr in self._linear(epoch)]
        if schedule.lr_schedule == "cosine" and epoch >= self.warmup_length:
            return [lr * factor for lr in self._cosine(epoch)]
        count = self._milestones().get(epoch, 0)
        if factor != 1.0 or self._factor(epoch - 1) != 1.0:  # the previous epoch's factor out
            factor /= self._factor(epoch - 1)
        return [group["lr"] * schedule.lr_gamma**count * factor for group in groups]

    def _cosine(self, epoch: int) -> list[float]:
        """ELR's and SOP's plan: ``min_lr + (lr - min_lr)(1 + cos(π t / P)) / 2`` at epoch ``t``
        of the method's stage, ``t`` counted from the last restart where ``cosine_period``
        gives ``P`` (torch's ``CosineAnnealingWarmRestarts``), else ``P`` the stage's length
        (``CosineAnnealingLR``)."""
        t = epoch - self.warmup_length
        period = self.schedule.cosine_period
        if period is not None:
            t, length = t % int(period), int(period)
        else:
            end = self.main_end
            length = max(1, (end if end is not None else epoch + 1) - self.warmup_length)
        low = float(self.schedule.min_lr)
        scale = (1.0 + math.cos(math.pi * t / length)) / 2.0
        return [low + (lr - low) * scale for lr in self.base_lrs]

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
            if k
            not in ("optimizer", "schedule", "base_betas", "warmup_length", "main_end", "factor")
        }
