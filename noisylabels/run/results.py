"""``results.json``: the summary every run writes next to its checkpoints and event files."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch

from noisylabels.callbacks import TailTest
from noisylabels.data import NoisyDataModule
from noisylabels.methods import NoisyLabelMethod
from noisylabels.run.execution import execution
from noisylabels.run.provenance import provenance
from noisylabels.run.record import resume_history


def _number(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value.item() if isinstance(value, torch.Tensor) else value)
    return None if math.isnan(value) else value


def best_checkpoint(trainer: L.Trainer) -> tuple[str | None, int | None, float | None]:
    """Path, epoch (0-based) and monitored score of the best checkpoint, where there is one."""
    ckpt = trainer.checkpoint_callback
    path = getattr(ckpt, "best_model_path", "") or None
    if path is None or not Path(path).is_file():
        return None, None, None
    epoch = torch.load(path, map_location="cpu", weights_only=True).get("epoch")
    return path, epoch, _number(getattr(ckpt, "best_model_score", None))


def build_results(
    trainer: L.Trainer,
    model: L.LightningModule,
    datamodule: Any,
    *,
    seed: int | None,
    wall_time_s: float,
    test_metrics: dict[str, Any] | None,
    best_val: dict[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    resumed: list[dict[str, Any]] | None = None,
    tail: dict[str, Any] | None = None,
    command: Sequence[str] | None = None,
    inputs: Mapping[str, str] | None = None,
    protocol_epochs: int | None = None,
    health: str = "ok",
) -> dict[str, Any]:
    """Collect the summary of a finished fit (+ test) into a JSON-ready dict. ``config``: the
    resolved command-line configuration, hashed into ``provenance``; ``resumed``: the fit's
    :func:`resume_history` and ``tail`` its :func:`tail_summary` (read from the trainer when not
    given; a test from a checkpoint restores the callbacks' states of that checkpoint, so a
    caller reads them before testing); ``command``: the run's command line, recorded with its hash
    in ``provenance``, and ``inputs`` the hashes of the files it read; ``protocol_epochs``: the
    epochs its config files plan (its preset's protocol, before command-line overrides);
    ``health``: ``"ok"``, or why the run stopped learning."""
    path, epoch, score = best_checkpoint(trainer)
    monitor = getattr(trainer.checkpoint_callback, "monitor", None)
    val_acc = score if monitor == "val/acc" else None
    if val_acc is None and best_val is not None:
        val_acc = _number(best_val.get("val/acc"))
    if val_acc is None:
        val_acc = _number(trainer.callback_metrics.get("val/acc"))
    test_acc = _number((test_metrics or {}).get("test/acc"))
    test_acc_last = _number((test_metrics or {}).get("test/acc_last"))
    hp = dict(getattr(model, "hparams", {}))
    ours = isinstance(datamodule, NoisyDataModule)
    tail = tail_summary(trainer) if tail is None else tail
    resumed = resume_history(trainer) if resumed is None else resumed
    return {
        "method": getattr(model, "method_name", type(model).__name__),
        "alpha": hp.get("alpha"),
        "backbone": (hp.get("network") or {}).get("backbone"),
        "dataset": datamodule.name if ours else type(datamodule).__name__,
        "noise": datamodule.noise_info() if ours else None,
        "data": datamodule.data_info() if ours else None,
        "seed": seed,
        "epochs": trainer.current_epoch,
        "protocol_epochs": protocol_epochs,
        "health": health,
        "best_epoch": epoch,
        "monitor": monitor,
        "monitor_score": score,
        "val_acc": val_acc,
        "test_acc": test_acc,
        "last_epoch": trainer.current_epoch - 1 if trainer.current_epoch > 0 else None,
        "test_acc_last": test_acc_last,
        "test_acc_tail_mean": None if tail is None else tail["mean"],
        "test_acc_tail": tail,
        **_test_max(tail),
        "estimation_epoch": getattr(model, "estimation_epoch", None),
        "t_estimate": getattr(model, "estimate_details", None),
        "t_estimation_error": (
            model.t_estimation_error() if isinstance(model, NoisyLabelMethod) else None
        ),
        "wall_time_s": wall_time_s,
        "wall_time_total_s": total_wall_time(wall_time_s, resumed),
        "execution": execution(trainer, model),
        "checkpoint": path,
        "resumed": resumed,
        "provenance": provenance(model, datamodule, config, command, inputs),
    }


def total_wall_time(wall_time_s: float, resumed: Sequence[Mapping[str, Any]]) -> float | None:
    """The seconds of every part of a run: this part's ``wall_time_s`` and, for each resume, the
    seconds the part before it ran until it wrote the checkpoint resumed from (work it did after
    that checkpoint was redone, and is not counted); ``None`` where a part did not record its
    time (a checkpoint written before runs recorded their parts)."""
    seconds = [(r.get("part") or {}).get("seconds") for r in resumed]
    if not all(isinstance(s, int | float) for s in seconds):
        return None
    return wall_time_s + sum(seconds)


def _test_max(tail: Mapping[str, Any] | None) -> dict[str, Any]:
    """``test_acc_max`` and ``test_acc_max_epoch`` of a tail test of every epoch (nothing for
    a run that did not test every epoch: the keys are absent, as before the option)."""
    if tail is None or "max" not in tail:
        return {}
    best = tail["max"]
    return {
        "test_acc_max": None if best is None else best["acc"],
        "test_acc_max_epoch": None if best is None else best["epoch"],
    }


def tail_summary(trainer: L.Trainer) -> dict[str, Any] | None:
    """The :class:`~noisylabels.callbacks.TailTest` record of the run, ``None`` without one."""
    for callback in trainer.callbacks:
        if isinstance(callback, TailTest):
            return callback.summary(trainer.max_epochs)
    return None
