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

No number is believed blindly. A run's problems (:class:`Problem`) are found when it is read:
a metric that is not a finite number in [0, 1] (``NaN``, ``Infinity``, ``87.0``, ``"0.9"``,
``true``, or none), a ``health`` other than ``"ok"``, fewer ``epochs`` than its preset's
``protocol_epochs``, a grid point whose results were made with other options than the sweep's.
:func:`screen` leaves such a run out of every mean, best mark, paired difference and figure,
and says why; unhealthy and short runs only where :class:`Admit` does not admit them
(``--include-unhealthy``, ``--include-short``). Fields a ``results.json`` lacks (written before
runs recorded them) are not recorded, not a problem. Only regular files are read: a named pipe,
socket or device named like a run's file is a :class:`DamagedRun`, never opened.
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


# what a problem of a run is about (Problem.kind)
METRIC_PROBLEM = "metric"  # one metric's value (Problem.metric: a METRICS name, or "eps_t")
UNHEALTHY = "unhealthy"  # its health is not "ok" (--include-unhealthy admits it)
SHORT = "short"  # fewer epochs than its protocol's (--include-short admits it)
NOT_THE_SWEEPS = "sweep"  # a grid point's results made with other options than the sweep's
EPS_T = "eps_t"


@dataclass(frozen=True)
class Problem:
    """Why a run's number is not to be believed: ``kind`` (:data:`METRIC_PROBLEM` with the
    ``metric`` it concerns, :data:`UNHEALTHY`, :data:`SHORT`, :data:`NOT_THE_SWEEPS`) and the
    reason as a report lists it (``test_acc is nan``, ``health: collapsed: ...``)."""

    kind: str
    text: str
    metric: str | None = None

    def __str__(self) -> str:
        return self.text


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
    except (ValueError, RecursionError) as err:  # a number of >4300 digits, nesting too deep
        raise DamagedRun(f"{file} cannot be read as JSON: {str(err).split(':')[0]}") from None
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


def _read_run_file(folder: Path) -> dict[str, Any]:
    """The ``sweep_run.json`` of a grid point's folder, its ``point`` checked."""
    file = folder / RUN_FILE
    content = _read_json(file)
    if not isinstance(content.get("point", {}), dict):
        raise DamagedRun(f"{file} has no grid point (its 'point' is not a mapping)")
    return content


def _shown(value: Any, limit: int = 60) -> str:
    """A value of a results.json as a reason shows it: ``nan``, ``87.0``, ``"0.9"``, ``true``."""
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
        text = repr(value)
    else:
        text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    """A finite number (not a boolean; an integer of any size is finite)."""
    return _is_number(value) and not (isinstance(value, float) and not math.isfinite(value))


def accuracy(value: Any) -> float | None:
    """``value`` as an accuracy: a finite number in [0, 1] (a fraction), ``None`` otherwise
    (``NaN``, ``inf``, ``87.0``, ``-0.1``, a string, a boolean, ``None``)."""
    return float(value) if _finite(value) and 0 <= value <= 1 else None


def _metric(results: Mapping[str, Any], key: str) -> tuple[float | None, str | None]:
    """An accuracy of ``results`` and, where it is not one, why."""
    value = results.get(key)
    if value is None:
        return None, f"{key} is not recorded"
    if not _is_number(value):
        return None, f"{key} is {_shown(value)}, not a number"
    if not _finite(value):
        return None, f"{key} is {_shown(value)}"
    if accuracy(value) is None:
        return None, f"{key} is {_shown(value)}, outside [0, 1]"
    return float(value), None


def _eps_t(results: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """ε_T of ``results`` (a finite number ≥ 0) and, where it is not one, why."""
    value = results.get("t_estimation_error")
    if value is None:
        return None, "t_estimation_error is not recorded (the run's true T is not known)"
    if not _is_number(value):
        return None, f"t_estimation_error is {_shown(value)}, not a number"
    if not _finite(value) or value < 0:
        return None, f"t_estimation_error is {_shown(value)}, not a finite number >= 0"
    return float(value), None


def _health(results: Mapping[str, Any]) -> list[Problem]:
    """The run's ``health`` when it is not ``"ok"`` (none recorded: no problem)."""
    health = results.get("health")
    if health is None or health == "ok":
        return []
    if isinstance(health, str) and health.strip():
        return [Problem(UNHEALTHY, "health: " + " ".join(health.split()))]  # on one line
    return [Problem(UNHEALTHY, f'health: {_shown(health)}, neither "ok" nor a reason')]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _protocol(results: Mapping[str, Any]) -> list[Problem]:
    """A run that trained fewer ``epochs`` than its ``protocol_epochs`` (the epochs its config
    files plan); none where the protocol is not recorded."""
    planned, trained = results.get("protocol_epochs"), results.get("epochs")
    if planned is None:
        return []
    if not _whole(planned):
        text = f"protocol_epochs is {_shown(planned)}, not a whole number"
    elif trained is None:
        text = f"its protocol plans {planned} epochs, and how many it trained is not recorded"
    elif not _whole(trained):
        text = f"epochs is {_shown(trained)}, not a whole number (its protocol plans {planned})"
    elif trained < planned:
        text = f"short run: {trained} of its protocol's {planned} epochs"
    else:
        return []
    return [Problem(SHORT, text)]


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
        metrics[name], why = _metric(results, key)
        if why is not None:
            found.append(Problem(METRIC_PROBLEM, why, name))
    eps_t, why = _eps_t(results)
    if why is not None:
        found.append(Problem(METRIC_PROBLEM, why, EPS_T))
    found += _health(results) + _protocol(results)
    return Record(file, fields, results.get("seed"), metrics, eps_t, config, found)


def _mtime(file: Path) -> float:
    try:
        return os.stat(file).st_mtime
    except OSError:  # a dangling link: chosen last, and named as damaged if chosen
        return -math.inf


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
    newest = max(files, key=_mtime)
    wanted = (run_file or {}).get("command_sha256")
    if not isinstance(wanted, str):
        return newest, []
    recorded = {file: _recorded_command(file) for file in files}
    matching = [file for file in files if recorded[file] == wanted]
    if matching:
        return max(matching, key=_mtime), []
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


@dataclass(frozen=True)
class Admit:
    """Which problems do not leave a run out of the means: its health (``unhealthy``,
    ``--include-unhealthy``), fewer epochs than its protocol (``short``, ``--include-short``).
    Any other problem always does."""

    unhealthy: bool = False
    short: bool = False

    def admits(self, problem: Problem) -> bool:
        return (problem.kind == UNHEALTHY and self.unhealthy) or (
            problem.kind == SHORT and self.short
        )


@dataclass
class Screened:
    """Runs sorted for a metric: ``used`` (averaged), ``left_out`` and ``admitted`` (averaged
    despite their problems, by :class:`Admit`), each of the latter with its problems."""

    used: list[Record] = field(default_factory=list)
    left_out: list[tuple[Record, list[Problem]]] = field(default_factory=list)
    admitted: list[tuple[Record, list[Problem]]] = field(default_factory=list)


def screen(
    records: Iterable[Record], metric: str, admit: Admit | None = None, eps_t: bool = False
) -> Screened:
    """Which of ``records`` may enter a mean of ``metric`` (a :data:`METRICS` name): those with
    a finite accuracy in [0, 1] and no problem that ``admit`` does not admit; with ``eps_t``
    (the bias figure) also a finite ε_T ≥ 0. Problems of other metrics do not count."""
    admit = admit or Admit()
    out = Screened()
    concerned = {metric, EPS_T} if eps_t else {metric}
    for record in records:
        reasons, admitted = [], []
        for problem in record.problems:
            if problem.kind == METRIC_PROBLEM and problem.metric not in concerned:
                continue
            (admitted if admit.admits(problem) else reasons).append(problem)
        # whatever the problems found say, a value that is not an accuracy never passes
        value = record.metrics.get(metric)
        if not reasons and accuracy(value) is None:
            text = f"{METRICS[metric]} is {_shown(value)}, not a finite accuracy in [0, 1]"
            reasons.append(Problem(METRIC_PROBLEM, text, metric))
        if not reasons and eps_t and not (_finite(record.eps_t) and record.eps_t >= 0):
            text = f"t_estimation_error is {_shown(record.eps_t)}, not a finite number >= 0"
            reasons.append(Problem(METRIC_PROBLEM, text, EPS_T))
        if reasons:
            out.left_out.append((record, reasons + admitted))
        else:
            out.used.append(record)
            if admitted:
                out.admitted.append((record, admitted))
    return out


@dataclass
class Grouped:
    """Cells ``cells[row][col]`` of one metric in %, with the sorted row and column keys, the
    fields they stand for, and the runs :func:`screen` sorted (those left out, with why)."""

    cells: dict[tuple, dict[tuple, Cell]]
    row_keys: list[tuple]
    col_keys: list[tuple]
    rows: list[str]
    cols: list[str]
    metric: str
    screened: Screened = field(default_factory=Screened)

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
    records: Iterable[Record],
    rows: Sequence[str],
    cols: Sequence[str],
    metric: str,
    admit: Admit | None = None,
) -> Grouped:
    """Group ``records`` into cells of ``metric`` (``best``, ``last`` or ``tail``) by the
    ``rows`` and ``cols`` fields; a cell holds one accuracy per seed, of the runs
    :func:`screen` lets in (``admit``: the problems that do not leave a run out)."""
    screened = screen(records, metric, admit)
    cells: dict[tuple, dict[tuple, Cell]] = {}
    for record in screened.used:
        row = tuple(record.get(f) for f in rows)
        col = tuple(record.get(f) for f in cols)
        cell = cells.setdefault(row, {}).setdefault(col, Cell({}))
        if record.seed in cell.values:
            raise InputError(
                f"two runs with seed {record.seed} fall in the cell {row} x {col} (one is "
                f"{record.path}); add the field that tells them apart to --rows or --cols "
                "(e.g. alpha, or a sweep axis)"
            )
        cell.values[record.seed] = 100.0 * float(record.metrics[metric])  # type: ignore[arg-type]

    def order(fields: Sequence[str]):
        return lambda key: [sort_key(f, v) for f, v in zip(fields, key, strict=True)]

    row_keys = sorted(cells, key=order(rows))
    col_keys = sorted({c for by_col in cells.values() for c in by_col}, key=order(cols))
    return Grouped(cells, row_keys, col_keys, list(rows), list(cols), metric, screened)
