"""Total training throughput of N concurrent ``noisylabels fit`` processes (LeNet-5 on MNIST),
as ``noisylabels sweep --parallel N`` runs them: each its own process, the CPU threads split
between them (``OMP_NUM_THREADS = CPUs // N``, at least 1) unless ``--threads`` says otherwise.

Each process trains Forward-VRNL (true T) for ``--epochs`` epochs of ``--batches`` batches of 128
and records when each training epoch starts and ends (its last batch). The first epoch is a
warm-up and is not counted. A process's throughput is images per epoch over its median epoch
time; the total is the sum over the N processes, which train at the same time. Settings are
measured in the order given, then in reverse (``--repeats 2``), so drift of the machine's load
hits them alike; the median of the repeats is reported, with the ratio to N = 1.

    python benchmarks/sweep_parallel.py --data-dir /folder/holding/MNIST --parallel 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA_GROUP = REPO / "configs" / "data" / "mnist.yaml"
CONFIG = REPO / "configs" / "method" / "forward_vrnl.yaml"  # after the data group
TRUE_T = REPO / "configs" / "protocol" / "true_t.yaml"  # the group estimates T after a warm-up
BATCH = 128


class EpochClock(L.Callback):
    """Append ``[start, end]`` wall times of every training epoch to ``$EPOCH_CLOCK_FILE``."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._last = time.time()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        with open(os.environ["EPOCH_CLOCK_FILE"], "a") as fh:
            fh.write(json.dumps([self._start, self._last]) + "\n")


def measure(n: int, threads: int, args: argparse.Namespace, scratch: Path) -> float:
    """Images per second of ``n`` concurrent processes together."""
    procs, clocks = [], []
    for i in range(n):
        clock = scratch / f"n{n}-{i}-{time.time_ns()}.jsonl"
        clocks.append(clock)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        env["EPOCH_CLOCK_FILE"] = str(clock)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
        command = [
            sys.executable, "-m", "noisylabels.cli", "fit", "--config", str(DATA_GROUP),
            "--config", str(CONFIG),
            "--config", str(TRUE_T),
            "--data.data_dir", str(args.data_dir), "--trainer.max_epochs", str(args.epochs),
            "--trainer.limit_train_batches", str(args.batches),
            "--trainer.limit_val_batches", "0", "--test_after_fit", "false",
            "--trainer.enable_progress_bar", "false", "--trainer.logger", "false",
            "--checkpoint.save_top_k", "0", "--trainer.callbacks+=sweep_parallel.EpochClock",
            "--trainer.default_root_dir", str(scratch / "runs"),
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        )
    total = 0.0
    for proc, clock in zip(procs, clocks, strict=True):
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"a run failed:\n{err.decode()[-2000:]}")
        epochs = [json.loads(line) for line in clock.read_text().splitlines()][1:]
        total += args.batches * BATCH / statistics.median(end - start for start, end in epochs)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, type=Path, help="folder holding MNIST/raw")
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--threads", type=int, help="threads per process (default: CPUs // N)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per process (first: warm-up)")
    parser.add_argument("--batches", type=int, default=150, help="training batches per epoch")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cpus} CPUs; LeNet-5 on MNIST, batch {BATCH}, {args.batches} batches per epoch")
    results: dict[int, list[float]] = {n: [] for n in args.parallel}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = args.parallel if repeat % 2 == 0 else list(reversed(args.parallel))
            for n in order:
                threads = args.threads or max(1, cpus // n)
                rate = measure(n, threads, args, Path(tmp))
                results[n].append(rate)
                print(f"  N={n} ({threads} thread(s) each): {rate:,.0f} img/s", flush=True)
    base = statistics.median(results[args.parallel[0]])
    print(f"\n| N processes | threads each | total img/s (median of {args.repeats}) | ratio |")
    print("|---|---|---|---|")
    for n in args.parallel:
        rate = statistics.median(results[n])
        threads = args.threads or max(1, cpus // n)
        print(f"| {n} | {threads} | {rate:,.0f} | {rate / base:.2f} |")


if __name__ == "__main__":
    main()
