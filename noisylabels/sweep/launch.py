"""Launching a sweep's runs: local processes, or one SLURM job array.

Every run is its own ``noisylabels fit`` process writing into the run's folder (its output in
``fit.log`` there, its grid point and command in ``sweep_run.json``).

* :func:`run_local` runs ``parallel`` processes at a time on this machine, the CPU threads split
  between them (``OMP_NUM_THREADS``), optionally spread over GPUs; it keeps going past a failed
  run, prints progress (done / total, failures, ETA) and returns the failures.
* :func:`write_slurm` writes one SLURM job array script, one run per array task. Each task runs
  ``srun noisylabels fit``, and Lightning's SLURM support does the rest: on ``SIGUSR1`` before
  the time limit it saves an HPC checkpoint in the run's folder and requeues the task
  (``scontrol requeue JOB_TASK``), and the requeued task resumes from that checkpoint. A task
  whose run already has a ``results.json`` exits at once.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisylabels.errors import InputError
from noisylabels.sweep.grid import RESULTS_FILE, RUN_FILE, Run, Sweep, display_path

LOG_FILE = "fit.log"
#: how a run's process starts; ``fit ...`` follows
FIT_COMMAND = [sys.executable, "-m", "noisylabels.cli"]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass
class Outcome:
    """How one run ended: ``ok``, the seconds it took, where its output is, its results."""

    run: Run
    ok: bool
    seconds: float
    log: Path
    results: dict[str, Any] | None = None
    reason: str = ""


def cpu_count() -> int:
    """CPUs this process may use (its affinity where the platform tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def threads_per_run(parallel: int, cpus: int | None = None) -> int:
    """CPU threads per process when ``parallel`` processes share the machine (at least 1)."""
    return max(1, (cpus or cpu_count()) // max(1, parallel))


def format_duration(seconds: float) -> str:
    """``1h05m``, ``8m12s``, ``42s``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def write_run_file(sweep: Sweep, run: Run, command: Sequence[str]) -> None:
    """Record the run's grid point and command in its folder (``sweep_run.json``)."""
    run.folder.mkdir(parents=True, exist_ok=True)
    record = {"sweep": sweep.name, "sweep_file": display_path(sweep.path), "point": run.point}
    record["command"] = list(command)
    (run.folder / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n")


def read_results(folder: Path) -> dict[str, Any] | None:
    """The newest ``results.json`` under ``folder``, or ``None``."""
    found = sorted(folder.rglob(RESULTS_FILE), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()) if found else None


class Progress:
    """Counts finished runs and prints one line per event with done / total, failures, ETA."""

    def __init__(self, total: int, parallel: int, print_fn: Callable[[str], None]) -> None:
        self.total, self.parallel, self.print = total, parallel, print_fn
        self.durations: list[float] = []
        self.failed = 0
        self.lock = threading.Lock()

    def finished(self, outcome: Outcome) -> None:
        with self.lock:
            self.durations.append(outcome.seconds)
            self.failed += not outcome.ok
            done = len(self.durations)
            left = self.total - done
            eta = sum(self.durations) / done * left / self.parallel if left else 0.0
            if outcome.ok and outcome.results:
                best, last = outcome.results.get("test_acc"), outcome.results.get("test_acc_last")
                what = f"test acc {_fmt(best)} (last epoch {_fmt(last)})"
            elif outcome.ok:
                what = "finished"
            else:
                what = f"FAILED ({outcome.reason}; see {display_path(outcome.log)})"
            self.print(
                f"[{done}/{self.total} done, {self.failed} failed, ETA "
                f"{format_duration(eta)}] {outcome.run.name}: {what} in "
                f"{format_duration(outcome.seconds)}"
            )


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{100 * float(value):.2f}%"


def run_process(
    sweep: Sweep,
    run: Run,
    extra: Sequence[str],
    env: Mapping[str, str],
    processes: dict[int, subprocess.Popen],
) -> Outcome:
    """Run one grid point as a ``noisylabels fit`` process with ``env`` (its output appended
    to ``fit.log`` in the run's folder); ``processes`` holds it while it runs."""
    command = [*FIT_COMMAND, *run.fit_args(extra)]
    write_run_file(sweep, run, command)
    log = run.folder / LOG_FILE
    start = time.perf_counter()
    with open(log, "a") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True
        )
        processes[process.pid] = process
        code = process.wait()
        processes.pop(process.pid, None)
    seconds = time.perf_counter() - start
    results = read_results(run.folder)
    if code != 0:
        return Outcome(run, False, seconds, log, reason=f"exit status {code}")
    if results is None:
        return Outcome(run, False, seconds, log, reason=f"no {RESULTS_FILE} written")
    return Outcome(run, True, seconds, log, results)


def run_local(
    sweep: Sweep,
    runs: Sequence[Run],
    extra: Sequence[str] = (),
    *,
    parallel: int = 1,
    threads: int | None = None,
    gpus: Sequence[str] = (),
    print_fn: Callable[[str], None] = print,
) -> list[Outcome]:
    """Run ``runs`` as ``noisylabels fit`` processes, ``parallel`` at a time, each with
    ``threads`` CPU threads (default: the CPUs split between the processes) and, where
    ``gpus`` are given, the GPU of its slot (``CUDA_VISIBLE_DEVICES``, round robin). Returns
    the failed runs' outcomes; a failure never stops the others."""
    if parallel < 1:
        raise InputError(f"--parallel must be >= 1, got {parallel}")
    threads = threads or threads_per_run(parallel)
    progress = Progress(len(runs), parallel, print_fn)
    free_slots = list(range(parallel))
    lock = threading.Lock()
    processes: dict[int, subprocess.Popen] = {}
    base_env = dict(os.environ, **{v: str(threads) for v in THREAD_VARIABLES})

    def launch(run: Run) -> Outcome:
        with lock:
            slot = free_slots.pop(0)
        env = dict(base_env)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
        try:
            outcome = run_process(sweep, run, extra, env, processes)
        finally:
            with lock:
                free_slots.append(slot)
        progress.finished(outcome)
        return outcome

    print_fn(
        f"{len(runs)} run(s), {parallel} at a time, {threads} CPU thread(s) each"
        + (f", GPUs {','.join(gpus)}" if gpus else "")
    )
    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        outcomes = list(pool.map(launch, runs))
    except KeyboardInterrupt:
        for process in list(processes.values()):  # the runs this sweep started, by their ids
            process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return [o for o in outcomes if not o.ok]


# ----------------------------------------------------------------------------- SLURM
@dataclass
class SlurmOptions:
    """Resources of each array task and the job's settings."""

    time: str = "24:00:00"
    partition: str | None = None
    gpus: int = 1
    cpus: int = 8
    mem: str | None = "32G"
    max_parallel: int | None = None
    setup: str | None = None
    sbatch_options: Sequence[str] = ()


def slurm_script(sweep: Sweep, runs: Sequence[Run], extra: Sequence[str], opts: SlurmOptions):
    """The text of a SLURM job-array script running ``runs``, one per array task."""
    folder = sweep.folder / "slurm"
    array = f"0-{len(runs) - 1}" + (f"%{opts.max_parallel}" if opts.max_parallel else "")
    lines = [
        "#!/bin/bash",
        f"# Sweep {sweep.name} ({display_path(sweep.path)}): {len(runs)} run(s), one per array",
        "# task. Written by `noisylabels sweep --launcher slurm`; submit with sbatch. On SIGUSR1",
        "# (90 s before the time limit) Lightning saves an HPC checkpoint in the run's folder and",
        "# requeues the task, which resumes from it; a run with a results.json is skipped.",
        f"#SBATCH --job-name={sweep.name}",
        f"#SBATCH --array={array}",
        "#SBATCH --ntasks=1",
        f"#SBATCH --cpus-per-task={opts.cpus}",
        f"#SBATCH --time={opts.time}",
        f"#SBATCH --output={display_path(folder)}/%A_%a.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --signal=SIGUSR1@90",
    ]
    if opts.gpus:
        lines.append(f"#SBATCH --gpus-per-task={opts.gpus}")
    if opts.mem:
        lines.append(f"#SBATCH --mem={opts.mem}")
    if opts.partition:
        lines.append(f"#SBATCH --partition={opts.partition}")
    lines += [f"#SBATCH {option}" for option in opts.sbatch_options]
    lines += ["set -euo pipefail", f"cd {shlex.quote(str(Path.cwd()))}"]
    if opts.setup:
        lines.append(opts.setup)
    lines += [
        'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
        'case "${SLURM_ARRAY_TASK_ID}" in',
    ]
    for i, run in enumerate(runs):
        command = shlex.join(["noisylabels", *run.fit_args(extra)])
        lines.append(f"  {i}) folder={shlex.quote(display_path(run.folder))}; set -- {command} ;;")
    lines += [
        '  *) echo "no run for array task ${SLURM_ARRAY_TASK_ID}" >&2; exit 2 ;;',
        "esac",
        'if [ -n "$(find "$folder" -name results.json -print -quit 2>/dev/null)" ]; then',
        '  echo "$folder: finished before (results.json exists)"; exit 0',
        "fi",
        'mkdir -p "$folder"',
        'srun "$@"',
    ]
    return "\n".join(lines) + "\n"


def write_slurm(
    sweep: Sweep,
    runs: Sequence[Run],
    extra: Sequence[str],
    opts: SlurmOptions,
    *,
    submit: bool = False,
    print_fn: Callable[[str], None] = print,
) -> Path:
    """Write the job-array script of ``runs`` to ``<root>/<name>/slurm/array.sbatch`` (and each
    run's ``sweep_run.json``); with ``submit``, submit it with ``sbatch``. Returns the script."""
    if submit and shutil.which("sbatch") is None:
        raise InputError("--submit needs SLURM's sbatch on PATH; submit the written script there")
    script = sweep.folder / "slurm" / "array.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(slurm_script(sweep, runs, extra, opts))
    for run in runs:
        write_run_file(sweep, run, ["noisylabels", *run.fit_args(extra)])
    print_fn(f"wrote {display_path(script)}: a job array of {len(runs)} task(s)")
    if submit:
        out = subprocess.run(["sbatch", str(script)], capture_output=True, text=True)
        if out.returncode != 0:
            raise InputError(f"sbatch refused {script}: {out.stderr.strip() or out.stdout}")
        print_fn(out.stdout.strip())
    return script
