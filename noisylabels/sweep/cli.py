"""``noisylabels sweep FILE.yaml``: expand a grid of runs (:mod:`noisylabels.sweep`) and run the
ones not finished yet, locally or as a SLURM job array (:mod:`noisylabels.sweep.launch`).

Examples::

    noisylabels sweep configs/sweeps/table1_mnist.yaml --dry-run
    noisylabels sweep configs/sweeps/table1_mnist.yaml --parallel 2 \\
        --where method=forward,forward_vrnl --where noise=sym-0.2 -- --data.data_dir DATA
    noisylabels sweep configs/sweeps/table1_cifar10.yaml --launcher slurm --submit \\
        --slurm-setup-file setup.sh -- --data.data_dir /data

Arguments after ``--`` are added to every run's ``noisylabels fit`` command. A run is skipped
where it finished with the same command, rerun where it finished with another (``[stale]``),
resumed where it was stopped, and left alone where another process writes it
(:mod:`noisylabels.sweep.records`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
import signal
from collections.abc import Sequence
from pathlib import Path

from noisylabels.arguments import CommandParser
from noisylabels.errors import InputError, NoisyLabelsError
from noisylabels.sweep.grid import Run, Sweep, check_classes, display_path, load_sweep
from noisylabels.sweep.launch import Outcome, SweepStopped, run_local, threads_per_run
from noisylabels.sweep.records import RunState, run_state
from noisylabels.sweep.slurm import SCRIPT, SlurmOptions, slurm_script, write_slurm

PENDING = ("stale", "to resume", "to run")  # the states a sweep runs


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``noisylabels sweep``."""
    p = CommandParser(
        prog="noisylabels sweep",
        description="Run a grid of `noisylabels fit` runs written in a sweep file, skipping "
        "runs finished with the same command (a results.json of it), rerunning those done with "
        "other options ([stale]) and resuming stopped ones. Arguments after `--` go to every "
        "run.",
        allow_abbrev=False,
    )
    p.add_argument("file", type=Path, metavar="FILE.yaml", help="the sweep file")
    p.add_argument("--root", type=Path, default=Path("runs"), help="runs go to ROOT/<name>/...")
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="AXIS=V1,V2",
        help="keep only the runs with these axis values (repeatable)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print every run with its state and command (and, with --launcher slurm, the "
        "script it would write) and exit; it loads no training code, so it checks the sweep "
        "file and the config files but not the classes and options (--check does)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with --dry-run: also check the methods and datasets the runs name and parse "
        "their options with `noisylabels fit --print_config`, as a sweep does before it runs "
        "(loads Lightning: seconds)",
    )
    p.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        default="local",
        help="local: processes on this machine (default); slurm: one SLURM job array",
    )
    local = p.add_argument_group("local launcher")
    local.add_argument("--parallel", type=int, default=1, help="processes at a time")
    local.add_argument(
        "--threads", type=int, help="CPU threads per process (default: CPUs / parallel)"
    )
    local.add_argument(
        "--gpus", default="", help="GPU ids for the processes, round robin, e.g. 0,1"
    )
    slurm = p.add_argument_group("SLURM launcher (one job array, one run per task)")
    slurm.add_argument("--submit", action="store_true", help="submit the script with sbatch")
    slurm.add_argument("--slurm-time", default="24:00:00", help="time limit per run")
    slurm.add_argument("--slurm-partition", help="partition")
    slurm.add_argument("--slurm-gpus", type=int, default=1, help="GPUs per run (0: none)")
    slurm.add_argument("--slurm-cpus", type=int, default=4, help="CPUs per run")
    slurm.add_argument("--slurm-mem", default="16G", help="memory per run")
    slurm.add_argument("--slurm-max-parallel", type=int, help="array tasks running at once")
    slurm.add_argument(
        "--slurm-setup", help="a shell line run before each run, e.g. activating the venv"
    )
    slurm.add_argument(
        "--slurm-setup-file",
        type=Path,
        metavar="FILE",
        help="shell lines each run's task runs first (module load, activating the environment)",
    )
    slurm.add_argument(
        "--sbatch-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="a further #SBATCH line, e.g. --sbatch-option=--account=proj (repeatable)",
    )
    return p


def parse_where(items: Sequence[str]) -> dict[str, list[str]]:
    """``["method=a,b", "seed=seed-0"]`` -> ``{"method": ["a", "b"], "seed": ["seed-0"]}``."""
    where: dict[str, list[str]] = {}
    for item in items:
        axis, sep, values = item.partition("=")
        if not sep or not axis or not values:
            raise InputError(f"--where {item!r}: write AXIS=VALUE[,VALUE...]")
        where.setdefault(axis, []).extend(v for v in values.split(",") if v)
    return where


def check_options(sweep: Sweep, runs: Sequence[Run], extra: Sequence[str]) -> None:
    """Parse one run of each distinct set of configs and option names with ``noisylabels fit
    --print_config``, so a misspelt option fails before anything runs."""
    # start-up time: the command line of a fit loads Lightning, which a dry run does without
    from noisylabels.run.cli import lightning_command

    checked: set[tuple] = set()
    for run in runs:
        key = (tuple(run.configs), tuple(sorted(run.args)))
        if key in checked:
            continue
        checked.add(key)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            refusal = None
            try:
                lightning_command([*run.fit_args(extra), "--print_config"])
            except NoisyLabelsError as error:
                refusal = str(error)
            except SystemExit as exit_:
                if exit_.code not in (0, None):
                    lines = err.getvalue().strip().splitlines()
                    refusal = lines[-1] if lines else f"exit status {exit_.code}"
        if refusal is not None:
            raise InputError(
                f"sweep {sweep.name}: `noisylabels fit` refuses the options of run {run.name}: "
                + refusal
            )


def _slurm_options(args: argparse.Namespace) -> SlurmOptions:
    return SlurmOptions(
        time=args.slurm_time,
        partition=args.slurm_partition,
        gpus=args.slurm_gpus,
        cpus=args.slurm_cpus,
        mem=args.slurm_mem,
        max_parallel=args.slurm_max_parallel,
        setup=args.slurm_setup,
        setup_file=args.slurm_setup_file,
        sbatch_options=args.sbatch_option,
    )


def _summary(sweep: Sweep, states: dict[str, RunState]) -> str:
    """The sweep's first line: how many runs, and how many in each state."""
    done = sum(s.kind == "done" for s in states.values())
    text = f"sweep {sweep.name}: {len(states)} run(s) in {display_path(sweep.folder)}, "
    text += f"{done} finished"
    for kind, what in (
        ("stale", "finished or stopped with other options or inputs (rerun)"),
        ("to resume", "to resume from their last.ckpt"),
        ("running", "being written by another process (left alone)"),
    ):
        n = sum(s.kind == kind for s in states.values())
        if n:
            text += f", {n} {what}"
    unknown = sum(s.kind == "done" and bool(s.note) for s in states.values())
    if unknown:
        text += (
            f" ({unknown} of the finished runs recorded no command, written before runs did: "
            "counted as finished)"
        )
    return text


def _stopped(sweep: Sweep, stop: SweepStopped) -> int:
    """Report a sweep stopped by a signal; return the exit status (128 + the signal)."""
    name = signal.Signals(stop.signum).name
    stopped = [o for o in stop.outcomes if o.kind == "stopped"]
    finished = [o for o in stop.outcomes if o.ok]
    idle = [o for o in stop.outcomes if o.kind == "not started"]
    print(
        f"sweep {sweep.name}: stopped by {name}; {len(finished)} run(s) finished, "
        f"{len(stopped)} stopped, {len(idle)} not started. Rerunning the sweep resumes the "
        "stopped runs from their last.ckpt and starts the others:"
    )
    for outcome in stopped:
        print(f"  {outcome.run.name}: {outcome.reason}; log: {display_path(outcome.log)}")
    return 128 + stop.signum


def _report(sweep: Sweep, pending: Sequence[Run], outcomes: Sequence[Outcome]) -> int:
    failures = [o for o in outcomes if o.kind == "failed"]
    busy = [o for o in outcomes if o.kind == "busy"]
    finished = sum(o.ok for o in outcomes)
    print(f"sweep {sweep.name}: {finished} of {len(pending)} run(s) finished")
    for outcome in busy:
        print(f"  {outcome.run.name}: not started, {outcome.reason}")
    if failures:
        print(f"{len(failures)} run(s) failed (rerun the sweep to retry them):")
        for outcome in failures:
            print(f"  {outcome.run.name}: {outcome.reason}; log: {display_path(outcome.log)}")
        return 1
    return 0


LAUNCHER_GROUPS = {"local": "local launcher", "slurm": "SLURM launcher"}
"""The title each launcher's option group starts with in :func:`build_parser`."""


def refuse_other_launcher(args: argparse.Namespace) -> None:
    """Refuse an option of the launcher not chosen (``--parallel`` with ``--launcher slurm``,
    ``--slurm-time`` with the local one), which would be left unused; the options are each
    group's of :func:`build_parser`, so a new one is covered."""
    parser = build_parser()
    for launcher, title in LAUNCHER_GROUPS.items():
        if launcher == args.launcher:
            continue
        group = next(g for g in parser._action_groups if (g.title or "").startswith(title))
        given = [
            action.option_strings[0]
            for action in group._group_actions
            if getattr(args, action.dest) != action.default
        ]
        if given:
            raise InputError(
                f"{', '.join(given)} would have no effect: "
                + ("they are options" if len(given) > 1 else "it is an option")
                + f" of --launcher {launcher}, and this sweep runs with --launcher "
                f"{args.launcher}; leave {'them' if len(given) > 1 else 'it'} out or choose "
                f"--launcher {launcher}"
            )


def sweep_main(args: argparse.Namespace, extra: list[str]) -> int:
    """Run the sweep the parsed ``args`` describe; return the exit status."""
    refuse_other_launcher(args)
    sweep = load_sweep(args.file, args.root, parse_where(args.where))
    if not sweep.runs:
        raise InputError(f"sweep {sweep.name}: --where leaves no run")
    opts = _slurm_options(args) if args.launcher == "slurm" else None
    if opts is not None:
        slurm_script(sweep, sweep.runs[:1], extra, opts)  # refuse bad --slurm-* values first
    if args.check or not args.dry_run:  # a dry run alone starts fast: it loads no training code
        check_classes(sweep)
        check_options(sweep, sweep.runs, extra)
    states = {run.name: run_state(run, extra) for run in sweep.runs}
    pending = [run for run in sweep.runs if states[run.name].kind in PENDING]
    resume = [states[run.name].resume for run in pending]
    print(_summary(sweep, states))
    if args.dry_run:
        for run in sweep.runs:
            state = states[run.name]
            command = shlex.join(["noisylabels", *run.fit_args(extra, resume=state.resume)])
            print(f"  [{state.kind}] {run.name}: {command}")
            if state.note and state.kind != "done":
                print(f"      {state.note}")
        if not args.check:
            print(
                "(the runs' methods, datasets and options are checked when the sweep runs; "
                "--dry-run --check checks them now)"
            )
        if opts is not None and pending:
            script = sweep.folder / "slurm" / SCRIPT
            print(f"\n# {display_path(script)} (not written: --dry-run)")
            print(slurm_script(sweep, pending, extra, opts, resume), end="")
        return 0
    for run in sweep.runs:
        if states[run.name].kind == "running":
            print(f"  {run.name}: {states[run.name].note}; left alone")
    if not pending:
        print("nothing to run")
        return 0
    if opts is not None:
        write_slurm(sweep, pending, extra, opts, resume=resume, submit=args.submit)
        return 0
    gpus = [g for g in args.gpus.split(",") if g]
    threads = args.threads or threads_per_run(args.parallel)
    try:
        outcomes = run_local(
            sweep, pending, extra, parallel=args.parallel, threads=threads, gpus=gpus,
            resume=resume,
        )  # fmt: skip
    except SweepStopped as stop:
        return _stopped(sweep, stop)
    return _report(sweep, pending, outcomes)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``noisylabels sweep``; exits with status 1 if a run failed."""
    argv = list(argv or [])
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = sweep_main(args, extra)
    except (NoisyLabelsError, FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    except KeyboardInterrupt:  # Ctrl-C before any run started
        print("noisylabels sweep: interrupted (Ctrl-C) before any run started", flush=True)
        code = 128 + signal.SIGINT
    if code:
        raise SystemExit(code)
    return code
