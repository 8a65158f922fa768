"""What a person watching a fit reads: the plan before the first epoch, a line per epoch (with
or without a progress bar), the time left after the first, each stage's start, why an early stop
stopped the run, and a warning when T̂ comes from a warm-up model near chance."""

from __future__ import annotations

import logging
import re
from datetime import datetime
from pathlib import Path

import pytest
import torch
from as_command import run_command

from noisylabels.callbacks.epoch_log import (
    epoch_line,
    plan_line,
    planned_stages,
    stage_line,
    time_left_line,
)
from noisylabels.methods.transition import near_chance, warn_near_chance
from noisylabels.noise import symmetric_transition

from conftest import CONFIGS

LINE = re.compile(
    r"^Epoch (\d+)/(\d+) \[(warm-up|main)\] train loss \d+\.\d{4} \| noisy-val acc \d\.\d{4}"
    r"( \| ε_T \d+\.\d{3})? \| \d+\.\d s$"
)


def test_epoch_line_leaves_out_what_is_unknown() -> None:
    assert (
        epoch_line(3, 14, "main", 0.81234, 0.51049, 0.0, 0.42)
        == "Epoch 3/14 [main] train loss 0.8123 | noisy-val acc 0.5105 | ε_T 0.000 | 0.4 s"
    )
    assert epoch_line(0, None, None, None, None, None, 2.0) == "Epoch 0 2.0 s"


def test_the_plan_names_each_stage_and_its_epochs() -> None:
    stages = planned_stages(100, warmup=20)
    assert stages == [("warm-up", 0, 19), ("main", 20, 99)]
    assert plan_line("Forward-VRNL", 100, stages) == (
        "Plan: Forward-VRNL, 100 epochs (0-99): warm-up 0-19 (20 epochs), main 20-99 (80 epochs)"
    )
    assert plan_line("CE", 80, planned_stages(80)) == "Plan: CE, 80 epochs (0-79)"
    three = planned_stages(10, warmup=2, revision=3)
    assert three == [("warm-up", 0, 1), ("main", 2, 6), ("revision", 7, 9)]
    assert plan_line(None, 10, three, start_epoch=4).endswith("; resumed at epoch 4")
    assert "no epoch limit" in plan_line("CE", -1, [])
    assert planned_stages(3, warmup=5) == [("warm-up", 0, 2)]  # what fits, nothing negative
    assert (
        stage_line("revision", 7, three)
        == "Stage revision begins at epoch 7: epochs 7-9 (3 epochs)"
    )
    when = datetime(2026, 1, 1, 12, 0)
    assert time_left_line(0, 6.0, 99, when) == (
        "Time: epoch 0 took 6.0 s; the 99 epochs left take about 10 min at this pace "
        "(training ends about 12:09; the test after it is not counted)"
    )
    assert "about 2.8 h" in time_left_line(0, 600.0, 17, when)


def test_a_line_per_epoch_without_progress_bar(tmp_path: Path) -> None:
    """The real command, progress bar off, as every sweep run: one line per epoch with the
    stage, and ε_T once T̂ exists; no "callbacks will override" notice."""
    out = run_command(
        ["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--model.transition", "estimate",
         "--model.schedule.warmup_epochs", "2", "--trainer.max_epochs", "4",
         "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    lines = [line for line in text.splitlines() if line.startswith("Epoch ")]
    assert len(lines) == 4, text[-3000:]
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert [(m[1], m[2], m[3]) for m in parsed] == [
        ("0", "3", "warm-up"), ("1", "3", "warm-up"), ("2", "3", "main"), ("3", "3", "main")
    ]  # fmt: skip
    assert [m[4] is not None for m in parsed] == [False, False, True, True]
    said = text.splitlines()
    plan = "Plan: Forward-VRNL, 4 epochs (0-3): warm-up 0-1 (2 epochs), main 2-3 (2 epochs)"
    assert said.count(plan) == 1 and said.index(plan) < said.index(lines[0])
    times = [line for line in said if line.startswith("Time: epoch 0 took ")]
    assert len(times) == 1 and "the 3 epochs left take about" in times[0]
    assert said.count("Stage main begins at epoch 2: epochs 2-3 (2 epochs)") == 1
    assert "will override" not in text
    assert "T̂ was estimated from a warm-up model near chance" not in text  # a healthy warm-up


def test_the_lines_are_written_above_a_progress_bar(tmp_path: Path, caplog, capsys) -> None:
    """Without a bar the lines go to the log; with Lightning's TQDM bar they are written above
    it (``tqdm.write``, to stdout), the same lines."""
    from noisylabels.cli import run

    args = ["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--test_after_fit", "false",
            "--trainer.max_epochs", "2"]  # fmt: skip
    for bar in ("false", "true"):
        caplog.clear()
        capsys.readouterr()
        with caplog.at_level(logging.INFO):
            run([*args, "--trainer.enable_progress_bar", bar,
                 "--trainer.default_root_dir", str(tmp_path / bar)])  # fmt: skip
        ours = re.compile(r"^(Plan: |Epoch \d+/)")  # not the bar's own "Epoch 0: 5%|..."
        logged = [m for m in caplog.messages if ours.match(m)]
        shown = [m for m in capsys.readouterr().out.splitlines() if ours.match(m)]
        said = logged if bar == "false" else shown
        assert [m.split(" ", 2)[:2] for m in said] == [
            ["Plan:", "Forward-VRNL,"], ["Epoch", "0/1"], ["Epoch", "1/1"]
        ], said  # fmt: skip
        assert not (shown if bar == "false" else logged)


def test_an_early_stop_says_why(run_cli, caplog) -> None:
    """An EarlyStopping that can never see an improvement (min_delta 1.0) stops the run after
    its patience; a line says so, with the epochs not trained."""
    with caplog.at_level(logging.INFO):
        run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "6",
                "--test_after_fit", "false", "--trainer.callbacks+=EarlyStopping",
                "--trainer.callbacks.monitor", "val/acc", "--trainer.callbacks.mode", "max",
                "--trainer.callbacks.patience", "1",
                "--trainer.callbacks.min_delta", "1.0")  # fmt: skip
    (line,) = [m for m in caplog.messages if m.startswith("EarlyStopping stopped the run")]
    assert line.startswith("EarlyStopping stopped the run after epoch 1: ")
    assert "val/acc" in line and line.endswith("(epochs 2-5 were not trained)")


def test_near_chance() -> None:
    assert near_chance(0.11, 10) and near_chance(0.185, 10)
    assert not near_chance(0.2, 10) and not near_chance(0.6, 10)
    assert near_chance(0.54, 2) and not near_chance(0.6, 2)
    good = symmetric_transition(10, 0.4)
    assert not warn_near_chance(good, 0.55)
    with pytest.warns(UserWarning, match=r"warm-up noisy-validation accuracy 0\.120"):
        assert warn_near_chance(good, 0.12)  # a diagonal that looks right, a model at chance
    with pytest.warns(UserWarning, match=r"mean diagonal of T̂ 0\.100; chance is 1/C = 0\.100"):
        assert warn_near_chance(torch.full((10, 10), 0.1))


def test_a_warmup_at_chance_warns(run_cli, tmp_path: Path) -> None:
    """A warm-up that learned nothing (a learning rate of 1e-9): the warning names both
    signs, and what to do."""
    with pytest.warns(UserWarning, match="near chance") as caught:
        run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"), "--model.transition",
                "estimate", "--model.schedule.warmup_epochs", "1", "--model.optim.lr", "1e-9",
                "--trainer.max_epochs", "2", "--test_after_fit", "false")  # fmt: skip
    (message,) = [str(w.message) for w in caught if "near chance" in str(w.message)]
    assert "mean diagonal of T̂ 0.1" in message and "--model.schedule.warmup_epochs" in message
    assert "warm-up noisy-validation accuracy" in message
