"""What ``noisylabels sweep`` tells: the progress line counts finished, failed and stopped runs
apart, ``--submit`` without sbatch names the script it wrote, a dry run checks classes and
options only with ``--check``, and a dry run piped into ``head`` ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from noisylabels.sweep import slurm
from noisylabels.sweep.grid import Run
from noisylabels.sweep.launch import Outcome, Progress

from conftest import CONFIGS, REPO

SWEEP = """\
name: demo
base: [{quickstart}]
axes:
  method:
    forward: {{model.alpha: 0.0}}
    forward_vrnl: {{model.alhpa: 0.1}}
  seed: {{values: [0, 1], options: [seed_everything]}}
"""


def sweep_cli(*args: str) -> int:
    from noisylabels.cli import run

    return run(["sweep", *args])


def write_sweep(folder: Path, text: str = SWEEP) -> Path:
    path = folder / "demo.yaml"
    path.write_text(text.format(quickstart=CONFIGS / "quickstart.yaml"))
    return path


def test_the_progress_line_counts_finished_failed_and_stopped_runs_apart(tmp_path: Path) -> None:
    lines: list[str] = []
    progress = Progress(5, 1, lines.append)
    for i, kind in enumerate(("finished", "failed", "stopped", "finished")):
        run = Run(point={"seed": f"seed-{i}"}, folder=tmp_path / str(i))
        progress.finished(Outcome(run, 60.0, tmp_path / "fit.log", reason="why", kind=kind))
    assert lines[0].startswith("[1/5 finished, 0 failed, ETA 4m00s] seed-0: finished")
    assert lines[1].startswith("[1/5 finished, 1 failed, ETA")
    assert lines[2].startswith("[1/5 finished, 1 failed, 1 stopped, ETA")
    assert lines[3].startswith("[2/5 finished, 1 failed, 1 stopped, ETA 1m00s]")


def test_submit_without_sbatch_names_the_script_it_wrote(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    from noisylabels.cli import main

    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, SWEEP.replace("alhpa", "alpha"))
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", str(path), "--root", "runs", "--launcher", "slurm", "--submit"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    script = Path("runs") / "demo" / "slurm" / slurm.SCRIPT
    assert script.is_file()
    assert "needs SLURM's sbatch" in err and f"sbatch {script}" in err, err
    assert "Traceback" not in err


def test_a_dry_run_checks_classes_and_options_with_check_only(tmp_path: Path, capsys) -> None:
    path = write_sweep(tmp_path)
    root = str(tmp_path / "runs")
    assert sweep_cli(str(path), "--root", root, "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.count("[to run]") == 4 and "--dry-run --check checks them now" in out
    with pytest.raises(SystemExit) as exit_:
        sweep_cli(str(path), "--root", root, "--dry-run", "--check")
    assert exit_.value.code == 2
    assert "refuses the options of run forward_vrnl/seed-0" in capsys.readouterr().err
    assert not Path(root).exists()


def test_a_dry_run_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("NOISYLABELS_DEBUG", None)
    sweep = CONFIGS / "sweeps" / "table1_mnist.yaml"  # 360 runs: more than a pipe holds
    process = subprocess.Popen(
        [sys.executable, "-m", "noisylabels.cli", "sweep", str(sweep), "--dry-run"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # as `head -1` does
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, err
    assert first.startswith(b"sweep table1_mnist: 360 run(s)")
    assert err == ""
