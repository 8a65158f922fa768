"""`make demo` runs as the Makefile writes it (shortened): the sweep of Forward and Forward-VRNL,
their accuracies at both checkpoints side by side, and the loss figure."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO

# what shortens the demo's two runs (appended to the sweep's runs after `--`)
SHORT = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2"]


def demo_commands() -> list[list[str]]:
    """The `noisylabels` commands of the Makefile's demo recipe, in order."""
    text = (REPO / "Makefile").read_text()
    recipe = re.search(r"^demo:.*?\n((?:\t.*\n)+)", text, flags=re.M)
    assert recipe, "the Makefile has no demo recipe"
    commands = []
    for line in recipe.group(1).splitlines():
        words = shlex.split(line.strip())
        if words and words[0].endswith("/noisylabels"):
            commands.append(words[1:])
    return commands


def test_make_demo_commands_run_and_show_both_checkpoints(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from noisylabels.cli import run

    commands = demo_commands()
    assert [c[0] for c in commands] == ["sweep", "report", "plot"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    sweep, report, plot = commands
    run([*sweep, "--", *SHORT])
    capsys.readouterr()
    run([*report, "--include-short", "--include-unhealthy"])  # 2 epochs of 2 batches
    table = capsys.readouterr().out
    for method in ("Forward", "Forward-VRNL"):
        row = rf"^\| {method} \| .+ \(1\)\** \| .+ \(1\)\** \|$"
        assert re.search(row, table, flags=re.M), table
    assert "(selected checkpoint)" in table and "(last epoch)" in table
    run(plot)
    figure = Path(plot[plot.index("--out") + 1])
    assert figure.is_file() and figure.stat().st_size > 10_000


@pytest.mark.slow
def test_the_readme_shows_what_the_demo_prints(tmp_path: Path, monkeypatch, capsys) -> None:
    """The whole demo (about a minute): the table README.md prints under `make demo` is the one
    the demo's report prints, row for row."""
    from noisylabels.cli import run

    readme = (REPO / "README.md").read_text()
    block = re.search(r"It prints:\n\n```\n(.*?)```", readme, flags=re.S)
    assert block, "README.md has no demo table after 'It prints:'"
    shown = [line for line in block.group(1).splitlines() if line.startswith("|")]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    sweep, report, _ = demo_commands()
    run(sweep)
    capsys.readouterr()
    run(report)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert printed == shown
