"""``run.lock``: a run folder is written by one process at a time.

Before a sweep starts a run it locks the run's folder: ``RUN/run.lock`` is locked with
``flock`` and holds, as JSON, who writes the folder (the PID of the ``noisylabels fit``
process, its host, who started it and when). The run's process inherits the lock, so it is held
for exactly as long as that process (or the sweep) lives: a second sweep of the same grid, or a
second launcher of this one, sees the folder as ``running`` and leaves it alone, even after the
first sweep was killed. A lock file whose process is gone is not locked any more (a *stale*
lock): it is reported with the PID it names and taken over. SLURM array tasks take the same lock
with the ``flock`` command (:mod:`noisylabels.sweep.slurm`).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCK_FILE = "run.lock"


@dataclass
class Holder:
    """Who holds (or held) a run folder's lock, as its lock file says."""

    pid: int | None
    host: str | None
    by: str | None
    since: str | None

    def __str__(self) -> str:
        where = f" on {self.host}" if self.host and self.host != socket.gethostname() else ""
        by = f", {self.by}" if self.by else ""
        since = f", since {self.since}" if self.since else ""
        return f"PID {self.pid}{where}{by}{since}"


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` where there is none to read (no file, an empty,
    damaged or half-written one, or JSON that is not an object). A sweep reads the files of
    its runs with it (``run.lock``, ``sweep_run.json``, ``results.json``)."""
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def _read(path: Path) -> Holder:
    content = read_json(path) or {}
    pid = content.get("pid")
    return Holder(
        pid if isinstance(pid, int) else None,
        content.get("host"),
        content.get("by"),
        content.get("since"),
    )


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def holder(folder: Path) -> Holder | None:
    """The live holder of ``folder``'s lock; ``None`` where no process holds it (no lock file,
    or a stale one)."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if _try_lock(fd):
            return None
        return _read(path)
    finally:
        os.close(fd)  # releases the lock where this call took it


class RunLock:
    """The lock of one run folder, held by this process (and the run it starts)."""

    def __init__(self, folder: Path, by: str) -> None:
        self.path = Path(folder) / LOCK_FILE
        self.by = by
        self.fd: int | None = None
        self.stale: Holder | None = None  # the holder named by a stale lock this one took over

    def acquire(self) -> Holder | None:
        """Lock the folder; returns ``None`` on success, else the live holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if not _try_lock(fd):
                os.close(fd)
                return _read(self.path)
            try:  # the file may have been removed and re-created since it was opened
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        previous = _read(self.path)
        if previous.pid is not None:
            self.stale = previous
        self.record(os.getpid())
        return None

    def record(self, pid: int) -> None:
        """Write who holds the lock: ``pid`` (the run's process, once it started)."""
        assert self.fd is not None
        content = {
            "pid": pid,
            "host": socket.gethostname(),
            "by": self.by,
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        data = (json.dumps(content) + "\n").encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def release(self) -> None:
        """Unlock and remove the lock file."""
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)
            self.fd = None
