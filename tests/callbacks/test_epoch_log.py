"""Logs a person can read: a line per epoch without a progress bar, and a warning when T̂ comes
from a warm-up model near chance."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
from as_command import run_command

from noisylabels.callbacks.epoch_log import epoch_line
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
    assert "will override" not in text
    assert "T̂ was estimated from a warm-up model near chance" not in text  # a healthy warm-up


def test_the_progress_bar_replaces_the_lines(tmp_path: Path, caplog) -> None:
    from noisylabels.cli import run

    args = ["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--test_after_fit", "false"]
    for bar, epochs in (("false", 2), ("true", 1)):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            run([*args, "--trainer.max_epochs", str(epochs), "--trainer.enable_progress_bar",
                 bar, "--trainer.default_root_dir", str(tmp_path / bar)])  # fmt: skip
        lines = [m for m in caplog.messages if m.startswith("Epoch ")]
        assert len(lines) == (2 if bar == "false" else 0)


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
