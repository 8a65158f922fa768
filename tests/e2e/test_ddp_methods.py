"""Every method of the registry, and its VRNL variant, gives under DDP (2 CPU processes over
gloo, ``configs/trainer/ddp_cpu.yaml``) the results it gives in one process with the same global
batch, through every stage it has (warm-up, estimation, its own stage, revision).

Each case is a ``noisylabels fit`` of 3 epochs on the digits: one warm-up epoch, then the
method's own stage (and, for methods with a revision stage, one revision epoch), at a global
batch of 128 (2 x 64 under DDP; a last step of 14 = 7 + 7 samples each epoch). The DDP runs of
all the selected cases share one pair of processes, forked (so they inherit the imports), each
case a ``noisylabels fit`` through the command line in them (Lightning takes the processes as
launched by a cluster); the one-process runs are the same command with ``--trainer.devices 1``.

The math is the same in both (global variance, global sample selection, estimates broadcast
from process 0, every sample once per epoch in the same order), but not the floating point:
DDP averages two half-batch gradients where one process sums over the whole batch, so weights
differ in the last bits after the first step. What a run is (method, noise, data sizes,
epochs, the estimation epoch) is compared exactly, accuracies within :data:`ACC_TOLERANCE`, ε_T
within :data:`EPS_TOLERANCE` (measured: every accuracy of every case identical, ε_T within 1e-7).

One case (T-Revision-VRNL, whose ΔT is unused before its revision stage) is in the default
suite; the other cases (every registered method, with and without VRNL) run under ``slow``.
"""

from __future__ import annotations

import json
import os
import socket
import traceback
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from noisylabels.methods import NoisyLabelMethod, SmallLossMethod, TransitionMethod, registry

from conftest import CONFIGS, read_results

WORLD = 2
GLOBAL_BATCH = 128
ACC_TOLERANCE = 0.01
"""Largest difference of an accuracy between the DDP and the one-process run: one of the 143
validation images, three of the 359 test images, whose prediction is a near tie."""
EPS_TOLERANCE = 0.01
"""Largest difference of ε_T = ‖T − T̂‖₁,₁ / ‖T‖₁,₁ (T̂ by anchor points of the warm-up model)."""
VRNL_ALPHA = 0.05
"""α of the VRNL cases (that of the command-line test of every method): at the cases' lr 0.1,
α 0.1 spreads ELR's losses until the weights ``1 + 2α(mean(l) - l_i)`` of its largest losses
turn negative and the run diverges, in one process as under DDP."""
DEFAULT_CASES = {("TRevision", VRNL_ALPHA)}


def _cases() -> list[Any]:
    params = []
    for name in registry():
        for alpha in (0.0, VRNL_ALPHA):
            marks = () if (name, alpha) in DEFAULT_CASES else (pytest.mark.slow,)
            suffix = "-VRNL" if alpha else ""
            params.append(pytest.param((name, alpha), marks=marks, id=f"{name}{suffix}"))
    return params


def fit_args(name: str, alpha: float) -> list[str]:
    """``noisylabels fit`` options of a case (without the process layout): every method with a
    warm-up epoch; T estimated where a method corrects with one; τ estimated and reached at
    once by the small-loss methods; a revision epoch where a method has a revision stage."""
    args = [
        *("fit", "--config", str(CONFIGS / "data" / "digits.yaml")),
        *("--model", f"noisylabels.methods.{name}", "--model.alpha", str(alpha)),
        *("--model.schedule.warmup_epochs", "1", "--trainer.max_epochs", "3"),
        *("--model.optim.lr", "0.1"),
        *("--trainer.accelerator", "cpu", "--data.noise_rate", "0.3"),
        *("--data.eval_batch_size", "100", "--trainer.enable_progress_bar", "false"),
        *("--trainer.enable_model_summary", "false"),
    ]
    return args + method_options(name)


def method_options(name: str) -> list[str]:
    """The options every stage of method ``name`` needs in a short run with one warm-up epoch:
    T estimated after it where the method corrects with one; τ estimated and reached at once
    where it selects samples; a revision epoch where it has a revision stage; the augmented
    views of every image it trains on."""
    cls = registry()[name]
    args = []
    if issubclass(cls, TransitionMethod):
        args += ["--model.transition", "estimate"]
    if issubclass(cls, SmallLossMethod):
        args += ["--model.forget_rate", "estimate", "--model.ramp_epochs", "1"]
    if cls.on_revision_start is not NoisyLabelMethod.on_revision_start:
        args += ["--model.schedule.revision_epochs", "1"]
    args += cls.data_options()
    return args


def _case_dir(root: Path, name: str, alpha: float) -> Path:
    return root / f"{name}-{alpha:g}"


def join_group(rank: int, port: int) -> None:
    """Make this process rank ``rank`` of a :data:`WORLD`-process gloo group on ``port``, as a
    cluster launches it (one thread, warnings off)."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NODE_RANK="0", LOCAL_RANK=str(rank)
    )
    os.environ.update(WORLD_SIZE=str(WORLD), RANK=str(rank))
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    # a group of our own, with a timeout: a case that fails on one process must not hang the
    # other for Lightning's default half hour (Lightning keeps a group it finds)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=180),
    )


def _worker(rank: int, port: int, root: str, cases: list[tuple[str, float]]) -> None:
    """One DDP process: every case in turn, through the command line."""
    join_group(rank, port)
    from noisylabels.cli import run

    for name, alpha in cases:
        folder = _case_dir(Path(root), name, alpha)
        args = fit_args(name, alpha) + ["--config", str(CONFIGS / "trainer" / "ddp_cpu.yaml")]
        args += ["--data.batch_size", str(GLOBAL_BATCH // WORLD)]
        args += ["--trainer.default_root_dir", str(folder)]
        try:
            run(args)
        except BaseException:  # noqa: BLE001 - recorded for the test, the next case runs
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"error-rank{rank}.txt").write_text(traceback.format_exc())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The DDP runs of every case selected in this session, in one pair of processes."""
    cases = sorted(
        {
            item.callspec.params["case"]
            for item in request.session.items
            if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
        }
    )
    root = tmp_path_factory.mktemp("ddp_methods")
    mp.start_processes(
        _worker, args=(_free_port(), str(root), cases), nprocs=WORLD, join=True, start_method="fork"
    )
    return root


EXACT = ("method", "alpha", "dataset", "noise", "data", "epochs", "last_epoch")
CLOSE = ("val_acc", "test_acc", "test_acc_last")


@pytest.mark.parametrize("case", _cases())
def test_ddp_run_equals_the_one_process_run(
    case: tuple[str, float], ddp_runs: Path, run_cli, tmp_path: Path
) -> None:
    name, alpha = case
    folder = _case_dir(ddp_runs, name, alpha)
    errors = sorted(folder.glob("error-rank*.txt"))
    assert not errors, "\n".join(p.read_text()[-3000:] for p in errors)
    ddp = read_results(folder)
    run_cli(
        *fit_args(name, alpha),
        *("--data.batch_size", str(GLOBAL_BATCH), "--trainer.devices", "1"),
        root=tmp_path,
    )
    one = read_results(tmp_path)
    summary = json.dumps({k: (one[k], ddp[k]) for k in CLOSE + ("t_estimation_error",)})
    print(f"{ddp['method']}: (one process, DDP) {summary}")  # pytest -rP shows it
    for key in EXACT:
        assert ddp[key] == one[key], f"{key}: {summary}"
    assert ddp["estimation_epoch"] == one["estimation_epoch"] == 0
    for key in CLOSE:
        assert abs(ddp[key] - one[key]) <= ACC_TOLERANCE, f"{key}: {summary}"
    if one["t_estimation_error"] is None:
        assert ddp["t_estimation_error"] is None
    else:
        assert abs(ddp["t_estimation_error"] - one["t_estimation_error"]) <= EPS_TOLERANCE
