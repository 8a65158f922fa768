"""One run, whichever door: ``fit_and_test`` from Python and ``noisylabels fit`` give the same
results and write the same files; docs/python.md's examples run as written."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import lightning as L
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from noisylabels.data import DigitsDataModule
from noisylabels.methods import Forward, NetworkOptions, OptimizerOptions, StageSchedule
from noisylabels.run import RunPlan, fit_and_test

from conftest import FINISHED_RUN_EPOCHS, REPO, read_results

EPOCHS = FINISHED_RUN_EPOCHS  # the command line's run is conftest's finished quickstart run
STEPS_PER_EPOCH = 21  # batches of 64 of the digits' 1,295 training samples
# the metrics of results.json (what differs between two runs of one experiment: the paths, the
# wall time and the provenance)
METRICS = (
    "method",
    "alpha",
    "backbone",
    "dataset",
    "noise",
    "data",
    "seed",
    "epochs",
    "best_epoch",
    "monitor",
    "monitor_score",
    "val_acc",
    "test_acc",
    "last_epoch",
    "test_acc_last",
    "estimation_epoch",
    "t_estimation_error",
)


def quickstart_in_python(root: Path, plan: RunPlan | None = None) -> dict:
    """configs/quickstart.yaml, written in Python as docs/python.md shows it, for EPOCHS epochs."""
    L.seed_everything(0, workers=True)
    data = DigitsDataModule(batch_size=64, noise_type="symmetric", noise_rate=0.4, noise_seed=0)
    model = Forward(
        num_classes=data.num_classes,
        input_shape=data.input_shape,
        network=NetworkOptions(backbone="mlp", backbone_kwargs={"hidden": [128]}),
        alpha=0.1,
        transition=True,
        schedule=StageSchedule(main_epochs=15, milestones=[10]),
        optim=OptimizerOptions(lr=0.05),
    )
    assert model.schedule.total_epochs == 15  # docs/python.md trains these; here a shorter run
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        log_every_n_steps=5,
        default_root_dir=root,
        enable_progress_bar=False,
    )
    return fit_and_test(model, data, trainer, plan)


def _metrics(results: dict) -> dict:
    return {key: results[key] for key in METRICS}


def _run_folder(root: Path) -> Path:
    return next(root.rglob("results.json")).parent


def test_fit_and_test_equals_noisylabels_fit(
    finished_cli, finished_run: Path, run_cli, tmp_path: Path
) -> None:
    """Same seed, quickstart-size data: identical results.json metrics, the same best
    checkpoint, the same per-subset statistics; the Python run's config.yaml runs the same
    experiment again from the command line. The command line's run is conftest's
    finished_run (``noisylabels fit --config configs/quickstart.yaml --trainer.max_epochs
    2``), read, not changed."""
    cli, cli_root = finished_cli, finished_run
    py_root, again_root = tmp_path / "python", tmp_path / "again"
    returned = quickstart_in_python(py_root)
    from_cli, from_python = read_results(cli_root), read_results(py_root)
    assert returned == from_python
    assert _metrics(from_python) == _metrics(from_cli) == _metrics(cli.results)
    assert from_python["monitor"] == "val/acc"  # the CLI's selection, not the last epoch
    cli_dir, py_dir = _run_folder(cli_root), _run_folder(py_root)
    shared = yaml.safe_load((cli_dir / "config.yaml").read_text())
    assert shared["trainer"]["max_epochs"] == EPOCHS and from_cli["epochs"] == EPOCHS
    for folder in (cli_dir, py_dir):
        best = [p.name for p in (folder / "checkpoints").glob("best-*.ckpt")]
        assert best == [f"best-epoch{from_cli['best_epoch']:03d}.ckpt"]
        assert (folder / "config.yaml").is_file() and (folder / "noise.pt").is_file()
    assert (py_dir / "subsets.csv").read_text() == (cli_dir / "subsets.csv").read_text()
    # config.yaml: the command line's layout, the classes and hyperparameters of the run
    text = (py_dir / "config.yaml").read_text()
    assert text.startswith("# a run of noisylabels.run.fit_and_test")
    assert "noisylabels.run.checkpoints.WarmupAwareCheckpoint" in text
    config = yaml.safe_load(text)
    assert config["seed_everything"] == 0 and config["trainer"]["max_epochs"] == EPOCHS
    assert config["model"]["class_path"].endswith(".Forward")
    assert config["model"]["init_args"]["alpha"] == 0.1
    assert config["data"]["init_args"]["noise_rate"] == 0.4
    assert from_python["provenance"]["config_sha256"] is not None
    run_cli("fit", "--config", str(py_dir / "config.yaml"), root=again_root)
    assert _metrics(read_results(again_root)) == _metrics(from_cli)
    # hp_metric, the metric of TensorBoard's HParams tab: the clean test accuracy, its one
    # value (no -1 from the start of the fit to smooth it with)
    for folder in (cli_dir, py_dir):
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        events.Reload()
        values = [e.value for e in events.Scalars("hp_metric")]
        assert values == [pytest.approx(from_cli["test_acc"])]


def test_each_addition_can_be_turned_off(tmp_path: Path) -> None:
    """RunPlan(checkpoint=None) keeps Lightning's checkpoint (the last epoch is tested);
    subset_statistics=False writes no subsets.csv. The run's record is written either way."""
    results = quickstart_in_python(tmp_path, RunPlan(checkpoint=None, subset_statistics=False))
    assert results["monitor"] is None and results["best_epoch"] == EPOCHS - 1
    assert results["test_acc"] == results["test_acc_last"]
    folder = next(tmp_path.rglob("noise.pt")).parent
    assert [p.name for p in (folder / "checkpoints").glob("*.ckpt") if p.name != "last.ckpt"] == [
        f"epoch={EPOCHS - 1}-step={EPOCHS * STEPS_PER_EPOCH}.ckpt"
    ]
    assert not (folder / "subsets.csv").exists()
    for name in ("results.json", "config.yaml", "transition_estimate.csv"):
        assert (folder / name).is_file(), name


def test_a_checkpoint_of_the_callers_is_kept(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    L.seed_everything(0)
    data = DigitsDataModule(noise_rate=0.4)
    model = Forward(
        num_classes=10, input_shape=data.input_shape, network={"backbone": "mlp"}, transition=True
    )
    mine = ModelCheckpoint(monitor="val/loss", mode="min")
    trainer = L.Trainer(max_epochs=2, default_root_dir=tmp_path, enable_progress_bar=False,
                        callbacks=[mine])  # fmt: skip
    results = fit_and_test(model, data, trainer)
    assert trainer.checkpoint_callback is mine and results["monitor"] == "val/loss"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_the_python_page_runs_as_written(tmp_path: Path, monkeypatch, capsys) -> None:
    """docs/python.md: noisylabels.cli.run, the quickstart and a LightningModule of one's own
    (not a NoisyLabelMethod) run as written and print what the page says."""
    monkeypatch.chdir(REPO)  # the page's paths are the repository's
    blocks = python_blocks(REPO / "docs" / "python.md")
    assert len(blocks) == 3
    root = tmp_path / "runs"
    for i, block in enumerate(blocks):
        code = block.replace('"runs/', f'"{root}/')
        if i == 0:  # the command line's run writes under the config's root
            code = code.replace('"false"]', f'"false", "--trainer.default_root_dir", "{root}/cli"]')
        with contextlib.ExitStack() as stack:
            if i == 2:  # a module of one's own records no per-sample steps, and is told so
                stack.enter_context(pytest.warns(UserWarning, match="SampleDynamics: the "))
            exec(compile(code, f"docs/python.md block {i}", "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out
    assert printed.splitlines().count("0.9442896842956543") == 2  # the quickstart, either door
    quickstart = json.loads(next((root / "quickstart_python").rglob("results.json")).read_text())
    assert quickstart["test_acc"] == 0.9442896842956543
    folder = next((root / "smallnet").rglob("results.json")).parent
    own = json.loads((folder / "results.json").read_text())
    assert own["method"] == "SmallNet" and own["dataset"] == "digits"
    assert own["test_acc"] > 0.5 and own["test_acc_last"] > 0.5
    assert own["checkpoint"].endswith(f"best-epoch{own['best_epoch']:03d}.ckpt")
    assert f"SmallNet {own['best_epoch']} {own['test_acc']} {own['test_acc_last']}" in printed
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert config["model"]["init_args"] == {
        "input_shape": [1, 8, 8], "num_classes": 10, "hidden": 64, "lr": 0.05
    }  # fmt: skip
    assert not (folder / "subsets.csv").exists()  # a plain LightningModule hands out no steps
