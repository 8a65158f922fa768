"""Cluster restarts that finish: a SLURM array task stopped at its time limit (SIGUSR1) and
preempted in its final test (SIGTERM) requeues itself each time and, restarted, ends with the
results of an uninterrupted run. SLURM is faked: its environment variables, and ``srun`` and
``scontrol`` stand-ins on PATH (``scontrol requeue`` stops the job with SIGTERM, as SLURM
does)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import CONFIGS, REPO, read_results

TESTS = Path(__file__).resolve().parent
METRICS = (
    "method", "alpha", "backbone", "dataset", "noise", "data", "seed", "epochs", "best_epoch",
    "monitor", "monitor_score", "val_acc", "test_acc", "test_acc_last", "t_estimation_error",
)  # fmt: skip
# the quickstart with a small MLP with dropout (the restored random state matters), 2 epochs
OPTIONS = {
    "model.network.backbone_kwargs": "{hidden: [64], dropout: 0.2}",
    "trainer.limit_train_batches": 10,
    "trainer.enable_model_summary": False,
    "trainer.max_epochs": 2,
}
SWEEP = """\
name: cluster
base: [{quickstart}]
args: {args}
axes:
  seed: {{values: [0], options: [seed_everything]}}
"""
FAKE_SCONTROL = """\
#!/bin/bash
echo "$*" >> "$SCONTROL_RECORD"
case "$1" in
  show) echo "JobId=78 ArrayJobId=77 ArrayTaskId=0 JobState=RUNNING" ;;
  requeue) kill -TERM "$PPID" ;;  # SLURM stops the job it requeues
esac
"""


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def fake_slurm(tmp_path: Path) -> dict[str, str]:
    """The environment of array task 77_0 (job 78) with srun, scontrol and noisylabels on
    PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "srun", '#!/bin/bash\nexec "$@"\n')
    _tool(bin_dir, "scontrol", FAKE_SCONTROL)
    _tool(bin_dir, "noisylabels", f'#!/bin/bash\nexec {sys.executable} -m noisylabels.cli "$@"\n')
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)]),
        "OMP_NUM_THREADS": str(torch.get_num_threads()),
        "SCONTROL_RECORD": str(tmp_path / "scontrol.txt"),
        "SLURM_JOB_ID": "78",
        "SLURM_ARRAY_JOB_ID": "77",
        "SLURM_ARRAY_TASK_ID": "0",
        "SLURM_JOB_NAME": "cluster",
        "SLURM_NTASKS": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "localhost",
        "SLURM_CPUS_PER_TASK": "1",
    }


@pytest.mark.slow
def test_time_limit_and_preemption_requeue_and_end_like_an_uninterrupted_run(
    run_cli, tmp_path: Path
) -> None:
    from noisylabels.cli import run

    argv = [
        arg
        for key, value in OPTIONS.items()
        for arg in (f"--{key}", str(value).lower() if isinstance(value, bool) else str(value))
    ]
    run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"), *argv, root=tmp_path / "straight")
    straight = read_results(tmp_path / "straight")

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            [
                {"where": "train", "index": 1, "batch": 3, "signal": "SIGUSR1"},  # time limit
                {"where": "test", "index": 1, "batch": 1, "signal": "SIGTERM"},  # preemption
            ]
        )
    )
    sweep = tmp_path / "cluster.yaml"
    args = json.dumps(OPTIONS).replace("false", "false")
    sweep.write_text(SWEEP.format(quickstart=CONFIGS / "quickstart.yaml", args=args))
    root = tmp_path / "runs"
    extra = ["--trainer.callbacks+=interrupt.SignalPlan", "--trainer.callbacks.plan", str(plan)]
    run(["sweep", str(sweep), "--root", str(root), "--launcher", "slurm", "--slurm-gpus", "0",
         "--", *extra])  # fmt: skip
    script = root / "cluster" / "slurm" / "array.sbatch"
    assert "#SBATCH --requeue" in script.read_text()
    env = fake_slurm(tmp_path)

    def task(restart: int) -> subprocess.CompletedProcess:
        task_env = dict(env, SLURM_RESTART_COUNT=str(restart))
        return subprocess.run(
            ["bash", str(script)], env=task_env, capture_output=True, text=True, timeout=600
        )

    # 1. SIGUSR1 before the time limit, in epoch 1: the task requeues itself and stops
    first = task(0)
    assert first.returncode == 143, first.stderr[-3000:]
    assert "Traceback" not in first.stderr
    notes = [line for line in first.stderr.splitlines() if line.startswith("noisylabels:")]
    assert len(notes) == 1, first.stderr[-3000:]
    assert "Stopped by SIGUSR1" in notes[0] and "in epoch 1" in notes[0]
    assert "SLURM job 77_0 was requeued" in notes[0]
    assert (tmp_path / "scontrol.txt").read_text().splitlines() == ["requeue 77_0"]
    folder = next(root.rglob("last.ckpt")).parent.parent
    assert "SIGUSR1" in (folder / "unfinished.txt").read_text()

    # 2. the requeued task continues from last.ckpt; preempted (SIGTERM) in the final test
    second = task(1)
    assert second.returncode == 143, second.stderr[-3000:]
    notes = [line for line in second.stderr.splitlines() if line.startswith("noisylabels:")]
    assert len(notes) == 1 and "Stopped by SIGTERM during the final test" in notes[0], notes
    assert "SLURM job 77_0 was requeued" in notes[0]
    assert (tmp_path / "scontrol.txt").read_text().splitlines()[1:] == [
        "show job -o 77_0",
        "requeue 77_0",
    ]
    assert not list(root.rglob("results.json"))

    # 3. the next start finishes: the results of the run that was never interrupted
    third = task(2)
    assert third.returncode == 0, third.stderr[-3000:]
    resumed = read_results(root)
    assert {k: resumed[k] for k in METRICS} == {k: straight[k] for k in METRICS}
    assert [r["epochs_done"] for r in resumed["resumed"]] == [1, 2]
    # the run recorded the hash of its command, which its sweep compares
    run_file = json.loads((folder.parent.parent / "sweep_run.json").read_text())
    assert resumed["provenance"]["command_sha256"] == run_file["command_sha256"]
    assert all(e["sent"] for e in json.loads(plan.read_text()))
    final = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    reference = torch.load(next((tmp_path / "straight").rglob("last.ckpt")), weights_only=True)[
        "state_dict"
    ]
    assert all(torch.equal(final[name], reference[name]) for name in reference)
    # one run folder, one checkpoint story: no HPC checkpoint, no leftovers
    assert [p.parent.parent for p in root.rglob("last.ckpt")] == [folder]
    assert not list(root.rglob("hpc_ckpt_*")) and not list(root.rglob(".*.tmp*"))
    assert not (folder / "unfinished.txt").exists()
    # a fourth start (e.g. a requeue that came too late) finds the run finished
    fourth = task(3)
    assert fourth.returncode == 0 and "finished before" in fourth.stdout


@pytest.mark.parametrize("state", ["RUNNING", "CANCELLED"])
def test_sigterm_requeues_unless_the_job_was_cancelled(
    tmp_path: Path, monkeypatch, state: str
) -> None:
    """Preemption (SIGTERM) requeues the job; ``scancel`` (its state CANCELLED) does not."""
    from noisylabels.run.stops import SlurmJob

    calls: list[list[str]] = []

    def fake_run(argv, **kwargs):
        calls.append(argv[1:])
        out = f"JobId=78 JobState={state}" if argv[1] == "show" else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr("noisylabels.run.stops.subprocess.run", fake_run)
    job = SlurmJob("77_0", first=True)
    assert job.cancelled() is (state == "CANCELLED")
    if not job.cancelled():
        assert job.requeue() == "SLURM job 77_0 was requeued"
    assert calls[-1] == (
        ["requeue", "77_0"] if state == "RUNNING" else ["show", "job", "-o", "77_0"]
    )


def test_the_docker_slurm_example_continues_its_own_run_when_requeued(tmp_path: Path) -> None:
    """docker/slurm.sbatch: a first start begins a run in the job's own folder; a requeued
    start of the same job finds its last.ckpt and continues it; another job starts afresh."""
    script = tmp_path / "job.sbatch"
    text = (REPO / "docker" / "slurm.sbatch").read_text()
    script.write_text(text.replace("source .venv/bin/activate", "true"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "srun", '#!/bin/bash\necho "$@" > "$SRUN_RECORD"\n')
    record = tmp_path / "srun.txt"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SRUN_RECORD": str(record),
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_NAME": "vrnl-cifar10",
    }

    def start(job: str, restart: int) -> list[str]:
        job_env = dict(env, SLURM_JOB_ID=job, SLURM_RESTART_COUNT=str(restart))
        subprocess.run(["bash", str(script)], env=job_env, check=True, cwd=tmp_path)
        return record.read_text().split()

    first = start("99", 0)
    assert first[:2] == ["noisylabels", "fit"] and "--ckpt_path" not in first
    assert first[first.index("--trainer.default_root_dir") + 1] == "runs/vrnl-cifar10-99"
    last = tmp_path / "runs" / "vrnl-cifar10-99" / "lightning_logs" / "version_0" / "checkpoints"
    last.mkdir(parents=True)
    (last / "last.ckpt").write_bytes(b"x")
    assert start("99", 1)[:4] == ["noisylabels", "fit", "--ckpt_path", "last"]
    assert "--ckpt_path" not in start("100", 0)
