"""``noisylabels plot``: the VRNL paper's loss figures from the per-subset statistics of runs.

``--kind loss`` (default) draws Fig.-1-style panels: the average training loss of correctly
labeled and of mislabeled samples per epoch, one panel per run (e.g. alpha = -0.1, 0, 0.1).
``--kind posteriors`` draws the Figs.-4/5-style grid: the cross-entropy of the clean posterior
against the clean label (top row) and of the noisy posterior against the noisy label (bottom
row), mean with a ±1 std band per subset (cut at 0), one column per run. The statistics are
those the :class:`~noisylabels.callbacks.SubsetStatistics` callback writes during training: the
run folder's ``subsets.csv`` (whatever the logger), or, for runs that have none (made before the
file existed), the ``subsets/*`` scalars of its TensorBoard event files.

Example::

    noisylabels plot runs/a-0.1 runs/a0 runs/a0.1 --out fig1.png
    noisylabels plot runs/rw runs/rw_vrnl --kind posteriors --out fig4.pdf
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisylabels.arguments import CommandParser
from noisylabels.disk.reading import LIMITS, UnreadableFile, read_json, read_text, read_yaml
from noisylabels.disk.runs import newest_run
from noisylabels.report.collect import CONFIG_FILE, RESULTS_FILE, VRNL_SUFFIX
from noisylabels.report.writing import out_error

# the statistics file of a run folder, as SubsetStatistics names it
# (noisylabels.callbacks.subset_stats.CSV_FILE); named here, as report names the files it reads,
# so that plotting loads neither torch nor Lightning
CSV_FILE = "subsets.csv"
KINDS = ("loss", "posteriors")
SUFFIXES = (".png", ".pdf", ".svg")
MARKER = "subsets/loss_mean/correct"  # a tag every run with the callback has
STYLE = {  # the paper's colours: correct = blue dashed, mislabeled = orange solid
    "correct": {"color": "tab:blue", "linestyle": "--", "label": "correctly labeled"},
    "mislabeled": {"color": "tab:orange", "linestyle": "-", "label": "mislabeled"},
}


@dataclass
class Run:
    """Per-epoch statistics of one run: ``series[tag] = (epochs, values)``, epochs from 1."""

    path: Path
    label: str
    series: dict[str, tuple[list[int], list[float]]]

    def get(self, quantity: str, subset: str) -> tuple[list[int], list[float]] | None:
        return self.series.get(f"subsets/{quantity}/{subset}")


def _has_statistics(folder: Path) -> bool:
    """Whether the event files in ``folder`` hold subset statistics."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 1})
    acc.Reload()
    return MARKER in acc.Tags().get("scalars", [])


def find_statistics_dir(run_dir: Path) -> Path:
    """The folder under ``run_dir`` that holds subset statistics (``subsets.csv`` or event files
    with them); of several, the one whose statistics were written last, said on stderr
    (:func:`~noisylabels.disk.runs.newest_run`, the rule ``audit`` follows too).

    ``run_dir`` may be a run's log dir (``.../version_0``) or a root above it.
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise FileNotFoundError(f"run dir {run_dir} does not exist")
    tables = list(run_dir.rglob(CSV_FILE))
    in_tables = {p.parent for p in tables}
    # event files in or under a folder with subsets.csv are that run's own
    event_files = [
        p
        for p in run_dir.rglob("events.out.tfevents.*")
        if not any(folder in in_tables for folder in p.parents)
    ]
    events = {p.parent for p in event_files}
    with_statistics = {f for f in events if _has_statistics(f)}
    markers = tables + [p for p in event_files if p.parent in with_statistics]
    if not markers:
        found = (
            f"event files in {len(events)} folder(s)"
            if events
            else f"no {CSV_FILE}, no event files"
        )
        raise FileNotFoundError(
            f"{run_dir}: {found}, none with per-subset statistics; they are written by the "
            "SubsetStatistics callback, which noisylabels fit adds unless --trainer.callbacks "
            "leaves it out (see docs/observability.md)"
        )
    return newest_run(run_dir, markers, "runs with statistics", command="plot")


def _run_method(event_dir: Path) -> tuple[str | None, float | None]:
    """The run's method as ``results.json`` names it (``Forward-VRNL``; for a run not finished
    yet, its class with ``-VRNL`` where α is not 0) and its α, from the run's files."""
    args: dict[str, Any] = {}
    method = None
    config: Any = None
    results: Any = None
    try:
        if os.path.lexists(event_dir / CONFIG_FILE):
            config = read_yaml(event_dir / CONFIG_FILE, "")
        if os.path.lexists(event_dir / RESULTS_FILE):
            results = read_json(event_dir / RESULTS_FILE, "")
    except UnreadableFile as err:  # the curves are still the run's: its label is the folder's
        print(f"noisylabels plot: {err}; its curves are labelled by its folder", file=sys.stderr)
    model = config.get("model") if isinstance(config, dict) else None
    if isinstance(model, dict):
        args = model.get("init_args") if isinstance(model.get("init_args"), dict) else {}
        method = str(model.get("class_path", "")).rsplit(".", 1)[-1] or None
    alpha = args.get("alpha") if isinstance(args.get("alpha"), (int, float)) else None
    if method and alpha:
        method += VRNL_SUFFIX
    if isinstance(results, dict) and results.get("method") is not None:
        method = str(results["method"])
    return method, alpha


def default_label(event_dir: Path) -> str:
    """The method as ``results.json`` and ``noisylabels report`` name it, with α where it is not
    0 (``Forward-VRNL (α = −0.1)``, ``Forward``), else the folder name."""
    method, alpha = _run_method(event_dir)
    if method and alpha:
        return f"{method} (α = {alpha:g})".replace("= -", "= \u2212")  # a minus sign
    if method:
        return method
    return event_dir.parent.name if event_dir.name.startswith("version_") else event_dir.name


def read_csv_series(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """The statistics of a ``subsets.csv``: ``series[tag] = (epochs from 1, values)``; empty
    cells (a subset without samples) are left out, a repeated epoch keeps its last row."""
    by_tag: dict[str, dict[int, float]] = {}
    text = read_text(path, "", LIMITS["json"])
    try:
        for row in csv.DictReader(io.StringIO(text, newline="")):
            epoch = int(row.pop("epoch"))
            for name, value in row.items():
                if name and value not in (None, ""):
                    by_tag.setdefault(name, {})[epoch] = float(value)
    except (KeyError, TypeError, ValueError, csv.Error) as err:
        raise UnreadableFile(
            f"run file {path} is not the statistics table a run writes ({type(err).__name__}: "
            f"{err})",
            path,
        ) from None
    return {
        name: ([e + 1 for e in sorted(steps)], [steps[e] for e in sorted(steps)])
        for name, steps in by_tag.items()
    }


def read_event_series(folder: Path) -> dict[str, tuple[list[int], list[float]]]:
    """The ``subsets/*`` scalars of the event files in ``folder``, as :func:`read_csv_series`
    returns them (a step logged twice keeps its last value). Their epochs are those Lightning
    logged as ``epoch`` at the same steps; runs that logged them at step = epoch (older ones)
    are read as such."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    epoch_at = {e.step: int(e.value) for e in acc.Scalars("epoch")} if "epoch" in tags else {}
    marked = sorted({e.step for e in acc.Scalars(MARKER)}) if MARKER in tags else []
    epochs = [epoch_at.get(s) for s in marked]
    by_epoch = bool(epochs) and None not in epochs
    by_epoch = by_epoch and all(a < b for a, b in zip(epochs[:-1], epochs[1:], strict=True))
    series = {}
    for name in tags:
        if not name.startswith("subsets/"):
            continue
        by_step = {e.step: e.value for e in acc.Scalars(name)}
        if by_epoch:
            by_step = {epoch_at[s]: v for s, v in sorted(by_step.items()) if s in epoch_at}
        steps = sorted(by_step)
        series[name] = ([s + 1 for s in steps], [by_step[s] for s in steps])
    return series


def load_run(run_dir: Path, label: str | None = None) -> Run:
    """Read the per-subset statistics of a run: its ``subsets.csv``, else its event files."""
    folder = find_statistics_dir(run_dir)
    table = folder / CSV_FILE
    series = read_csv_series(table) if table.is_file() else read_event_series(folder)
    return Run(folder, label or default_label(folder), series)


def _missing(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def draw(runs: list[Run], kind: str = "loss", title: str | None = None) -> Any:
    """Draw the figure for ``runs`` and return the matplotlib ``Figure``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    n = len(runs)
    if kind == "loss":
        rows = [("loss", "average training loss")]
    else:
        rows = [
            ("ce_clean", "CE of clean posterior\nvs clean label"),
            ("ce_noisy", "CE of noisy posterior\nvs noisy label"),
        ]
    fig, axes = plt.subplots(
        len(rows),
        n,
        figsize=(3.4 * n + 0.6, 2.9 * len(rows) + (0.4 if title else 0)),
        sharey="row",
        squeeze=False,
    )
    for r, (quantity, ylabel) in enumerate(rows):
        for c, run in enumerate(runs):
            ax = axes[r][c]
            drawn = False
            for subset in ("correct", "mislabeled"):
                mean = run.get(f"{quantity}_mean", subset)
                if mean is None:
                    continue
                drawn = True
                epochs, values = mean
                ax.plot(epochs, values, linewidth=1.6, **STYLE[subset])
                std = run.get(f"{quantity}_std", subset) if kind == "posteriors" else None
                if std is not None and std[0] == epochs:
                    # losses are >= 0: the band stops at 0 however skewed they are
                    lo = [max(m - s, 0.0) for m, s in zip(values, std[1], strict=True)]
                    hi = [m + s for m, s in zip(values, std[1], strict=True)]
                    ax.fill_between(epochs, lo, hi, color=STYLE[subset]["color"], alpha=0.18)
            if not drawn:
                _missing(ax, "no statistics\n(clean labels unknown?)")
            if r == 0:
                ax.set_title(run.label, fontsize=10)
            if r == len(rows) - 1:
                ax.set_xlabel("epoch")
            if c == 0:
                ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.xaxis.get_major_locator().set_params(integer=True)
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        axes[0][0].legend(handles, labels, fontsize=8, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot(
    run_dirs: list[Path],
    out: Path,
    kind: str = "loss",
    labels: list[str] | None = None,
    title: str | None = None,
) -> Path:
    """Draw ``kind`` for ``run_dirs`` into ``out`` (PNG, PDF or SVG by suffix); return ``out``."""
    out = Path(out)
    if out.suffix.lower() not in SUFFIXES:
        raise ValueError(f"--out must end with one of {SUFFIXES}, got {out.name!r}")
    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"--labels got {len(labels)} labels for {len(run_dirs)} run dirs")
    runs = [
        load_run(Path(d), None if labels is None else labels[i]) for i, d in enumerate(run_dirs)
    ]
    fig = draw(runs, kind, title)
    import matplotlib.pyplot as plt

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=150 if out.suffix.lower() == ".png" else None)
    except OSError as err:
        raise out_error(out, err) from None
    finally:
        plt.close(fig)
    return out


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``noisylabels plot``."""
    parser = CommandParser(
        prog="noisylabels plot",
        description="Draw the VRNL paper's loss figures (mislabeled vs correctly labeled "
        "samples per epoch) from runs trained with the SubsetStatistics callback (their "
        "subsets.csv, or their TensorBoard event files).",
        allow_abbrev=False,
    )
    parser.add_argument(
        "run_dirs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="a run's log dir or a folder above it (its newest run with statistics is used); "
        "one panel (column) per run",
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="output file: .png, .pdf or .svg (by suffix)"
    )
    parser.add_argument(
        "--kind",
        choices=KINDS,
        default="loss",
        help="loss: average training loss per subset (Fig. 1 style); posteriors: clean- and "
        "noisy-label CE, mean ± std (Figs. 4/5 style). Default: loss",
    )
    parser.add_argument(
        "--labels",
        nargs="+",
        metavar="LABEL",
        help="panel titles, one per RUN_DIR (default: the method as results.json and report "
        "name it, with alpha where it is not 0)",
    )
    parser.add_argument("--title", help="figure title")
    return parser


def main(argv: list[str] | None = None) -> Path:
    """Entry point of ``noisylabels plot``; returns the written file."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        out = plot(args.run_dirs, args.out, args.kind, args.labels, args.title)
    except (FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
