"""Launching a sweep's runs on this machine: local processes, stopped together.

Every run is its own ``noisylabels fit`` process writing into the run's folder (its output in
``fit.log`` there, its grid point, command and the command's hash in ``sweep_run.json``).
:func:`run_local` runs ``parallel`` processes at a time, the CPU threads split between them
(``OMP_NUM_THREADS``), optionally spread over GPUs; it keeps going past a failed run, prints
progress (finished / total, failed, stopped, ETA) and returns how every run ended.

Each run's folder is locked while its process lives (``run.lock``, :mod:`noisylabels.disk.lock`):
a folder that another process writes is left alone. The runs start in their own sessions (a
terminal's Ctrl-C does not reach them directly): on SIGTERM or SIGINT the sweep starts no new
run, sends its running runs SIGTERM (their clean stop: each keeps its ``last.ckpt`` and marks
its folder unfinished), waits for them and raises :class:`SweepStopped` listing them; a second
signal kills them. The SLURM job array is :mod:`noisylabels.sweep.slurm`.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisylabels.disk.lock import RunLock, read_object
from noisylabels.disk.storage import storage_error
from noisylabels.errors import InputError, NoisyLabelsError
from noisylabels.sweep.grid import RESULTS_FILE, Run, Sweep, display_path
from noisylabels.sweep.records import finished_as_planned, write_run_file

LOG_FILE = "fit.log"
#: how a run's process starts; ``fit ...`` follows
FIT_COMMAND = [sys.executable, "-m", "noisylabels.cli"]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
WAIT_S = 0.2  # how often the sweep looks for a stop signal while its runs go on


@dataclass
class Outcome:
    """How one run ended: ``kind`` (``finished``, ``failed``, ``stopped``, ``busy``: another
    process writes its folder, ``not started``), the seconds it took, where its output is, its
    results and why it did not finish."""

    run: Run
    seconds: float
    log: Path
    results: dict[str, Any] | None = None
    reason: str = ""
    kind: str = "finished"

    @property
    def ok(self) -> bool:
        """Whether the run finished."""
        return self.kind == "finished"


class SweepStopped(Exception):
    """A stop signal ended the sweep: the signal and how every run ended."""

    def __init__(self, signum: int, outcomes: list[Outcome]) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum, self.outcomes = signum, outcomes


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


def read_results(folder: Path) -> dict[str, Any] | None:
    """The newest ``results.json`` under ``folder``, or ``None`` (also where it cannot be
    read: :func:`~noisylabels.disk.lock.read_object`)."""
    found = sorted(folder.rglob(RESULTS_FILE), key=lambda p: p.stat().st_mtime)
    return read_object(found[-1]) if found else None


class Progress:
    """Counts how the runs ended and prints one line per run that ended: finished / total, how
    many failed, were stopped or left alone (another process writes them) so far, and the
    ETA."""

    SHOWN = ("failed", "stopped", "busy")  # after "N/total finished"; the last two where any

    def __init__(self, total: int, parallel: int, print_fn: Callable[[str], None]) -> None:
        self.total, self.parallel, self.print = total, parallel, print_fn
        self.durations: list[float] = []
        self.counts = dict.fromkeys(("finished", *self.SHOWN), 0)
        self.lock = threading.Lock()

    def tally(self) -> str:
        """``3/56 finished, 1 failed, 1 stopped``: the runs so far by how they ended."""
        counts = self.counts
        parts = [f"{counts['finished']}/{self.total} finished", f"{counts['failed']} failed"]
        parts += [
            f"{counts[kind]} {'left alone' if kind == 'busy' else kind}"
            for kind in self.SHOWN[1:]
            if counts[kind]
        ]
        return ", ".join(parts)

    def finished(self, outcome: Outcome) -> None:
        if outcome.kind == "not started":
            return
        with self.lock:
            self.durations.append(outcome.seconds)
            if outcome.kind in self.counts:
                self.counts[outcome.kind] += 1
            ended = len(self.durations)
            left = self.total - ended
            eta = sum(self.durations) / ended * left / self.parallel if left else 0.0
            if outcome.ok and outcome.results:
                best, last = outcome.results.get("test_acc"), outcome.results.get("test_acc_last")
                what = f"test acc {_fmt(best)} (last epoch {_fmt(last)})"
            elif outcome.ok:
                what = "finished"
            elif outcome.kind == "busy":
                what = f"not started: {outcome.reason}"
            elif outcome.kind == "stopped":
                what = f"{outcome.reason}; it keeps its last.ckpt"
            else:
                what = f"FAILED ({outcome.reason}; see {display_path(outcome.log)})"
            if outcome.ok and outcome.reason:  # finished, but not by this sweep
                what += f" ({outcome.reason})"
            self.print(
                f"[{self.tally()}, ETA "
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
    started: Callable[[subprocess.Popen], None],
    resume: bool | None = None,
) -> Outcome:
    """Run one grid point as a ``noisylabels fit`` process with ``env`` (its output appended
    to ``fit.log`` in the run's folder), holding the folder's lock while it lives; ``started``
    is called with the process once it runs. ``resume``: continue from the run's
    ``last.ckpt`` (``None``: where it has one)."""
    log = run.folder / LOG_FILE
    lock = RunLock(run.folder, by=f"noisylabels sweep {sweep.name} (PID {os.getpid()})")
    try:
        busy = lock.acquire()
    except NoisyLabelsError as err:  # a lock file that is no file, a disk that is full
        return Outcome(run, 0.0, log, reason=str(err), kind="failed")
    if busy is not None:
        reason = f"being written by {busy}; left alone"
        return Outcome(run, 0.0, log, reason=reason, kind="busy")
    if finished_as_planned(run, extra):  # another process finished it since the sweep looked
        lock.release()
        reason = "finished meanwhile by another process with this command; left as it is"
        return Outcome(run, 0.0, log, read_results(run.folder), reason=reason)
    try:
        command = [*FIT_COMMAND, *run.fit_args(extra, resume=resume)]
        write_run_file(sweep, run, command, run.command_sha256(extra))
        start = time.perf_counter()
        with open(log, "a") as out:
            if lock.stale is not None:
                out.write(f"# took over the stale run.lock of {lock.stale} (no longer running)\n")
            out.write(f"$ {shlex.join(command)}\n")
            out.flush()
            assert lock.fd is not None
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
                pass_fds=(lock.fd,),  # the run holds its folder's lock, even past the sweep
            )
            lock.record(process.pid)
            started(process)
            code = process.wait()
    finally:
        lock.release()
    seconds = time.perf_counter() - start
    results = read_results(run.folder)
    if code != 0:
        return Outcome(run, seconds, log, reason=f"exit status {code}", kind="failed")
    if results is None:
        reason = f"no {RESULTS_FILE} written"
        return Outcome(run, seconds, log, reason=reason, kind="failed")
    return Outcome(run, seconds, log, results)


def _signal(process: subprocess.Popen, signum: int) -> None:
    try:
        process.send_signal(signum)
    except ProcessLookupError:  # it ended meanwhile
        pass


def run_local(
    sweep: Sweep,
    runs: Sequence[Run],
    extra: Sequence[str] = (),
    *,
    parallel: int = 1,
    threads: int | None = None,
    gpus: Sequence[str] = (),
    resume: Sequence[bool] | None = None,
    print_fn: Callable[[str], None] = print,
) -> list[Outcome]:
    """Run ``runs`` as ``noisylabels fit`` processes, ``parallel`` at a time, each with
    ``threads`` CPU threads (default: the CPUs split between the processes) and, where
    ``gpus`` are given, the GPU of its slot (``CUDA_VISIBLE_DEVICES``, round robin);
    ``resume``: per run, whether it continues from its ``last.ckpt`` (default: where it has
    one). Returns every run's outcome; a failure never stops the others. SIGTERM or SIGINT
    stops the runs and raises :class:`SweepStopped` (see the module docstring)."""
    if parallel < 1:
        raise InputError(f"--parallel must be >= 1, got {parallel}")
    threads = threads or threads_per_run(parallel)
    progress = Progress(len(runs), parallel, print_fn)
    free_slots = list(range(parallel))
    lock = threading.Lock()
    processes: dict[int, subprocess.Popen] = {}
    stopping = threading.Event()
    base_env = dict(os.environ, **{v: str(threads) for v in THREAD_VARIABLES})

    def started(process: subprocess.Popen) -> None:
        with lock:
            processes[process.pid] = process
            if stopping.is_set():  # started while the sweep stops: stop it too
                _signal(process, signal.SIGTERM)

    def launch(run: Run, resume_run: bool | None) -> Outcome:
        log = run.folder / LOG_FILE
        if stopping.is_set():
            return Outcome(run, 0.0, log, reason="not started", kind="not started")
        with lock:
            slot = free_slots.pop(0)
        env = dict(base_env)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
        try:
            outcome = run_process(sweep, run, extra, env, started, resume_run)
        except OSError as err:  # the run folder cannot be written
            reason = str(storage_error(err) or err)
            outcome = Outcome(run, 0.0, log, reason=reason, kind="failed")
        finally:
            with lock:
                free_slots.append(slot)
                for pid in [p for p, proc in processes.items() if proc.poll() is not None]:
                    processes.pop(pid)
        if stopping.is_set() and outcome.kind == "failed" and outcome.seconds > 0:
            outcome.kind, outcome.reason = "stopped", f"stopped ({outcome.reason})"
        progress.finished(outcome)
        return outcome

    print_fn(
        f"{len(runs)} run(s), {parallel} at a time, {threads} CPU thread(s) each"
        + (f", GPUs {','.join(gpus)}" if gpus else "")
    )
    received: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, lambda s, _: received.append(s))
    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        flags = list(resume) if resume is not None else [None] * len(runs)
        futures = [pool.submit(launch, run, flag) for run, flag in zip(runs, flags, strict=True)]
        handled = 0
        waiting = set(futures)
        while waiting:  # wait on the unfinished ones only: a finished one would return at once
            _, waiting = wait(waiting, timeout=WAIT_S, return_when=FIRST_COMPLETED)
            if len(received) > handled:
                handled = _stop(sweep, received, handled, stopping, lock, processes, print_fn)
        outcomes = [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        raise SweepStopped(received[0], outcomes)
    return outcomes


def _stop(
    sweep: Sweep,
    received: list[int],
    handled: int,
    stopping: threading.Event,
    lock: threading.Lock,
    processes: dict[int, subprocess.Popen],
    print_fn: Callable[[str], None],
) -> int:
    """Act on the stop signals received since ``handled``: the first stops the runs with
    SIGTERM, a later one kills them. Returns the number of signals handled."""
    first = handled == 0
    name = signal.Signals(received[-1]).name
    stopping.set()
    with lock:
        running = [p for p in processes.values() if p.poll() is None]
        for process in running:
            _signal(process, signal.SIGTERM if first else signal.SIGKILL)
    if first:
        print_fn(
            f"sweep {sweep.name}: {name} received: starting no new run; stopping "
            f"{len(running)} running run(s) with SIGTERM (each keeps its last.ckpt) and "
            "waiting for them; send it again (Ctrl-C) to kill them at once"
        )
    else:
        print_fn(f"sweep {sweep.name}: {name} again: killing {len(running)} run(s)")
    return len(received)
