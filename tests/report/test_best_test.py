"""The highest test accuracy over the epochs: recorded only where a run asks for it
(``--test_every_epoch``), the maximum of its every-epoch tests, and ``report --metric
best-test`` beside the selected checkpoint and the last epoch, each table naming its rule."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from noisylabels.callbacks.tail_test import TailTest
from noisylabels.cli import run

from conftest import CONFIGS, read_results

QUICKSTART = str(CONFIGS / "quickstart.yaml")


def _fit(run_cli, root: Path, *args: str) -> dict:
    run_cli("fit", "--config", QUICKSTART, "--trainer.max_epochs", "4", *args, root=root)
    return read_results(root)


def _report(*args: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        run(["report", *args])
    return out.getvalue()


def test_every_epoch_is_tested_and_the_highest_recorded(run_cli, tmp_path: Path) -> None:
    results = _fit(run_cli, tmp_path / "a", "--test_every_epoch", "true")
    tail = results["test_acc_tail"]
    assert tail["epochs"] == [0, 1, 2, 3]
    scores = [acc[0] for acc in tail["acc"]]  # one network: the figure is its accuracy
    assert results["test_acc_max"] == pytest.approx(max(scores))
    assert results["test_acc_max_epoch"] == scores.index(max(scores))
    assert results["test_acc_tail_mean"] is None  # no tail was asked for
    assert results["test_acc_max"] >= results["test_acc_last"] - 1e-6  # float32 metric


def test_a_run_that_did_not_ask_records_no_maximum(run_cli, tmp_path: Path) -> None:
    results = _fit(run_cli, tmp_path / "b")
    assert "test_acc_max" not in results and results["test_acc_tail"] is None


def test_the_tail_mean_stays_over_the_tail_when_every_epoch_is_tested(run_cli, tmp_path):
    results = _fit(run_cli, tmp_path / "c", "--test_every_epoch", "true", "--tail_test_epochs", "2")
    tail = results["test_acc_tail"]
    assert tail["epochs"] == [0, 1, 2, 3]
    last_two = [acc[0] for acc in tail["acc"][2:]]
    assert results["test_acc_tail_mean"] == pytest.approx(sum(last_two) / 2)


def test_a_maximum_with_a_missing_epoch_is_none() -> None:
    test = TailTest(0, every_epoch=True)
    test.records = [
        {"epoch": 0, "acc": [0.5], "score": 0.5},
        {"epoch": 2, "acc": [0.7], "score": 0.7},
    ]
    summary = test.summary(3)
    assert summary["max"] is None and summary["missing"] == [1]
    test.records.insert(1, {"epoch": 1, "acc": [0.9], "score": 0.9})
    assert test.summary(3)["max"] == {"acc": 0.9, "epoch": 1}


def test_report_best_test_beside_selected_and_last(run_cli, tmp_path: Path) -> None:
    """``--metric best-test`` averages the runs that tested every epoch, leaves the others out
    saying why, and the table says which rule it reports."""
    root = tmp_path / "runs"
    for name, alpha in (("forward", "0"), ("forward_vrnl", "0.1")):
        _fit(run_cli, root / name, "--test_every_epoch", "true", "--model.alpha", alpha)
    _fit(run_cli, root / "plain", "--seed_everything", "1")  # no every-epoch test
    text = _report(str(root), "--metric", "best-test,best,last", "--include-short")
    assert "highest test accuracy over the epochs (chosen by the test set: optimistic)" in text
    left_out = text.split("Left out of the highest test accuracy over the epochs")[1]
    assert "test_acc_max is not recorded" in left_out.split("Left out of")[0]
    line = next(row for row in text.splitlines() if row.startswith("| Forward-VRNL"))
    best_test, selected, last = (c.strip(" *") for c in line.strip("|").split("|")[1:])
    assert best_test.endswith("(1)") and selected.endswith("(2)") and last.endswith("(2)")
