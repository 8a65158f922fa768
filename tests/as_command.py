"""Run many ``noisylabels`` command lines as the real command, without paying for Python and
torch to start each time: the modules are imported once, then every command line runs in a
forked child process exactly as the ``noisylabels`` entry point runs it (``sys.argv``, the
interpreter's handling of an exception that escapes: a printed traceback and exit status 1),
its stdout and stderr captured at the file-descriptor level. The child is a whole process of
its own: a signal it sends itself or receives ends or stops it as it would the command, and its
exit status is the command's.

    python as_command.py

reads one request per line on stdin, ``{"argv": [...], "stdout": FILE, "stderr": FILE, "cwd":
FOLDER, "read_only": [FOLDER, ...]}``, and answers each with ``{"status": exit status}`` on
stdout once its child has ended: :func:`run_command` runs a command line this way from a test,
through one such process per test process (started on first use). ``read_only`` (optional):
folders the child sees as read-only bind mounts, in a mount namespace of its own (root in a
mount namespace, as ``unshare -m``; the mounts never leave the child).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
CALLBACKS = TESTS / "e2e"  # interrupt.py: the callbacks that stop a run from inside
CLONE_NEWNS = 0x00020000  # unshare(2): a mount namespace of one's own (os.CLONE_NEWNS from 3.12)


def mount_read_only(folders: list[str]) -> None:
    """Give this process a mount namespace of its own, private as ``unshare -m`` makes it (no
    mount propagates out of it), in which ``folders`` are read-only bind mounts of themselves."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare(CLONE_NEWNS): {os.strerror(code)}")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    for folder in folders:
        subprocess.run(["mount", "--bind", folder, folder], check=True)
        subprocess.run(["mount", "-o", "remount,ro,bind", folder, folder], check=True)


def run_as_command(
    argv: list[str],
    stderr_file: Path,
    stdout_file: Path | None = None,
    cwd: str | None = None,
    read_only: list[str] | None = None,
) -> int:
    """Run ``noisylabels ARGV`` in a forked child; its exit status (minus the signal that
    ended it, as :mod:`subprocess` reports it)."""
    pid = start_command(argv, stderr_file, stdout_file, cwd, read_only)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


def start_command(
    argv: list[str],
    stderr_file: Path,
    stdout_file: Path | None = None,
    cwd: str | None = None,
    read_only: list[str] | None = None,
) -> int:
    """Start ``noisylabels ARGV`` in a forked child; its PID."""
    pid = os.fork()
    if pid == 0:  # the child: the real command's path, from sys.argv
        status = 1
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            fd = os.open(stderr_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            out = stdout_file if stdout_file is not None else os.devnull
            os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
            if read_only:
                mount_read_only(read_only)
            if cwd is not None:
                os.chdir(cwd)
            sys.argv = ["noisylabels", *argv]
            from noisylabels.cli import main

            main()
            status = 0
        except SystemExit as done:
            code = done.code
            status = code if isinstance(code, int) else (0 if code is None else 1)
        except BaseException:  # what the interpreter does with an exception that escapes
            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    return pid


# what a fit imports on first use (its figures, the TensorBoard logger, the digits, DivideMix's
# mixture model): imported once here rather than by every forked command
FIRST_USE = (
    "matplotlib.backends.backend_agg",
    "matplotlib.figure",
    "sklearn.datasets",
    "sklearn.mixture",
    "torch.utils.tensorboard",
)


def warm_up() -> None:
    """Do once, before the forks, what every command would otherwise do for itself: import the
    package, the training stack and what a fit imports on first use, and build the parsers of
    ``noisylabels fit`` (the package keeps them for the next command of the process,
    run/cli.py); then move every object out of the garbage collector's reach, so that a child's
    collections neither walk them nor copy the memory pages they share with this process."""
    import contextlib
    import gc
    import importlib
    import io
    import warnings

    import noisylabels.cli  # noqa: F401
    from noisylabels.run.cli import make_cli

    for module in FIRST_USE:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    quickstart = REPO / "configs" / "quickstart.yaml"
    # stdout is the answers'; the warning filters a command sets are undone, so that a child
    # warns as the command would
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        with contextlib.suppress(SystemExit):
            make_cli(["fit", "--config", str(quickstart), "--print_config"])
    gc.collect()
    gc.freeze()


def serve() -> None:
    """Answer the requests on stdin (see the module docstring) until it closes."""
    warm_up()
    for line in sys.stdin:
        request = json.loads(line)
        if "together" in request:  # several command lines started at once
            pids = [
                start_command(r["argv"], Path(r["stderr"]), Path(r["stdout"]), r.get("cwd"))
                for r in request["together"]
            ]
            statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
            print(json.dumps({"statuses": statuses}), flush=True)
            continue
        status = run_as_command(
            request["argv"],
            Path(request["stderr"]),
            Path(request["stdout"]),
            request.get("cwd"),
            request.get("read_only"),
        )
        print(json.dumps({"status": status}), flush=True)


_servers: dict[str, subprocess.Popen] = {}


def _server(threads: int) -> subprocess.Popen:
    """This process's command process for ``threads`` torch threads (started on first use; its
    stdin closes, and so it ends, when this process does)."""
    key = str(threads)
    server = _servers.get(key)
    if server is None or server.poll() is not None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(CALLBACKS)]),
            "OMP_NUM_THREADS": key,
        }
        env.pop("NOISYLABELS_DEBUG", None)
        server = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=env,
            text=True,
        )
        _servers[key] = server
        atexit.register(_stop, server)
    return server


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.stdin.close()
        server.wait(timeout=60)


def run_command(
    argv: list[str], cwd: Path = REPO, threads: int = 1, read_only: Sequence[Path] = ()
) -> subprocess.CompletedProcess:
    """``noisylabels ARGV`` as the real command in a process of its own (a child of this test
    process's command process, which imported the package once), with ``threads`` torch
    threads and ``read_only`` folders mounted read-only for it alone; what
    :func:`subprocess.run` returns for it."""
    server = _server(threads)
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        request = {"argv": [str(a) for a in argv], "stdout": str(out), "stderr": str(err),
                   "cwd": str(cwd), "read_only": [str(f) for f in read_only]}  # fmt: skip
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        if not answer:
            raise RuntimeError(f"the command process ended (status {server.wait()})")
        status = json.loads(answer)["status"]
        stdout = out.read_text(errors="replace") if out.exists() else ""
        stderr = err.read_text(errors="replace") if err.exists() else ""
    return subprocess.CompletedProcess(["noisylabels", *argv], status, stdout, stderr)


if __name__ == "__main__":
    serve()


def run_commands_together(
    argvs: Sequence[list[str]], cwd: Path = REPO, threads: int = 1
) -> list[subprocess.CompletedProcess]:
    """Several ``noisylabels`` command lines started at the same moment, each as the real
    command in a process of its own (as :func:`run_command`); what :func:`subprocess.run`
    returns for each, once all have ended."""
    server = _server(threads)
    with tempfile.TemporaryDirectory() as folder:
        files = [(Path(folder) / f"out{i}", Path(folder) / f"err{i}") for i in range(len(argvs))]
        together = [
            {
                "argv": [str(a) for a in argv],
                "stdout": str(out),
                "stderr": str(err),
                "cwd": str(cwd),
            }  # fmt: skip
            for argv, (out, err) in zip(argvs, files, strict=True)
        ]
        server.stdin.write(json.dumps({"together": together}) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        if not answer:
            raise RuntimeError(f"the command process ended (status {server.wait()})")
        statuses = json.loads(answer)["statuses"]
        done = []
        for argv, (out, err), status in zip(argvs, files, statuses, strict=True):
            stdout = out.read_text(errors="replace") if out.exists() else ""
            stderr = err.read_text(errors="replace") if err.exists() else ""
            done.append(subprocess.CompletedProcess(["noisylabels", *argv], status, stdout, stderr))
    return done
