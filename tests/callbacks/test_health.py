"""A run that stops learning stops and says so (HealthMonitor), and a finished run's results
are judged the same way (results_health): on runs that collapse through the real CLI, on the
learning curves of healthy runs, across a resume and under two processes."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from noisylabels.callbacks import HealthMonitor, results_health
from noisylabels.callbacks.health import MARGIN, MIN_PATIENCE, PATIENCE, patience_for
from noisylabels.noise import majority_fraction

from conftest import CONFIGS, REPO, TwoThreadAllReduce, read_results, synthetic_facts, tiny_trainer

C = 10
# MNIST's class frequencies (class 1 is the most frequent, 11.2 %): a 6,000-sample split
MNIST_SHARES = [0.0987, 0.1124, 0.0993, 0.1022, 0.0974, 0.0904, 0.0986, 0.1044, 0.0975, 0.0991]
VAL_LABELS = torch.repeat_interleave(
    torch.arange(C), torch.tensor([round(6000 * s) for s in MNIST_SHARES])
)
CHANCE = majority_fraction(VAL_LABELS)
RESULTS = sorted((REPO / "results").rglob("results.json"))
# the shipped runs their own monitor judged healthy (or made before it existed); a run it
# stopped (e.g. Backward-VRNL at alpha 0.1, results/later_methods_mnist) records why
HEALTHY = [p for p in RESULTS if json.loads(p.read_text()).get("health", "ok") == "ok"]


def _facts(val_labels: torch.Tensor = VAL_LABELS, clean_validation: bool = False) -> Any:
    labels = torch.arange(100) % C
    facts = synthetic_facts(C, labels, labels, torch.arange(90), 0.5)
    return dataclasses.replace(facts, val_labels=val_labels, clean_validation=clean_validation)


def _trainer(max_epochs: int | None = 80, facts: Any = None, strategy: Any = None) -> Any:
    facts = _facts() if facts is None else facts
    return SimpleNamespace(
        sanity_checking=False,
        fast_dev_run=False,
        state=SimpleNamespace(fn="fit"),
        callback_metrics={},
        current_epoch=0,
        max_epochs=max_epochs,
        should_stop=False,
        datamodule=SimpleNamespace(data_facts=lambda: facts),
        world_size=1 if strategy is None else 2,
        strategy=strategy,
    )


MODULE = SimpleNamespace(num_classes=C, device=torch.device("cpu"))


def _epochs(monitor: HealthMonitor, trainer: Any, curve: list[float], first: int = 0) -> int | None:
    """Validate ``curve`` epoch by epoch from ``first``, as Lightning would (stopping where the
    trainer is told to); the epoch the monitor stopped the run at, or ``None``."""
    for epoch, accuracy in enumerate(curve, start=first):
        trainer.current_epoch = epoch
        trainer.callback_metrics["val/acc"] = torch.tensor(accuracy)
        monitor.on_validation_end(trainer, MODULE)
        if trainer.should_stop:
            return epoch
    return None


# ----------------------------------------------------------------------- the callback itself
def test_a_run_at_chance_stops_after_patience_epochs_naming_why(caplog) -> None:
    monitor, trainer = HealthMonitor(), _trainer()
    assert monitor.verdict == "ok"
    curve = [0.30, 0.45, 0.11, 0.098, 0.10, 0.12, 0.098, 0.098, 0.098]
    with caplog.at_level(logging.INFO):
        stopped = _epochs(monitor, trainer, curve)
    assert stopped == 6 and trainer.should_stop
    assert monitor.verdict == (
        f"collapsed: noisy-validation accuracy 0.098 at chance ({CHANCE:.3f}) for 5 epochs "
        "(epochs 2-6)"
    )
    lines = [r.getMessage() for r in caplog.records if "HealthMonitor" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "stopping training at epoch 6" in lines[0] and "--model.alpha" in lines[0]


def test_chance_is_the_most_frequent_validation_label_plus_the_margin() -> None:
    edge = CHANCE + MARGIN
    for value, stops in ((edge, True), (edge + 1e-3, False), (float("nan"), True)):
        monitor, trainer = HealthMonitor(patience=2), _trainer()
        assert (_epochs(monitor, trainer, [value] * 3) is not None) == stops, value
    # a split dominated by one class: predicting it scores its share, which is chance
    skewed = torch.cat([torch.zeros(700, dtype=torch.long), torch.arange(300) % C])
    monitor, trainer = HealthMonitor(patience=2), _trainer(facts=_facts(skewed))
    assert _epochs(monitor, trainer, [0.72, 0.72, 0.72]) == 1
    assert "at chance (0.730)" in monitor.verdict
    # clean validation labels (Clothing1M's clean_val): the same, named so
    monitor, trainer = HealthMonitor(patience=2), _trainer(facts=_facts(clean_validation=True))
    _epochs(monitor, trainer, [0.05, 0.05])
    assert monitor.verdict.startswith("collapsed: validation accuracy 0.050")


def test_a_recovery_resets_the_count_and_stop_false_only_records() -> None:
    monitor, trainer = HealthMonitor(), _trainer()
    assert _epochs(monitor, trainer, [0.1] * 4 + [0.3] + [0.1] * 4) is None
    assert monitor.verdict == "ok" and monitor.streak == [5, 6, 7, 8]
    monitor, trainer = HealthMonitor(stop=False), _trainer()
    assert _epochs(monitor, trainer, [0.1] * 7) is None and not trainer.should_stop
    assert monitor.verdict.endswith("for 5 epochs (epochs 0-4)")


def test_a_short_run_waits_half_its_epochs_at_least_two() -> None:
    assert [patience_for(PATIENCE, n) for n in (1, 2, 3, 4, 6, 10, 200)] == [2, 2, 2, 2, 3, 5, 5]
    assert patience_for(PATIENCE, None) == patience_for(PATIENCE, -1) == PATIENCE
    assert MIN_PATIENCE == 2
    monitor, trainer = HealthMonitor(), _trainer(max_epochs=6)
    assert _epochs(monitor, trainer, [0.1] * 6) == 2
    monitor, trainer = HealthMonitor(), _trainer(max_epochs=1)  # one epoch is never judged
    assert _epochs(monitor, trainer, [0.1]) is None and monitor.verdict == "ok"


def test_what_is_not_a_fit_epoch_is_not_counted() -> None:
    monitor, trainer = HealthMonitor(patience=1), _trainer()
    trainer.callback_metrics["val/acc"] = torch.tensor(0.0)
    for flag in ("sanity_checking", "fast_dev_run"):
        setattr(trainer, flag, True)
        monitor.on_validation_end(trainer, MODULE)
        setattr(trainer, flag, False)
    trainer.state.fn = "validate"
    monitor.on_validation_end(trainer, MODULE)
    assert monitor.streak == [] and monitor.verdict == "ok"
    trainer.state.fn = "fit"
    trainer.callback_metrics.clear()  # nothing logged: nothing to judge
    monitor.on_validation_end(trainer, MODULE)
    assert monitor.streak == []
    with pytest.raises(ValueError, match="patience"):
        HealthMonitor(patience=0)


def test_the_count_survives_a_checkpoint(tmp_path: Path) -> None:
    """A run stopped after 3 epochs at chance and resumed stops where the uninterrupted run
    does; the state is plain data (a checkpoint loads it with weights_only); a test of an
    earlier checkpoint after the fit does not rewind the verdict."""
    curve = [0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    whole, trainer = HealthMonitor(), _trainer()
    assert _epochs(whole, trainer, curve) == 5
    first, trainer = HealthMonitor(), _trainer()
    _epochs(first, trainer, curve[:4])
    torch.save(first.state_dict(), tmp_path / "state.pt")
    resumed, trainer = HealthMonitor(), _trainer()
    resumed.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    assert _epochs(resumed, trainer, curve[4:], first=4) == 5
    assert resumed.verdict == whole.verdict and resumed.state_dict() == whole.state_dict()
    early = HealthMonitor()
    _epochs(early, _trainer(), curve[:2])
    resumed.load_state_dict(early.state_dict())  # the best checkpoint, tested after the fit
    assert resumed.verdict == whole.verdict


class _AtChance(L.LightningModule):
    """A model that logs a validation accuracy at chance every epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 2)
        self.num_classes = 2

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def validation_step(self, batch, batch_idx):
        self.log("val/acc", 0.5)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_resumed_lightning_fit_stops_where_the_uninterrupted_one_does(tmp_path: Path) -> None:
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4, 2)))

    def fit(root: Path, max_steps: int, ckpt: Path | None = None) -> tuple[L.Trainer, Any]:
        monitor = HealthMonitor(patience=3)
        trainer = tiny_trainer(
            default_root_dir=root,
            max_epochs=-1,
            max_steps=max_steps,
            callbacks=[monitor],
            num_sanity_val_steps=0,
            enable_checkpointing=True,
        )
        trainer.fit(_AtChance(), data, data, ckpt_path=ckpt)
        return trainer, monitor

    whole, monitor = fit(tmp_path / "whole", max_steps=40)
    assert whole.current_epoch == 3 and monitor.streak == [0, 1, 2]
    first, _ = fit(tmp_path / "cut", max_steps=8)  # two epochs, then interrupted
    ckpt = next((tmp_path / "cut").rglob("*.ckpt"))
    again, resumed = fit(tmp_path / "cut", max_steps=40, ckpt=ckpt)
    assert again.current_epoch == whole.current_epoch and resumed.verdict == monitor.verdict


def test_two_processes_take_the_same_decision() -> None:
    """Under DDP each process decides from the same observation: here the two see different
    accuracies (which the reduced val/acc never gives), and still stop at the same epoch."""
    all_reduce = TwoThreadAllReduce()
    curves = {0: [0.5, 0.1, 0.5, 0.1, 0.1, 0.5], 1: [0.5, 0.5, 0.1, 0.5, 0.5, 0.1]}
    stopped: dict[int, Any] = {}
    monitors = {r: HealthMonitor(patience=3) for r in (0, 1)}

    def work(rank: int) -> None:
        strategy = SimpleNamespace(reduce=all_reduce.reducer(rank))
        stopped[rank] = _epochs(monitors[rank], _trainer(strategy=strategy), curves[rank])

    threads = [threading.Thread(target=work, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert stopped == {0: 3, 1: 3} and all_reduce.calls == {0: 4, 1: 4}
    assert monitors[0].streak == monitors[1].streak == [1, 2, 3]


# ----------------------------------------------------------------- the shipped runs are healthy
def test_every_shipped_run_is_judged_as_its_monitor_judged_it() -> None:
    """A finished run's record reads "ok" where the run's monitor let it finish, and not "ok"
    where the monitor stopped it."""
    assert len(HEALTHY) >= 50
    for path in RESULTS:
        results = json.loads(path.read_text())
        healthy = results.get("health", "ok") == "ok"
        assert (results_health(results) == "ok") == healthy, path


def test_results_health_of_collapsed_and_unknown_runs() -> None:
    run = {"dataset": "cifar100", "val_acc": 0.4, "test_acc": 0.6, "test_acc_last": 0.02}
    assert results_health(run) == (
        "collapsed: clean test accuracy of the last epoch (test_acc_last) 0.020 at chance "
        f"(1/C = 0.010 for 100 classes, + margin {MARGIN:g})"
    )
    assert results_health({"dataset": "mnist", "val_acc": 0.098, "test_acc": 0.9}).startswith(
        "collapsed: validation accuracy of the selected checkpoint (val_acc) 0.098"
    )
    assert results_health({"dataset": "clothing1m", "test_acc": float("nan")}) != "ok"
    assert results_health({"dataset": "clothing1m", "val_acc": 0.6, "test_acc": 0.7}) == "ok"
    assert results_health({"dataset": "folder", "test_acc": 0.9}).startswith("unknown:")
    assert results_health({"dataset": "mnist"}) == "unknown: no accuracy recorded"


def _curve(results: dict[str, Any], shape: str) -> list[float]:
    """A noisy-validation learning curve of the kind a shipped run had: from near chance to
    its recorded best ``val_acc`` within a few epochs, then a slow decline (memorization);
    ``slow``: the first ``patience - 1`` epochs at chance; ``restart``: a newly initialised
    network at the start of the method's own stage (Patrini's Forward, Dual-T) scores chance
    for one epoch."""
    best, epochs = float(results["val_acc"]), int(results.get("epochs") or 80)
    rise = [CHANCE + (best - CHANCE) * (1 - math.exp(-(e + 1))) for e in range(4)]
    decline = [best - 0.05 * (best - CHANCE) * e / epochs for e in range(epochs - len(rise))]
    curve = rise + decline
    if shape == "slow":
        curve = [CHANCE] * (PATIENCE - 1) + curve[: epochs - PATIENCE + 1]
    elif shape == "restart":
        curve[min(20, len(curve) // 2)] = CHANCE - 0.01
    return curve


@pytest.mark.parametrize("shape", ["fast", "slow", "restart"])
def test_the_monitor_never_fires_on_the_shipped_runs_kind_of_curve(shape: str) -> None:
    for path in HEALTHY:
        results = json.loads(path.read_text())
        monitor, trainer = HealthMonitor(), _trainer(max_epochs=int(results.get("epochs") or 80))
        assert _epochs(monitor, trainer, _curve(results, shape)) is None, path
        assert monitor.verdict == "ok"


# ------------------------------------------------------------------- through the real CLI
def _fit(tmp_path: Path, *args: str) -> tuple[HealthMonitor, dict[str, Any]]:
    from noisylabels.cli import run

    cli = run(
        ["fit", *args, "--trainer.default_root_dir", str(tmp_path)]
        + ["--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"]
        + ["--trainer.callbacks+=noisylabels.callbacks.HealthMonitor"]
    )
    monitors = [c for c in cli.trainer.callbacks if isinstance(c, HealthMonitor)]
    assert len(monitors) == 1
    return monitors[0], read_results(tmp_path)


QUICKSTART = ["--config", str(CONFIGS / "quickstart.yaml")]
COTEACHING = ["--config", str(CONFIGS / "data/digits.yaml")]
COTEACHING += ["--config", str(CONFIGS / "method/coteaching.yaml")]
SHORT = ["--trainer.max_epochs", "6", "--trainer.limit_train_batches", "5"]


@pytest.mark.parametrize(
    "args, judged",
    [
        ([*QUICKSTART, *SHORT, "--model.alpha", "5"], True),  # VRNL's loss frozen
        ([*QUICKSTART, *SHORT, "--model.optim.lr", "1000"], True),
        ([*COTEACHING, "--trainer.max_epochs", "6", "--model.alpha", "5"], False),  # loss rising
    ],
    ids=["forward-alpha-5", "forward-lr-1000", "coteaching-alpha-5"],
)
def test_a_collapsing_run_is_stopped_and_says_so(tmp_path, caplog, args, judged) -> None:
    with caplog.at_level(logging.INFO):
        monitor, results = _fit(tmp_path, *args)
    assert monitor.verdict.startswith("collapsed: noisy-validation accuracy ")
    assert monitor.verdict.endswith("for 3 epochs (epochs 0-2)")  # half of 6 epochs
    assert results["last_epoch"] == 2  # stopped, not run to its 6 epochs
    assert any("HealthMonitor: stopping training" in r.getMessage() for r in caplog.records)
    if judged:  # what results.json alone shows of it
        assert results_health(results).startswith("collapsed: ")


def test_a_healthy_quickstart_run_is_judged_ok(tmp_path: Path) -> None:
    monitor, results = _fit(tmp_path, *QUICKSTART, "--trainer.max_epochs", "6")
    assert monitor.verdict == "ok" and results["last_epoch"] == 5
    assert results_health(results) == "ok"
