"""The clean test accuracy of every network over the last epochs of a run.

The references of the two-network baselines report neither a selected checkpoint nor only the
last epoch: the Dual-T repository's Co-teaching, MentorNet and Decoupling report the mean test
accuracy of both networks over the last 10 epochs (its ``run_coteaching.py``). :class:`TailTest`
records what that needs; ``results.json`` keeps it (``test_acc_tail``) and
``noisylabels report --metric tail`` selects its mean. With ``every_epoch`` it tests every
epoch of the run, for the highest test accuracy over the epochs (``test_acc_max``, ``report
--metric best-test``), the CIFAR-N paper's reporting rule: a choice of the epoch by the test set
itself, and so an optimistic figure beside the selected checkpoint's and the last epoch's.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.evaluation import network_accuracies


class TailTest(L.Callback):
    """At the end of each of the last ``epochs`` training epochs, the clean test accuracy of
    the predictors the clean test scores (one pass over the test set per epoch, no effect on
    training): the method's prediction (``test/acc``), then each further network
    (``test/net{k}/acc``).

    An epoch's figure is the mean over the method's networks where each network predicts on its
    own (the two-network references' metric), its prediction's where the method predicts with
    its networks together (``ensemble_prediction``: DivideMix, ELR+). The tail is the run's last
    ``epochs`` epochs as it ends: records of epochs outside them (a resumed run given another
    ``max_epochs``, a finished run continued) are dropped, and a tail missing one of them has no
    mean.

    With ``every_epoch`` every epoch of the run is tested (and kept), the tail's mean still
    over its last ``epochs``; the summary then also names the epoch of the highest figure
    (``max``).

    Args:
        epochs: how many of the run's last epochs (0: none).
        every_epoch: test every epoch, not only the tail's.
    """

    def __init__(self, epochs: int = 10, every_epoch: bool = False) -> None:
        if epochs < 0:
            raise ValueError(f"epochs must be >= 0, got {epochs}")
        self.epochs = epochs
        self.every_epoch = bool(every_epoch)
        # {"epoch", "acc": [prediction, network 1, ...], "score": the epoch's figure}
        self.records: list[dict[str, Any]] = []

    def window(self, max_epochs: int | None) -> range | None:
        """The epochs of the tail of a run of ``max_epochs`` epochs (``None``: no bounded run
        or no tail)."""
        if not self.epochs or max_epochs is None or max_epochs < 0:
            return None
        return range(max(0, max_epochs - self.epochs), max_epochs)

    def tested(self, max_epochs: int | None) -> range | None:
        """The epochs tested in a run of ``max_epochs``: every one with ``every_epoch``, else
        the tail's."""
        if self.every_epoch and max_epochs is not None and max_epochs >= 0:
            return range(0, max_epochs)
        return self.window(max_epochs)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        window = self.tested(trainer.max_epochs)
        if window is None or trainer.sanity_checking or trainer.fast_dev_run:
            return
        if trainer.current_epoch not in window:
            return
        facts = pl_module.data_facts() if isinstance(pl_module, NoisyLabelMethod) else None
        if facts is None:
            return
        counts = network_accuracies(
            pl_module, facts, "test", trainer.global_rank, trainer.world_size
        )
        counts = trainer.strategy.reduce(counts, reduce_op="sum").tolist()
        total = max(counts[-1], 1)
        accs = [c / total for c in counts[:-1]]
        score = accs[0] if pl_module.ensemble_prediction else sum(accs) / len(accs)
        self.records = [
            r for r in self.records if r["epoch"] in window and r["epoch"] != trainer.current_epoch
        ]
        self.records.append({"epoch": trainer.current_epoch, "acc": accs, "score": score})

    def summary(self, max_epochs: int | None = None) -> dict[str, Any] | None:
        """``{"epochs", "acc" (per epoch, per predictor), "mean"}`` of the recorded epochs of
        the tail of a run of ``max_epochs`` epochs (all recorded ones where not given), or
        ``None`` where none was recorded; ``mean`` is ``None`` and ``missing`` lists the tail's
        epochs without a record where some are. With ``every_epoch`` the records are every
        epoch's, ``mean`` that of the tail's (``None`` without a tail), and ``max`` is
        ``{"acc", "epoch"}`` of the highest figure (``None`` where an epoch is missing)."""
        window = self.tested(max_epochs)
        records = sorted(
            (r for r in self.records if window is None or r["epoch"] in window),
            key=lambda r: r["epoch"],
        )
        if not records:
            return None
        epochs = [r["epoch"] for r in records]
        out: dict[str, Any] = {"epochs": epochs, "acc": [r["acc"] for r in records]}
        missing = [] if window is None else sorted(set(window) - set(epochs))
        scores = [r.get("score", sum(r["acc"]) / len(r["acc"])) for r in records]
        if self.every_epoch:
            top = max(range(len(scores)), key=lambda i: scores[i])
            best = None if missing else {"acc": scores[top], "epoch": epochs[top]}
            out["max"] = best
            tail = self.window(max_epochs)
            if tail is None:
                return out | {"mean": None} | ({"missing": missing} if missing else {})
            tail_scores = [s for e, s in zip(epochs, scores, strict=True) if e in tail]
            missing_tail = sorted(set(tail) - set(epochs))
            if missing_tail:
                return out | {"mean": None, "missing": missing}
            return out | {"mean": sum(tail_scores) / len(tail_scores)}
        if missing:
            return out | {"mean": None, "missing": missing}
        return out | {"mean": sum(scores) / len(scores)}

    def state_dict(self) -> dict[str, Any]:
        return {"records": list(self.records)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.records = list(state_dict.get("records", []))
