"""What a person watching a fit reads in the terminal: the run's plan when training starts, a
line per training epoch, the start of each stage, the time left, and why a run stopped early.

:class:`EpochLog` writes, once an epoch is over::

    Epoch 3/14 [main] train loss 0.8123 | noisy-val acc 0.5105 | ε_T 0.000 | 0.4 s

the stage (``warm-up``, ``main``, ``revision`` of a :class:`NoisyLabelMethod`), the epoch's
training loss, the noisy-validation accuracy (where the epoch was validated), the error
``ε_T = ‖T − T̂‖₁,₁ / ‖T‖₁,₁`` of the method's T̂ against the true T (where both exist) and the
epoch's wall time. Epochs count from 0, as in Lightning's progress bar and the checkpoint names.
Before the first epoch it writes the plan (:func:`plan_line`)::

    Plan: Forward-VRNL, 15 epochs (0-14): warm-up 0-9 (10 epochs), main 10-14 (5 epochs)

after the first epoch this process trained, the time the rest should take at that pace
(:func:`time_left_line`); at the start of each later stage a line naming it; and at the end of
a run an early-stopping callback cut short, that callback's reason. With Lightning's TQDM
progress bar on, the lines are written above the bar (``tqdm.write``) instead of the log.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, TQDMProgressBar
from lightning.pytorch.utilities import rank_zero_info

from noisylabels.methods.core.base import NoisyLabelMethod

# the logged names read, first found wins (the project's, then common spellings of others)
TRAIN_LOSS = ("train/loss", "train_loss", "loss")
VAL_ACC = ("val/acc", "val_acc")


def _first(metrics: dict[str, Any], names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in metrics:
            return float(metrics[name])
    return None


def stage_of(pl_module: L.LightningModule) -> str | None:
    """The stage a :class:`NoisyLabelMethod` is in (``warm-up``, ``main``, ``revision``)."""
    if not isinstance(pl_module, NoisyLabelMethod):
        return None
    if pl_module.in_warmup:
        return "warm-up"
    return "revision" if pl_module.in_revision else "main"


def planned_stages(
    max_epochs: int, warmup: int = 0, revision: int = 0
) -> list[tuple[str, int, int]]:
    """The stages of a run of ``max_epochs`` epochs with ``warmup`` warm-up and ``revision``
    revision epochs, as ``(stage, first epoch, last epoch)``; stages of no epoch are left out."""
    warmup = min(max(warmup, 0), max_epochs)
    revision = min(max(revision, 0), max_epochs - warmup)
    spans = [
        ("warm-up", 0, warmup - 1),
        ("main", warmup, max_epochs - revision - 1),
        ("revision", max_epochs - revision, max_epochs - 1),
    ]
    return [(name, first, last) for name, first, last in spans if last >= first]


def _epochs(first: int, last: int) -> str:
    n = last - first + 1
    return f"{first}-{last} ({n} epoch{'s' if n != 1 else ''})"


def plan_line(
    name: str | None,
    max_epochs: int | None,
    stages: list[tuple[str, int, int]],
    start_epoch: int = 0,
) -> str:
    """The plan of a fit: what is trained, for how many epochs, in which stages, and where a
    resumed fit starts. ``max_epochs`` ``None`` or negative: no epoch limit."""
    head = "Plan: " + (f"{name}, " if name else "")
    if max_epochs is None or max_epochs < 0:
        line = head + "no epoch limit (--trainer.max_epochs not set; max_steps or a stop ends it)"
    else:
        line = head + f"{max_epochs} epoch{'s' if max_epochs != 1 else ''}"
        if max_epochs > 0:
            line += f" (0-{max_epochs - 1})"
        if len(stages) > 1 or (stages and stages[0][0] != "main"):
            line += ": " + ", ".join(f"{s} {_epochs(a, b)}" for s, a, b in stages)
    if start_epoch > 0:
        line += f"; resumed at epoch {start_epoch}"
    return line


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def time_left_line(epoch: int, seconds: float, epochs_left: int, now: datetime) -> str:
    """The time the ``epochs_left`` epochs after ``epoch`` take at its pace (``seconds``, the
    epoch's wall time with its validation), and the clock time training should end."""
    left = seconds * epochs_left
    end = (now + timedelta(seconds=left)).strftime("%H:%M")
    return (
        f"Time: epoch {epoch} took {seconds:.1f} s; the {epochs_left} epoch"
        f"{'s' if epochs_left != 1 else ''} left take about {_duration(left)} at this pace "
        f"(training ends about {end}; the test after it is not counted)"
    )


def stage_line(stage: str, epoch: int, stages: list[tuple[str, int, int]]) -> str:
    """The line that says ``stage`` begins at ``epoch`` (with its epochs where planned)."""
    for name, first, last in stages:
        if name == stage and first <= epoch <= last:
            return f"Stage {stage} begins at epoch {epoch}: epochs {_epochs(epoch, last)}"
    return f"Stage {stage} begins at epoch {epoch}"


def early_stop_line(callback: EarlyStopping, max_epochs: int | None) -> str:
    """Why ``callback`` stopped the run, and what was not trained."""
    reason = getattr(callback, "stopping_reason_message", None) or (
        f"{callback.monitor} did not improve by more than {abs(callback.min_delta)} in "
        f"{callback.patience} checks"
    )
    line = f"EarlyStopping stopped the run after epoch {callback.stopped_epoch}: {reason}"
    if max_epochs is not None and max_epochs > callback.stopped_epoch + 1:
        line += f" (epochs {callback.stopped_epoch + 1}-{max_epochs - 1} were not trained)"
    return line


def epoch_line(
    epoch: int,
    last_epoch: int | None,
    stage: str | None,
    train_loss: float | None,
    val_acc: float | None,
    t_error: float | None,
    seconds: float,
) -> str:
    """One epoch's line (see the module docstring); missing values are left out."""
    head = f"Epoch {epoch}" if last_epoch is None else f"Epoch {epoch}/{last_epoch}"
    if stage:
        head += f" [{stage}]"
    parts = []
    if train_loss is not None:
        parts.append(f"train loss {train_loss:.4f}")
    if val_acc is not None:
        parts.append(f"noisy-val acc {val_acc:.4f}")
    if t_error is not None:
        parts.append(f"ε_T {t_error:.3f}")
    parts.append(f"{seconds:.1f} s")
    return f"{head} " + " | ".join(parts)


class EpochLog(L.Callback):
    """Write a fit's plan, a line per training epoch, the stage changes, the time left and an
    early stop's reason (process 0; see the module docstring).

    The line of an epoch is written when the next one starts (or training ends): the values a
    method logs at the end of its epoch are complete only after every callback's epoch end, and
    the stage shown is the one the epoch trained in.
    """

    def __init__(self) -> None:
        self._epoch: int | None = None
        self._start = 0.0
        self._validated = False
        self._stage: str | None = None
        self._stages: list[tuple[str, int, int]] = []
        self._timed = False

    @staticmethod
    def say(trainer: L.Trainer, text: str) -> None:
        """Write ``text`` (process 0): above a TQDM progress bar where one is drawn, else to
        Lightning's log."""
        if not trainer.is_global_zero:
            return
        bar = trainer.progress_bar_callback
        if isinstance(bar, TQDMProgressBar) and bar.is_enabled:
            from tqdm import tqdm

            tqdm.write(text, file=sys.stdout)
        else:
            rank_zero_info(text)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        max_epochs = trainer.max_epochs
        warmup = revision = 0
        name = None
        if isinstance(pl_module, NoisyLabelMethod):
            warmup, revision = pl_module.warmup_length(), pl_module.revision_length()
            name = pl_module.method_name
        bounded = max_epochs is not None and max_epochs >= 0
        self._stages = planned_stages(max_epochs, warmup, revision) if bounded else []
        self._stage = None
        self._timed = False
        if not trainer.fast_dev_run:
            self.say(trainer, plan_line(name, max_epochs, self._stages, trainer.current_epoch))

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, pl_module)
        self._epoch = trainer.current_epoch
        self._start = time.perf_counter()
        self._validated = False

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # the method's own epoch-start hook (after the callbacks') sets the epoch's stage
        if batch_idx != 0:
            return
        stage = stage_of(pl_module)
        if stage is not None and self._stage is not None and stage != self._stage:
            self.say(trainer, stage_line(stage, trainer.current_epoch, self._stages))
        self._stage = stage

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, pl_module)
        for callback in trainer.early_stopping_callbacks:
            if callback.stopped_epoch > 0 or (
                trainer.should_stop and getattr(callback, "stopping_reason_message", None)
            ):
                self.say(trainer, early_stop_line(callback, trainer.max_epochs))

    def _report(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch, self._epoch = self._epoch, None
        if epoch is None or not trainer.is_global_zero:
            return
        seconds = time.perf_counter() - self._start
        metrics = trainer.callback_metrics
        max_epochs = trainer.max_epochs
        bounded = max_epochs is not None and max_epochs > 0
        t_error = None
        if isinstance(pl_module, NoisyLabelMethod):
            t_error = pl_module.t_estimation_error()
        line = epoch_line(
            epoch,
            max_epochs - 1 if bounded else None,
            stage_of(pl_module) if self._stage is None else self._stage,
            _first(metrics, TRAIN_LOSS),
            _first(metrics, VAL_ACC) if self._validated else None,
            t_error,
            seconds,
        )
        self.say(trainer, line)
        left = max_epochs - epoch - 1 if bounded else 0
        if not self._timed and left > 0 and not trainer.should_stop:
            self.say(trainer, time_left_line(epoch, seconds, left, datetime.now()))
        self._timed = True
