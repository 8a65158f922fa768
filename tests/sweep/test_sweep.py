"""``noisylabels sweep``: grid expansion and names, skip-if-done, failures that do not stop the
sweep, the SLURM job array, and sweeps that name what the project lacks."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from noisylabels.sweep import launch, slurm
from noisylabels.sweep.grid import display_path, load_sweep

from conftest import CONFIGS, REPO

SWEEP = """\
name: demo
base: [{quickstart}]
args: {{trainer.max_epochs: 1}}
axes:
  method:
    forward: {{model.alpha: 0.0}}
    forward_vrnl: {{model.alpha: 0.1}}
  noise:
    sym-0.2: {{data.noise_type: symmetric, data.noise_rate: 0.2}}
    pair-0.45: {{data.noise_type: pair, data.noise_rate: 0.45}}
  seed: {{values: [0, 1, 2], options: [seed_everything, data.noise_seed]}}
rules:
  - where: {{method: forward_vrnl, noise: [pair-0.45]}}
    args: {{model.alpha: 0.01}}
  - where: {{method: forward, seed: 2}}
    args: {{model.optim.lr: 0.02}}
"""


def write_sweep(folder: Path, text: str = SWEEP, name: str = "demo.yaml") -> Path:
    path = folder / name
    path.write_text(text.format(quickstart=CONFIGS / "quickstart.yaml"))
    return path


def sweep_cli(*args: str) -> int:
    from noisylabels.cli import run

    return run(["sweep", *args])


def test_grid_expansion_count_names_and_options(tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep(tmp_path), root=tmp_path / "runs")
    assert len(sweep.runs) == 2 * 2 * 3
    assert [r.name for r in sweep.runs[:4]] == [
        "forward/sym-0.2/seed-0",
        "forward/sym-0.2/seed-1",
        "forward/sym-0.2/seed-2",
        "forward/pair-0.45/seed-0",
    ]
    run = next(r for r in sweep.runs if r.name == "forward_vrnl/pair-0.45/seed-2")
    assert run.folder == tmp_path / "runs" / "demo" / "forward_vrnl" / "pair-0.45" / "seed-2"
    assert run.args == {
        "trainer.max_epochs": 1,
        "model.alpha": 0.01,
        "data.noise_type": "pair",
        "data.noise_rate": 0.45,
        "seed_everything": 2,
        "data.noise_seed": 2,
    }
    argv = run.fit_args(["--data.batch_size", "8"])
    assert argv[:3] == ["fit", "--config", display_path(CONFIGS / "quickstart.yaml")]
    assert argv[argv.index("--model.alpha") + 1] == "0.01"
    assert argv[-4:-2] == ["--data.batch_size", "8"] and argv[-2] == "--trainer.default_root_dir"
    sym = next(r for r in sweep.runs if r.name == "forward_vrnl/sym-0.2/seed-0")
    assert sym.args["model.alpha"] == 0.1  # the rule matches pair noise only
    lr = {
        r.name: r.args.get("model.optim.lr") for r in sweep.runs if r.point["method"] == "forward"
    }
    assert lr["forward/pair-0.45/seed-2"] == 0.02 and lr["forward/pair-0.45/seed-1"] is None
    kept = load_sweep(sweep.path, tmp_path, {"method": ["forward"], "seed": ["1", "seed-2"]})
    assert [r.name for r in kept.runs] == [
        "forward/sym-0.2/seed-1",
        "forward/sym-0.2/seed-2",
        "forward/pair-0.45/seed-1",
        "forward/pair-0.45/seed-2",
    ]


def test_dry_run_prints_every_run_and_what_is_done(tmp_path: Path, capsys) -> None:
    path = write_sweep(tmp_path)
    done = tmp_path / "runs" / "demo" / "forward" / "sym-0.2" / "seed-1" / "version_0"
    done.mkdir(parents=True)
    (done / "results.json").write_text("{}")
    assert sweep_cli(str(path), "--root", str(tmp_path / "runs"), "--dry-run") == 0
    out = capsys.readouterr().out
    assert "12 run(s)" in out and "1 finished" in out
    assert "[done] forward/sym-0.2/seed-1:" in out
    assert out.count("[to run]") == 11
    assert not (tmp_path / "runs" / "demo" / "forward_vrnl").exists()  # nothing ran


def test_a_stopped_run_resumes_from_its_last_checkpoint(tmp_path: Path, capsys) -> None:
    """A run folder with a ``last.ckpt`` and no results.json (a stopped run) is resumed with
    ``--ckpt_path last``; new and finished runs are not."""
    path = write_sweep(tmp_path)
    folder = tmp_path / "runs" / "demo" / "forward" / "sym-0.2"
    partial = folder / "seed-0" / "lightning_logs" / "version_0" / "checkpoints"
    partial.mkdir(parents=True)
    (partial / "last.ckpt").write_bytes(b"")
    done = folder / "seed-1" / "lightning_logs" / "version_0"
    (done / "checkpoints").mkdir(parents=True)
    (done / "checkpoints" / "last.ckpt").write_bytes(b"")
    (done / "results.json").write_text("{}")
    runs = {run.name: run for run in load_sweep(path, tmp_path / "runs").runs}
    assert runs["forward/sym-0.2/seed-0"].fit_args()[-2:] == ["--ckpt_path", "last"]
    assert "--ckpt_path" not in runs["forward/sym-0.2/seed-1"].fit_args()
    assert "--ckpt_path" not in runs["forward/sym-0.2/seed-2"].fit_args()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            SWEEP.replace(
                "    forward: {{model.alpha: 0.0}}\n",
                "    forward: {{model.alpha: 0.0}}\n"
                "    unicorn: {{model: noisylabels.methods.UnicornLoss}}\n",
            ),
            "names method 'noisylabels.methods.UnicornLoss'",
        ),
        (
            SWEEP + "  - where: {{method: forward}}\n    args: {{data: noisylabels.data.SVHN}}\n",
            "names dataset 'noisylabels.data.SVHN'",
        ),
        (
            SWEEP.replace("forward: {{model.alpha: 0.0}}", "forward: {{config: missing.yaml}}"),
            "missing.yaml",
        ),
        (SWEEP.replace("{{model.alpha: 0.0}}", "{{model.alhpa: 0.0}}"), "refuses the options"),
        (SWEEP.replace("noise: [pair-0.45]", "noise: [pair-0.4]"), "pair-0.4"),
        (SWEEP.replace("axes:", "axis:"), "unknown section"),
    ],
    ids=["method", "dataset", "config", "option", "rule", "section"],
)
def test_a_sweep_naming_what_is_missing_fails_before_it_starts(
    tmp_path: Path, capsys, text: str, message: str
) -> None:
    path = write_sweep(tmp_path, text)
    with pytest.raises(SystemExit) as exc:
        sweep_cli(str(path), "--root", str(tmp_path / "runs"))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert not (tmp_path / "runs").exists()


FAKE_FIT = """\
import json, os, pathlib, sys
argv = sys.argv[1:]
folder = pathlib.Path(argv[argv.index("--trainer.default_root_dir") + 1])
record = pathlib.Path(os.environ["FAKE_FIT_RECORD"])
with record.open("a") as fh:
    fh.write(json.dumps({"folder": str(folder), "threads": os.environ.get("OMP_NUM_THREADS"),
                         "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\\n")
if "broken" in folder.parts:
    print("Traceback: the run broke", file=sys.stderr)
    sys.exit(3)
out = folder / "lightning_logs" / "version_0"
out.mkdir(parents=True, exist_ok=True)
(out / "results.json").write_text(json.dumps({"test_acc": 0.9, "test_acc_last": 0.85}))
"""


def test_local_launcher_skips_finished_runs_and_survives_failures(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Six runs, one finished before: the other five run two at a time with the CPU threads
    split between them; the two broken runs fail, the others finish, the failures are listed
    at the end and the exit status is 1; a second sweep retries only the failures."""
    text = SWEEP.replace("forward_vrnl: {{model.alpha: 0.1}}", "broken: {{model.alpha: 0.1}}")
    text = text.replace("method: forward_vrnl", "method: broken")
    path = write_sweep(tmp_path, text)
    fake = tmp_path / "fake_fit.py"
    fake.write_text(FAKE_FIT)
    record = tmp_path / "record.jsonl"
    monkeypatch.setattr(launch, "FIT_COMMAND", [sys.executable, str(fake)])
    monkeypatch.setenv("FAKE_FIT_RECORD", str(record))
    monkeypatch.setattr(launch, "cpu_count", lambda: 8)
    root = tmp_path / "runs"
    done = root / "demo" / "forward" / "sym-0.2" / "seed-0" / "lightning_logs" / "version_0"
    done.mkdir(parents=True)
    (done / "results.json").write_text("{}")
    args = [
        str(path),
        "--root",
        str(root),
        "--parallel",
        "2",
        "--where",
        "seed=0,1",
        "--where",
        "noise=sym-0.2,pair-0.45",
        "--gpus",
        "0,1",
    ]
    with pytest.raises(SystemExit) as exc:
        sweep_cli(*args)
    assert exc.value.code == 1
    out = capsys.readouterr().out
    launched = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(launched) == 7  # 8 runs, 1 finished before
    assert {r["threads"] for r in launched} == {"4"}  # 8 CPUs / 2 processes
    assert {r["gpu"] for r in launched} <= {"0", "1"}
    assert "7 run(s), 2 at a time, 4 CPU thread(s) each, GPUs 0,1" in out
    assert "[3/7 finished, 4 failed, ETA 0s]" in out
    assert "test acc 90.00% (last epoch 85.00%)" in out
    assert "4 run(s) failed" in out and "broken/pair-0.45/seed-1: exit status 3" in out
    log = root / "demo" / "broken" / "sym-0.2" / "seed-0" / "fit.log"
    assert "the run broke" in log.read_text()
    run_file = json.loads((log.parent / "sweep_run.json").read_text())
    assert run_file["point"] == {"method": "broken", "noise": "sym-0.2", "seed": "seed-0"}
    record.unlink()
    with pytest.raises(SystemExit):
        sweep_cli(*args)
    retried = {
        Path(json.loads(line)["folder"]).parts[-3] for line in record.read_text().splitlines()
    }
    assert retried == {"broken"}


def test_slurm_array_script_runs_one_grid_point_per_task(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """The job array of a 2 x 2 grid: one task per run, each `srun noisylabels fit` of its grid
    point; a task whose run has a results.json exits without running; --submit hands the
    script to sbatch."""
    path = write_sweep(tmp_path)
    root = tmp_path / "runs"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in (
        ("srun", 'echo "$@" > "$SRUN_RECORD"'),
        ("sbatch", 'echo "Submitted batch job 4242 ($1)"'),
    ):
        exe = bin_dir / tool
        exe.write_text(f"#!/bin/bash\n{body}\n")
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env = dict(os.environ)
    sweep_cli(
        str(path),
        "--root",
        str(root),
        "--launcher",
        "slurm",
        "--submit",
        "--where",
        "seed=0",
        "--slurm-time",
        "02:00:00",
        "--slurm-max-parallel",
        "2",
        "--slurm-setup",
        "source .venv/bin/activate",
        "--sbatch-option=--account=vrnl",
        "--",
        "--data.data_dir",
        "/data",
    )
    out = capsys.readouterr().out
    script = root / "demo" / "slurm" / "array.sbatch"
    assert "a job array of 4 task(s)" in out and "Submitted batch job 4242" in out
    text = script.read_text()
    for line in (
        "#SBATCH --array=0-3%2",
        "#SBATCH --time=02:00:00",
        "#SBATCH --gpus-per-task=1",
        "#SBATCH --signal=SIGUSR1@90",
        "#SBATCH --account=vrnl",
        "source .venv/bin/activate",
    ):
        assert line in text
    subprocess.run(["bash", "-n", str(script)], check=True)
    # emulate array task 3 (the 4th run) with the srun stand-in
    setup_free = text.replace("source .venv/bin/activate", "true")
    runnable = tmp_path / "task.sh"
    runnable.write_text(setup_free)
    srun_record = tmp_path / "srun.txt"
    task = dict(env, SLURM_ARRAY_TASK_ID="3", SRUN_RECORD=str(srun_record))
    subprocess.run(["bash", str(runnable)], check=True, env=task, cwd=REPO)
    command = srun_record.read_text().split()
    folder = command[command.index("--trainer.default_root_dir") + 1]
    assert command[:2] == ["noisylabels", "fit"] and "/data" in command
    assert folder.endswith("demo/forward_vrnl/pair-0.45/seed-0")
    assert command[command.index("--model.alpha") + 1] == "0.01"
    # a finished run: the task exits at once
    srun_record.unlink()
    finished = Path(folder) if Path(folder).is_absolute() else REPO / folder
    (finished / "version_0").mkdir(parents=True, exist_ok=True)
    (finished / "version_0" / "results.json").write_text("{}")
    result = subprocess.run(
        ["bash", str(runnable)], env=task, cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "finished before" in result.stdout and not srun_record.exists()


def test_submit_without_sbatch_says_so(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit):
        sweep_cli(
            str(write_sweep(tmp_path)), "--root", str(tmp_path), "--launcher", "slurm", "--submit"
        )
    assert "needs SLURM's sbatch" in capsys.readouterr().err


@pytest.mark.slow
def test_real_runs_through_the_sweep(tmp_path: Path, capsys) -> None:
    """Two real `noisylabels fit` processes of a tiny grid, one of which fails at setup: the
    other finishes with results.json (both test accuracies) and the sweep exits with 1."""
    text = textwrap.dedent("""\
        name: real
        base: [{quickstart}]
        args: {{trainer.max_epochs: 1, trainer.limit_train_batches: 2,
                trainer.limit_val_batches: 1, data.batch_size: 16}}
        axes:
          noise:
            sym-0.2: {{data.noise_type: symmetric}}
            nofile: {{data.noise_type: file}}
        """)
    path = write_sweep(tmp_path, text)
    root = tmp_path / "runs"
    with pytest.raises(SystemExit) as exc:
        sweep_cli(str(path), "--root", str(root), "--parallel", "2")
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "[1/2 finished, 1 failed" in out and "nofile: exit status" in out
    results = json.loads(next((root / "real" / "sym-0.2").rglob("results.json")).read_text())
    assert results["test_acc"] is not None and results["test_acc_last"] is not None
    assert "noise_file" in (root / "real" / "nofile" / "fit.log").read_text()


@pytest.mark.parametrize(
    ("name", "runs", "methods"),
    [
        ("table1_mnist", 360, 12),
        ("table1_cifar10", 360, 12),
        ("table1_cifar100", 360, 12),
        ("table2_clothing1m", 13, 13),
    ],
)
def test_shipped_table_sweeps_list_every_method_of_the_papers_tables(
    name: str, runs: int, methods: int, tmp_path: Path
) -> None:
    """The shipped table sweeps expand to the documented run counts, name only methods and
    datasets this project has, and have a row for every method of the paper's table."""
    from noisylabels.report.cells import load_paper
    from noisylabels.report.collect import method_key
    from noisylabels.sweep.grid import check_classes

    sweep = load_sweep(CONFIGS / "sweeps" / f"{name}.yaml", tmp_path)
    assert len(sweep.runs) == runs
    check_classes(sweep)
    rows = {run.name.split("/")[0] for run in sweep.runs}
    assert len(rows) == methods
    table = "table2" if name.startswith("table2") else "table1"
    dataset = {"table1_mnist": "MNIST", "table1_cifar10": "CIFAR-10"}.get(name)
    paper = {
        key
        for (ds, _, key) in load_paper()
        if (ds == "Clothing1M") == (table == "table2") and (dataset is None or ds == dataset)
    }
    # the sweep's row names, as method names: forward_vrnl -> forwardvrnl, dualt -> dualt
    ours = {method_key(row.replace("volmin", "volminnet")) for row in rows}
    assert paper <= ours, paper - ours
