"""``run.lock``: a run folder is written by one process at a time.

Every writer of a run folder holds its lock for as long as it writes: ``noisylabels fit`` (a new
run or a resume, from its folder's claim to its last file), ``predict`` while it writes
``predictions.csv``, a sweep for as long as its run's process lives (on the grid point's folder,
which holds the run's), a SLURM task of a sweep (the same file, with the ``flock`` command). The
lock is ``flock`` on ``FOLDER/run.lock``, which holds, as JSON, who writes the folder (PID,
host, what, since when). The operating system releases it when its holder ends, however it
ends: a lock file whose process is gone is *stale*, and the next writer takes it over and says
so. A second writer of a held folder is refused with one paragraph naming the holder
(:class:`FolderBusy`).

A new run's folder is claimed atomically (:func:`claim_version`): ``version_N`` is created with
``mkdir``, which exactly one process can do, so two runs started together into one root take
``version_0`` and ``version_1``, never one folder.

This module loads neither torch nor Lightning (a sweep locks folders without them).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisylabels.disk.reading import LIMITS, UnreadableFile, read_json
from noisylabels.disk.storage import storage_error
from noisylabels.errors import InputError

LOCK_FILE = "run.lock"
VERSION_PREFIX = "version_"  # the run folders of Lightning's TensorBoard and CSV loggers
# the temporary files of a write cut short (noisylabels.disk.storage names them
# .STEM.PID.tmp.SUFFIX; a checkpoint written through another writer, .last.tmp)
TEMPORARY = re.compile(r"^\..+\.\d+\.tmp(\.[^.]+)?$|^\.last\.tmp$")


@dataclass
class Holder:
    """Who holds (or held) a run folder's lock, as its lock file says."""

    pid: int | None
    host: str | None
    by: str | None
    since: str | None

    def __str__(self) -> str:
        where = f" on {self.host}" if self.host else ""
        by = f" ({self.by})" if self.by else ""
        since = f", since {self.since}" if self.since else ""
        return f"PID {self.pid}{where}{by}{since}"


def read_object(path: Path, what: str = "") -> dict[str, Any] | None:
    """The JSON object in ``path`` (:func:`noisylabels.disk.reading.read_json`); ``None`` where
    there is none to read (no file, an empty, damaged, half-written or oversized one, a named
    pipe, JSON that is not an object). A sweep reads the files of its runs with it
    (``run.lock``, ``sweep_run.json``, ``results.json``)."""
    try:
        content = read_json(path, what, LIMITS["json"])
    except UnreadableFile:
        return None
    return content if isinstance(content, dict) else None


def _read(path: Path) -> Holder:
    try:
        content = read_json(path, "lock file", LIMITS["small"])
    except UnreadableFile:
        content = {}
    content = content if isinstance(content, dict) else {}
    pid = content.get("pid")
    text = {k: v if isinstance(v := content.get(k), str) else None for k in ("host", "by", "since")}
    return Holder(pid if isinstance(pid, int) else None, text["host"], text["by"], text["since"])


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
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if _try_lock(fd):
            return None
        return _read(path)
    finally:
        os.close(fd)  # releases the lock where this call took it


def _inherited(path: Path) -> int | None:
    """A descriptor this process inherited that holds the lock of ``path`` (a sweep starts its
    run's process with the lock of the run's folder), else ``None``."""
    try:
        target = os.stat(path)
    except OSError:
        return None
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = [int(name) for name in os.listdir(listing)]
        except (OSError, ValueError):
            continue
        for fd in fds:
            try:
                info = os.fstat(fd)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) == (target.st_dev, target.st_ino) and _try_lock(fd):
                return fd  # flock on the description that holds the lock succeeds
        return None
    return None


class FolderBusy(InputError):
    """Another live process writes the run folder; the message names it."""


class RunLock:
    """The lock of one run folder, held by this process (and the processes it starts with it).

    Args:
        folder: the folder whose ``run.lock`` is taken (created where missing).
        by: what holds it, as the lock file records (``noisylabels fit``).
    """

    def __init__(self, folder: Path, by: str) -> None:
        self.path = Path(folder) / LOCK_FILE
        self.by = by
        self.fd: int | None = None
        self.inherited = False
        self.stale: Holder | None = None  # the holder named by a stale lock this one took over

    def acquire(self) -> Holder | None:
        """Lock the folder; returns ``None`` on success (also where this process already holds
        the lock through a descriptor it inherited), else the live holder."""
        inherited = _inherited(self.path)
        if inherited is not None:
            self.fd, self.inherited = inherited, True
            return None
        while True:
            fd = self._open()
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

    def _open(self) -> int:
        """The lock file, opened (its folder and the file created where missing); a disk that
        cannot take it is a :class:`~noisylabels.errors.StorageError`, a lock file that is no
        regular file an :class:`~noisylabels.errors.InputError` naming it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise IsADirectoryError(errno.EINVAL, "not a regular file")
            return fd
        except OSError as err:
            found = storage_error(err, self.path)
            if found is not None:
                raise found from None
            raise InputError(
                f"{self.path} cannot be used as the run folder's lock file "
                f"({err.strerror or err}): it is not one this program wrote; remove it"
            ) from None

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
        """Unlock and remove the lock file (a lock inherited from the process that started
        this one stays that process's)."""
        if self.fd is None:
            return
        if self.inherited:
            self.fd = None
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def busy_message(folder: Path, busy: Holder, doing: str) -> str:
    """The one paragraph refusing to write ``folder``, which ``busy`` writes."""
    return (
        f"the run folder {folder} is being written by {busy}: one process writes a run folder "
        f"at a time, so {doing} is refused and nothing was written. Wait for that process to "
        "end (or stop it); a run it leaves unfinished continues with `noisylabels fit --config "
        f"{folder / 'config.yaml'} --ckpt_path {folder}`"
    )


def hold(folder: Path, by: str, doing: str = "this command") -> RunLock:
    """The lock of ``folder``, taken (:class:`RunLock`); :class:`FolderBusy` naming the live
    holder where another process writes it. A stale lock taken over is said on stderr."""
    lock = RunLock(folder, by)
    busy = lock.acquire()
    if busy is not None:
        raise FolderBusy(busy_message(Path(folder), busy, doing))
    if lock.stale is not None:
        print(
            f"noisylabels: took over the lock of {folder}: its holder, {lock.stale}, is no "
            "longer running",
            file=sys.stderr,
            flush=True,
        )
    return lock


def claim_version(base: Path, first: int = 0) -> Path:
    """Create and return the next free run folder ``base/version_N`` (N ≥ ``first``, above
    every version there): ``mkdir`` succeeds for one process only, so two runs started together
    never get the same folder."""
    base.mkdir(parents=True, exist_ok=True)
    taken = [
        int(p.name[len(VERSION_PREFIX) :])
        for p in base.iterdir()
        if p.name.startswith(VERSION_PREFIX) and p.name[len(VERSION_PREFIX) :].isdigit()
    ]
    number = max([first - 1, *taken]) + 1
    while True:
        folder = base / f"{VERSION_PREFIX}{number}"
        try:
            folder.mkdir()
        except FileExistsError:
            number += 1
            continue
        return folder


def remove_temporary(folder: Path) -> list[Path]:
    """Remove the temporary files of writes cut short (:data:`TEMPORARY`) from ``folder`` and
    its ``checkpoints/``; the caller holds the folder's lock, so none is being written. Returns
    what was removed."""
    removed = []
    for place in (folder, folder / "checkpoints"):
        try:
            names = os.listdir(place)
        except OSError:
            continue
        for name in names:
            path = place / name
            if TEMPORARY.match(name) and path.is_file():
                try:
                    path.unlink()
                except OSError:
                    continue
                removed.append(path)
    return removed
