"""The clean test accuracy of every network over the last epochs of a run.

The references of the two-network baselines report neither a selected checkpoint nor only the
last epoch: the Dual-T repository's Co-teaching, MentorNet and Decoupling report the mean test
accuracy of both networks over the last 10 epochs (its ``run_coteaching.py``). :class:`TailTest`
records what that needs; ``results.json`` keeps it (``test_acc_tail``) and
``noisylabels report --metric tail`` selects its mean.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.evaluation import network_accuracies


class TailTest(L.Callback):
    """At the end of each of the last ``epochs`` training epochs, the clean test accuracy of
    every network of the method (one pass over the test set per epoch, no effect on training).

    Args:
        epochs: how many of the run's last epochs (0: none).
    """

    def __init__(self, epochs: int = 10) -> None:
        if epochs < 0:
            raise ValueError(f"epochs must be >= 0, got {epochs}")
        self.epochs = epochs
        self.records: list[dict[str, Any]] = []  # {"epoch", "acc": [network 0, 1, ...]}

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        max_epochs = trainer.max_epochs
        if not self.epochs or max_epochs is None or max_epochs < 0 or trainer.sanity_checking:
            return
        if trainer.current_epoch < max_epochs - self.epochs or trainer.fast_dev_run:
            return
        facts = pl_module.data_facts() if isinstance(pl_module, NoisyLabelMethod) else None
        if facts is None:
            return
        counts = network_accuracies(
            pl_module, facts, "test", trainer.global_rank, trainer.world_size
        )
        counts = trainer.strategy.reduce(counts, reduce_op="sum").tolist()
        total = max(counts[-1], 1)
        self.records = [r for r in self.records if r["epoch"] != trainer.current_epoch]
        self.records.append(
            {"epoch": trainer.current_epoch, "acc": [c / total for c in counts[:-1]]}
        )

    def summary(self) -> dict[str, Any] | None:
        """``{"epochs", "acc" (per epoch, per network), "mean"}`` of the recorded epochs, or
        ``None`` where none was recorded."""
        if not self.records:
            return None
        accs = [a for record in self.records for a in record["acc"]]
        return {
            "epochs": [r["epoch"] for r in self.records],
            "acc": [r["acc"] for r in self.records],
            "mean": sum(accs) / len(accs),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"records": list(self.records)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.records = list(state_dict.get("records", []))
