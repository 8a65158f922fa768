"""What a sweep knows of a run folder: ``sweep_run.json`` and the state of the run.

``sweep_run.json`` (written when the run is launched, or its SLURM script written) holds the
sweep, the grid point, the full command and ``command_sha256``, the hash of the command's
options and of the content of its config files
(:func:`noisylabels.run.provenance.command_sha256`). The run's ``results.json`` records the
same hash of the command it was run with, so a sweep tells a run done with its options from one
done with others (a trial with fewer epochs, an edited preset):

=============  ===========================================================================
``done``       the newest ``results.json`` has this command's hash, or none at all (results
               written before runs recorded it count as done: their options are unknown)
``stale``      the newest ``results.json`` (or the stopped attempt's ``sweep_run.json``) has
               another hash, or a file the run read (its label file, its T file:
               ``provenance.inputs``) has changed or is gone since: the run is done again,
               from the start, in a new version folder
``to resume``  a stopped attempt of this command left a ``last.ckpt`` (``--ckpt_path last``)
``running``    a live process holds the folder's ``run.lock`` (:mod:`noisylabels.disk.lock`)
``to run``     nothing yet
=============  ===========================================================================
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisylabels.disk.lock import holder, read_object
from noisylabels.disk.reading import UnreadableFile, read_yaml
from noisylabels.disk.storage import write_json
from noisylabels.run.provenance import command_identity, input_files_sha256
from noisylabels.run.resume import CHECKPOINT_FILE as LAST
from noisylabels.sweep.grid import RESULTS_FILE, RUN_FILE, Run, Sweep, display_path


def write_run_file(sweep: Sweep, run: Run, command: Sequence[str], sha256: str) -> None:
    """Record the run's grid point, full command and its hash in its folder
    (``sweep_run.json``, written atomically)."""
    record = {
        "sweep": sweep.name,
        "sweep_file": display_path(sweep.path),
        "point": run.point,
        "command": [str(a) for a in command],
        "command_sha256": sha256,
        "written": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_json(run.folder / RUN_FILE, record)


def _newest(paths: Sequence[Path]) -> Path | None:
    return max(paths, key=lambda p: p.stat().st_mtime, default=None)


def _options(argv: Sequence[str]) -> dict[str, list[str]]:
    """``--key value`` / ``--key=value`` pairs of a command identity, by key (repeatable)."""
    out: dict[str, list[str]] = {}
    items = list(argv)
    i = 0
    while i < len(items):
        arg = items[i]
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg.partition("=")
            i += 1
        elif arg.startswith("--") and i + 1 < len(items) and not items[i + 1].startswith("--"):
            key, value = arg, items[i + 1]
            i += 2
        else:
            key, value = arg, ""
            i += 1
        out.setdefault(key, []).append(value)
    return out


def describe_difference(before: Any, now: Sequence[str]) -> str:
    """How the ``noisylabels fit`` command ``before`` (a full command line; ``None`` where
    unknown) differs from ``now``: ``other options: --trainer.max_epochs 1 (now 80)``."""
    if isinstance(before, list) and "fit" in before:
        before = before[before.index("fit") :]
    else:
        return "other options"
    old, new = _options(command_identity(before)), _options(command_identity(now))
    parts = []
    for key in [*old, *(k for k in new if k not in old)]:
        if old.get(key) == new.get(key):
            continue
        if key == "--config":
            parts.append("other config file content")
            continue
        was = " ".join(old[key]) if key in old else "not given"
        is_ = " ".join(new[key]) if key in new else "not given"
        parts.append(f"{key} {was} (now {is_})")
    return "other options: " + ("; ".join(parts) if parts else "another command")


# what an input file was to a run: its option in the command, its key in the run's config.yaml
INPUT_KINDS = (
    ("label file", "--data.noise_file", ("data", "noise_file")),
    ("T file", "--model.transition", ("model", "transition")),
)
_HASHED: dict[tuple[str, int, int, int], str | None] = {}  # (path, inode, size, mtime) -> hash


def _current_sha256(path: str) -> str | None:
    """The SHA-256 of the file ``path`` now (``None``: gone, or not a file), each version of a
    file hashed once however many runs read it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = next(iter(input_files_sha256([path]).values()), None)
    return _HASHED[key]


def _run_config(path: Path) -> dict[str, Any] | None:
    """The mapping of the ``config.yaml`` a run wrote, or ``None`` if it cannot be read."""
    try:
        content = read_yaml(path, "")
    except UnreadableFile:
        return None
    return content if isinstance(content, dict) else None


def _input_kind(path: str, results: Path, command: Any) -> str:
    """What ``path`` was to the run of ``results``: its label file or its T file, by the option
    of the recorded command or the run's ``config.yaml`` that names it; else an input file."""
    given: dict[str, list[str]] = {}
    if isinstance(command, list):
        options = _options([str(a) for a in command])
        given = {option: options.get(option, []) for _, option, _ in INPUT_KINDS}
    config = _run_config(results.parent / "config.yaml")
    for kind, option, (section, key) in INPUT_KINDS:
        values = list(given.get(option, []))
        part = config.get(section) if config else None
        init_args = part.get("init_args") if isinstance(part, Mapping) else None
        if isinstance(init_args, Mapping) and isinstance(init_args.get(key), str):
            values.append(init_args[key])
        for value in values:
            candidate = os.path.abspath(os.path.expanduser(value))
            if candidate == path or os.path.basename(candidate) == os.path.basename(path):
                return kind
    return "input file"


def changed_inputs(provenance: Mapping[str, Any], results: Path) -> str:
    """How the files a finished run read (``provenance.inputs``, ``{path: sha256}``) differ
    from the files now: ``label file /data/labels.csv changed since the run``; ``""`` where
    none does or the run recorded none."""
    inputs = provenance.get("inputs")
    if not isinstance(inputs, Mapping):
        return ""
    notes = []
    for path, recorded in inputs.items():
        now = _current_sha256(str(path))
        if now == recorded:
            continue
        kind = _input_kind(str(path), results, provenance.get("command"))
        notes.append(f"{kind} {path} {'is gone' if now is None else 'changed'} since the run")
    return "; ".join(notes)


@dataclass
class RunState:
    """The state of a run folder (see the module docstring), a note saying why, and whether
    the run continues from its ``last.ckpt``."""

    kind: str
    note: str = ""
    resume: bool = False


def run_state(run: Run, extra: Sequence[str] = (), held: bool = False) -> RunState:
    """Where ``run`` stands (see the module docstring); ``held``: the caller holds the run
    folder's lock, so a live holder is not another writer."""
    live = None if held else holder(run.folder)
    if live is not None:
        return RunState("running", f"written by {live}")
    if not run.folder.is_dir():
        return RunState("to run")
    planned = run.fit_args(extra, resume=False)
    sha = run.command_sha256(extra)
    results = _newest(list(run.folder.rglob(RESULTS_FILE)))
    stale_note = ""
    if results is not None:
        content = read_object(results)
        provenance = (content or {}).get("provenance") or {}
        recorded = provenance.get("command_sha256") if isinstance(provenance, dict) else None
        changed = changed_inputs(provenance, results) if isinstance(provenance, dict) else ""
        if content is None:
            stale_note = f"finished, but its {display_path(results)} cannot be read"
        elif changed:
            stale_note = f"finished, but its {changed}"
        elif recorded is None:
            return RunState("done", "finished before runs recorded their command")
        elif recorded == sha:
            return RunState("done")
        else:
            stale_note = f"finished with {describe_difference(provenance.get('command'), planned)}"
    checkpoints = [p for p in run.folder.rglob(LAST) if p.parent.name == "checkpoints"]
    partial = _newest(checkpoints)
    if partial is not None and (
        results is None or partial.stat().st_mtime > results.stat().st_mtime
    ):
        record = read_object(run.folder / RUN_FILE) or {}
        launched = record.get("command_sha256")
        if launched is None or launched == sha:  # unknown (an older sweep) or this command
            return RunState("to resume", resume=True)
        before = describe_difference(record.get("command"), planned)
        return RunState("stale", f"stopped, with {before}")
    if stale_note:
        return RunState("stale", stale_note)
    return RunState("to run")


def finished_as_planned(run: Run, extra: Sequence[str] = ()) -> bool:
    """Whether ``run``'s folder holds a finished run of this very command and inputs (the
    state ``done``), read by a sweep that holds the folder's lock just before it would start
    the run: another process may have finished it since the sweep looked."""
    return run_state(run, extra, held=True).kind == "done"
