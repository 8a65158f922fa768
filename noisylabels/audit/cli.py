"""``noisylabels audit RUN_DIR``: which training labels of a finished run are likely wrong.

Examples::

    noisylabels audit runs/quickstart/lightning_logs/version_0
    noisylabels audit RUN --top 40 --classes cat,dog
    noisylabels audit RUN --score posterior --folds 5        # trains 5 more models
    noisylabels audit --config configs/quickstart.yaml -- --data.noise_rate 0.2   # fit first

Writes ``label_issues.csv`` (every audited label, most suspect first) and ``label_issues.png``
(the ``--top`` most suspect images, given vs predicted label) in the run folder (with
``--classes``: ``label_issues_<classes>.csv``/``.png``, leaving the full ranking), and prints the
top of the ranking; where the true labels are known (synthetic noise, a label file) also the
precision and recall of the flagged set and the AUROC of the score against the flipped labels.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, NoReturn

from noisylabels.arguments import CommandParser
from noisylabels.audit.choices import DEFAULT_FOLDS, DEFAULT_SCORE, DEFAULT_TOP, SCORES
from noisylabels.errors import InputError

if TYPE_CHECKING:
    from noisylabels.audit.issues import LabelIssues


class Parser(CommandParser):
    """The subcommands' parser whose mistakes are user errors (one paragraph from the
    ``noisylabels`` command) instead of a usage message and an exit."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.with_hint(message)} (noisylabels audit --help)")


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``noisylabels audit``."""
    p = Parser(
        prog="noisylabels audit",
        description="Rank the training labels of a finished run (or of a run trained first with "
        "--config) from most to least likely wrong; write label_issues.csv and label_issues.png "
        "in the run folder. Fit options for --config follow a '--'.",
    )
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="folder of a finished run")
    p.add_argument(
        "--config",
        action="append",
        metavar="FILE",
        help="train a run with `noisylabels fit --config FILE ...` first, then audit it "
        "(repeatable; fit options after '--')",
    )
    p.add_argument(
        "--score",
        choices=SCORES,
        default=DEFAULT_SCORE,
        help="margin (default): minus the area under the margin over the training epochs; "
        "loss: the mean training loss; weight: minus the mean VRNL weight (alpha != 0); "
        "posterior: 1 - the out-of-sample posterior of the given label (trains --folds models)",
    )
    p.add_argument(
        "--top",
        default=str(DEFAULT_TOP),
        metavar="K",
        help=f"how many of the most suspect labels to print and draw (default {DEFAULT_TOP})",
    )
    p.add_argument(
        "--classes",
        metavar="A,B",
        help="audit only the labels given these classes (comma-separated names or numbers); "
        "writes label_issues_<classes>.csv/.png, leaving the full label_issues.csv",
    )
    p.add_argument(
        "--folds",
        default=str(DEFAULT_FOLDS),
        metavar="K",
        help=f"K of the cross-validation behind --score posterior (default {DEFAULT_FOLDS})",
    )
    p.add_argument(
        "--include-unhealthy",
        action="store_true",
        help="audit a run whose health is not 'ok' (it stopped learning: its scores are a "
        "model's at chance), with a warning; refused without it",
    )
    p.add_argument(
        "--data.data_dir",
        dest="data_dir",
        metavar="DIR",
        help="where the run's dataset is now (default: the data_dir of its config)",
    )
    return p


def _whole(value: str, option: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise InputError(f"{option} must be a whole number >= {minimum}, got {value!r}")
    return number


def describe(issues: LabelIssues, top: int) -> str:
    """What the command prints: the counts, the quality where known, the top of the ranking
    and the files written."""
    audited = len(issues.rows)
    where = f" given {', '.join(issues.classes)}" if issues.classes else ""
    lines = [
        f"{issues.run}: {audited} training labels{where} ranked by {issues.score}; "
        f"{issues.flagged} flagged as likely wrong"
    ]
    q = issues.quality
    if q is not None and q["flipped"]:
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        lines.append(
            f"against the {q['flipped']} known flipped labels: precision {fmt(q['precision'])}, "
            f"recall {fmt(q['recall'])}, AUROC {fmt(q['auroc'])}"
        )
    shown = issues.rows[:top]
    if shown:
        columns = [
            c
            for c in ("rank", "index", "file", "given", "predicted", "score", "true_label")
            if c in ("given", "predicted") or c in shown[0]
        ]
        table = [columns]
        for row in shown:
            cells = []
            for c in columns:
                if c in ("given", "predicted"):
                    cells.append(str(row.get(f"{c}_class", row[f"{c}_label"])))
                else:
                    cells.append(str(row[c]))
            table.append(cells)
        widths = [max(len(r[j]) for r in table) for j in range(len(columns))]
        lines.append("")
        for cells in table:
            padded = (cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
            lines.append("  ".join(padded).rstrip())
        lines.append("")
    lines.append(f"wrote {issues.csv_path}")
    if issues.grid_path is not None:
        lines.append(f"wrote {issues.grid_path}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``noisylabels audit``; prints the audit, returns 0. User errors raise."""
    argv = list(argv or [])
    fit_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, fit_args = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    top = _whole(args.top, "--top", 1)
    folds = _whole(args.folds, "--folds", 2)
    # start-up time: the audit loads torch and Lightning; --help and a refused option do not
    from noisylabels.audit.issues import audit, fit_and_audit

    options = {
        "score": args.score,
        "top": top,
        "classes": args.classes,
        "folds": folds,
        "data_dir": args.data_dir,
        "unhealthy": args.include_unhealthy,
        "log": print,
    }
    if args.config and args.run_dir:
        raise InputError("give either RUN_DIR (a finished run) or --config (train one first)")
    if args.config:
        configs = [a for config in args.config for a in ("--config", config)]
        issues = fit_and_audit([*configs, *fit_args], **options)
    elif args.run_dir:
        if fit_args:
            raise InputError(
                "fit options after '--' go with --config (a run to train first); RUN_DIR is a "
                "finished run"
            )
        issues = audit(args.run_dir, **options)
    else:
        raise InputError(
            "noisylabels audit needs RUN_DIR (the folder of a finished run) or --config FILE "
            "(train a run first); noisylabels audit --help"
        )
    print(describe(issues, top))
    return 0
