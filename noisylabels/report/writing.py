"""Writing what ``noisylabels report`` and ``plot`` produce (``--out``), with one message naming
the file when it cannot be written (a read-only folder, a path through a file, a full disk)."""

from __future__ import annotations

from pathlib import Path

from noisylabels.errors import InputError

__all__ = ["out_error"]


def out_error(path: Path, err: OSError) -> InputError:
    """The user error for an ``--out`` ``path`` that writing failed with ``err``: what is in
    the way (a file where a folder should be, a folder without write permission) and what to
    do."""
    path = Path(path)
    reason = err.strerror or str(err)
    blocking = next((p for p in path.parents if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        reason = f"{blocking} is a file, not a folder"
    return InputError(
        f"cannot write --out {path}: {reason}; choose a file in a folder you can write to"
    )
