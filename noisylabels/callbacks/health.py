"""Stop a run that has stopped learning, and say so; judge the results of a finished run.

A run can end at chance without a NaN: VRNL with a coefficient too large for the scale of the
losses (``--model.alpha 5``), a learning rate far too high, and the loss freezes or wanders
while every epoch finishes and ``results.json`` looks like any other. (A loss that becomes NaN
or infinite is :class:`~noisylabels.callbacks.DivergenceGuard`'s.)

:class:`HealthMonitor` compares each epoch's validation accuracy (``val/acc``, which every
method logs: on noisy labels, or on the clean labels of a separate validation set) with
**chance**: the accuracy of always predicting the most frequent validation label (from the
data facts, :attr:`~noisylabels.noise.DataFacts.val_chance`), plus :data:`MARGIN`. A network
that learned nothing, or predicts one class, scores at most that. After :data:`PATIENCE`
consecutive validated epochs at or below it (half the run's epochs where that is fewer, at least
2) of the method's own stage — a warm-up is plain cross-entropy on a network that may still be at
chance after its first short epochs, and a learning rate that breaks it breaks the stage after
it too — it stops training, prints one line saying why, and its :attr:`~HealthMonitor.verdict`
becomes ``"collapsed: noisy-validation accuracy 0.098 at chance (0.112) for 5 epochs (epochs
3-7)"``; otherwise it is ``"ok"``.

:func:`results_health` judges a finished run's ``results.json`` the same way, for runs that
recorded no verdict: chance is ``1/C`` there (the labels are not in the file).
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from noisylabels.noise import data_facts_of
from noisylabels.verdicts import MARGIN, OK, results_health

__all__ = ["MARGIN", "PATIENCE", "MIN_PATIENCE", "HealthMonitor", "results_health"]

PATIENCE = 5
"""Consecutive validated epochs at chance after which a run is stopped as collapsed."""
MIN_PATIENCE = 2
"""The fewest epochs at chance that stop a short run (its patience is half its epochs)."""


def patience_for(patience: int, max_epochs: int | None) -> int:
    """The epochs at chance that stop a run of ``max_epochs`` epochs: ``patience``, or half the
    run where that is fewer, but never fewer than :data:`MIN_PATIENCE` (a run of one epoch is
    never stopped); ``patience`` for a run without an epoch limit."""
    if max_epochs is None or max_epochs < 0:
        return patience
    return min(patience, max(MIN_PATIENCE, max_epochs // 2))


def _describe(what: str, accuracy: float, chance: float, epochs: list[int]) -> str:
    n = len(epochs)
    span = f"epoch {epochs[0]}" if n == 1 else f"epochs {epochs[0]}-{epochs[-1]}"
    return (
        f"collapsed: {what} accuracy {accuracy:.3f} at chance ({chance:.3f}) for {n} "
        f"epoch{'s' if n != 1 else ''} ({span})"
    )


class HealthMonitor(L.Callback):
    """Stop a run whose validation accuracy stays at chance (see the module docstring).

    Args:
        patience: consecutive validated epochs at or below chance + ``margin`` that stop the
            run (default :data:`PATIENCE`; a run of fewer than ``2 * patience`` epochs uses
            half its epochs, at least :data:`MIN_PATIENCE`).
        margin: accuracy above chance that counts as learning (default :data:`MARGIN`).
        monitor: the logged accuracy to watch (default ``val/acc``, every method's).
        stop: stop training when the run collapses (default); ``False`` only records the
            verdict.

    Attributes:
        verdict: ``"ok"``, or ``"collapsed: ..."`` naming the accuracy, chance and epochs.

    Chance is the fraction of the most frequent validation label (the data facts'
    ``val_chance``; ``1/C`` of the method's ``num_classes`` for a data module without facts).
    Under DDP the logged accuracy is the one over all processes, and the processes agree on
    each epoch's observation by a sum over them, so every process stops at the same epoch. The
    count survives a checkpoint: a resumed run goes on counting.
    """

    def __init__(
        self,
        patience: int = PATIENCE,
        margin: float = MARGIN,
        monitor: str = "val/acc",
        stop: bool = True,
    ) -> None:
        if int(patience) < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        if not 0.0 <= float(margin) < 1.0:
            raise ValueError(f"margin must be in [0, 1), got {margin}")
        self.patience = int(patience)
        self.margin = float(margin)
        self.monitor = monitor
        self.stop = bool(stop)
        self.streak: list[int] = []  # the epochs of the current run of epochs at chance
        self.accuracy: float | None = None  # the last accuracy of the streak
        self.chance: float | None = None
        self.collapsed: str | None = None  # the verdict once the run collapsed
        self.last_epoch: int | None = None  # the last epoch observed

    @property
    def verdict(self) -> str:
        """``"ok"``, or why the run is judged collapsed."""
        return self.collapsed or OK

    # ---------------------------------------------------------------- what counts as chance
    def chance_of(self, trainer: L.Trainer, pl_module: L.LightningModule) -> float | None:
        """Chance for this run's validation accuracy (see the class docstring)."""
        facts = data_facts_of(getattr(trainer, "datamodule", None))
        chance = facts.val_chance if facts is not None else None
        if chance is not None:
            return chance
        classes = getattr(pl_module, "num_classes", None)
        return 1.0 / classes if isinstance(classes, int) and classes > 0 else None

    def _what(self, trainer: L.Trainer) -> str:
        facts = data_facts_of(getattr(trainer, "datamodule", None))
        return "validation" if facts is not None and facts.clean_validation else "noisy-validation"

    # ---------------------------------------------------------------- Lightning hooks
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.fast_dev_run or self.collapsed:
            return
        state = getattr(trainer, "state", None)
        if state is not None and getattr(state, "fn", "fit") != "fit":
            return
        if getattr(pl_module, "in_warmup", False):
            return  # judged in the method's own stage (see the class docstring)
        value = trainer.callback_metrics.get(self.monitor)
        chance = self.chance_of(trainer, pl_module)
        if value is None or chance is None:
            return
        accuracy = float(value)
        at_chance = not math.isfinite(accuracy) or accuracy <= chance + self.margin
        at_chance = self._agree(trainer, pl_module, at_chance)
        epoch = int(trainer.current_epoch)
        self.last_epoch = epoch
        if not at_chance:
            self.streak, self.accuracy = [], None
            return
        if not self.streak or self.streak[-1] != epoch:
            self.streak.append(epoch)
        self.accuracy, self.chance = accuracy, chance
        if len(self.streak) < patience_for(self.patience, trainer.max_epochs):
            return
        self.collapsed = _describe(self._what(trainer), accuracy, chance, self.streak)
        if self.stop:
            trainer.should_stop = True
        stopping = "stopping training" if self.stop else "not stopping (stop: false)"
        rank_zero_info(
            f"HealthMonitor: {stopping} at epoch {epoch}, the run has {self.collapsed} (chance: "
            "always predicting the most frequent validation label; margin "
            f"{self.margin:g}). Likely causes: --model.alpha too large for the scale of the "
            "losses, or --model.optim.lr too high."
        )

    @staticmethod
    def _agree(trainer: L.Trainer, pl_module: L.LightningModule, at_chance: bool) -> bool:
        """Whether any process saw the epoch at chance (one sum over the processes; every
        process gets the same answer)."""
        strategy = getattr(trainer, "strategy", None)
        if strategy is None or int(getattr(trainer, "world_size", 1)) <= 1:
            return at_chance
        flag = torch.tensor(float(at_chance), device=pl_module.device)
        return bool(strategy.reduce(flag, reduce_op="sum") > 0)

    # ---------------------------------------------------------------- checkpoints
    @property
    def state_key(self) -> str:
        """One state per watched metric in a checkpoint (as Lightning's EarlyStopping)."""
        return self._generate_state_key(monitor=self.monitor)

    def state_dict(self) -> dict[str, Any]:
        return {
            "streak": list(self.streak),
            "accuracy": self.accuracy,
            "chance": self.chance,
            "collapsed": self.collapsed,
            "last_epoch": self.last_epoch,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the count of a checkpoint (a resumed run goes on from it), unless this
        monitor has already seen a later epoch: a test of an earlier checkpoint (the best one)
        after the fit restores the callbacks' states, and must not rewind the verdict."""
        last = state_dict.get("last_epoch")
        if self.last_epoch is not None and (last is None or int(last) < self.last_epoch):
            return
        self.streak = [int(e) for e in state_dict.get("streak", [])]
        self.accuracy = state_dict.get("accuracy")
        self.chance = state_dict.get("chance")
        self.collapsed = state_dict.get("collapsed")
        self.last_epoch = None if last is None else int(last)
