"""Rendering of ``noisylabels report``: tables as Markdown, LaTeX or CSV, and the bias figure.

Accuracies are in %, a cell reads ``mean ± std (n)`` with ``n`` the number of seeds, and the
best mean of each column is bold, among the cells that hold every seed of the column (means over
other seeds do not compare). Paired cells read ``+Δ [low, high] p=… (n)``: VRNL minus its
base method in percentage points, the 95 % confidence interval and the paired t-test's p-value.
Only the runs :func:`~noisylabels.report.cells.screen` lets in count; :func:`problems_section`
lists the others, each with why.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from noisylabels.report.cells import (
    Admit,
    Cell,
    Grouped,
    Paired,
    Published,
    Screened,
    mixed_precisions,
    paired_difference,
    screen,
    sort_key,
    unpaired_seeds,
)
from noisylabels.report.collect import (
    METRIC_NAMES,
    VRNL_SUFFIX,
    Record,
    base_method,
    method_key,
)
from noisylabels.report.problems import SHORT, UNHEALTHY

DASH = "—"


@dataclass
class Table:
    """A rendered table: header, text cells and which cells are bold."""

    title: str
    header: list[str]
    rows: list[list[str]]
    bold: set[tuple[int, int]] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def fmt_cell(cell: Cell | None) -> str:
    if cell is None:
        return DASH
    std = "" if cell.std is None else f" ± {cell.std:.2f}"
    return f"{cell.mean:.2f}{std} ({cell.n})"


def fmt_paper(value: Published | None) -> str:
    if value is None:
        return DASH
    return f"{value.mean:.2f}" + ("" if value.std is None else f" ± {value.std:.2f}")


def fmt_paired(paired: Paired | None) -> str:
    if paired is None:
        return DASH
    text = f"{paired.mean:+.2f}"
    if paired.low is not None and paired.high is not None:
        text += f" [{paired.low:+.2f}, {paired.high:+.2f}]"
    elif paired.n > 1:  # no spread among the seeds' differences: no interval to give
        text += " [equal on every seed: no interval]"
    if paired.p is not None:
        text += f" p={paired.p:.3f}" if paired.p >= 0.001 else " p<0.001"
    return f"{text} ({paired.n})"


def _label(key: tuple) -> str:
    return " ".join(DASH if v is None else str(v) for v in key)


def _paper_value(
    paper: Mapping[tuple[str, str, str], Published],
    fields: Mapping[str, Any],
    method: str | None = None,
) -> Published | None:
    method = method or fields.get("method")
    if not {"dataset", "noise"} <= set(fields) or method is None:
        return None
    return paper.get((str(fields["dataset"]), str(fields["noise"]), method_key(str(method))))


def rule_note(shown: Sequence[Published], metrics: Sequence[str], what: str = "paper") -> str:
    """The note saying under which rule the published figures ``shown`` were reported, and
    whether that is the rule of this table's ``metrics`` (a figure of another rule does not
    compare like for like: the best test accuracy over the epochs is above a selected
    checkpoint's by construction)."""
    counts: dict[str | None, int] = {}
    for value in shown:
        counts[value.rule] = counts.get(value.rule, 0) + 1
    if not counts:
        return f"{what}: no published figure for these cells"
    named = [
        (METRIC_NAMES[rule] if rule else "a rule its paper does not state")
        + (f" ({n} of {len(shown)})" if len(counts) > 1 else "")
        for rule, n in counts.items()
    ]
    text = f"{what}: the published figures report the {' and '.join(named)}"
    others = sorted(rule for rule in counts if rule and rule not in metrics)
    if None in counts:
        text += "; where the rule is not stated, the columns may not compare"
    if others:
        ours = " and ".join(METRIC_NAMES[m] for m in metrics)
        text += (
            f"; this table's are the {ours}: another rule, so the columns do not compare "
            "like for like"
        )
    elif None not in counts:
        same = " and ".join(METRIC_NAMES[r] for r in metrics if r in counts)
        text += ", the rule of this table" if len(metrics) == 1 else f", as this table's {same}"
    return text


def main_table(g: Grouped, paper: Mapping | None, title: str) -> Table:
    """Mean ± std (n) per cell, the best mean per column bold; the paper's numbers beside each
    column where ``paper`` is given."""
    return side_by_side([g], None, paper, title)


def side_by_side(
    groups: Sequence[Grouped], names: Sequence[str] | None, paper: Mapping | None, title: str
) -> Table:
    """The cells of several metrics (``groups``, one per metric, named ``names``; one group:
    ``None``) of the same rows and columns in one table: each column once per metric, e.g. the
    selected checkpoint's accuracy beside the last epoch's; the best mean of each bold; the
    paper's number once per column where ``paper`` is given."""
    first = groups[0]
    row_keys = list(dict.fromkeys(k for g in groups for k in g.row_keys))
    col_keys = list(dict.fromkeys(k for g in groups for k in g.col_keys))
    header = list(first.rows)
    for col in col_keys:
        header += [f"{_label(col)} ({name})" for name in names] if names else [_label(col)]
        header += ["paper"] if paper is not None else []
    out = Table(title, header, [])
    mixed, shown = [], []
    for i, row in enumerate(row_keys):
        line = [DASH if v is None else str(v) for v in row]
        for col in col_keys:
            for g in groups:
                cell = g.cell(row, col)
                if cell is not None and g.is_best(row, col):
                    out.bold.add((i, len(line)))
                line.append(fmt_cell(cell))
            cell = first.cell(row, col)
            if cell is not None and (found := mixed_precisions(cell)):
                mixed.append(
                    f"{' '.join(line[: len(row)])} in {_label(col)}: its seeds ran in different "
                    f"precisions ({', '.join(found[None])}), so its spread holds the "
                    "arithmetic's too (results.json's execution)"
                )
            if paper is not None:
                value = _paper_value(paper, first.fields(row, col))
                shown += [value] if value is not None else []
                line.append(fmt_paper(value))
        out.rows.append(line)
    out.notes.append(
        "test accuracy (%), mean ± std over seeds (n − 1), (n) seeds; bold: best of the cells "
        "that hold every seed of their column"
    )
    if paper is not None:
        out.notes.append(rule_note(shown, [g.metric for g in groups]))
    out.notes += mixed
    return out


def vrnl_pairs(g: Grouped) -> list[tuple[tuple, tuple]]:
    """``(vrnl_row, base_row)`` for every row of a ``X-VRNL`` method whose ``X`` row (all other
    row fields equal) exists; needs ``method`` among the rows."""
    index = g.rows.index("method")
    keys = set(g.row_keys)
    pairs = []
    for row in g.row_keys:
        base = base_method(str(row[index]))
        if base is None:
            continue
        base_row = row[:index] + (base,) + row[index + 1 :]
        if base_row in keys:
            pairs.append((row, base_row))
    return pairs


def pair_statistics(g: Grouped, vrnl_row: tuple, base_row: tuple, col: tuple) -> Paired | None:
    """:func:`paired_difference` of two rows' cells in a column (``None`` if one is empty)."""
    a, b = g.cell(vrnl_row, col), g.cell(base_row, col)
    if not (a and b):
        return None
    apart = set(unpaired_seeds(a, b))
    kept = {s: v for s, v in a.values.items() if s not in apart}
    return paired_difference(kept, b.values)


def pair_label(g: Grouped, vrnl_row: tuple, base_row: tuple, minus: str = "−") -> list[str]:
    """The row label of a pair: its fields, the method written ``X-VRNL − X``."""
    index = g.rows.index("method")
    label = [DASH if v is None else str(v) for v in vrnl_row]
    label[index] = f"{vrnl_row[index]} {minus} {base_row[index]}"
    return label


def paired_table(g: Grouped, paper: Mapping | None, title: str) -> Table:
    """VRNL minus base per column: mean difference, 95 % CI, paired t-test p-value, (n)
    common seeds; the paper's difference of means beside it where ``paper`` is given."""
    header = list(g.rows)
    for col in g.col_keys:
        header += [_label(col)] + (["paper Δ"] if paper is not None else [])
    out = Table(title, header, [])
    notes_below, shown = [], []
    for vrnl_row, base_row in vrnl_pairs(g):
        label = pair_label(g, vrnl_row, base_row)
        line = list(label)
        for col in g.col_keys:
            a, b = g.cell(vrnl_row, col), g.cell(base_row, col)
            apart = unpaired_seeds(a, b) if a and b else {}
            both = set(a.values) & set(b.values) - set(apart) if a and b else set()
            for seed, found in mixed_precisions(a, b, seeds=both).items():
                notes_below.append(
                    f"in {' '.join(label)} in {_label(col)}: seed {seed}'s two runs ran in "
                    f"different precisions ({', '.join(found)}), so its difference holds the "
                    "arithmetic's too (results.json's execution)"
                )
            for why in sorted(set(apart.values())):
                seeds = ", ".join(str(s) for s, reason in apart.items() if reason == why)
                notes_below.append(
                    f"left out of {' '.join(label)} in {_label(col)}: seed(s) {seeds}, whose "
                    f"two runs {why}, so are no pair"
                )
            line.append(fmt_paired(pair_statistics(g, vrnl_row, base_row, col)))
            if paper is not None:
                fields = g.fields(vrnl_row, col)
                ours = _paper_value(paper, fields)
                theirs = _paper_value(paper, fields, method=str(base_row[g.rows.index("method")]))
                pair = None if ours is None or theirs is None else (ours, theirs)
                shown += list(pair or ())
                line.append(DASH if pair is None else f"{ours.mean - theirs.mean:+.2f}")
        out.rows.append(line)
    out.notes.append(
        "VRNL minus base in percentage points over the seeds both have: mean [95 % CI, t "
        "distribution], two-sided paired t-test p-value, (n) seeds"
    )
    if paper is not None:
        out.notes.append(rule_note(shown, [g.metric], "paper Δ (the difference of its means)"))
    out.notes += notes_below
    if not out.rows:
        out.notes.insert(0, "no pairs: no X-VRNL row has its X row (with the same other fields)")
    return out


RUN_COLUMNS = (
    "seed", "selected epoch", "selected", "last epoch", "last 10 epochs", "T̂ from epoch",
    "ε_T", "T̂ mean diagonal", "health", "executed", "commit", "hours",
)  # fmt: skip
"""The columns of :func:`runs_table` after the run's fields."""


def _number(value: Any, digits: int = 3) -> str:
    """A finite number with ``digits`` decimals, else a dash."""
    finite = isinstance(value, int | float) and math.isfinite(value)
    return f"{value:.{digits}f}" if finite else DASH


def _percent(value: Any) -> str:
    """A fraction as a percentage with 2 decimals, else a dash."""
    return _number(100 * value if isinstance(value, int | float) else None, 2)


def _executed(execution: Any) -> str | None:
    """One part's ``execution`` in words: device, precision, ``compiled`` or the fall-back."""
    if not isinstance(execution, Mapping):
        return None
    words = [str(execution.get("device") or DASH), str(execution.get("precision") or DASH)]
    if execution.get("compile_mode"):
        words.append("compiled" + (" (CUDA graphs)" if execution.get("cuda_graphs") else ""))
    if execution.get("compile_fallback"):
        words.append("fell back to eager")
    return " ".join(words)


def _parts(
    results: Mapping[str, Any], key: str, last: Any, describe: Callable[[Any], str | None]
) -> str:
    """Each part of a run described (``describe`` of each earlier part's ``key`` under its
    ``resumed`` entry, then of ``last``, the run's own record of its last part), a part
    shown where it differs from the one before, joined by "then"; a dash where none records
    it."""
    resumed = results.get("resumed")
    earlier = (
        [r.get("part") for r in resumed if isinstance(r, Mapping)]
        if isinstance(resumed, list)
        else []
    )
    values = [p.get(key) if isinstance(p, Mapping) else None for p in earlier] + [last]
    shown: list[str] = []
    for value in values:
        words = describe(value)
        if words and (not shown or shown[-1] != words):
            shown.append(words)
    return " then ".join(shown) if shown else DASH


def executed(results: Mapping[str, Any]) -> str:
    """How a run's arithmetic ran (its ``execution``, and that of each earlier part of a resumed
    run where it differs from the part before): device, precision, ``compiled`` or the
    fall-back to eager."""
    return _parts(results, "execution", results.get("execution"), _executed)


def _commit(code: Any) -> str | None:
    """The project commit a part ran (its first 7 digits; ``+changes``: with uncommitted
    changes to tracked files)."""
    commit = code.get("git_commit") if isinstance(code, Mapping) else None
    if not isinstance(commit, str) or not commit:
        return None
    return commit[:7] + ("+changes" if code.get("git_dirty") else "")


def commits(results: Mapping[str, Any]) -> str:
    """The project commit of each part of a run (``provenance`` for the last part), as
    :func:`executed` joins them."""
    return _parts(results, "code", results.get("provenance"), _commit)


def run_hours(results: Mapping[str, Any]) -> tuple[float | None, bool]:
    """``(hours, complete)`` a run took over all its parts (``wall_time_total_s``); for a run
    that does not record it, its ``wall_time_s``: complete where it was never resumed, else a
    lower bound (its last part's); ``(None, False)`` without either."""
    total = results.get("wall_time_total_s")
    if isinstance(total, int | float) and math.isfinite(total):
        return total / 3600, True
    last = results.get("wall_time_s")
    if not (isinstance(last, int | float) and math.isfinite(last)):
        return None, False
    return last / 3600, not results.get("resumed")


def _hours(results: Mapping[str, Any]) -> str:
    hours, complete = run_hours(results)
    return DASH if hours is None else ("" if complete else "≥ ") + f"{hours:.2f}"


def run_row(record: Record) -> list[str]:
    """The :data:`RUN_COLUMNS` of one run, from its ``results.json`` (accuracies in %)."""
    results = record.results
    estimate = results.get("t_estimate")
    diag = estimate.get("diag") if isinstance(estimate, dict) else None
    mean_diag = sum(diag) / len(diag) if isinstance(diag, list) and diag else None
    epoch = results.get("estimation_epoch")
    return [
        str(record.seed),
        str(results.get("best_epoch", DASH)),
        _percent(results.get("test_acc")),
        _percent(results.get("test_acc_last")),
        _percent(results.get("test_acc_tail_mean")),
        DASH if epoch is None else str(epoch),
        _number(results.get("t_estimation_error")),
        _number(mean_diag),
        str(results.get("health", DASH)),
        executed(results),
        commits(results),
        _hours(results),
    ]


def runs_table(records: Sequence[Record], fields: Sequence[str], title: str) -> Table:
    """One row per run, in the order of ``fields`` and the seed: the run's ``fields``, then
    :data:`RUN_COLUMNS` (every run, healthy or not: the health column says which)."""

    def order(record: Record) -> tuple:
        return (*(str(record.get(f)) for f in fields), str(record.seed))

    rows = [[str(r.get(f)) for f in fields] + run_row(r) for r in sorted(records, key=order)]
    spent = [run_hours(r.results) for r in records]
    total = sum(h for h, _ in spent if h is not None)
    bound = "at least " if not all(h is not None and done for h, done in spent) else ""
    notes = [
        "accuracies in %; selected: the checkpoint of the best noisy-validation accuracy; "
        "epochs from 0; ε_T and T̂ of runs that estimate or learn T",
        f"hours: wall-clock time of every part of the run (≥: a resumed run that recorded its "
        f"last part only); {bound}{total:.2f} hours in all",
    ]
    return Table(title, [*fields, *RUN_COLUMNS], rows, notes=notes)


def table_to_csv(table: Table) -> str:
    """A rendered table as CSV: its header, then its rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.header)
    writer.writerows(table.rows)
    return buffer.getvalue()


def to_markdown(table: Table) -> str:
    lines = [f"**{table.title}**", "", "| " + " | ".join(table.header) + " |"]
    lines.append("|" + "|".join("---" for _ in table.header) + "|")
    for i, row in enumerate(table.rows):
        cells = [f"**{c}**" if (i, j) in table.bold else c for j, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""] + [f"_{n}_" for n in table.notes]) + "\n"


def latex_escape(text: str) -> str:
    for char, repl in (
        ("\\", r"\textbackslash{}"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("&", r"\&"),
        ("#", r"\#"),
        ("±", r"$\pm$"),
        ("−", "$-$"),
        ("Δ", r"$\Delta$"),
        ("—", "--"),
        ("<", r"$<$"),
    ):
        text = text.replace(char, repl)
    return text


def to_latex(table: Table) -> str:
    spec = "l" * len(table.header)
    lines = [
        "% " + table.title,
        f"\\begin{{tabular}}{{{spec}}}",
        "\\toprule",
        " & ".join(latex_escape(h) for h in table.header) + " \\\\",
        "\\midrule",
    ]
    for i, row in enumerate(table.rows):
        cells = [latex_escape(c) for c in row]
        cells = [f"\\textbf{{{c}}}" if (i, j) in table.bold else c for j, c in enumerate(cells)]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"] + [f"% {latex_escape(n)}" for n in table.notes]
    return "\n".join(lines) + "\n"


def to_csv(g: Grouped, paired: bool, paper: Mapping | None) -> str:
    """One line per cell (and per VRNL/base pair with ``paired``), numbers unrounded."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "kind",
            *g.rows,
            *g.cols,
            "metric",
            "n",
            "mean",
            "std",
            "best",
            "ci_low",
            "ci_high",
            "p_value",
            "paper_mean",
            "paper_std",
            "paper_rule",
        ]
    )
    for col in g.col_keys:
        for row in g.row_keys:
            cell = g.cell(row, col)
            if cell is None:
                continue
            pub = _paper_value(paper, g.fields(row, col)) if paper is not None else None
            writer.writerow(
                [
                    "cell",
                    *row,
                    *col,
                    g.metric,
                    cell.n,
                    cell.mean,
                    cell.std,
                    g.is_best(row, col),
                    "",
                    "",
                    "",
                    "" if pub is None else pub.mean,
                    "" if pub is None or pub.std is None else pub.std,
                    "" if pub is None or pub.rule is None else pub.rule,
                ]
            )
        for vrnl_row, base_row in vrnl_pairs(g) if paired else []:
            result = pair_statistics(g, vrnl_row, base_row, col)
            if result is not None:
                writer.writerow(
                    [
                        "paired",
                        *pair_label(g, vrnl_row, base_row, "-"),
                        *col,
                        g.metric,
                        result.n,
                        result.mean,
                        "",
                        "",
                        result.low,
                        result.high,
                        result.p,
                        "",
                        "",
                    ]
                )
    return buffer.getvalue()


def _reasons(problems: Sequence[Any]) -> str:
    return "; ".join(str(p) for p in problems)


def include_hint(screened: Screened) -> str:
    """Which ``--include-*`` flags would average runs left out (``""`` if none would): those of
    the runs whose every problem is their health or their epochs."""
    flaggable = [{p.kind for p in problems} for _, problems in screened.left_out]
    kinds = set().union(*(k for k in flaggable if k <= {UNHEALTHY, SHORT}))
    hints = [
        f"{flag} averages the {what} ones"
        for kind, flag, what in (
            (UNHEALTHY, "--include-unhealthy", "unhealthy"),
            (SHORT, "--include-short", "short"),
        )
        if kind in kinds
    ]
    return "; ".join(hints)


def problems_section(
    screened: Screened, where: str = "every mean, bold and paired difference"
) -> str:
    """The runs left out of ``where``, each with why, and those averaged despite a problem
    (admitted by ``--include-unhealthy`` / ``--include-short``), as lines of text; ``""`` where
    every run counts as it is."""
    lines = []
    if screened.left_out:
        hint = include_hint(screened)
        lines.append(
            f"Left out of {where}: {len(screened.left_out)} run(s)"
            + (f" ({hint})" if hint else "")
            + ":"
        )
        lines += [f"- {r.path}: {_reasons(problems)}" for r, problems in screened.left_out]
    if screened.admitted:
        lines.append(
            f"Averaged despite a problem (--include-unhealthy, --include-short): "
            f"{len(screened.admitted)} run(s):"
        )
        lines += [f"- {r.path}: {_reasons(problems)}" for r, problems in screened.admitted]
    return "".join(f"{line}\n" for line in lines)


def bias_figure(
    records: Sequence[Record], metric: str, out: Path, title: str, admit: Admit | None = None
) -> Path:
    """Test accuracy against ε_T (the paper's Fig. 3): one panel per dataset and noise, one line
    per method, a point per ``model.transition_bias`` (mean over seeds, ±1 std bars); of the
    runs :func:`~noisylabels.report.cells.screen` lets in (``admit``)."""
    from matplotlib.figure import Figure

    points: dict[tuple, dict[str, dict[Any, list[tuple[float, float]]]]] = {}
    for r in screen(records, metric, admit, eps_t=True).used:
        value = r.metrics.get(metric)
        if r.eps_t is None or value is None:
            continue
        panel = (r.fields["dataset"], r.fields["noise"])
        gamma = r.get("model.transition_bias")
        by_gamma = points.setdefault(panel, {}).setdefault(r.fields["method"], {})
        by_gamma.setdefault(gamma if gamma is not None else id(r), []).append(
            (float(r.eps_t), 100.0 * float(value))
        )
    if not points:
        raise ValueError(
            "no run recorded both ε_T (t_estimation_error) and the test accuracy; "
            "the bias study needs runs with a known true T"
        )
    fig = Figure(figsize=(4.2 * len(points), 3.4))
    panels = sorted(points, key=lambda p: (sort_key("dataset", p[0]), sort_key("noise", p[1])))
    for k, panel in enumerate(panels):
        ax = fig.add_subplot(1, len(points), k + 1)
        for method in sorted(points[panel], key=lambda m: sort_key("method", m)):
            xs, ys, errs = [], [], []
            for pts in points[panel][method].values():
                eps, acc = [p[0] for p in pts], [p[1] for p in pts]
                xs.append(sum(eps) / len(eps))
                ys.append(sum(acc) / len(acc))
                errs.append(Cell(dict(enumerate(acc))).std or 0.0)
            order = sorted(range(len(xs)), key=xs.__getitem__)
            style = "-" if method.endswith(VRNL_SUFFIX) else "--"
            ax.errorbar(
                [xs[i] for i in order],
                [ys[i] for i in order],
                yerr=[errs[i] for i in order],
                fmt="o" + style,
                ms=3,
                capsize=2,
                label=method,
            )
        ax.set_xlabel("ε_T of the T used")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{panel[0]}, {panel[1]}")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    return out
