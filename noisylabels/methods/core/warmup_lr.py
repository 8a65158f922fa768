"""A learning rate of the warm-up of its own, for methods whose reference trains the CE warm-up
and the method's stage as two runs at two learning rates (a CE model trained first, then loaded
by the method's script: GLS, f-divergence).

The schedule (:class:`~noisylabels.methods.core.stages.StageSchedule`) runs the warm-up at the
optimizer's ``lr`` and starts the method's stage at ``lr`` again. A method with a
``warmup_lr`` option scales every warm-up epoch's rate by ``warmup_lr / lr`` through its
:meth:`~noisylabels.methods.core.staged.StagedModule.lr_factor` (the hook CORES² uses), so the
warm-up runs at ``warmup_lr`` with its own milestones (``schedule.warmup_milestones``) and the
method's stage at ``lr`` with its milestones. ``warmup_lr`` null: the warm-up at ``lr`` (the
factor is 1 in every epoch, the rates those of a method without the option).
"""

from __future__ import annotations

import math

from noisylabels.errors import InputError

OPTION = "--model.warmup_lr"


def check_warmup_lr(value: float | None) -> float | None:
    """``value`` as a float (``None`` kept); :class:`InputError` unless it is a positive
    finite number or null."""
    if value is None:
        return None
    if not (math.isfinite(float(value)) and float(value) > 0):
        raise InputError(
            f"{OPTION} must be a positive learning rate, or null (the warm-up at "
            f"--model.optim.lr), got {value}"
        )
    return float(value)


def warmup_lr_factor(warmup_lr: float | None, lr: float, epoch: int, warmup_length: int) -> float:
    """The factor of absolute epoch ``epoch``'s rate: ``warmup_lr / lr`` in the warm-up's
    ``warmup_length`` epochs, 1 after them (and everywhere without ``warmup_lr``)."""
    if warmup_lr is None or not 0 <= epoch < warmup_length:
        return 1.0
    return warmup_lr / lr


def warmup_lr_inert(warmup_lr: float | None, warmup_epochs: int) -> list[tuple[str, str]]:
    """``warmup_lr`` as an option without effect where the schedule has no warm-up."""
    if warmup_lr is None or int(warmup_epochs) > 0:
        return []
    return [("warmup_lr", "there is no warm-up stage (--model.schedule.warmup_epochs 0)")]
