"""The per-subset statistics behind :class:`~noisylabels.callbacks.SubsetStatistics`, as pure
functions of an epoch's per-sample buffer (no Lightning).

Per sample: the method's training loss, ``ce_noisy = -log q_{y~}`` with the method's noisy
posterior ``q`` (``q = p @ T`` for transition methods, ``T`` row-stochastic,
``T[i, j] = P(noisy = j | clean = i)``), ``ce_clean = -log p_y`` and the VRNL weight; per subset
(mislabeled, correct, clean label unknown) their means, population stds and counts; and
``subsets.csv``, an epoch's statistics as a row of a file any tool reads.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from noisylabels.errors import InputError, warn
from noisylabels.methods.core.losses import EPS
from noisylabels.methods.core.step import StepOutput

SUBSETS = ("mislabeled", "correct")
LOSSES = ("loss", "ce_noisy", "ce_clean")
PREFIX = "subsets"

CSV_FILE = "subsets.csv"  # in the run folder: "epoch" (from 0), then a column per tag
EPOCH_COLUMN = "epoch"

# columns after the C logits of the per-sample buffer
_LOSS, _WEIGHT, _SEEN_LOSS, _SEEN_WEIGHT = range(4)


def tag(quantity: str, subset: str) -> str:
    """TensorBoard tag of a statistic, e.g. ``subsets/ce_noisy_mean/mislabeled``."""
    return f"{PREFIX}/{quantity}/{subset}"


def csv_columns() -> list[str]:
    """The columns of ``subsets.csv``: ``epoch`` (from 0), then every statistic by its tag."""
    per_subset = [f"{q}_{m}" for m in ("mean", "std") for q in LOSSES]
    per_subset += ["weight_mean", "nonpositive_weight_frac"]
    columns = [EPOCH_COLUMN] + [tag(name, s) for name in per_subset for s in SUBSETS]
    columns.append(tag("nonpositive_weight_frac", "all"))
    columns += [tag("count", s) for s in (*SUBSETS, "unknown")]
    return columns


def write_csv_row(
    path: str | Path, epoch: int, scalars: dict[str, float], columns: list[str] | None = None
) -> None:
    """Set ``epoch``'s row of the CSV file ``path`` to ``scalars`` (by tag; a statistic left
    out is an empty cell) under ``columns`` (``epoch`` first; default: ``subsets.csv``'s). Rows
    of this epoch and later ones are dropped first, so a resumed run that redoes an epoch leaves
    one row per epoch. The file is replaced atomically."""
    path = Path(path)
    columns = csv_columns() if columns is None else columns
    rows: list[dict[str, str]] = []
    if path.is_file():
        with path.open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if int(r[EPOCH_COLUMN]) < epoch]
    row = {EPOCH_COLUMN: str(epoch)}
    row.update({name: _cell(v) for name, v in scalars.items() if name in columns})
    rows.append(row)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def _cell(value: Any) -> str:
    """A CSV cell: an integer (a count, a class) as one, any other number as a float."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return repr(float(value))


def subset_ids(noisy: Tensor, clean: Tensor) -> Tensor:
    """Subset of each sample: 0 mislabeled, 1 correct, 2 clean label unknown (``-1``)."""
    ids = torch.where(noisy != clean, 0, 1)
    return torch.where(clean < 0, 2, ids)


def network_steps(outputs: Any, network: int) -> list[StepOutput] | None:
    """The :class:`StepOutput` records of ``network`` that a training step returned
    (``outputs["steps"]``); ``None`` where it returned none (not a noisylabels method)."""
    steps = outputs.get("steps") if isinstance(outputs, dict) else None
    return None if steps is None else [step for step in steps if step.network == network]


class StepRecords(L.Callback):
    """Base of the callbacks that keep one network's per-sample records of a training epoch
    (:class:`SubsetStatistics`, :class:`SampleDynamics`): ``(index, logits, losses)`` and
    ``(index, weights, used)`` of every step, as references, written into a per-sample buffer
    and summed across processes once at the epoch's end (:meth:`gather_records`), once for all
    the callbacks of a trainer that recorded the same steps.

    Args:
        network: which network's steps to record, for methods that train several (0: the
            first, the one a single-network method has).
    """

    def __init__(self, network: int = 0) -> None:
        if network < 0:
            raise ValueError(f"network must be >= 0, got {network}")
        self.network = network
        self._loss_records: list[tuple[Tensor, Tensor, Tensor]] = []
        self._weight_records: list[tuple[Tensor, Tensor, Tensor | None]] = []
        self._warned = False
        # this epoch's gathered records, for the other StepRecords of the trainer: (key, sums)
        self._gathered: tuple[tuple[Any, ...], Tensor] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse to record a network the method does not train (its steps would never come,
        and the record would stay empty)."""
        networks = getattr(pl_module, "networks", None)
        if networks is not None and self.network >= len(networks):
            raise InputError(
                f"{type(self).__name__}(network={self.network}): {type(pl_module).__name__} "
                f"trains {len(networks)} network(s), numbered from 0"
            )

    def record_steps(self, outputs: Any, losses: bool = True) -> None:
        """Keep this step's records of :attr:`network` (the losses only if ``losses``); a step
        without records (not a noisylabels method) is said once."""
        steps = network_steps(outputs, self.network)
        if steps is None:
            if not self._warned:
                warn(
                    f"{type(self).__name__}: the training step returned no 'steps' (StepOutput "
                    "records of a noisylabels method), so there is nothing to record"
                )
                self._warned = True
            return
        for step in steps:
            # references only: the mask is applied at the epoch's end (indexing by it here
            # would synchronize)
            self._weight_records.append((step.index, step.weights, step.used))
            if losses:
                self._loss_records.append((step.index, step.logits, step.losses))

    def clear_records(self) -> None:
        self._loss_records, self._weight_records = [], []

    def start_epoch(self) -> None:
        """Drop the records and the gathered sums of the epoch before (at a training epoch's
        start)."""
        self.clear_records()
        self._gathered = None

    def take_records(self, buffer: Tensor) -> Tensor:
        """This epoch's records written into ``buffer`` (see :func:`fill_buffer`); the records
        are cleared."""
        buffer = fill_buffer(buffer, self._loss_records, self._weight_records)
        self.clear_records()
        return buffer

    def gather_records(self, trainer: L.Trainer, buffer: Tensor, shared: bool = True) -> Tensor:
        """This epoch's records written into ``buffer`` and summed across processes; the
        records are cleared. Do not modify the result: it may be another callback's.

        ``shared``: the records are those of every training step of :attr:`network` in this
        epoch, losses included (nothing else added), so every :class:`StepRecords` of the
        trainer that says so for the same network and buffer shape in the same epoch holds the
        same sums. The first of them fills and reduces its buffer; the others return its sums
        (one fill and one all-reduce per epoch, however many callbacks read them). The choice
        depends only on the callbacks and the epoch, so every process makes the same one."""
        # every callback of a Trainer; a stand-in trainer without callbacks has no others
        others = [
            c
            for c in getattr(trainer, "callbacks", None) or ()
            if isinstance(c, StepRecords) and c is not self
        ]
        key = None
        if shared and others:
            key = (
                trainer.current_epoch,
                trainer.global_step,
                self.network,
                tuple(buffer.shape),
                buffer.dtype,
                buffer.device,
            )
            for other in others:
                if other._gathered is not None and other._gathered[0] == key:
                    self.clear_records()
                    return other._gathered[1]
        gathered = trainer.strategy.reduce(self.take_records(buffer), reduce_op="sum")
        self._gathered = None if key is None else (key, gathered)
        return gathered


def fill_buffer(
    buffer: Tensor,
    loss_records: list[tuple[Tensor, Tensor, Tensor]],
    weight_records: list[tuple[Tensor, Tensor, Tensor | None]],
) -> Tensor:
    """Write an epoch's records into the per-sample ``buffer`` (``(N, C + 4)``, zeroed first)
    and return it: ``(index, logits, losses)`` and ``(index, weights, used)`` records (``used``:
    the samples that got a weight, ``None`` for all); a sample recorded twice keeps one of its
    records."""
    buffer = buffer.zero_()
    c = buffer.shape[1] - 4
    if loss_records:
        index = torch.cat([r[0] for r in loss_records])
        logits = torch.cat([r[1].float() for r in loss_records])
        losses = torch.cat([r[2].float() for r in loss_records])
        buffer[index, : c + 1] = torch.cat([logits, losses[:, None]], 1)
        buffer[index, c + _SEEN_LOSS] = 1.0
    if weight_records:
        index = torch.cat([r[0] for r in weight_records])
        weights = torch.cat([r[1].float() for r in weight_records])
        used = [
            torch.ones_like(r[0], dtype=torch.bool) if r[2] is None else r[2]
            for r in weight_records
        ]
        keep = torch.cat(used)
        index, weights = index[keep], weights[keep]
        buffer[index, c + _WEIGHT] = weights
        buffer[index, c + _SEEN_WEIGHT] = 1.0
    return buffer


def summarize(
    buffer: Tensor,
    noisy: Tensor,
    clean: Tensor,
    subsets: Tensor,
    noisy_posterior: Any = None,
    with_losses: bool = False,
) -> tuple[dict[str, float], dict[str, Tensor]]:
    """Per-subset statistics of an epoch from a (process-summed) per-sample buffer.

    Args:
        buffer: ``(N, C + 4)``: summed logits, training loss, VRNL weight, and how many
            processes recorded each sample's losses / weight. A sample recorded by several
            processes (the padding of a distributed sampler) is averaged, never counted twice.
        noisy, clean: training and clean labels ``(N,)`` (clean ``-1`` = unknown).
        subsets: :func:`subset_ids` of the samples.
        noisy_posterior: map ``(p, index)`` from clean posteriors ``p`` of the samples with
            dataset indices ``index`` to noisy posteriors ``q`` (e.g. ``q = p @ T``, or a
            per-sample T); ``None`` means ``q = p``.
        with_losses: also return each subset's per-sample training losses (for histograms).

    Returns:
        ``(scalars, losses)``: statistics by tag (means and population std; those of an empty
        subset are left out, counts are always there) and the per-subset training losses.
    """
    c = buffer.shape[1] - 4
    n_loss, n_weight = buffer[:, c + _SEEN_LOSS], buffer[:, c + _SEEN_WEIGHT]
    rows = torch.nonzero((n_loss + n_weight) > 0).flatten()
    b = buffer[rows]
    has_loss, has_weight = b[:, c + _SEEN_LOSS] > 0, b[:, c + _SEEN_WEIGHT] > 0
    count = b[:, c + _SEEN_LOSS].clamp_min(1.0)
    log_p = F.log_softmax(b[:, :c] / count[:, None], dim=1)
    label = noisy[rows].unsqueeze(1)
    ce_clean = -log_p.gather(1, clean[rows].clamp_min(0).unsqueeze(1)).squeeze(1)
    if noisy_posterior is None:
        ce_noisy = -log_p.gather(1, label).squeeze(1)
    else:
        q = noisy_posterior(log_p.exp(), rows)
        ce_noisy = -torch.log(q.gather(1, label).squeeze(1) + EPS)
    loss = b[:, c + _LOSS] / count
    values = torch.stack([loss, ce_noisy, ce_clean]).double() * has_loss
    weight = torch.where(has_weight, b[:, c + _WEIGHT] / b[:, c + _SEEN_WEIGHT].clamp_min(1), 0)
    columns = [
        values,
        values.square(),
        torch.stack([weight, weight <= 0, has_weight, has_loss]).double() * has_weight,
        has_loss[None].double(),
    ]
    # one scatter-add: sums per subset (0 mislabeled, 1 correct, 2 unknown) of every column
    x = torch.cat(columns)
    sums = x.new_zeros(len(x), 3).index_add_(1, subsets[rows], x)
    k = len(LOSSES)
    n = sums[-1]
    mean = sums[:k] / n.clamp_min(1)
    std = (sums[k : 2 * k] / n.clamp_min(1) - mean.square()).clamp_min(0).sqrt()
    w_sum, nonpositive, n_w = sums[2 * k], sums[2 * k + 1], sums[2 * k + 2]
    table = torch.stack(
        [*mean, *std, w_sum / n_w.clamp_min(1), nonpositive / n_w.clamp_min(1), n, n_w]
    )
    table = torch.cat([table.flatten(), (nonpositive.sum() / n_w.sum().clamp_min(1))[None]])
    flat = table.tolist()  # the one host sync of an epoch
    cols = 3
    names = [f"{q}_mean" for q in LOSSES] + [f"{q}_std" for q in LOSSES]
    names += ["weight_mean", "nonpositive_weight_frac", "count", "_weight_count"]
    scalars: dict[str, float] = {}
    for r, name in enumerate(names):
        for j, subset in enumerate((*SUBSETS, "unknown")):
            scalars[tag(name, subset)] = flat[r * cols + j]
    scalars[tag("nonpositive_weight_frac", "all")] = flat[-1]
    kept = {tag("count", s) for s in (*SUBSETS, "unknown")} | {
        tag("nonpositive_weight_frac", "all")
    }
    for subset in SUBSETS:
        if scalars[tag("count", subset)] > 0:
            kept |= {tag(f"{q}_{m}", subset) for q in LOSSES for m in ("mean", "std")}
        if scalars[tag("_weight_count", subset)] > 0:
            kept |= {tag("weight_mean", subset), tag("nonpositive_weight_frac", subset)}
    scalars = {name: value for name, value in scalars.items() if name in kept}
    losses: dict[str, Tensor] = {}
    if with_losses:
        ids = subsets[rows]
        for j, subset in enumerate(SUBSETS):
            losses[subset] = loss[(ids == j) & has_loss]
    return scalars, losses
