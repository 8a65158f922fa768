"""Run many ``noisylabels`` command lines as the real command, without paying for Python and
torch to start each time: the modules are imported once, then every command line runs in a
forked child process exactly as the ``noisylabels`` entry point runs it (``sys.argv``, the
interpreter's handling of an exception that escapes: a printed traceback and exit status 1),
its stdout and stderr captured at the file-descriptor level.

    python as_command.py COMMANDS.json RESULTS.json

COMMANDS.json is ``{"name": [argv after "noisylabels", ...], ...}``; RESULTS.json receives
``{"name": {"status": exit status, "stderr": text}, ...}``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path


def run_as_command(argv: list[str], stderr_file: Path) -> int:
    """Run ``noisylabels ARGV`` in a forked child; its exit status."""
    pid = os.fork()
    if pid == 0:  # the child: the real command's path, from sys.argv
        status = 1
        try:
            fd = os.open(stderr_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
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
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


def main() -> None:
    commands = json.loads(Path(sys.argv[1]).read_text())
    import noisylabels.cli  # noqa: F401  # imported once, before the forks
    import noisylabels.run.cli  # noqa: F401

    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, argv in commands.items():
            stderr_file = Path(folder) / "stderr"
            status = run_as_command(argv, stderr_file)
            text = stderr_file.read_text(errors="replace") if stderr_file.exists() else ""
            results[name] = {"status": status, "stderr": text}
    Path(sys.argv[2]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
