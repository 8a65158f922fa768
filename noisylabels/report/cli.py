"""``noisylabels report RUNS_DIR``: tables of test accuracy over seeds from finished runs
(:mod:`noisylabels.report`), rendered by :mod:`noisylabels.report.render`.

Examples::

    noisylabels report runs/table1_mnist --paired --paper
    noisylabels report runs/table1_mnist --metric last --format latex --out table1.tex
    noisylabels report runs/fig1_mnist --rows method,alpha --cols noise
    noisylabels report runs/bias --kind bias --out fig3.png
    noisylabels report runs/table1_mnist --kind runs

A number enters a mean only if it is a finite accuracy in [0, 1] of a healthy run that trained
its protocol's epochs (and, at a sweep's grid point, was made with the sweep's options); every
run left out is listed after the tables with why (on stderr with ``--format csv``, ``--out``
or ``--kind bias``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from noisylabels.arguments import CommandParser
from noisylabels.errors import InputError
from noisylabels.report.cells import Admit, Screened, group, load_paper, screen
from noisylabels.report.collect import METRIC_NAMES, METRICS, DamagedRun, collect
from noisylabels.report.mixed import mixed_cells
from noisylabels.report.writing import out_error


def build_parser() -> Any:
    """Arguments of ``noisylabels report``."""
    p = CommandParser(
        prog="noisylabels report",
        description="Tables of test accuracy (mean ± std over seeds) from the results.json files "
        "under each RUNS_DIR; with --paired, VRNL against its base method seed by seed. A run "
        "enters the means only with a finite accuracy in [0, 1], a health of 'ok' (or none "
        "recorded), at least its protocol's epochs and, at a sweep's grid point, the sweep's "
        "options; every run left out is listed after the tables with why.",
        allow_abbrev=False,
    )
    p.add_argument(
        "runs_dirs",
        type=Path,
        nargs="+",
        metavar="RUNS_DIR",
        help="folder(s) searched for results.json files",
    )
    p.add_argument(
        "--format",
        choices=("markdown", "latex", "csv"),
        default="markdown",
        help="markdown (default), latex (booktabs tabular) or csv (one line per cell)",
    )
    p.add_argument(
        "--rows", default="method", help="comma-separated fields of the rows (default: method)"
    )
    p.add_argument(
        "--cols", default="dataset,noise", help="fields of the columns (default: dataset,noise)"
    )
    p.add_argument(
        "--metric",
        type=metric_list,
        default=["best"],
        help="best: the selected checkpoint's test accuracy; last: the last epoch's; tail: the "
        "mean over the last epochs (runs with --tail_test_epochs) of every network, or of the "
        "prediction of a method that predicts with its networks together (DivideMix); "
        "best-test: the highest test accuracy over the epochs (runs with --test_every_epoch; "
        "the CIFAR-N paper's rule, an epoch chosen by the test set, so optimistic); several, "
        "comma-separated (best,last), side by side in one table. A run whose value is not a "
        "finite accuracy in [0, 1] (NaN, 87.0, a string) is left out and listed",
    )
    p.add_argument("--paired", action="store_true", help="add VRNL − base per seed, CI, p-value")
    p.add_argument(
        "--paper",
        action="store_true",
        help="the VRNL paper's published numbers beside ours (its Tables 1 and 2, reported at "
        "a checkpoint selected on noisy validation data); a note under each table says "
        "whether the published rule is the table's metric",
    )
    p.add_argument(
        "--paper-file",
        type=Path,
        metavar="FILE",
        help="another published table beside ours, implies --paper: a CSV file with the columns "
        "table, dataset, noise, method, mean, std, rule (dataset, noise and method as the "
        "report prints them, mean and std in %%, rule the metric the paper reports: best, "
        "last, tail, best-test, or empty where it does not say); '#' lines are comments",
    )
    p.add_argument(
        "--kind",
        choices=("table", "bias", "runs"),
        default="table",
        help="bias: accuracy vs ε_T (PNG); runs: one row per run (selected epoch, accuracies, "
        "the epoch T̂ came from, ε_T, T̂'s mean diagonal, health), by --rows and --cols",
    )
    p.add_argument("--out", type=Path, help="write here (required for --kind bias: a .png)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="fail on a run whose results.json (or config.yaml, sweep_run.json) is damaged, "
        "empty or not a regular file (a named pipe is never opened), instead of skipping it "
        "with a warning listed after the report",
    )
    p.add_argument(
        "--include-unhealthy",
        action="store_true",
        help="average runs whose results.json records a health other than 'ok' (e.g. "
        "'collapsed: ...') instead of leaving them out; they are listed after the tables",
    )
    p.add_argument(
        "--include-short",
        action="store_true",
        help="average short runs (fewer epochs than the protocol_epochs their config files "
        "plan, e.g. a trial with --trainer.max_epochs 2) instead of leaving them out; they are "
        "listed after the tables",
    )
    p.add_argument("--title", help="table or figure title (default: RUNS_DIR and the metric)")
    return p


def metric_list(value: str) -> list[str]:
    """``--metric best,last``: the metrics, each one of :data:`METRICS`, none twice."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    wrong = [n for n in names if n not in METRICS]
    if not names or wrong or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{value!r}: give one or more of {', '.join(METRICS)}, comma-separated, each once"
        )
    return names


def write_out(path: Path, text: str) -> None:
    """Write ``text`` to ``--out`` ``path``; :class:`InputError` naming it where it cannot be
    written (a read-only folder, a full disk)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as err:
        raise out_error(path, err) from None


def gather(args: Any, skipped: list[str]) -> list[Any]:
    """The records of every RUNS_DIR; damaged runs are skipped into ``skipped`` unless
    ``--strict``."""
    records = []
    for folder in args.runs_dirs:
        try:
            records += collect(folder, None if args.strict else skipped)
        except DamagedRun as err:
            raise InputError(
                f"{err}; without --strict such a run is skipped with a warning"
            ) from None
    if not records:
        raise InputError(
            f"every run under {', '.join(map(str, args.runs_dirs))} is damaged: "
            + "; ".join(skipped)
        )
    return records


def nothing_left(screened: Screened, where: str, what: str) -> InputError:
    """The error for a report whose every run was left out: the first few, with why."""
    from noisylabels.report.render import include_hint

    shown = "; ".join(
        f"{record.path}: {', '.join(map(str, problems))}"
        for record, problems in screened.left_out[:3]
    )
    more = len(screened.left_out) - 3
    hint = include_hint(screened)
    return InputError(
        f"every run under {where} is left out of {what}: {shown}"
        + (f"; and {more} more" if more > 0 else "")
        + (f" ({hint})" if hint else "")
    )


def check_fields(records: list[Any], rows: list[str], cols: list[str]) -> None:
    """Refuse a field of ``--rows``/``--cols`` that no run has (a misspelt one would put every
    run into one "—" cell), listing the fields the runs have."""
    fields = sorted({name for record in records for name in record.fields})
    for option, names in (("--rows", rows), ("--cols", cols)):
        for name in names:
            if name in fields or any(record.get(name) is not None for record in records):
                continue
            raise InputError(
                f"{option} {','.join(names)}: no run has a field {name!r}; the runs' fields are "
                f"{', '.join(fields)}, and any option of their config.yaml by its dotted name "
                "(e.g. model.alpha, data.noise_rate)"
            )


PAPER_KEYS = ("dataset", "noise", "method")
"""The fields a published figure is found by; a table with ``--paper`` has each among its
rows or columns."""
UNUSED_BY_KIND = {
    "bias": ("rows", "cols", "paired", "paper", "paper_file", "format"),
    "runs": ("metric", "paired", "paper", "paper_file", "include_unhealthy", "include_short"),
}
"""The options a ``--kind`` does not read: the bias figure draws a panel per dataset and noise
and a line per method, as a PNG; the runs table lists every run with all its accuracies."""


def refuse_unused(args: Any) -> None:
    """Refuse an option given away from its default that the ``--kind`` asked for would leave
    unused (applied or refused, never ignored)."""
    defaults = build_parser()
    unused = [
        "--" + dest.replace("_", "-")
        for dest in UNUSED_BY_KIND.get(args.kind, ())
        if getattr(args, dest) != defaults.get_default(dest)
    ]
    if unused:
        raise InputError(
            f"{', '.join(unused)} would have no effect with --kind {args.kind}: "
            + (
                "the bias figure draws one panel per dataset and noise and one line per "
                "method, as a PNG (--metric, --include-* and --title apply to it)"
                if args.kind == "bias"
                else "the runs table lists every run, healthy or not, with the selected, last "
                "and last-10-epoch accuracies (--rows, --cols, --format and --title apply to it)"
            )
            + "; leave them out"
        )


def report(args: Any, skipped: list[str] | None = None) -> str:
    """The report the parsed ``args`` describe, as text (the bias figure: its path); runs left
    out as damaged are appended to ``skipped``. The runs left out of the means (and those
    averaged despite a problem) are listed after the tables, on stderr where the output is
    CSV, a file or the figure."""
    from noisylabels.report import render

    refuse_unused(args)
    records = gather(args, [] if skipped is None else skipped)
    admit = Admit(unhealthy=args.include_unhealthy, short=args.include_short)
    metrics = list(args.metric)
    metric_name = " and ".join(METRIC_NAMES[m] for m in metrics)
    where = ", ".join(str(folder) for folder in args.runs_dirs)
    title = args.title or f"{where}: test accuracy of the {metric_name}"
    if len(metrics) > 1 and (args.kind == "bias" or args.format == "csv"):
        raise InputError(
            f"--metric {','.join(metrics)}: several metrics make one Markdown or LaTeX table; "
            "--kind bias and --format csv take one metric at a time"
        )
    if args.kind == "bias":
        if args.out is None or args.out.suffix.lower() != ".png":
            raise InputError("--kind bias draws a PNG: give --out FILE.png")
        metric = metrics[0]
        screened = screen(records, metric, admit, eps_t=True)
        if not screened.used:
            raise nothing_left(screened, where, "the figure")
        try:
            path = render.bias_figure(records, metric, args.out, title, admit)
        except OSError as err:
            raise out_error(args.out, err) from None
        print(render.problems_section(screened, "the figure"), end="", file=sys.stderr)
        return f"wrote {path}"
    rows = [f for f in args.rows.split(",") if f]
    cols = [f for f in args.cols.split(",") if f]
    if not rows or set(rows) & set(cols):
        raise InputError("--rows needs a field, and no field may be in both --rows and --cols")
    check_fields(records, rows, cols)
    if args.kind == "runs":
        if not records:
            raise InputError(f"no finished run under {where}")
        title = args.title or f"{where}: every run"
        table = render.runs_table(records, [*rows, *cols], title)
        if args.format == "csv":
            text = render.table_to_csv(table)
        else:
            text = (render.to_markdown if args.format == "markdown" else render.to_latex)(table)
        return deliver(text, args.out)
    if args.paired and "method" not in rows:
        raise InputError("--paired pairs the rows X-VRNL and X: put method among --rows")
    paper = load_paper(args.paper_file) if args.paper_file else load_paper() if args.paper else None
    if paper is not None and (lacking := [f for f in PAPER_KEYS if f not in rows + cols]):
        raise InputError(
            f"--paper{'-file' if args.paper_file else ''} matches each cell to a published "
            f"figure by its dataset, noise and method: put {' and '.join(lacking)} among "
            f"--rows or --cols (now --rows {','.join(rows)} --cols {','.join(cols)})"
        )
    groups = [group(records, rows, cols, m, admit) for m in metrics]
    grouped = groups[0]
    if not any(g.row_keys for g in groups):
        raise nothing_left(grouped.screened, where, f"the table of the {metric_name}")
    if args.format == "csv":
        parts = [render.to_csv(grouped, args.paired, paper)]
    else:
        emit = render.to_markdown if args.format == "markdown" else render.to_latex
        if len(groups) == 1:
            tables = [render.main_table(grouped, paper, title)]
        else:
            names = [METRIC_NAMES[m] for m in metrics]
            tables = [render.side_by_side(groups, names, paper, title)]
        if args.paired:
            tables += [
                render.paired_table(g, paper, f"VRNL − base, {METRIC_NAMES[m]}")
                for g, m in zip(groups, metrics, strict=True)
            ]
        parts = [emit(t) for t in tables]
        if paper is not None:
            source = f"(paper: {paper.label})"
            parts.append(f"% {source}\n" if args.format == "latex" else f"{source}\n")
    if len(groups) == 1:
        sections = [render.problems_section(grouped.screened)]
    else:  # a run may count in one metric's column and not in another's
        sections = [
            render.problems_section(
                g.screened, f"the {METRIC_NAMES[m]} columns (means, bold and paired difference)"
            )
            for g, m in zip(groups, metrics, strict=True)
        ]
    left_out = "".join(dict.fromkeys(sections))
    if left_out and args.format == "markdown":
        parts.append(left_out)
    elif left_out and args.format == "latex":  # comments: the .tex still compiles
        parts.append("".join(f"% {line}\n" for line in left_out.splitlines()))
    if left_out and (args.format == "csv" or args.out is not None):
        print(left_out, end="", file=sys.stderr)  # the CSV stays parseable, a file is seen
    mixed = mixed_cells(grouped.screened.used, rows, cols)
    if mixed:
        warning = (
            "Warning: these cells average runs made with different options (e.g. a trial "
            "sweep's runs beside the real ones); rerun the odd ones (`noisylabels sweep` shows "
            "runs done with other options as [stale]):\n" + "".join(f"- {line}\n" for line in mixed)
        )
        if args.format == "csv":  # the CSV stays parseable: the warning goes to stderr
            print(warning, end="", file=sys.stderr)
        elif args.format == "latex":  # comments: the .tex still compiles
            parts.append("".join(f"% {line}\n" for line in warning.splitlines()))
        else:
            parts.append(warning)
    return deliver("\n".join(parts), args.out)


def deliver(text: str, out: Path | None) -> str:
    """``text``, or, with ``--out``, what it was written to (the text goes to the file)."""
    if out is None:
        return text
    write_out(out, text)
    return f"wrote {out}"


def main(argv: list[str] | None = None) -> str:
    """Entry point of ``noisylabels report``; prints and returns the report, then a warning
    listing the runs it skipped as damaged (on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    skipped: list[str] = []
    try:
        text = report(args, skipped)
    except (InputError, FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    print(text, end="" if text.endswith("\n") else "\n")
    if skipped:
        lines = "\n".join(f"  {line}" for line in skipped)
        print(
            f"noisylabels report: warning: {len(skipped)} run(s) skipped, their files are "
            f"damaged (--strict fails instead):\n{lines}",
            file=sys.stderr,
        )
    return text
