"""``noisylabels plot``: paper-style figures from the statistics of runs made here (their
``subsets.csv``, or the event files of runs that have none)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from noisylabels.cli import run
from noisylabels.report.plot import load_run

from conftest import CONFIGS


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two short Forward runs on digits (alpha 0 and 0.1) with the SubsetStatistics callback."""
    roots = []
    for alpha in ("0", "0.1"):
        root = tmp_path_factory.mktemp(f"alpha{alpha}")
        run(
            [
                "fit",
                "--config",
                str(CONFIGS / "quickstart.yaml"),
                "--model.alpha",
                alpha,
                "--trainer.max_epochs",
                "2",
                "--trainer.default_root_dir",
                str(root),
                "--trainer.enable_progress_bar",
                "false",
                "--test_after_fit",
                "false",
                '--trainer.callbacks=[{"class_path": "noisylabels.callbacks.SubsetStatistics"}]',
            ]
        )
        roots.append(root)
    return roots


def test_plot_loss_png(runs: list[Path], tmp_path: Path) -> None:
    out = run(["plot", *map(str, runs), "--out", str(tmp_path / "fig.png"), "--title", "digits"])
    assert out == tmp_path / "fig.png"
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_plot_posteriors_pdf_with_labels(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "sub" / "fig.pdf"
    run(["plot", *map(str, runs), "--kind", "posteriors", "--out", str(out), "--labels", "a", "b"])
    assert out.read_bytes().startswith(b"%PDF") and out.stat().st_size > 5_000


def test_plot_reads_the_logged_epochs(runs: list[Path]) -> None:
    loaded = load_run(runs[1])
    assert loaded.label == "Forward-VRNL (α = 0.1)"
    assert loaded.path.name == "version_0"
    for quantity in ("loss_mean", "ce_clean_mean", "ce_noisy_std"):
        for subset in ("correct", "mislabeled"):
            epochs, values = loaded.get(quantity, subset)
            assert epochs == [1, 2] and all(v >= 0 for v in values)
    # the training loss of mislabeled samples stays above that of correctly labeled ones
    assert loaded.get("loss_mean", "mislabeled")[1][-1] > loaded.get("loss_mean", "correct")[1][-1]


def test_runs_without_subsets_csv_are_read_from_their_event_files(
    runs: list[Path], tmp_path: Path
) -> None:
    """A run made before subsets.csv existed: the same series from TensorBoard's events."""
    old = shutil.copytree(runs[1], tmp_path / "old")
    (csv_file,) = old.rglob("subsets.csv")
    csv_file.unlink()
    from_events, from_csv = load_run(old), load_run(runs[1])
    assert from_events.series.keys() == from_csv.series.keys()
    for name, (epochs, values) in from_csv.series.items():
        assert from_events.series[name][0] == epochs
        assert from_events.series[name][1] == pytest.approx(values, rel=1e-6), name


def test_a_run_logged_with_csv_logger_only_plots(tmp_path: Path) -> None:
    """--trainer.logger CSVLogger, no TensorBoard: subsets.csv in the run folder, and plot
    draws from it; hp_metric (the clean test accuracy) lands in the logger's metrics.csv."""
    import csv
    import json

    root = tmp_path / "runs"
    run(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "2",
         "--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", str(root),
         "--trainer.default_root_dir", str(root),
         "--trainer.enable_progress_bar", "false"])  # fmt: skip
    assert not list(root.rglob("events.out.tfevents.*"))
    folder = next(root.rglob("results.json")).parent
    assert (folder / "subsets.csv").is_file()
    out = run(["plot", str(root), "--out", str(tmp_path / "fig.png")])
    assert out.read_bytes().startswith(b"\x89PNG")
    loaded = load_run(root)
    assert loaded.path == folder and loaded.get("loss_mean", "correct")[0] == [1, 2]
    with (folder / "metrics.csv").open(newline="") as fh:
        hp = [float(r["hp_metric"]) for r in csv.DictReader(fh) if r["hp_metric"]]
    assert hp == [json.loads((folder / "results.json").read_text())["test_acc"]]


def test_a_folder_of_several_runs_plots_the_newest_and_says_so(
    runs: list[Path], tmp_path: Path, capsys
) -> None:
    """The run whose statistics were written last, whatever the folders' names or order; a
    file written into an older run since (an audit's) does not make it the newest."""
    root = tmp_path / "runs"
    older = shutil.copytree(runs[1], root / "b")
    newer = shutil.copytree(runs[0], root / "a")
    (older_csv,) = older.rglob("subsets.csv")
    (newer_csv,) = newer.rglob("subsets.csv")
    now = time.time()
    os.utime(older_csv, (now - 60, now - 60))
    os.utime(newer_csv, (now, now))
    (older_csv.parent / "label_issues.csv").write_text("rank\n")  # written after both runs
    out = run(["plot", str(root), "--out", str(tmp_path / "fig.png")])
    assert out.read_bytes().startswith(b"\x89PNG")
    err = capsys.readouterr().err
    assert (
        f"noisylabels plot: {root} holds 2 runs with statistics; using the newest, "
        f"{newer_csv.parent}" in err
    ), err
    assert load_run(root).path == newer_csv.parent


def test_plot_errors(runs: list[Path], tmp_path: Path, capsys) -> None:
    cases = [
        ([str(tmp_path), "--out", str(tmp_path / "a.png")], "none with per-subset statistics"),
        ([str(tmp_path / "nope"), "--out", str(tmp_path / "a.png")], "does not exist"),
        ([str(runs[0]), "--out", str(tmp_path / "a.jpg")], "--out must end with"),
        ([str(runs[0]), "--out", str(tmp_path / "a.png"), "--labels", "x", "y"], "2 labels"),
        ([str(runs[0]), "--out", str(tmp_path / "a.png"), "--kind", "bars"], "invalid choice"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as exc:
            run(["plot", *args])
        assert exc.value.code == 2
        assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("a.*"))


def test_plot_help(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        run(["plot", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in ("--out", "--kind", "--labels", "--title", "RUN_DIR"):
        assert option in text
