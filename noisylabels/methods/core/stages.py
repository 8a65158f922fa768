"""When a method's stages begin: warm-up → estimation point → the method's own objective.

A run of a method with a warm-up stage trains ``warmup_epochs`` of plain cross-entropy on the
noisy labels (VRNL off; checkpoint selection skips these epochs), then reaches the estimation
point (e.g. of T̂) once and trains the method's own objective for the remaining epochs. Methods
without a warm-up start in their own stage.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from noisylabels.errors import InputError

WARMUP_MODELS = ("last", "best")
MAIN_STAGE_INITS = ("continue", "reinit", "restart")
MILESTONES_FROM = ("main", "start")


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
    """

    warmup_epochs: int = 0
    warmup_model: str = "last"
    main_stage_init: str = "continue"
    warmup_momentum: float | None = None
    momentum: float = 0.9
    milestones: Sequence[int] = (30, 60)
    milestones_from: str = "main"

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

    def warmup_length(self, active: bool, fast_dev_run: bool = False) -> int:
        """Warm-up epochs of a run: 0 without a warm-up stage (``active`` false), and under
        ``fast_dev_run`` so that every stage runs."""
        return int(self.warmup_epochs) if active and not fast_dev_run else 0

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

    def leaves_no_main_epoch(self, warmup_length: int, max_epochs: int | None) -> bool:
        """Whether a warm-up of ``warmup_length`` epochs leaves no epoch of the method's own
        stage in a run of ``max_epochs`` (``None`` or negative: unbounded)."""
        return max_epochs is not None and max_epochs >= 0 and warmup_length >= max_epochs
