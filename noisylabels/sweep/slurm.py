"""A sweep as one SLURM job array: one run per array task.

Each task runs its grid point as ``srun noisylabels fit ...`` in the folder the sweep was written
from. It does nothing where the run already finished with this command (a ``results.json``
holding the command's hash, or one written before runs recorded it) or where another process
writes the run folder (its ``run.lock``, taken with ``flock``), and continues the run from its
``checkpoints/last.ckpt`` (``--ckpt_path last``) where an earlier attempt of this array left
one. The run itself handles the time limit and preemption: on ``SIGUSR1`` (``#SBATCH
--signal=SIGUSR1@90``) or ``SIGTERM`` it stops after its current batch and requeues the task
(``#SBATCH --requeue``, ``scontrol requeue``; :mod:`noisylabels.run.stops`), which then
continues where the last completed epoch left it. See docs/cluster.md.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from noisylabels.disk.lock import LOCK_FILE
from noisylabels.disk.storage import write_text
from noisylabels.errors import InputError, MissingFileError
from noisylabels.sweep.grid import RUN_FILE, Run, Sweep, display_path
from noisylabels.sweep.records import write_run_file

SCRIPT = "array.sbatch"
TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^(UNLIMITED|INFINITE)$", re.IGNORECASE)
MEMORY = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
PARTITION = re.compile(r"^[A-Za-z0-9_.,-]+$")
# what an #SBATCH --output path may hold: no space, quote, '%' (a file name pattern) or '\'
SAFE_PATH = re.compile(r"^[A-Za-z0-9._/+:@,=~-]+$")


@dataclass
class SlurmOptions:
    """Resources of each array task and the job's settings. The defaults suit the small models
    of MNIST and CIFAR (one GPU, 4 CPUs, 16 GB); Clothing1M's image decoding wants more CPUs
    and memory (e.g. 8 and 32G)."""

    time: str = "24:00:00"
    partition: str | None = None
    gpus: int = 1
    cpus: int = 4
    mem: str | None = "16G"
    max_parallel: int | None = None
    setup: str | None = None
    setup_file: Path | None = None
    sbatch_options: Sequence[str] = ()


def _one_line(option: str, value: str) -> None:
    if "\n" in value or "\r" in value:
        raise InputError(
            f"{option} {value!r} holds a line break; an #SBATCH line holds one line"
            + (" (several setup lines: --slurm-setup-file FILE)" if "setup" in option else "")
        )


def check_options(sweep: Sweep, opts: SlurmOptions) -> str:
    """Refuse values that would break the script (line breaks, an unquotable log path,
    malformed time or memory); returns the setup lines (``--slurm-setup`` and the content of
    ``--slurm-setup-file``)."""
    for option, value in (
        ("--slurm-time", opts.time),
        ("--slurm-mem", opts.mem),
        ("--slurm-partition", opts.partition),
    ):
        if value is not None:
            _one_line(option, value)
    if not TIME.match(opts.time):
        raise InputError(
            f"--slurm-time {opts.time!r} is not a SLURM time: write MINUTES, HH:MM:SS or "
            "DAYS-HH:MM:SS (e.g. 08:00:00)"
        )
    if opts.mem is not None and not MEMORY.match(opts.mem):
        raise InputError(f"--slurm-mem {opts.mem!r}: write a size such as 16G or 4000M")
    if opts.partition is not None and not PARTITION.match(opts.partition):
        raise InputError(
            f"--slurm-partition {opts.partition!r}: a partition name (letters, digits, '_', "
            "'-', '.'; several separated by commas)"
        )
    for name, value, low in (
        ("--slurm-gpus", opts.gpus, 0),
        ("--slurm-cpus", opts.cpus, 1),
        ("--slurm-max-parallel", opts.max_parallel, 1),
    ):
        if value is not None and value < low:
            raise InputError(f"{name} must be >= {low}, got {value}")
    for option in opts.sbatch_options:
        _one_line("--sbatch-option", option)
        if not option.startswith("-"):
            raise InputError(
                f"--sbatch-option {option!r}: give the sbatch option itself, e.g. "
                "--sbatch-option=--account=proj"
            )
    logs = display_path(sweep.folder / "slurm")
    if not SAFE_PATH.match(logs):
        raise InputError(
            f"the SLURM log folder {logs!r} (under --root) holds a space, quote, '%' or other "
            "character that an #SBATCH --output line cannot carry; choose a --root whose path "
            "has none"
        )
    setup = []
    if opts.setup:
        _one_line("--slurm-setup", opts.setup)
        setup.append(opts.setup)
    if opts.setup_file is not None:
        if not opts.setup_file.is_file():
            raise MissingFileError(
                f"--slurm-setup-file {opts.setup_file} does not exist (a file of shell lines "
                "each task runs first, e.g. module load and activating the environment)"
            )
        try:
            text = opts.setup_file.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(
                f"--slurm-setup-file {opts.setup_file} cannot be read as text ({err})"
            ) from None
        setup += [line for line in text.splitlines() if not line.startswith("#!")]
    return "\n".join(setup)


def slurm_script(
    sweep: Sweep,
    runs: Sequence[Run],
    extra: Sequence[str],
    opts: SlurmOptions,
    resume: Sequence[bool] | None = None,
) -> str:
    """The text of a SLURM job-array script running ``runs``, one per array task;
    ``resume``: which runs continue from their ``last.ckpt`` at their first start."""
    return _script(sweep, runs, extra, opts, resume)[0]


def _script(
    sweep: Sweep,
    runs: Sequence[Run],
    extra: Sequence[str],
    opts: SlurmOptions,
    resume: Sequence[bool] | None,
) -> tuple[str, list[tuple[list[str], str]]]:
    """:func:`slurm_script`'s text, and each run's ``noisylabels fit`` arguments (without
    ``--ckpt_path``) with their hash (:meth:`~noisylabels.sweep.grid.Run.command_sha256`),
    computed once for the script and the runs' ``sweep_run.json``."""
    setup = check_options(sweep, opts)
    planned = [(run.fit_args(extra, resume=False), run.command_sha256(extra)) for run in runs]
    resume = list(resume) if resume is not None else [False] * len(runs)
    folder = sweep.folder / "slurm"
    array = f"0-{len(runs) - 1}" + (f"%{opts.max_parallel}" if opts.max_parallel else "")
    lines = [
        "#!/bin/bash",
        f"# Sweep {sweep.name} ({display_path(sweep.path)}): {len(runs)} run(s), one per array",
        "# task. Written by `noisylabels sweep --launcher slurm`; submit with sbatch. On SIGUSR1",
        "# (90 s before the time limit) or SIGTERM (preemption) a run stops after its current",
        "# batch, keeps its checkpoints/last.ckpt and requeues its task, which continues from",
        "# there; a run finished with this command is skipped (docs/cluster.md).",
        f"#SBATCH --job-name={sweep.name}",
        f"#SBATCH --array={array}",
        "#SBATCH --ntasks=1",
        f"#SBATCH --cpus-per-task={opts.cpus}",
        f"#SBATCH --time={opts.time}",
        f"#SBATCH --output={display_path(folder)}/%A_%a.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --signal=SIGUSR1@90",
        "#SBATCH --requeue",
    ]
    if opts.gpus:
        lines.append(f"#SBATCH --gpus-per-task={opts.gpus}")
    if opts.mem:
        lines.append(f"#SBATCH --mem={opts.mem}")
    if opts.partition:
        lines.append(f"#SBATCH --partition={opts.partition}")
    lines += [f"#SBATCH {option}" for option in opts.sbatch_options]
    lines += ["set -euo pipefail", f"cd {shlex.quote(str(Path.cwd()))}"]
    if setup:
        lines += ["set +u  # environment setup scripts may read unset variables", setup, "set -u"]
    lines += [
        'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
        'case "${SLURM_ARRAY_TASK_ID}" in',
    ]
    for i, (run, (args, sha256)) in enumerate(zip(runs, planned, strict=True)):
        command = shlex.join(["noisylabels", *args])
        lines.append(
            f"  {i}) folder={shlex.quote(display_path(run.folder))}; "
            f"hash={sha256}; resume={int(resume[i])}; set -- {command} ;;"
        )
    lines += [
        '  *) echo "no run for array task ${SLURM_ARRAY_TASK_ID}" >&2; exit 2 ;;',
        "esac",
        "# finished before: a results.json of this command (or of a version without the hash)",
        "while IFS= read -r -d '' results; do",
        '  if grep -qF "\\"command_sha256\\": \\"$hash\\"" "$results" ||',
        '     ! grep -qF \'"command_sha256": "\' "$results"; then',
        '    echo "$folder: finished before ($results)"; exit 0',
        "  fi",
        'done < <(find "$folder" -name results.json -print0 2>/dev/null)',
        'mkdir -p "$folder"',
        "# one process writes a run folder at a time (a second sweep of the grid leaves it)",
        "if command -v flock >/dev/null 2>&1; then",
        f'  exec 9>>"$folder/{LOCK_FILE}"',
        "  if ! flock -n 9; then",
        f'    echo "$folder is being written by another process: $(cat "$folder/{LOCK_FILE}")"',
        "    exit 0",
        "  fi",
        '  printf \'{"pid": %s, "host": "%s", "by": "SLURM job %s_%s", "since": "%s"}\\n\' '
        '"$$" "$(hostname)" "${SLURM_ARRAY_JOB_ID:-}" "${SLURM_ARRAY_TASK_ID}" '
        f'"$(date \'+%F %T\')" > "$folder/{LOCK_FILE}"',
        "fi",
        "# a requeued task (or a stopped run) continues from the last.ckpt this array wrote",
        f'if [ -n "$(find "$folder" -path \'*/checkpoints/last.ckpt\' -newer "$folder/{RUN_FILE}"'
        ' -print -quit 2>/dev/null)" ]; then resume=1; fi',
        'if [ "$resume" = 1 ]; then set -- "$@" --ckpt_path last; fi',
        'srun "$@"',
    ]
    return "\n".join(lines) + "\n", planned


def write_slurm(
    sweep: Sweep,
    runs: Sequence[Run],
    extra: Sequence[str],
    opts: SlurmOptions,
    *,
    resume: Sequence[bool] | None = None,
    submit: bool = False,
    print_fn: Callable[[str], None] = print,
) -> Path:
    """Write the job-array script of ``runs`` to ``<root>/<name>/slurm/array.sbatch`` (and each
    run's ``sweep_run.json``); with ``submit``, submit it with ``sbatch``. Returns the script.
    Without ``sbatch`` on PATH the script is written all the same and the refusal names it."""
    text, planned = _script(sweep, runs, extra, opts, resume)
    script = write_text(sweep.folder / "slurm" / SCRIPT, text)
    for run, (args, sha256) in zip(runs, planned, strict=True):
        write_run_file(sweep, run, ["noisylabels", *args], sha256)
    print_fn(f"wrote {display_path(script)}: a job array of {len(runs)} task(s)")
    if submit and shutil.which("sbatch") is None:
        shown = display_path(script)
        raise InputError(
            f"--submit needs SLURM's sbatch on PATH, which this machine lacks: the job array is "
            f"written ({shown}) but not submitted; submit it where SLURM is, with "
            f"`sbatch {shlex.quote(shown)}` from this folder"
        )
    if submit:
        out = subprocess.run(["sbatch", str(script)], capture_output=True, text=True)
        if out.returncode != 0:
            raise InputError(f"sbatch refused {script}: {out.stderr.strip() or out.stdout}")
        print_fn(out.stdout.strip())
    return script
