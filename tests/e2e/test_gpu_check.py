"""``make gpu-check`` (``benchmarks/gpu_check.py``) without a GPU: a dry run that says it needs
CUDA, lists its steps and exits 0, so CI can run it; the pieces it runs on a GPU that a CPU can
check (the fake CIFAR-10 it writes, how it compares a compiled run with its eager twin)."""

from __future__ import annotations

import json
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="with CUDA, gpu-check runs for real (make gpu-check)"
)
STEPS = ["toolchain", "cuda-tests", "stage-change", "throughput", "cifar-fit", "mnist"]


def test_the_dry_run_lists_every_step_and_exits_0(capsys, tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    assert gpu_check.main(["--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "gpu-check needs a CUDA GPU" in printed and "dry run, nothing runs" in printed
    listed = [line.split()[0] for line in printed.splitlines() if line.startswith("  ")]
    assert listed == STEPS == [name for name, *_ in gpu_check.STEPS]
    assert "within 480 s" in printed and not out.exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_gpu_check_is_the_dry_run_on_a_cpu(capsys, monkeypatch) -> None:
    """``make gpu-check`` runs benchmarks/gpu_check.py with the given python and DATA; that
    script, given those arguments, is the dry run (in this process: the script's start-up is
    the throughput benchmark's below, and the dry run's exit status is main's)."""
    proc = subprocess.run(
        ["make", "-n", "-s", "gpu-check", f"PYTHON={sys.executable}", "DATA=/nowhere",
         "VENV=/nowhere/venv"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [command] = proc.stdout.strip().splitlines()
    python, script, *args = shlex.split(command)
    assert (python, script) == (sys.executable, "benchmarks/gpu_check.py")
    assert args == ["--data-dir", "/nowhere"]
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "argv", [script, *args])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(script, run_name="__main__")
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "gpu-check needs a CUDA GPU" in printed and "mnist" in printed


def test_the_throughput_benchmark_it_runs_starts(capsys, monkeypatch) -> None:
    """The script as ``python benchmarks/gpu_throughput.py --help`` runs it (its imports, its
    start-up and its parser), in this process, whose modules are loaded already."""
    script = str(REPO / "benchmarks" / "gpu_throughput.py")
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as done:
        runpy.run_path(script, run_name="__main__")
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "--json" in printed and "--fake-data" in printed


def test_the_fake_cifar10_is_read_as_cifar10(tmp_path: Path) -> None:
    from noisylabels.data import CIFAR10DataModule

    root = gpu_check.write_fake_cifar10(tmp_path, n_train=100, n_test=20)
    dm = CIFAR10DataModule(data_dir=str(root), noise_rate=0.2)
    dm.setup("fit")
    assert dm.data.train_images.shape == (100, 3, 32, 32)
    assert len(dm.train_indices) + len(dm.val_indices) == 100


def _run(losses: list[float], accs: list[float], test_acc: float, fallback=None) -> dict:
    epochs = [
        {"metrics": {"train/loss": loss, "val/acc": acc}}
        for loss, acc in zip(losses, accs, strict=True)
    ]
    return {
        "probe": {"epochs": epochs, "fallback": fallback},
        "results": {"test_acc": test_acc, "test_acc_last": test_acc},
    }


def test_a_compiled_run_agrees_with_its_eager_twin_within_float_tolerance() -> None:
    eager = _run([2.0, 1.0], [0.5, 0.6], 0.7)
    assert gpu_check._agree(eager, _run([2.0001, 1.0005], [0.505, 0.6], 0.705)) == []
    problems = gpu_check._agree(eager, _run([2.0, 1.01], [0.5, 0.62], 0.75, "Error: x"))
    assert problems[0] == "compiling fell back to eager: Error: x"
    assert any(p.startswith("epoch 1 train/loss") for p in problems)
    assert any(p.startswith("epoch 1 val/acc") for p in problems)
    assert any(p.startswith("test_acc ") for p in problems)


def test_the_table_has_one_row_per_step() -> None:
    rows = [
        {"step": "toolchain", "status": "pass", "seconds": 12.3, "summary": "ok"},
        {"step": "mnist", "status": "skip", "seconds": 0.0, "summary": "no MNIST | here"},
    ]
    assert gpu_check.table(rows).splitlines() == [
        "| step | status | seconds | result |",
        "|---|---|---|---|",
        "| toolchain | pass | 12 | ok |",
        "| mnist | skip | 0 | no MNIST / here |",
    ]


@pytest.mark.slow
def test_every_throughput_workload_trains_on_the_cpu(tmp_path: Path) -> None:
    """Every workload of ``gpu_throughput.py`` (its preset with its own-stage options, its plain
    loop where it has one) trains a few steps on the CPU with tiny sizes, each row without an
    error: the options the benchmark gives a preset are options its method takes (the GPU check
    once lost its throughput step to one it did not)."""
    import gpu_throughput

    out = tmp_path / "throughput.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_throughput.py"), "--device", "cpu",
         "--fake-data", "--fake-size", "1500", "--only", *gpu_throughput.WORKLOADS,
         "--batch-size", "8", "--warmup-steps", "1", "--steps", "2", "--blocks", "1",
         "--sync-steps", "0", "--compile-modes", "--parallel", "", "--threads", "1",
         "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert list(figures) == list(gpu_throughput.WORKLOADS)
    for workload, rows in figures.items():
        preset = gpu_throughput.WORKLOADS[workload][0]
        assert ("plain eager loop" in rows) == (preset in gpu_throughput.PLAIN_LOOP)
        for row, result in rows.items():
            assert result["error"] is None, (workload, row, result["error"])
            assert result["images_per_s"] > 0, (workload, row)
            host = (result[k] for k in ("host_ms_in_step", "host_ms_after_sync", "ms_per_step"))
            assert all(ms > 0 for ms in host), (workload, row, result)
            if row != "plain eager loop":  # eager on the CPU: nothing compiled
                assert result["compiled"]["graphs"] == 0, (workload, row)


def test_host_times_count_the_timed_steps_and_those_right_after_a_sync() -> None:
    """The throughput benchmark's host times: every timed step's, and apart those of the
    steps that start right after a synchronization (the warm-up's end, each block's end but
    the last), whose launch queue is empty; warm-up steps count in neither."""
    import gpu_throughput

    timing = gpu_throughput.Timing(torch.device("cpu"), warmup=2, steps=6, blocks=3)
    step = 0
    while not timing.done:
        step += 1
        timing.host(in_step=float(step), between=None if step == 1 else 0.5)
        timing.after_step(images=8)
    assert step == 2 + 6
    assert timing.in_step == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]  # the 6 timed steps
    assert timing.after_sync == [3.0, 5.0, 7.0]  # after the warm-up's and blocks' ends
    assert timing.between == [0.5] * 6
    result = timing.result()
    assert result["host_ms_in_step"] == 5500.0 and result["host_ms_after_sync"] == 5000.0
