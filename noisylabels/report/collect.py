"""Collect finished runs (their ``results.json``) into records, each with its problems.

A run is described by fields: ``dataset``, ``method`` (``Forward-VRNL`` where α ≠ 0), ``alpha``,
``noise`` (``Sym-20%``, ``Asym-50%``, ``Pair-45%``, ``real``, ...), ``backbone`` and ``seed`` from
its ``results.json``; the axes of the sweep that made it (``sweep_run.json``); and any option of
its saved ``config.yaml`` by its dotted name (``model.transition_bias``, ``data.noise_seed``).
How runs are grouped into cells and compared is :mod:`noisylabels.report.cells`.

No number is believed blindly. A run's problems (:class:`Problem`) are found when it is read:
a metric that is not a finite number in [0, 1] (``NaN``, ``Infinity``, ``87.0``, ``"0.9"``,
``true``, or none), a ``health`` other than ``"ok"``, fewer ``epochs`` than its preset's
``protocol_epochs``, a grid point whose results were made with other options than the sweep's.
:func:`~noisylabels.report.cells.screen` leaves such a run out of every mean, best mark, paired
difference and figure, and says why; unhealthy and short runs only where they are not admitted
(``--include-unhealthy``, ``--include-short``). Fields a ``results.json`` lacks (written before
runs recorded them) are not recorded, not a problem. Only regular files are read: a named pipe,
socket or device named like a run's file is a :class:`DamagedRun`, never opened.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from noisylabels.disk.reading import UnreadableFile, read_json, read_yaml
from noisylabels.disk.runs import written_at
from noisylabels.errors import MissingFileError
from noisylabels.report.problems import (
    EPS_T,
    METRIC_PROBLEM,
    NOT_THE_SWEEPS,
    Problem,
    eps_t_of,
    health_problems,
    metric_of,
    protocol_problems,
    selection_problem,
)

# the run files of run/ and sweep/, named again here: a report reads them without torch
RESULTS_FILE = "results.json"
RUN_FILE = "sweep_run.json"
CONFIG_FILE = "config.yaml"
METRICS = {
    "best": "test_acc",
    "last": "test_acc_last",
    "tail": "test_acc_tail_mean",
    "best-test": "test_acc_max",
}
METRIC_NAMES = {
    "best": "selected checkpoint",
    "last": "last epoch",
    "tail": "mean over the last epochs and networks",
    "best-test": "highest test accuracy over the epochs (chosen by the test set: optimistic)",
}
"""What each of :data:`METRICS` is, as a report's titles and notes name it."""
PAPER_FILE = Path(__file__).resolve().parent / "paper_results.csv"
VRNL_SUFFIX = "-VRNL"
DATASETS = {
    "mnist": "MNIST",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "cifar10n": "CIFAR-10N",
    "cifar100n": "CIFAR-100N",
    "clothing1m": "Clothing1M",
}
NOISE_KINDS = {
    "symmetric": "Sym",
    "asymmetric": "Asym",
    "pair": "Pair",
    "semantic": "Sem",
    "instance": "Inst",
    "real": "real",
    "file": "file",
    "none": "clean",
}


def dataset_label(name: str) -> str:
    """``cifar10`` -> ``CIFAR-10`` (the paper's spelling); other names as they are."""
    return DATASETS.get(str(name).lower(), str(name))


def noise_label(noise: Mapping[str, Any] | None) -> str:
    """``{"type": "symmetric", "rate_nominal": 0.2}`` -> ``Sym-20%``; ``real`` for real noise
    (its label set where the dataset has several, CIFAR-N's ``worse``), ``file:<key>`` for
    label files."""
    if not noise:
        return "n/a"
    kind = str(noise.get("type"))
    if kind == "real" and noise.get("label_set"):
        return str(noise["label_set"])
    if kind == "file":
        return f"file:{noise.get('key') or Path(str(noise.get('file', ''))).name}"
    label = NOISE_KINDS.get(kind, kind)
    rate = noise.get("rate_nominal")
    return label if rate is None or kind in ("real", "none") else f"{label}-{100 * rate:g}%"


# our method names whose paper row has another name: the paper's "Dual T" row is Dual-T's T̂ in
# Forward (docs/methods.md, Dual-T)
PAPER_ALIASES = {"forwarddualt": "dualt"}


def method_key(name: str) -> str:
    """A method name for matching the paper's: lower case, ``+`` read as ``plus``
    (``Co-teaching+`` is ``CoTeachingPlus``, not ``Co-teaching``), then letters and digits
    only, with :data:`PAPER_ALIASES` applied."""
    key = re.sub(r"[^a-z0-9]", "", name.lower().replace("+", "plus"))
    return PAPER_ALIASES.get(key, key)


def base_method(name: str) -> str | None:
    """``Forward-VRNL`` -> ``Forward``; ``None`` for a base method."""
    return name[: -len(VRNL_SUFFIX)] if name.endswith(VRNL_SUFFIX) else None


# what a problem of a run is about (Problem.kind)
@dataclass
class Record:
    """One finished run: its fields, seed, test accuracies (fractions in [0, 1], ``None`` where
    not a finite accuracy: its :attr:`problems` say why), ε_T and the problems found in it."""

    path: Path
    fields: dict[str, Any]
    seed: Any
    metrics: dict[str, float | None]
    eps_t: float | None
    config: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)  # the run's results.json

    def get(self, name: str) -> Any:
        """A field, or a dotted option of the run's ``config.yaml`` (``init_args`` implied)."""
        if name in self.fields:
            return self.fields[name]
        if "." in name:
            node: Any = self.config
            for part in name.split("."):
                if isinstance(node, Mapping) and part not in node and "init_args" in node:
                    node = node["init_args"]
                if not isinstance(node, Mapping) or part not in node:
                    return None
                node = node[part]
            return node
        return None


class DamagedRun(UnreadableFile):
    """A run's file that cannot be read into a record (damaged, empty, not a regular file, not
    what it should be); the message names the file."""


def _read_json(file: Path) -> dict[str, Any]:
    """A JSON object from ``file``; :class:`DamagedRun` naming it otherwise."""
    try:
        content = read_json(file, "")
    except UnreadableFile as err:
        raise DamagedRun(str(err)) from None
    if not isinstance(content, dict):
        raise DamagedRun(f"{file} holds a JSON {type(content).__name__}, not a run's results")
    return content


def _read_config(file: Path) -> dict[str, Any]:
    if not os.path.lexists(file):
        return {}
    try:
        config = read_yaml(file, "")
    except UnreadableFile as err:
        raise DamagedRun(str(err)) from None
    if config is not None and not isinstance(config, dict):
        raise DamagedRun(f"{file} is not a config (not a mapping)")
    return config or {}


def _read_run_file(folder: Path) -> dict[str, Any]:
    """The ``sweep_run.json`` of a grid point's folder, its ``point`` checked."""
    file = folder / RUN_FILE
    content = _read_json(file)
    if not isinstance(content.get("point", {}), dict):
        raise DamagedRun(f"{file} has no grid point (its 'point' is not a mapping)")
    return content


def _record(
    file: Path, root: Path, point: Mapping[str, Any], problems: Sequence[Problem] = ()
) -> Record:
    """The :class:`Record` of the run whose results are ``file`` (``point``: its sweep's grid
    point; ``problems``: found before it was read); :class:`DamagedRun` naming the file of the
    run that cannot be read."""
    results = _read_json(file)
    config = _read_config(file.parent / CONFIG_FILE)
    fields = {k: v for k, v in point.items() if k != "seed"}
    fields.update(
        dataset=dataset_label(results.get("dataset", "?")),
        method=str(results.get("method", "?")),
        alpha=results.get("alpha"),
        noise=noise_label(results.get("noise") if isinstance(results.get("noise"), dict) else None),
        backbone=results.get("backbone"),
    )
    found = list(problems)
    metrics: dict[str, float | None] = {}
    for name, key in METRICS.items():
        metrics[name], why = metric_of(results, key)
        if why is None and name == "best":
            why = selection_problem(results)
        if why is not None:
            found.append(Problem(METRIC_PROBLEM, why, name))
    eps_t, why = eps_t_of(results)
    if why is not None:
        found.append(Problem(METRIC_PROBLEM, why, EPS_T))
    found += health_problems(results) + protocol_problems(results)
    return Record(file, fields, results.get("seed"), metrics, eps_t, config, found, results)


def _recorded_command(file: Path) -> str | None:
    """The ``provenance.command_sha256`` a ``results.json`` records (``None``: not recorded,
    or not readable)."""
    try:
        provenance = _read_json(file).get("provenance")
    except DamagedRun:
        return None
    sha = provenance.get("command_sha256") if isinstance(provenance, dict) else None
    return sha if isinstance(sha, str) else None


def choose_results(
    files: Sequence[Path], run_file: Mapping[str, Any] | None
) -> tuple[Path, list[Problem]]:
    """The ``results.json`` that stands for a run folder, of the ``files`` under it (one per
    Lightning version folder), and its problem if any.

    Without a ``sweep_run.json`` (``run_file`` ``None``): the newest. A grid point's: the
    newest of those whose ``provenance.command_sha256`` is the ``command_sha256`` of its
    ``sweep_run.json``; if none is, the newest, with a problem (it was made with other options
    than the sweep's, a trial's) unless either hash is not recorded (older files)."""
    newest = max(files, key=written_at)
    wanted = (run_file or {}).get("command_sha256")
    if not isinstance(wanted, str):
        return newest, []
    recorded = {file: _recorded_command(file) for file in files}
    matching = [file for file in files if recorded[file] == wanted]
    if matching:
        return max(matching, key=written_at), []
    if recorded[newest] is None:
        return newest, []
    text = (
        f"its options differ from the sweep's: a trial? (its command_sha256 "
        f"{recorded[newest][:12]}…, {RUN_FILE}'s {wanted[:12]}…)"
    )
    return newest, [Problem(NOT_THE_SWEEPS, text)]


def collect(runs_dir: str | Path, skipped: list[str] | None = None) -> list[Record]:
    """Every run under ``runs_dir`` with a ``results.json``: one per run folder (the newest,
    where a folder has several, e.g. a run resumed into a new version folder), one per grid
    point of a sweep (a folder with ``sweep_run.json``: :func:`choose_results`).

    A run whose ``results.json`` (or ``config.yaml``, ``sweep_run.json``) is damaged, empty,
    not a regular file or not a run's: with ``skipped`` (a list) it is left out and a line
    naming the file and what is wrong is appended to ``skipped``; without it
    :class:`DamagedRun` (an :class:`InputError`) naming the file is raised (``noisylabels
    report --strict``). What is wrong with the numbers of a run that can be read is in its
    record's :attr:`~Record.problems`."""
    root = Path(runs_dir)
    if not root.is_dir():
        raise MissingFileError(f"runs folder {root} does not exist")
    found: dict[Path, list[Path]] = {}
    for file in root.rglob(RESULTS_FILE):
        inside = [f for f in file.parents if f == root or root in f.parents]
        point_dir = next((f for f in inside if os.path.lexists(f / RUN_FILE)), file.parent)
        found.setdefault(point_dir, []).append(file)
    records = []
    for point_dir, files in sorted(found.items()):
        try:
            run_file = _read_run_file(point_dir) if os.path.lexists(point_dir / RUN_FILE) else None
            file, problems = choose_results(files, run_file)
            records.append(_record(file, root, (run_file or {}).get("point", {}), problems))
        except DamagedRun as err:
            if skipped is None:
                raise
            skipped.append(str(err))
    if not records and not (skipped and found):
        raise MissingFileError(f"no {RESULTS_FILE} under {root}: no finished run")
    return records
