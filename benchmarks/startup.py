"""Start-up time of the ``noisylabels`` command: the median wall time of each command below,
each a fresh ``python -m noisylabels.cli`` process, and whether it imported Lightning or torch.

Commands are measured in turn, ``--repeats`` rounds (the order alternates between rounds, so
drift of the machine's load hits them alike); the median over the rounds is printed. A busy
machine makes every figure larger: compare figures taken together.

    python benchmarks/startup.py --repeats 7
    python benchmarks/startup.py --only help sweep-dry-run
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SWEEP = str(REPO / "configs" / "sweeps" / "table1_mnist.yaml")

# name -> arguments after `noisylabels`
COMMANDS: dict[str, list[str]] = {
    "python": [],  # the interpreter alone (`python -c pass`), the floor of every figure
    "help": ["--help"],
    "version": ["--version"],
    "sweep-help": ["sweep", "--help"],
    "sweep-dry-run": ["sweep", SWEEP, "--dry-run"],
    "report-help": ["report", "--help"],
    "plot-help": ["plot", "--help"],
    "audit-help": ["audit", "--help"],
    "fit-help": ["fit", "--help"],
}

# printed by the child after the command: which of these it had imported
PROBE = (
    "import sys, runpy\n"
    "sys.argv = ['noisylabels', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('noisylabels.cli', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
    "finally:\n"
    "    heavy = [m for m in ('torch', 'lightning') if m in sys.modules]\n"
    "    sys.stderr.write('IMPORTED ' + ','.join(heavy) + '\\n')\n"
)


def once(args: list[str], cwd: str) -> tuple[float, str]:
    """Wall seconds of one command in a fresh interpreter, and the heavy packages it imported."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    if not args:
        command = [sys.executable, "-c", "pass"]
    else:
        command = [sys.executable, "-c", PROBE, *args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    imported = ""
    for line in done.stderr.splitlines():
        if line.startswith("IMPORTED "):
            imported = line.removeprefix("IMPORTED ").strip()
    if args and done.returncode not in (0,):
        sys.stderr.write(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}\n")
    return elapsed, imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--only", nargs="+", choices=list(COMMANDS), help="these commands only")
    args = parser.parse_args()
    names = args.only or list(COMMANDS)
    times: dict[str, list[float]] = {name: [] for name in names}
    imports: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:  # a sweep's dry run writes nothing, but
        for round_ in range(args.repeats):  # run it where it could not touch runs/ anyway
            for name in names if round_ % 2 == 0 else reversed(names):
                elapsed, imported = once(COMMANDS[name], scratch)
                times[name].append(elapsed)
                imports[name] = imported
    print(f"{'command':<15} {'median s':>9} {'min s':>7} {'max s':>7}  imports")
    for name in names:
        shown = " ".join(COMMANDS[name]).replace(str(REPO) + os.sep, "") or "(python -c pass)"
        print(
            f"{name:<15} {statistics.median(times[name]):>9.2f} {min(times[name]):>7.2f} "
            f"{max(times[name]):>7.2f}  {imports[name] or '-':<16} {shown}"
        )


if __name__ == "__main__":
    main()
