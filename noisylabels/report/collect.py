"""Collect finished runs (their ``results.json``) into tables of test accuracy over seeds.

A run is described by fields: ``dataset``, ``method`` (``Forward-VRNL`` where α ≠ 0), ``alpha``,
``noise`` (``Sym-20%``, ``Asym-50%``, ``Pair-45%``, ``real``, ...), ``backbone`` and ``seed`` from
its ``results.json``; the axes of the sweep that made it (``sweep_run.json``); and any option of
its saved ``config.yaml`` by its dotted name (``model.transition_bias``, ``data.noise_seed``).
Cells group the runs that differ only in ``seed``: mean ± sample standard deviation (n − 1) of
the test accuracy in %, with the number of seeds.

Paired statistics (VRNL against its base method, :func:`paired_difference`): the runs of
``X-VRNL`` and ``X`` with the same seed share noisy labels, split and initialisation, so the
difference per seed is the effect of VRNL; reported are its mean, a 95 % confidence interval
from Student's t distribution with n − 1 degrees of freedom, and the two-sided p-value of the
paired t-test (``scipy.stats.ttest_rel``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from noisylabels.errors import InputError, MissingFileError

# the run files of run/ and sweep/, named again here: a report reads them without torch
RESULTS_FILE = "results.json"
RUN_FILE = "sweep_run.json"
CONFIG_FILE = "config.yaml"
METRICS = {"best": "test_acc", "last": "test_acc_last", "tail": "test_acc_tail_mean"}
PAPER_FILE = Path(__file__).resolve().parent / "paper_results.csv"
VRNL_SUFFIX = "-VRNL"
DATASETS = {
    "mnist": "MNIST",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
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
    """``{"type": "symmetric", "rate_nominal": 0.2}`` -> ``Sym-20%``; ``real`` for real noise,
    ``file:<key>`` for label files."""
    if not noise:
        return "n/a"
    kind = str(noise.get("type"))
    if kind == "file":
        return f"file:{noise.get('key') or Path(str(noise.get('file', ''))).name}"
    label = NOISE_KINDS.get(kind, kind)
    rate = noise.get("rate_nominal")
    return label if rate is None or kind in ("real", "none") else f"{label}-{100 * rate:g}%"


# our method names whose paper row has another name: the paper's "Dual T" row is Dual-T's T̂ in
# Forward (docs/methods.md, Dual-T)
PAPER_ALIASES = {"forwarddualt": "dualt"}


def method_key(name: str) -> str:
    """A method name for matching the paper's: lower case, letters and digits only, with
    :data:`PAPER_ALIASES` applied."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return PAPER_ALIASES.get(key, key)


def base_method(name: str) -> str | None:
    """``Forward-VRNL`` -> ``Forward``; ``None`` for a base method."""
    return name[: -len(VRNL_SUFFIX)] if name.endswith(VRNL_SUFFIX) else None


@dataclass
class Record:
    """One finished run: its fields, seed, test accuracies (fractions) and ε_T."""

    path: Path
    fields: dict[str, Any]
    seed: Any
    metrics: dict[str, float | None]
    eps_t: float | None
    config: dict[str, Any] = field(default_factory=dict)

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


def _sweep_point(results: Path, root: Path) -> dict[str, Any]:
    for folder in [results.parent, *results.parent.parents]:
        file = folder / RUN_FILE
        if os.path.lexists(file):
            point = _read_json(file).get("point", {})
            if not isinstance(point, dict):
                raise DamagedRun(f"{file} has no grid point (its 'point' is not a mapping)")
            return dict(point)
        if folder == root:
            break
    return {}


class DamagedRun(InputError):
    """A run's file that cannot be read into a record (damaged, empty, not a regular file, not
    what it should be); the message names the file."""


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a file"


def read_regular(file: Path) -> str:
    """The UTF-8 text of ``file``, a regular file (a symbolic link is followed);
    :class:`DamagedRun` naming it otherwise. A named pipe, socket or device is never opened (a
    pipe without a writer blocks a reader for ever): it is looked at with ``stat``, and the file
    opened is checked again, in case it was replaced in between."""
    try:
        mode = os.stat(file).st_mode
    except OSError as err:
        raise DamagedRun(f"{file} cannot be read: {err.strerror or err}") from None
    if not stat.S_ISREG(mode):
        raise DamagedRun(f"{file} is {_file_kind(mode)}, not a regular file")
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise DamagedRun(f"{file} cannot be read: {err.strerror or err}") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise DamagedRun(f"{file} is {_file_kind(mode)}, not a regular file")
        try:
            data = handle.read()
        except OSError as err:
            raise DamagedRun(f"{file} cannot be read: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DamagedRun(f"{file} cannot be read: {err}") from None


def _read_json(file: Path) -> dict[str, Any]:
    """A JSON object from ``file``; :class:`DamagedRun` naming it otherwise."""
    text = read_regular(file)
    if not text.strip():
        raise DamagedRun(f"{file} is empty")
    try:
        content = json.loads(text)
    except json.JSONDecodeError as err:
        raise DamagedRun(
            f"{file} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        ) from None
    if not isinstance(content, dict):
        raise DamagedRun(f"{file} holds a JSON {type(content).__name__}, not a run's results")
    return content


def _read_config(file: Path) -> dict[str, Any]:
    if not file.exists():
        return {}
    try:
        config = yaml.safe_load(read_regular(file))
    except yaml.YAMLError as err:
        summary = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DamagedRun(f"{file} cannot be read as YAML: {summary}") from None
    if config is not None and not isinstance(config, dict):
        raise DamagedRun(f"{file} is not a config (not a mapping)")
    return config or {}


def _number(file: Path, results: Mapping[str, Any], key: str) -> float | None:
    value = results.get(key)
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise DamagedRun(f"{file}: {key} is {value!r}, not a number")


def _record(file: Path, root: Path) -> Record:
    """The :class:`Record` of the run whose results are ``file``; :class:`DamagedRun` naming
    the file of the run that cannot be read."""
    results = _read_json(file)
    config = _read_config(file.parent / CONFIG_FILE)
    fields = {k: v for k, v in _sweep_point(file, root).items() if k != "seed"}
    fields.update(
        dataset=dataset_label(results.get("dataset", "?")),
        method=str(results.get("method", "?")),
        alpha=results.get("alpha"),
        noise=noise_label(results.get("noise") if isinstance(results.get("noise"), dict) else None),
        backbone=results.get("backbone"),
    )
    metrics = {name: _number(file, results, key) for name, key in METRICS.items()}
    eps_t = _number(file, results, "t_estimation_error")
    return Record(file, fields, results.get("seed"), metrics, eps_t, config)


def _mtime(file: Path) -> float:
    try:
        return os.stat(file).st_mtime
    except OSError:  # a dangling link: chosen last, and named as damaged if chosen
        return -math.inf


def collect(runs_dir: str | Path, skipped: list[str] | None = None) -> list[Record]:
    """Every run under ``runs_dir`` with a ``results.json`` (the newest, where a folder has
    several, e.g. a run resumed into a new version folder).

    A run whose ``results.json`` (or ``config.yaml``, ``sweep_run.json``) is damaged, empty,
    not a regular file or not a run's: with ``skipped`` (a list) it is left out and a line
    naming the file and what is wrong is appended to ``skipped``; without it
    :class:`DamagedRun` (an :class:`InputError`) naming the file is raised (``noisylabels
    report --strict``)."""
    root = Path(runs_dir)
    if not root.is_dir():
        raise MissingFileError(f"runs folder {root} does not exist")
    newest: dict[Path, Path] = {}
    for file in root.rglob(RESULTS_FILE):
        inside = [f for f in file.parents if f == root or root in f.parents]
        point_dir = next((f for f in inside if os.path.lexists(f / RUN_FILE)), file.parent)
        if point_dir not in newest or _mtime(file) > _mtime(newest[point_dir]):
            newest[point_dir] = file
    records = []
    for file in sorted(newest.values()):
        try:
            records.append(_record(file, root))
        except DamagedRun as err:
            if skipped is None:
                raise
            skipped.append(str(err))
    if not records and not (skipped and newest):
        raise MissingFileError(f"no {RESULTS_FILE} under {root}: no finished run")
    return records


# ------------------------------------------------------------------------------ statistics
@dataclass
class Cell:
    """Test accuracy (%) of one cell over seeds."""

    values: dict[Any, float]  # seed -> accuracy in %

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values.values()) / self.n

    @property
    def std(self) -> float | None:
        """Sample standard deviation (n − 1); ``None`` for one seed."""
        if self.n < 2:
            return None
        m = self.mean
        return math.sqrt(sum((v - m) ** 2 for v in self.values.values()) / (self.n - 1))


@dataclass
class Paired:
    """VRNL minus base over the seeds both have, in percentage points."""

    n: int
    mean: float
    low: float | None
    high: float | None
    p: float | None


def paired_difference(vrnl: Mapping[Any, float], base: Mapping[Any, float]) -> Paired | None:
    """Mean of ``vrnl[s] - base[s]`` over the common seeds, its 95 % confidence interval (t
    distribution, n − 1 degrees of freedom) and the paired t-test's two-sided p-value; ``None``
    without a common seed; no interval or p-value for one seed or identical differences."""
    from scipy import stats

    seeds = sorted(set(vrnl) & set(base), key=str)
    if not seeds:
        return None
    diffs = [vrnl[s] - base[s] for s in seeds]
    n = len(diffs)
    mean = sum(diffs) / n
    if n < 2:
        return Paired(n, mean, None, None, None)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd == 0.0:
        return Paired(n, mean, mean, mean, None)
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    p = float(stats.ttest_rel([vrnl[s] for s in seeds], [base[s] for s in seeds]).pvalue)
    return Paired(n, mean, mean - half, mean + half, p)


# options of config.yaml that may differ within a cell: the seeds, and where a run was written
# or read its data (dotted, with init_args)
def load_paper(path: Path = PAPER_FILE) -> dict[tuple[str, str, str], tuple[float, float | None]]:
    """The paper's published numbers: ``(dataset, noise, method key) -> (mean, std)``."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    table = {}
    for row in csv.DictReader(lines):
        std = float(row["std"]) if row["std"] else None
        key = (row["dataset"], row["noise"], method_key(row["method"]))
        table[key] = (float(row["mean"]), std)
    return table


def sort_key(name: str, value: Any) -> tuple:
    """Order of a field's values: datasets as in the paper, noise by kind then rate, a base
    method before its VRNL variant, numbers by value."""
    if name == "dataset":
        order = list(DATASETS.values())
        return (order.index(value) if value in order else len(order), str(value))
    if name == "noise":
        kind, _, rate = str(value).partition("-")
        kinds = list(NOISE_KINDS.values())
        number = float(rate.rstrip("%")) if re.fullmatch(r"[\d.]+%", rate) else -1.0
        return (kinds.index(kind) if kind in kinds else len(kinds), str(kind), number)
    if name == "method":
        base = base_method(str(value))
        return (str(base or value), base is not None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


@dataclass
class Grouped:
    """Cells ``cells[row][col]`` of one metric in %, with the sorted row and column keys, the
    fields they stand for, and how many runs lacked the metric."""

    cells: dict[tuple, dict[tuple, Cell]]
    row_keys: list[tuple]
    col_keys: list[tuple]
    rows: list[str]
    cols: list[str]
    metric: str
    missing: int = 0

    def cell(self, row: tuple, col: tuple) -> Cell | None:
        return self.cells.get(row, {}).get(col)

    def fields(self, row: tuple, col: tuple) -> dict[str, Any]:
        """The field values of a cell: ``{"method": ..., "dataset": ..., "noise": ...}``."""
        return dict(zip(self.rows, row, strict=True)) | dict(zip(self.cols, col, strict=True))

    def best(self, col: tuple) -> float | None:
        """The highest mean of a column."""
        means = [self.cells[r][col].mean for r in self.row_keys if col in self.cells[r]]
        return max(means) if means else None


def group(
    records: Iterable[Record], rows: Sequence[str], cols: Sequence[str], metric: str
) -> Grouped:
    """Group ``records`` into cells of ``metric`` (``best`` or ``last``) by the ``rows`` and
    ``cols`` fields; a cell holds one accuracy per seed."""
    cells: dict[tuple, dict[tuple, Cell]] = {}
    missing = 0
    for record in records:
        value = record.metrics.get(metric)
        if value is None:
            missing += 1
            continue
        row = tuple(record.get(f) for f in rows)
        col = tuple(record.get(f) for f in cols)
        cell = cells.setdefault(row, {}).setdefault(col, Cell({}))
        if record.seed in cell.values:
            raise InputError(
                f"two runs with seed {record.seed} fall in the cell {row} x {col} (one is "
                f"{record.path}); add the field that tells them apart to --rows or --cols "
                "(e.g. alpha, or a sweep axis)"
            )
        cell.values[record.seed] = 100.0 * float(value)

    def order(fields: Sequence[str]):
        return lambda key: [sort_key(f, v) for f, v in zip(fields, key, strict=True)]

    row_keys = sorted(cells, key=order(rows))
    col_keys = sorted({c for by_col in cells.values() for c in by_col}, key=order(cols))
    return Grouped(cells, row_keys, col_keys, list(rows), list(cols), metric, missing)
