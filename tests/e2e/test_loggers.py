"""Any Lightning logger: ``--trainer.logger CLASS`` without a ``save_dir`` writes into the run's
root, the per-subset statistics reach every logger (not TensorBoard only), several loggers of a
run share its folder, and ``noisylabels plot`` and ``--ckpt_path last`` work with them."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from noisylabels.callbacks.subset_stats import CSV_FILE, csv_columns
from noisylabels.report.plot import load_run, read_event_series

from conftest import CONFIGS, REPO

QUICK = ("--config", str(CONFIGS / "quickstart.yaml"), "--test_after_fit", "false")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _subsets_by_epoch(rows: list[dict[str, str]]) -> dict[int, dict[str, float]]:
    """The ``subsets/*`` values of CSV rows (``subsets.csv`` or a CSVLogger's ``metrics.csv``)
    by epoch."""
    found: dict[int, dict[str, float]] = {}
    for row in rows:
        values = {k: float(v) for k, v in row.items() if k.startswith("subsets/") and v}
        if values and row.get("epoch"):
            found.setdefault(int(float(row["epoch"])), {}).update(values)
    return found


def _events_by_epoch(folder: Path) -> dict[int, dict[str, float]]:
    """The ``subsets/*`` scalars of the event files in ``folder`` by epoch: Lightning logs the
    epoch as the scalar ``epoch`` at the same step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    epoch_at = {e.step: int(e.value) for e in acc.Scalars("epoch")}
    found: dict[int, dict[str, float]] = {}
    for name in acc.Tags()["scalars"]:
        if name.startswith("subsets/"):
            for event in acc.Scalars(name):
                found.setdefault(epoch_at[event.step], {})[name] = event.value
    return found


def _assert_same(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]]) -> None:
    assert a.keys() == b.keys()
    for epoch in a:
        assert a[epoch].keys() == b[epoch].keys(), epoch
        for name, value in a[epoch].items():
            assert b[epoch][name] == pytest.approx(value, rel=1e-6, abs=1e-9), (epoch, name)


def test_csv_logger_by_class_name(run_cli, tmp_path: Path, capsys) -> None:
    """The documented ``--trainer.logger CSVLogger``: no save_dir needed (the run's root, as
    for the default logger, recorded in config.yaml); metrics.csv holds the subset statistics
    of every epoch, equal to subsets.csv; the run plots; ``--ckpt_path last`` finds it."""
    run_cli("fit", *QUICK, "--trainer.max_epochs", "2", "--trainer.logger", "CSVLogger")
    folder = tmp_path / "lightning_logs" / "version_0"
    assert (folder / "metrics.csv").is_file() and not list(tmp_path.rglob("events.out.*"))
    config = yaml.safe_load((folder / "config.yaml").read_text())
    logger = config["trainer"]["logger"]
    assert logger["class_path"] == "lightning.pytorch.loggers.CSVLogger"
    assert logger["init_args"]["save_dir"] == str(tmp_path)

    metrics = _rows(folder / "metrics.csv")
    assert set(csv_columns()[1:]) <= set(metrics[0])  # every statistic has its column
    logged = _subsets_by_epoch(metrics)
    assert sorted(logged) == [0, 1]
    _assert_same(_subsets_by_epoch(_rows(folder / CSV_FILE)), logged)

    out = tmp_path / "fig.png"
    from noisylabels.cli import run

    assert run(["plot", str(tmp_path), "--out", str(out)]) == out
    assert load_run(tmp_path).get("loss_mean", "mislabeled")[0] == [1, 2]

    # --ckpt_path last: the newest run under the CSV logger's folder (finished: it goes on
    # from its last.ckpt in a new folder)
    capsys.readouterr()
    run_cli(
        "fit", *QUICK[:2], "--trainer.max_epochs", "3", "--trainer.logger", "CSVLogger",
        "--ckpt_path", "last",
    )  # fmt: skip
    results = json.loads((tmp_path / "lightning_logs" / "version_1" / "results.json").read_text())
    (resumed,) = results["resumed"]
    assert resumed["from"] == str(folder / "checkpoints" / "last.ckpt")
    assert resumed["epochs_done"] == 2


def test_print_config_leaves_the_save_dir_to_the_run(tmp_path: Path, capsys) -> None:
    """``--print_config`` prints the logger's save_dir as null (set at run time, like
    default_root_dir); that config, given back, builds the logger in the run's root."""
    from noisylabels.cli import run
    from noisylabels.run.cli import make_cli

    with pytest.raises(SystemExit):
        run(["fit", *QUICK, "--trainer.logger", "TensorBoardLogger", "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["logger"]["init_args"]["save_dir"] is None
    printed["trainer"]["default_root_dir"] = str(tmp_path / "root")
    for key in ("ckpt_path", "weights_only"):  # options of `fit`, not of the bare parser
        printed.pop(key)
    config = tmp_path / "printed.yaml"
    config.write_text(yaml.safe_dump(printed))
    cli = make_cli(["--config", str(config)], run=False)
    (logger,) = cli.trainer.loggers
    assert type(logger).__name__ == "TensorBoardLogger"
    assert logger.save_dir == str(tmp_path / "root")
    # a save_dir given is kept
    cli = make_cli(
        ["--config", str(config), "--trainer.logger.save_dir", str(tmp_path / "elsewhere")],
        run=False,
    )
    assert cli.trainer.loggers[0].save_dir == str(tmp_path / "elsewhere")


def test_csv_and_tensorboard_loggers_hold_the_same_statistics(run_cli, tmp_path: Path) -> None:
    """Two loggers by class name: both write into the one run folder, and both hold the same
    subset statistics for each epoch (those of subsets.csv)."""
    cli = run_cli(
        "fit", *QUICK, "--trainer.max_epochs", "3", "--trainer.callbacks.init_args.source", "pass",
        "--trainer.logger", "[CSVLogger, TensorBoardLogger]",
    )  # fmt: skip
    assert [type(lg).__name__ for lg in cli.trainer.loggers] == ["CSVLogger", "TensorBoardLogger"]
    (folder,) = (tmp_path / "lightning_logs").iterdir()
    assert list(folder.glob("events.out.tfevents.*")) and (folder / "metrics.csv").is_file()
    from_csv = _subsets_by_epoch(_rows(folder / "metrics.csv"))
    from_tensorboard = _events_by_epoch(folder)
    assert sorted(from_csv) == [0, 1, 2]
    _assert_same(from_csv, from_tensorboard)
    _assert_same(_subsets_by_epoch(_rows(folder / CSV_FILE)), from_csv)
    # the event files alone give the same series (a run without subsets.csv)
    series = read_event_series(folder)
    for name in from_csv[0]:
        epochs, values = series[name]
        assert epochs == [1, 2, 3]
        assert values == pytest.approx([from_csv[e][name] for e in (0, 1, 2)], rel=1e-6)


def test_event_files_logged_at_step_epoch_still_read(tmp_path: Path) -> None:
    """Runs made when the statistics went to TensorBoard at step = epoch (besides Lightning's
    own metrics, whose ``epoch`` is logged at the training steps) plot as before."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step in range(6):  # Lightning: epoch 0 at steps 0-2, epoch 1 at 3-5
        writer.add_scalar("epoch", step // 3, global_step=step)
    for epoch, value in enumerate((2.0, 1.5)):
        writer.add_scalar("subsets/loss_mean/correct", value, global_step=epoch)
    writer.close()
    assert read_event_series(tmp_path)["subsets/loss_mean/correct"] == ([1, 2], [2.0, 1.5])


@pytest.mark.slow
def test_two_processes_log_the_statistics_of_all_samples(tmp_path: Path) -> None:
    """DDP over two CPU processes with the CSV logger: metrics.csv holds, per epoch, the
    statistics of subsets.csv, which count every training sample once (both processes')."""
    args = [
        sys.executable, "-m", "noisylabels.cli", "fit", *QUICK,
        "--config", str(CONFIGS / "trainer" / "ddp_cpu.yaml"), "--trainer.max_epochs", "2",
        "--trainer.logger", "CSVLogger", "--trainer.default_root_dir", str(tmp_path),
        "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (folder,) = (tmp_path / "lightning_logs").iterdir()
    logged = _subsets_by_epoch(_rows(folder / "metrics.csv"))
    assert sorted(logged) == [0, 1]
    _assert_same(_subsets_by_epoch(_rows(folder / CSV_FILE)), logged)
    counted = logged[1]["subsets/count/mislabeled"] + logged[1]["subsets/count/correct"]
    assert counted == 1295  # the digits' training split, not one process's half


def test_a_resumed_run_keeps_the_csv_metrics_of_its_earlier_epochs(tmp_path: Path) -> None:
    """Lightning's CSV writer deletes the metrics.csv it finds when it starts: a run continued
    in its own folder keeps the rows of its earlier part, and starts without that warning."""
    from as_command import run_command

    root = tmp_path / "runs"
    plan = tmp_path / "signals.json"
    plan.write_text(json.dumps([{"where": "train", "index": 2, "batch": 0, "signal": "SIGTERM"}]))
    argv = ["fit", *QUICK, "--trainer.logger", "CSVLogger", "--trainer.max_epochs", "4",
            "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
            "--trainer.callbacks+=interrupt.SignalPlan",
            "--trainer.callbacks.plan", str(plan)]  # fmt: skip
    stopped = run_command(argv)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    (metrics,) = root.rglob("metrics.csv")
    before = {r["epoch"] for r in _rows(metrics)} - {""}
    assert before == {"0", "1"}
    resumed = run_command([*argv, "--ckpt_path", "last"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Experiment logs directory" not in resumed.stderr + stopped.stderr
    assert {r["epoch"] for r in _rows(metrics)} - {""} == {"0", "1", "2", "3"}
