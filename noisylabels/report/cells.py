"""Cells of a report: the runs that differ only in ``seed``, their test accuracy over seeds
(mean ± sample standard deviation, n − 1, in %), and VRNL against its base method seed by seed.

Paired statistics (:func:`paired_difference`): the runs of ``X-VRNL`` and ``X`` with the same
seed share noisy labels, split and initialisation, so the difference per seed is the effect of
VRNL; reported are its mean, a 95 % confidence interval from Student's t distribution with
n − 1 degrees of freedom, and the two-sided p-value of the paired t-test
(``scipy.stats.ttest_rel``). Only runs :func:`screen` lets in count.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from noisylabels.errors import InputError
from noisylabels.report.collect import (
    DATASETS,
    METRICS,
    NOISE_KINDS,
    PAPER_FILE,
    Record,
    base_method,
    method_key,
)
from noisylabels.report.mixed import CELL_OPTIONS_IGNORED, flat_config, pair_differences
from noisylabels.report.problems import (
    EPS_T,
    METRIC_PROBLEM,
    SHORT,
    UNHEALTHY,
    Problem,
    accuracy,
    finite,
    shown,
)


@dataclass
class Cell:
    """Test accuracy (%) of one cell over seeds."""

    values: dict[Any, float]  # seed -> accuracy in %
    labels: dict[Any, str | None] = field(default_factory=dict)
    """seed -> the SHA-256 of the noisy training labels its run trained on (``None``: not
    recorded): two cells pair a seed only where its runs trained on the same labels."""
    configs: dict[Any, dict[str, str]] = field(default_factory=dict)
    """seed -> its run's ``config.yaml``, flat (:func:`~noisylabels.report.mixed.flat_config`;
    empty: none): a seed pairs two cells' runs only where they differ in nothing but VRNL."""
    precisions: dict[Any, str | None] = field(default_factory=dict)
    """seed -> the precision its run's arithmetic ran in (``execution.precision``; ``None``: not
    recorded): ``auto`` gives ``bf16-mixed`` on a GPU and ``32-true`` on a CPU."""

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


def _recorded(results: Mapping[str, Any], block: str, key: str) -> str | None:
    """The non-empty string ``results[block][key]`` of a run's ``results.json``, if any."""
    section = results.get(block)
    value = section.get(key) if isinstance(section, Mapping) else None
    return value if isinstance(value, str) and value else None


def labels_sha256(results: Mapping[str, Any]) -> str | None:
    """The SHA-256 of the noisy training labels a run's ``results.json`` records, if any."""
    return _recorded(results, "provenance", "noisy_labels_sha256")


def run_precision(results: Mapping[str, Any]) -> str | None:
    """The precision a run's ``results.json`` records its arithmetic ran in, if any."""
    return _recorded(results, "execution", "precision")


def mixed_precisions(*cells: Cell, seeds: Any = None) -> dict[Any, list[str]]:
    """The recorded precisions of ``cells``' runs where they differ: over all the seeds of one
    cell, or seed by seed (``seeds``: those to compare) between two cells. Keyed by seed (one
    cell: the key ``None``, the precisions of all its seeds)."""
    if seeds is None:
        found = sorted({p for cell in cells for p in cell.precisions.values() if p})
        return {None: found} if len(found) > 1 else {}
    out = {}
    for seed in sorted(seeds, key=str):
        found = sorted({p for cell in cells if (p := cell.precisions.get(seed))})
        if len(found) > 1:
            out[seed] = found
    return out


def unpaired_seeds(a: Cell, b: Cell) -> dict[Any, str]:
    """The seeds both cells (``a`` of X-VRNL, ``b`` of X) have whose runs are no pair, with
    why: they trained on different noisy labels (both recorded and unequal), or their configs
    differ in more than what only VRNL uses (:func:`~noisylabels.report.mixed.pair_differences`)."""
    out: dict[Any, str] = {}
    for seed in sorted(set(a.values) & set(b.values), key=str):
        labels = a.labels.get(seed), b.labels.get(seed)
        if None not in labels and labels[0] != labels[1]:
            out[seed] = "trained on different noisy labels (noisy_labels_sha256)"
            continue
        differ = pair_differences(a.configs.get(seed, {}), b.configs.get(seed, {}))
        if differ:
            out[seed] = "differ in more than VRNL's options (X-VRNL / X): " + "; ".join(differ)
    return out


EQUAL_WITHIN = 1e-4
"""Differences (percentage points) whose standard deviation is at most this are equal: the
accuracies are stored as float32 fractions, so two equal differences can differ by about 1e-5
points (a test set of 10,000 images resolves 0.01)."""


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
    if sd <= EQUAL_WITHIN:  # equal differences: a t interval of width 0 would read as certainty
        return Paired(n, mean, None, None, None)
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    p = float(stats.ttest_rel([vrnl[s] for s in seeds], [base[s] for s in seeds]).pvalue)
    return Paired(n, mean, mean - half, mean + half, p)


# options of config.yaml that may differ within a cell: the seeds, and where a run was written
# or read its data (dotted, with init_args)
PAPER_COLUMNS = ("table", "dataset", "noise", "method", "mean", "std", "rule")
"""The columns of a paper file: ``dataset``, ``noise``, ``method`` and ``mean`` required,
``std`` and ``rule`` may be empty, ``table`` is a free label."""


@dataclass(frozen=True)
class Published:
    """One published figure: its mean and standard deviation in % (``None``: not printed), and
    the rule it was reported under, a name of :data:`METRICS` (``best``: a checkpoint selected
    without the test set; ``best-test``: the highest test accuracy over the epochs; ``last``:
    the last epoch), ``None`` where its paper does not say."""

    mean: float
    std: float | None
    rule: str | None


class Paper(Mapping):
    """A published table: ``(dataset, noise, method key) -> Published``, read by
    :func:`load_paper` from ``source``."""

    def __init__(self, source: Path, values: dict[tuple[str, str, str], Published]) -> None:
        self.source = source
        self._figures = values

    def __getitem__(self, key: tuple[str, str, str]) -> Published:
        return self._figures[key]

    def __iter__(self) -> Any:
        return iter(self._figures)

    def __len__(self) -> int:
        return len(self._figures)

    @property
    def label(self) -> str:
        """How a report names it: the shipped file as the VRNL paper's tables, another by path."""
        if self.source == PAPER_FILE:
            return f"{PAPER_FILE.name}, the VRNL paper's Tables 1 and 2"
        return str(self.source)


def _percent(text: str) -> float | None:
    """``text`` as a finite number in [0, 100], else ``None`` (``9_7``, which Python's
    ``float`` reads as 97, is not a published figure's spelling)."""
    if "_" in text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 100.0 else None


def load_paper(path: Path = PAPER_FILE) -> Paper:
    """A published table from a CSV file of :data:`PAPER_COLUMNS` (lines starting with ``#``
    are comments), checked where read: :class:`InputError` naming the file and line of a
    missing or unknown column, a figure that is not a finite percentage, a rule that is not a
    report metric, or a cell given twice."""

    def refuse(why: str) -> InputError:
        return InputError(
            f"--paper-file {path}: {why}. A paper file is CSV with the columns "
            f"{', '.join(PAPER_COLUMNS)} (dataset, noise, method and mean required; a row per "
            "published figure, in %; rule one of " + ", ".join(METRICS) + " or empty where the "
            "paper does not say); see docs/sweeps.md, 'Reporting rules'"
        )

    try:
        if not path.is_file():
            raise refuse("not a file")
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark too
    except (OSError, UnicodeDecodeError) as err:
        raise refuse(f"cannot be read ({err})") from None
    numbered = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    numbered = [(i, line) for i, line in numbered if not line.lstrip().startswith("#")]
    if not numbered:
        raise refuse("it has no header and no rows")
    header = next(csv.reader([numbered[0][1]]))
    names = [name.strip() for name in header]
    unknown = [name for name in names if name not in PAPER_COLUMNS]
    missing = [name for name in ("dataset", "noise", "method", "mean") if name not in names]
    if unknown or missing or len(set(names)) != len(names):
        wrong = (f"unknown column(s) {', '.join(map(repr, unknown))}; " if unknown else "") + (
            f"missing column(s) {', '.join(missing)}; " if missing else ""
        )
        raise refuse(f"line {numbered[0][0]}: {wrong or 'a column named twice; '}header {header}")
    table: dict[tuple[str, str, str], Published] = {}
    where: dict[tuple[str, str, str], int] = {}
    for number, line in numbered[1:]:
        values = next(csv.reader([line]))
        if len(values) != len(names):
            raise refuse(f"line {number}: {len(values)} value(s) for {len(names)} columns")
        row = {name: value.strip() for name, value in zip(names, values, strict=True)}
        if not all(row[name] for name in ("dataset", "noise", "method")):
            raise refuse(f"line {number}: dataset, noise and method must each be given")

        mean = _percent(row["mean"])
        std = _percent(row["std"]) if row.get("std") else None
        for name, value in (("mean", mean), ("std", std)):
            if value is None and (name == "mean" or row.get(name)):
                raise refuse(f"line {number}: {name} {row[name]!r} is not a number in [0, 100]")
        rule = row.get("rule") or None
        if rule is not None and rule not in METRICS:
            raise refuse(f"line {number}: rule {rule!r} is not one of {', '.join(METRICS)}")
        key = (row["dataset"], row["noise"], method_key(row["method"]))
        if not key[2]:
            raise refuse(
                f"line {number}: method {row['method']!r} has no letter or digit to match a "
                "method by (the report's method names, e.g. Forward-VRNL, CoTeachingPlus)"
            )
        if key in table:
            raise refuse(
                f"line {number}: {row['dataset']} {row['noise']} {row['method']} is given "
                f"again (first on line {where[key]})"
            )
        table[key], where[key] = Published(mean, std, rule), number
    if not table:
        raise refuse("it has a header and no rows")
    return Paper(path, table)


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
            text = f"{METRICS[metric]} is {shown(value)}, not a finite accuracy in [0, 1]"
            reasons.append(Problem(METRIC_PROBLEM, text, metric))
        if not reasons and eps_t and not (finite(record.eps_t) and record.eps_t >= 0):
            text = f"t_estimation_error is {shown(record.eps_t)}, not a finite number >= 0"
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

    def ranked(self, col: tuple) -> list[tuple]:
        """The rows whose cell of ``col`` holds every seed of the column: only means over the
        same seeds compare, so a cell that lacks a seed another cell has (a run still to come,
        a run left out) is not ranked. Empty where no cell holds them all."""
        rows = [r for r in self.row_keys if col in self.cells[r]]
        seeds = set().union(*(self.cells[r][col].values for r in rows))
        return [r for r in rows if set(self.cells[r][col].values) == seeds]

    def is_best(self, row: tuple, col: tuple) -> bool:
        """Whether the cell of ``row`` and ``col`` is ranked and has the best mean of the ranked."""
        ranked = self.ranked(col)
        means = [self.cells[r][col].mean for r in ranked]
        return row in ranked and self.cells[row][col].mean == max(means)


def differing_fields(first: Record, second: Record) -> list[str]:
    """What tells two runs apart, as ``--rows`` and ``--cols`` name it: the fields (``alpha``,
    ``backbone``, a sweep's axis) whose values differ; where none does, the options of their
    ``config.yaml`` files (those both have, by dotted name without ``init_args``:
    ``model.optim.lr``; the seeds and the run and data folders left out) that differ."""
    fields = [
        name
        for name in sorted(set(first.fields) | set(second.fields))
        if first.fields.get(name) != second.fields.get(name)
    ]
    if fields:
        return fields
    one, other = flat_config(first.config), flat_config(second.config)
    options = sorted(
        key for key in (set(one) & set(other)) - set(CELL_OPTIONS_IGNORED) if one[key] != other[key]
    )
    names = [".".join(part for part in key.split(".") if part != "init_args") for key in options]
    return list(dict.fromkeys(names))


def collision(first: Record, second: Record, row: tuple, col: tuple) -> str:
    """Why two runs of one seed cannot share the cell ``row`` x ``col``, and what to add to
    ``--rows`` or ``--cols``: the fields they differ in (:func:`differing_fields`)."""
    where = (
        f"two runs with seed {second.seed} fall in the cell {row} x {col} ({first.path} and "
        f"{second.path})"
    )
    names = differing_fields(first, second)
    if not names:
        return (
            f"{where}, and they differ in no field and no option of their config.yaml: the "
            "same run made twice? Report one of them (move the other out of RUNS_DIR)"
        )
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"{where}; add the field that tells them apart to --rows or --cols: they differ in {shown}"
    )


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
    placed: dict[tuple[tuple, tuple, Any], Record] = {}  # (row, col, seed) -> its run
    for record in screened.used:
        row = tuple(record.get(f) for f in rows)
        col = tuple(record.get(f) for f in cols)
        cell = cells.setdefault(row, {}).setdefault(col, Cell({}))
        if record.seed in cell.values:
            raise InputError(collision(placed[row, col, record.seed], record, row, col))
        placed[row, col, record.seed] = record
        cell.values[record.seed] = 100.0 * float(record.metrics[metric])  # type: ignore[arg-type]
        cell.labels[record.seed] = labels_sha256(record.results)
        cell.precisions[record.seed] = run_precision(record.results)
        cell.configs[record.seed] = flat_config(record.config)

    def order(fields: Sequence[str]):
        return lambda key: [sort_key(f, v) for f, v in zip(fields, key, strict=True)]

    row_keys = sorted(cells, key=order(rows))
    col_keys = sorted({c for by_col in cells.values() for c in by_col}, key=order(cols))
    return Grouped(cells, row_keys, col_keys, list(rows), list(cols), metric, screened)
