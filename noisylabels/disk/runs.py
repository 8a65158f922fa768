"""Which run a command that reads one run takes from a folder that holds several: the newest
of those that have what it reads (``audit``: a finished run's ``results.json``; ``plot``: the
per-subset statistics), with a line on stderr naming it and how many there were. ``report``
reads every run under its folders and takes none of them this way. This module imports
nothing of the package.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable
from pathlib import Path


def written_at(file: Path) -> float:
    """When ``file`` was last written (a dangling link: never, so it is chosen last)."""
    try:
        return os.stat(file).st_mtime
    except OSError:
        return -math.inf


def newest_run(root: Path, markers: Iterable[Path], what: str, *, command: str) -> Path:
    """The run folder, of those under ``root`` that ``markers`` stand for (each marker is a
    file the command reads, in its run's folder: ``results.json``, ``subsets.csv``, an event
    file), whose marker was written last; where there are several, a line on stderr says
    ``noisylabels COMMAND: ROOT holds N WHAT; using the newest, FOLDER``. Files written into a
    run folder after its run (an audit's ``label_issues.csv``) do not make it newer.

    Raises :class:`ValueError` for no marker (the caller says what is missing, and why)."""
    written: dict[Path, float] = {}
    for marker in markers:
        folder = Path(marker).parent
        written[folder] = max(written.get(folder, -math.inf), written_at(Path(marker)))
    if not written:
        raise ValueError(f"no {what} under {root}")
    # the latest write; of runs written at the same moment, the last by path (version_10 > 9)
    newest = max(written, key=lambda folder: (written[folder], _path_order(folder)))
    if len(written) > 1:
        note = f"{root} holds {len(written)} {what}; using the newest, {newest}"
        print(f"noisylabels {command}: {note}", file=sys.stderr)
    return newest


def _path_order(folder: Path) -> tuple:
    """A folder's path as sort key, numbers by value (``version_10`` after ``version_9``)."""
    parts = []
    for part in folder.parts:
        head, _, number = part.rpartition("_")
        parts.append((head, int(number), "") if number.isdigit() else (part, -1, part))
    return tuple(parts)
