"""The ``noisylabels`` command: dispatch to its subcommands, and one-paragraph failures.

``noisylabels fit|validate|test|predict`` are Lightning's stages (:mod:`noisylabels.run.cli`);
``plot``, ``sweep``, ``report`` and ``audit`` are the project's own
(:mod:`noisylabels.report.plot`, :mod:`noisylabels.sweep.cli`, :mod:`noisylabels.report.cli`,
:mod:`noisylabels.audit.cli`). Each subcommand's module is imported only when it runs, and the
command itself imports neither torch nor Lightning: ``--help``, ``--version``, ``report``,
``plot``, ``sweep --dry-run`` and every ``--help`` but a Lightning stage's start in a fraction of
a second (``benchmarks/startup.py`` measures it), where loading the training stack takes
seconds. A Lightning stage reads its ``--config`` files first, so a broken one (not YAML, not a
mapping, a key twice, a missing or circular ``compose:``) fails as fast, with the parse's error.

User errors (:class:`~noisylabels.errors.NoisyLabelsError`) end the command with one paragraph
and their exit status (2; 3 for a diverged run), SIGTERM with status 143; ``--debug`` or
``NOISYLABELS_DEBUG=1`` shows the traceback. From Python, :func:`run` runs one command and
returns its result (the CLI object of a Lightning stage, a subcommand's exit status).
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from typing import Any

from noisylabels import __version__
from noisylabels.errors import InputError, StorageError, user_error

DEBUG_FLAG = "--debug"
DEBUG_ENV = "NOISYLABELS_DEBUG"
SIGTERM_EXIT = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended
SIGPIPE_EXIT = 141  # 128 + SIGPIPE: a reader of the output (`| head`) closed it early
# why a write to the standard output fails that the user can fix (a closed pipe ends quietly)
STDOUT_ERRNOS = {errno.ENOSPC: "the device is full", errno.EDQUOT: "the disk quota is exhausted"}

LIGHTNING = "noisylabels.run.cli:lightning_command"
# where Lightning's SIGTERMException lives; a command that never imported it cannot raise it
SIGTERM_MODULE = "lightning.pytorch.utilities.exceptions"
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
    if entry[0] != LIGHTNING:
        return getattr(importlib.import_module(module), function)(argv[1:])
    from noisylabels.compose import check_config_files

    check_config_files(argv[1:])  # a broken config file fails before the training stack loads
    return getattr(importlib.import_module(module), function)(None if args is None else argv)


def debug_requested(argv: list[str]) -> bool:
    """Whether ``argv`` or the environment asks for tracebacks of user errors."""
    return DEBUG_FLAG in argv or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def paragraph(err: BaseException) -> str:
    """``err``'s message as one paragraph (its lines joined), with the debug hint."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return (
        f"noisylabels: error: {text} (Run with {DEBUG_FLAG} or {DEBUG_ENV}=1 to see the traceback.)"
    )


class WatchedStdout:
    """The standard output, remembering the error of a write or flush that failed, so that the
    command can tell a failed write to its output (``> /dev/full``, ``| head``) from other
    errors. Everything else is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.failure: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as err:
            self.failure = err
            raise

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as err:
            self.failure = err
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    def failed(self, err: BaseException) -> OSError | None:
        """The failed write to the output behind ``err`` (itself, or what it was raised from or
        while handling), if there was one."""
        seen: set[int] = set()
        current: BaseException | None = err
        while current is not None and id(current) not in seen:
            if current is self.failure:
                return self.failure
            seen.add(id(current))
            current = current.__cause__ or current.__context__
        return None


def _file_descriptor(stream: Any) -> int | None:
    """The file descriptor under ``stream``; ``None`` for one that has none (a capture)."""
    try:
        return int(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None


def _silence(fd: int) -> None:
    """Point file descriptor ``fd`` at /dev/null, so that the interpreter's last flush of what
    the output could not take fails no more (and prints no 'Exception ignored')."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


def _target(fd: int) -> str:
    """What the file descriptor ``fd`` writes to (``/dev/full``, a file's path), where the
    system says."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def stdout_failure_exit(err: OSError, stream: Any) -> int:
    """End the command after a write to its output ``stream`` failed: quietly for a reader that
    closed it (a pipe to ``head``: status 141, as for SIGPIPE), else with one paragraph (status
    2)."""
    fd = _file_descriptor(stream)
    target = _target(fd) if fd is not None else ""
    if fd is not None:
        _silence(fd)
    if err.errno == errno.EPIPE:
        return SIGPIPE_EXIT
    code = err.errno or 0
    reason = STDOUT_ERRNOS.get(code, os.strerror(code).lower())
    problem = StorageError(
        f"cannot write to the standard output{f' ({target})' if target else ''}: {reason} "
        f"({os.strerror(code)}); the output is cut short. Free space there, or send the output "
        "elsewhere"
    )
    try:
        print(paragraph(problem), file=sys.stderr, flush=True)
    except OSError:
        pass
    return problem.exit_code


def _flush_stdout() -> None:
    """Flush the output now, inside the command, where a failure is handled (not at exit)."""
    if sys.stdout is not None:
        sys.stdout.flush()


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``noisylabels`` command: user errors end it with one paragraph and
    their exit status (a traceback with ``--debug`` or ``NOISYLABELS_DEBUG=1``), SIGTERM with
    status 143; programming errors keep their traceback. An output that cannot be written ends
    it with one paragraph and status 2 (a full device), or quietly with status 141 (a pipe
    whose reader is gone, as ``| head`` leaves it)."""
    argv = list(sys.argv[1:] if args is None else args)
    debug = debug_requested(argv)
    argv = [a for a in argv if a != DEBUG_FLAG]
    if args is None:
        sys.argv[1:] = argv
    stdout = sys.stdout
    watched = WatchedStdout(stdout) if stdout is not None else None
    if watched is not None:
        sys.stdout = watched
    try:
        try:
            status = _main(None if args is None else argv, debug)
            _flush_stdout()
        except SystemExit:
            _flush_stdout()  # what help or a report printed before it exits
            raise
    except (Exception, SystemExit) as err:
        failure = watched.failed(err) if watched is not None else None
        if failure is None or debug:
            raise
        status = stdout_failure_exit(failure, stdout)
    finally:
        if sys.stdout is watched:
            sys.stdout = stdout
    if status:
        sys.exit(status)


def stopped_by_sigterm(err: BaseException) -> bool:
    """Whether ``err`` is Lightning's ``SIGTERMException`` (a fit stopped by SIGTERM). It is
    looked up among the modules already imported rather than imported here: only a command that
    loaded Lightning can raise it, and the others start without loading it."""
    sigterm = getattr(sys.modules.get(SIGTERM_MODULE), "SIGTERMException", None)
    return isinstance(sigterm, type) and isinstance(err, sigterm)


def _main(args: list[str] | None, debug: bool) -> int:
    """Run the command; its exit status. User errors print their paragraph here."""
    try:
        result = run(args)
    except SystemExit as err:
        if stopped_by_sigterm(err):  # a run stopped by a signal: the status a shell reports
            return int(getattr(err, "exit_code", SIGTERM_EXIT))
        raise
    except Exception as err:
        found = user_error(err)
        if found is None or debug:
            raise
        print(paragraph(found), file=sys.stderr, flush=True)
        return found.exit_code
    return result if isinstance(result, int) and result else 0


if __name__ == "__main__":
    main()
