"""A line per training epoch, for runs without a progress bar (every sweep run).

:class:`EpochLog` writes, once an epoch is over, what a person watching a run wants to see::

    Epoch 3/14 [main] train loss 0.8123 | noisy-val acc 0.5105 | ε_T 0.000 | 0.4 s

the stage (``warm-up``, ``main``, ``revision`` of a :class:`NoisyLabelMethod`), the epoch's
training loss, the noisy-validation accuracy (where the epoch was validated), the error
``ε_T = ‖T − T̂‖₁,₁ / ‖T‖₁,₁`` of the method's T̂ against the true T (where both exist) and the
epoch's wall time. Epochs count from 0, as in Lightning's progress bar and the checkpoint names.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
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
    """Log one line per training epoch (process 0) when the trainer has no progress bar.

    The line of an epoch is written when the next one starts (or training ends): the values a
    method logs at the end of its epoch are complete only after every callback's epoch end, and
    the stage shown is the one the epoch trained in.
    """

    def __init__(self) -> None:
        self._epoch: int | None = None
        self._start = 0.0
        self._validated = False

    @staticmethod
    def _wanted(trainer: L.Trainer) -> bool:
        return trainer.progress_bar_callback is None and trainer.is_global_zero

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, pl_module)
        self._epoch = trainer.current_epoch
        self._start = time.perf_counter()
        self._validated = False

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, pl_module)

    def _report(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch, self._epoch = self._epoch, None
        if epoch is None or not self._wanted(trainer):
            return
        metrics = trainer.callback_metrics
        max_epochs = trainer.max_epochs
        t_error = None
        if isinstance(pl_module, NoisyLabelMethod):
            t_error = pl_module.t_estimation_error()
        line = epoch_line(
            epoch,
            max_epochs - 1 if max_epochs is not None and max_epochs > 0 else None,
            stage_of(pl_module),
            _first(metrics, TRAIN_LOSS),
            _first(metrics, VAL_ACC) if self._validated else None,
            t_error,
            time.perf_counter() - self._start,
        )
        rank_zero_info(line)
