"""What TensorBoard shows first of a run: the mislabeled and the correctly labeled samples'
statistics side by side, each subset a line of its own with its name.

TensorBoard colours and names the lines of a chart by *run* (a folder of event files), so the
two subsets of a run are written as two runs inside its folder, ``by_subset/mislabeled`` and
``by_subset/correctly_labeled``, under the same tags: every chart of the group
:data:`GROUP` then holds one line per subset, named ``…/by_subset/mislabeled`` and
``…/by_subset/correctly_labeled`` in its legend. The group's name starts with a capital letter,
which TensorBoard's Time Series and Scalars dashboards sort before the lower-case tags (``epoch``,
``hp_metric``, ``subsets``, ``train``, ``val``), so it is the first group on the first screen.
The group also holds :data:`FIGURE`, the figure ``noisylabels plot`` draws (correctly labeled
blue and dashed, mislabeled orange and solid), so the colours TensorBoard picks for runs never
leave the subsets unnamed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from noisylabels.callbacks.subset_stats import SUBSETS, tag

GROUP = "Mislabeled vs correctly labeled"
FOLDER = "by_subset"
RUN_NAMES = {"mislabeled": "mislabeled", "correct": "correctly_labeled"}
# per-subset statistic (its tag's quantity) -> its chart's name
CHARTS = {
    "loss_mean": "training loss, mean",
    "ce_clean_mean": "CE of clean posterior vs clean label, mean",
    "ce_noisy_mean": "CE of noisy posterior vs noisy label, mean",
    "weight_mean": "VRNL weight w_i, mean",
    "loss_std": "training loss, std",
    "ce_clean_std": "CE of clean posterior vs clean label, std",
    "ce_noisy_std": "CE of noisy posterior vs noisy label, std",
    "nonpositive_weight_frac": "fraction of weights w_i <= 0",
}
FIGURE = f"{GROUP}/figure (as noisylabels plot draws it)"


def board_tag(quantity: str) -> str:
    """The tag of a per-subset statistic in :data:`GROUP`, e.g. ``Mislabeled vs correctly
    labeled/training loss, mean``."""
    return f"{GROUP}/{CHARTS[quantity]}"


def custom_scalars_layout() -> dict[str, dict[str, list[Any]]]:
    """Layout of TensorBoard's Custom Scalars tab: a chart per statistic of :data:`CHARTS`,
    whose lines are the subsets' runs (so each line is coloured and named by its subset)."""
    charts = {
        name: ["Multiline", [f"^{re.escape(board_tag(quantity))}$"]]
        for quantity, name in CHARTS.items()
    }
    return {GROUP: charts}


class SubsetBoard:
    """The two subset runs of one TensorBoard run folder (created on first use, process 0)."""

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self._writers: dict[str, Any] = {}

    def _writer(self, subset: str) -> Any:
        if subset not in self._writers:
            from torch.utils.tensorboard import SummaryWriter

            folder = self.log_dir / FOLDER / RUN_NAMES[subset]
            self._writers[subset] = SummaryWriter(str(folder))
        return self._writers[subset]

    def write(self, scalars: dict[str, float], step: int) -> None:
        """Write each subset's statistics of ``scalars`` (by their ``subsets/...`` tags) at
        ``step``; a statistic a subset lacks (no samples) is left out."""
        for subset in SUBSETS:
            values = {q: scalars.get(tag(q, subset)) for q in CHARTS}
            present = {q: float(v) for q, v in values.items() if v is not None and v == v}
            if not present:
                continue
            writer = self._writer(subset)
            for quantity, value in present.items():
                writer.add_scalar(board_tag(quantity), value, global_step=step)
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


def add_figure(experiment: Any, statistics_csv: Path, label: str, step: int) -> bool:
    """Add the loss figure of ``noisylabels plot`` for the statistics in ``statistics_csv`` to
    a TensorBoard ``experiment`` (a ``SummaryWriter``) as :data:`FIGURE` at ``step``; ``False``
    where there is nothing to draw yet."""
    from noisylabels.report.plot import Run, draw, read_csv_series

    if not statistics_csv.is_file():
        return False
    series = read_csv_series(statistics_csv)
    if not series:
        return False
    import matplotlib.pyplot as plt

    figure = draw([Run(statistics_csv.parent, label, series)], "loss")
    try:
        experiment.add_figure(FIGURE, figure, global_step=step, close=False)
    finally:
        plt.close(figure)
    return True
