"""Writing a run's files so that a reader never sees half of one, and saying so when the disk
cannot take them.

Every file a reader may open while a run writes it (``results.json``, ``config.yaml``, ``noise.pt``,
the T files, ``unfinished.txt``, ``predictions.csv``, ``sweep_run.json`` and the checkpoints) is
written to a temporary file in its own folder (``.STEM.PID.tmp.SUFFIX``) and renamed over the old
one: a reader sees the previous file or the new one, never a part of it, and a run killed while
writing leaves the previous file (and at most the hidden temporary one). A run folder's files are
written through these by the run record only (:mod:`noisylabels.run.record`), its checkpoints
included (staged in the run's own folder rather than in ``$TMPDIR``, where Lightning's default
stages them).

A write that fails because the disk is full or the folder is read-only removes its temporary
file, so no empty or truncated file is left, and raises :class:`~noisylabels.errors.StorageError`
naming the folder and the free space there (:func:`storage_error` does the same for the errors
of writes made by other libraries, e.g. the loggers).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from noisylabels.errors import StorageError

# the errors of a write that the user can fix by freeing space or choosing another folder
STORAGE_ERRNOS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "the folder is not writable by this user",
    errno.EPERM: "the folder is not writable by this user",
    errno.EFBIG: "the file is larger than this file system or process allows",
}


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``path`` and flush it to the disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to (its folder created first); renamed over
    ``path`` when the block ends without an error, removed otherwise. Disk-full and permission
    errors become :class:`StorageError`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        found = storage_error(err, path)
        if found is None:
            raise
        raise found from err
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")  # keeps the suffix
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):  # a read-only folder: the error below says so
            tmp.unlink(missing_ok=True)
        found = storage_error(err, path)
        if found is not None and found is not err:
            raise found from err
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (creating its folder); return the path."""
    path = Path(path)
    with replacing(path) as tmp:
        _write_file(tmp, data)
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; return the path."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, content: Any) -> Path:
    """Write ``content`` as indented JSON to ``path`` atomically; return the path."""
    return write_text(path, json.dumps(content, indent=2) + "\n")


def torch_bytes(obj: Any) -> bytes:
    """``obj`` as ``torch.save`` writes it."""
    import torch  # start-up time: a sweep writes its files with this module, without torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def save_torch(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)``, atomically; return the path."""
    return write_bytes(path, torch_bytes(obj))


def human_size(size: float) -> str:
    """``1536`` -> ``1.5 KB`` (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"  # pragma: no cover - the loop returns


def free_space(folder: Path) -> str:
    """The free space of the file system holding ``folder`` (or its nearest existing parent),
    as ``"12.3 GB free of 100.0 GB"``; ``"free space unknown"`` where it cannot be read."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            try:
                usage = shutil.disk_usage(candidate)
            except OSError:
                break
            return f"{human_size(usage.free)} free of {human_size(usage.total)}"
    return "free space unknown"


def storage_error(err: BaseException, path: str | os.PathLike | None = None) -> StorageError | None:
    """``err`` as a :class:`StorageError` naming the folder of ``path`` (or of the file the
    error names) and its free space, where it is a full disk or a folder that cannot be
    written; itself where it already is one; ``None`` otherwise."""
    if isinstance(err, StorageError):
        return err
    if not isinstance(err, OSError) or err.errno not in STORAGE_ERRNOS:
        return None
    target = Path(path if path is not None else (err.filename or "."))
    target = Path(os.path.abspath(target))
    folder = target if target.is_dir() else target.parent
    found = StorageError(
        f"cannot write {target}: {STORAGE_ERRNOS[err.errno]} ({os.strerror(err.errno)}); "
        f"{folder} has {free_space(folder)}. Free space there (or make the folder writable), "
        "or write elsewhere with --trainer.default_root_dir (a sweep: --root); a run with a "
        "checkpoints/last.ckpt continues with `noisylabels fit ... --ckpt_path RUN_FOLDER`."
    )
    found.errno = err.errno
    return found
