"""The ``noisylabels`` command: dispatch to its subcommands, and one-paragraph failures.

``noisylabels fit|validate|test|predict`` are Lightning's stages (:mod:`noisylabels.run.cli`);
``plot``, ``sweep``, ``report`` and ``audit`` are the project's own
(:mod:`noisylabels.report.plot`, :mod:`noisylabels.sweep.cli`, :mod:`noisylabels.report.cli`,
:mod:`noisylabels.audit.cli`). Each subcommand's module is
imported only when it runs (the command itself loads Lightning first, for its SIGTERM exit).

User errors (:class:`~noisylabels.errors.NoisyLabelsError`) end the command with one paragraph
and their exit status (2; 3 for a diverged run), SIGTERM with status 143; ``--debug`` or
``NOISYLABELS_DEBUG=1`` shows the traceback. From Python, :func:`run` runs one command and
returns its result (the CLI object of a Lightning stage, a subcommand's exit status).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from noisylabels import __version__
from noisylabels.errors import InputError, user_error

DEBUG_FLAG = "--debug"
DEBUG_ENV = "NOISYLABELS_DEBUG"
SIGTERM_EXIT = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended

LIGHTNING = "noisylabels.run.cli:lightning_command"
# name -> ("module:function" taking the arguments after the name, one line of help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "fit": (LIGHTNING, "train a method, test it on the clean test set, write results.json"),
    "validate": (LIGHTNING, "evaluate a checkpoint on the (noisy) validation split"),
    "test": (LIGHTNING, "evaluate a checkpoint on the clean test set"),
    "predict": (LIGHTNING, "predict the class probabilities of the test set"),
    "sweep": ("noisylabels.sweep.cli:main", "run a grid of fits (locally or as a SLURM array)"),
    "report": ("noisylabels.report.cli:main", "tables of test accuracy over seeds from runs"),
    "plot": ("noisylabels.report.plot:main", "the paper's loss figures from runs"),
    "audit": ("noisylabels.audit.cli:main", "rank a run's training labels by how likely wrong"),
}


def usage() -> str:
    """The top-level help: every subcommand with one line."""
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [
        f"usage: noisylabels SUBCOMMAND [options]   (noisylabels {__version__})",
        "",
        "Learning with noisy labels: VRNL and its baselines. Subcommands:",
        *(f"  {name:<{width}}  {text}" for name, (_, text) in SUBCOMMANDS.items()),
        "",
        "noisylabels SUBCOMMAND --help shows a subcommand's options; --debug shows the "
        "traceback of an error.",
    ]
    return "\n".join(lines)


def run(args: list[str] | None = None) -> Any:
    """Run one command (``args`` as on the command line after ``noisylabels``; ``None``:
    ``sys.argv``) and return what it returns: the CLI object of a Lightning stage (its
    ``results`` after ``fit``), a subcommand's exit status. User errors raise."""
    argv = list(sys.argv[1:] if args is None else args)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        raise SystemExit(0)
    if argv[0] == "--version":
        print(f"noisylabels {__version__}")
        raise SystemExit(0)
    entry = SUBCOMMANDS.get(argv[0])
    if entry is None:
        raise InputError(
            f"unknown subcommand {argv[0]!r}; the subcommands are {', '.join(SUBCOMMANDS)} "
            "(noisylabels --help)"
        )
    module, _, function = entry[0].partition(":")
    command = getattr(importlib.import_module(module), function)
    if entry[0] == LIGHTNING:
        return command(None if args is None else argv)
    return command(argv[1:])


def debug_requested(argv: list[str]) -> bool:
    """Whether ``argv`` or the environment asks for tracebacks of user errors."""
    return DEBUG_FLAG in argv or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def paragraph(err: BaseException) -> str:
    """``err``'s message as one paragraph (its lines joined), with the debug hint."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return (
        f"noisylabels: error: {text} (Run with {DEBUG_FLAG} or {DEBUG_ENV}=1 to see the traceback.)"
    )


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``noisylabels`` command: user errors end it with one paragraph and
    their exit status (a traceback with ``--debug`` or ``NOISYLABELS_DEBUG=1``), SIGTERM with
    status 143; programming errors keep their traceback."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException  # loads Lightning

    argv = list(sys.argv[1:] if args is None else args)
    debug = debug_requested(argv)
    argv = [a for a in argv if a != DEBUG_FLAG]
    if args is None:
        sys.argv[1:] = argv
    try:
        result = run(None if args is None else argv)
    except SIGTERMException:
        sys.exit(SIGTERM_EXIT)
    except Exception as err:
        found = user_error(err)
        if found is None or debug:
            raise
        print(paragraph(found), file=sys.stderr, flush=True)
        sys.exit(found.exit_code)
    if isinstance(result, int) and result:
        sys.exit(result)


if __name__ == "__main__":
    main()
