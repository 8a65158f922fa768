"""Loss statistics of mislabeled vs correctly labeled training samples, per epoch.

The VRNL paper ("Do We Need to Penalize Variance of Losses for Learning with Label Noise?")
argues with these curves: the average training loss of mislabeled and of correctly labeled
samples over training (its Fig. 1), and the cross-entropy of the clean posterior against the
clean label and of the noisy posterior against the noisy label, mean and std per subset (its
Figs. 4 and 5). :class:`SubsetStatistics` records them for any run and writes them to
TensorBoard; ``noisylabels plot`` draws the paper-style figures from the event files.

Per sample ``i`` with clean posterior ``p = softmax(z_i)``, noisy label ``y~_i`` and clean label
``y_i`` the callback keeps:

* ``loss``: the method's own per-sample training loss (e.g. Forward's ``-log (p @ T)_{y~}``);
* ``ce_noisy``: ``-log q_{y~}`` with the method's noisy posterior ``q`` (``q = p @ T`` for
  transition methods, ``T`` row-stochastic, ``T[i, j] = P(noisy = j | clean = i)``; ``q = p``
  for methods without T);
* ``ce_clean``: ``-log p_{y}`` (only where the clean label is known);
* ``weight``: the VRNL weight ``w_i = 1 + 2 alpha (mean(l) - l_i)`` the training step used.

A training step costs nothing but keeping references to the detached logits, losses and
weights it already computed (no kernel, no host sync); once per epoch they are written into a
per-sample buffer, summed across processes, and the posteriors, cross-entropies and statistics
are computed, with the method's ``T`` at the end of the epoch.

A sample is *mislabeled* when its clean label is known and differs from its training label,
*correct* when they agree; samples with an unknown clean label (real-world noise) belong to
neither subset.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

SOURCES = ("train_step", "pass")
SUBSETS = ("mislabeled", "correct")
LOSSES = ("loss", "ce_noisy", "ce_clean")
PREFIX = "subsets"
EPS = 1e-12

# columns after the C logits of the per-sample buffer
_LOSS, _WEIGHT, _SEEN_LOSS, _SEEN_WEIGHT = range(4)


def tag(quantity: str, subset: str) -> str:
    """TensorBoard tag of a statistic, e.g. ``subsets/ce_noisy_mean/mislabeled``."""
    return f"{PREFIX}/{quantity}/{subset}"


def custom_scalars_layout() -> dict[str, dict[str, list[Any]]]:
    """Layout of TensorBoard's Custom Scalars tab: the two subsets overlaid in each chart."""
    charts: dict[str, list[Any]] = {}
    names = {
        "loss": "training loss",
        "ce_noisy": "CE of noisy posterior vs noisy label",
        "ce_clean": "CE of clean posterior vs clean label",
    }
    for quantity, name in names.items():
        charts[f"{name}, mean"] = ["Multiline", [tag(f"{quantity}_mean", s) for s in SUBSETS]]
        charts[f"{name}, std"] = ["Multiline", [tag(f"{quantity}_std", s) for s in SUBSETS]]
    charts["VRNL weight w_i, mean"] = ["Multiline", [tag("weight_mean", s) for s in SUBSETS]]
    charts["fraction of weights w_i <= 0"] = [
        "Multiline",
        [tag("nonpositive_weight_frac", s) for s in (*SUBSETS, "all")],
    ]
    return {"mislabeled vs correctly labeled": charts}


def subset_ids(noisy: Tensor, clean: Tensor) -> Tensor:
    """Subset of each sample: 0 mislabeled, 1 correct, 2 clean label unknown (``-1``)."""
    ids = torch.where(noisy != clean, 0, 1)
    return torch.where(clean < 0, 2, ids)


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
        noisy_posterior: map from clean posteriors ``p`` to noisy posteriors ``q`` (e.g.
            ``q = p @ T``); ``None`` means ``q = p``.
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
        ce_noisy = -torch.log(noisy_posterior(log_p.exp()).gather(1, label).squeeze(1) + EPS)
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


class SubsetStatistics(L.Callback):
    """Per-epoch loss statistics of mislabeled vs correctly labeled training samples.

    Reproduces the quantities of the VRNL paper's Figs. 1, 4 and 5 (see the module docstring):
    per subset the mean and std of the method's training loss, of the noisy posterior's CE
    against the noisy label and of the clean posterior's CE against the clean label, the mean
    VRNL weight ``w_i`` and the fraction of ``w_i <= 0``, plus loss histograms. Written to
    TensorBoard as ``subsets/<quantity>/<subset>`` with step = epoch (0-based) and a Custom
    Scalars layout overlaying the subsets; also logged to ``trainer.callback_metrics``.

    Args:
        source: ``train_step`` reuses the losses the training steps computed (free; a sample's
            values are those of its step, so they average over the model's states during the
            epoch); ``pass`` runs the model in eval mode over the training split without
            augmentation at the end of the epoch (exact; one extra forward pass). The weights
            ``w_i`` always come from the training steps.
        every_n_epochs: record the statistics at the end of every n-th epoch (and the last).
        histograms: write per-subset histograms of the training loss to TensorBoard.
        network: which network's steps to record, for methods that train several (0: the
            first, the one a single-network method has). ``source: pass`` evaluates the
            method's own forward (its first network) whatever this says.

    The values come from the :class:`~noisylabels.methods.step.StepOutput` records the method's
    training steps return under ``"steps"``: losses and logits of every sample of the batch,
    weights of the samples the objective used (a method that selects samples, such as
    Co-teaching, gives weights only to those).

    Under multi-process training every process records the samples it trained on and the
    per-sample buffers are summed across processes once per epoch; a sample seen by several
    processes (sampler padding) counts once.
    """

    def __init__(
        self,
        source: str = "train_step",
        every_n_epochs: int = 1,
        histograms: bool = True,
        network: int = 0,
    ) -> None:
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        self.source = source
        self.every_n_epochs = every_n_epochs
        self.histograms = histograms
        if network < 0:
            raise ValueError(f"network must be >= 0, got {network}")
        self.network = network
        self.last: dict[str, float] = {}
        self._buffer: Tensor | None = None
        self._noisy: Tensor | None = None
        self._clean: Tensor | None = None
        self._subsets: Tensor | None = None
        # this epoch's records: (index, logits, losses) and (index, weights)
        self._loss_records: list[tuple[Tensor, Tensor, Tensor]] = []
        self._weight_records: list[tuple[Tensor, Tensor]] = []
        self._active = False
        self._warned = False

    # ------------------------------------------------------------------ setup
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._buffer = None
        mine = [cb for cb in trainer.callbacks if isinstance(cb, SubsetStatistics)]
        if mine and mine[0] is not self:
            rank_zero_warn(
                f"{len(mine)} SubsetStatistics callbacks would write the same statistics; only "
                "the first one in trainer.callbacks records. To change the options of a "
                "config's callback, use --trainer.callbacks.init_args.KEY VALUE rather than "
                "adding another with --trainer.callbacks+=..."
            )
            return
        datamodule = trainer.datamodule
        noisy = getattr(datamodule, "noisy_labels", None)
        data = getattr(datamodule, "data", None)
        if noisy is None or data is None:
            rank_zero_warn(
                "SubsetStatistics needs a noisylabels data module (noisy and clean labels of "
                "the training set); no subset statistics are recorded for this run"
            )
            return
        clean = data.train_clean.long()
        noisy = noisy.long()
        known = clean >= 0
        device = pl_module.device
        num_classes = int(getattr(pl_module, "num_classes", 0) or datamodule.num_classes)
        self._noisy, self._clean = noisy.to(device), clean.to(device)
        self._subsets = subset_ids(self._noisy, self._clean)
        self._buffer = torch.zeros(len(noisy), num_classes + 4, device=device)
        train = getattr(datamodule, "train_indices", None)
        train = torch.arange(len(noisy)) if train is None else train
        n_train, n_known = len(train), int(known[train].sum())
        n_mis = int((known & (noisy != clean))[train].sum())
        message = (
            f"SubsetStatistics ({self.source}): {n_train} training samples, {n_mis} mislabeled, "
            f"{n_known - n_mis} correctly labeled"
        )
        if n_known < n_train:
            message += (
                f"; the clean label is known for {n_known} of them, so the subsets and the "
                f"clean-label statistics use those {n_known} only"
            )
        rank_zero_info(message)
        if n_known == 0:
            rank_zero_warn(
                "SubsetStatistics: no training sample has a known clean label, so there are no "
                "mislabeled/correct subsets; only the overall weight statistics are recorded"
            )
        for logger in self._tensorboards(trainer):
            logger.experiment.add_custom_scalars(custom_scalars_layout())
            logger.experiment.add_text(f"{PREFIX}/summary", message)

    @staticmethod
    def _tensorboards(trainer: L.Trainer) -> list[TensorBoardLogger]:
        if not trainer.is_global_zero:
            return []
        return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]

    def _records(self, trainer: L.Trainer) -> bool:
        epoch = trainer.current_epoch
        last = trainer.max_epochs is not None and epoch + 1 == trainer.max_epochs
        return (epoch + 1) % self.every_n_epochs == 0 or last

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._active = self._buffer is not None and self._records(trainer)
        self._loss_records, self._weight_records = [], []

    # ------------------------------------------------------------------ recording
    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if not self._active:
            return
        steps = outputs.get("steps") if isinstance(outputs, dict) else None
        if steps is None:
            if not self._warned:
                rank_zero_warn(
                    "SubsetStatistics: the training step returned no 'steps' (StepOutput "
                    "records of a noisylabels method), so there is nothing to record"
                )
                self._warned = True
            return
        for step in steps:
            if step.network != self.network:
                continue
            if step.used is None:
                self._weight_records.append((step.index, step.weights))
            else:
                self._weight_records.append((step.index[step.used], step.weights[step.used]))
            if self.source == "train_step":
                self._loss_records.append((step.index, step.logits, step.losses))

    def _fill_buffer(self) -> Tensor:
        """Write this epoch's records into the per-sample buffer (a sample recorded twice by
        this process keeps one of its records) and return it."""
        buffer = self._buffer.zero_()
        c = buffer.shape[1] - 4
        if self._loss_records:
            index = torch.cat([r[0] for r in self._loss_records])
            logits = torch.cat([r[1].float() for r in self._loss_records])
            losses = torch.cat([r[2].float() for r in self._loss_records])
            buffer[index, : c + 1] = torch.cat([logits, losses[:, None]], 1)
            buffer[index, c + _SEEN_LOSS] = 1.0
        if self._weight_records:
            index = torch.cat([r[0] for r in self._weight_records])
            weights = torch.cat([r[1].float() for r in self._weight_records])
            buffer[index, c + _WEIGHT] = weights
            buffer[index, c + _SEEN_WEIGHT] = 1.0
        self._loss_records, self._weight_records = [], []
        return buffer

    def _training_pass(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Evaluate the model on the training split (no augmentation), this process's share."""
        for batch, logits in pl_module.training_split_logits(
            rank=trainer.global_rank, world_size=trainer.world_size
        ):
            losses = pl_module.stage_loss(logits, batch)
            self._loss_records.append((batch["index"], logits, losses))

    # ------------------------------------------------------------------ epoch end
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active:
            return
        self._active = False
        if self.source == "pass":
            self._training_pass(trainer, pl_module)
        buffer = trainer.strategy.reduce(self._fill_buffer(), reduce_op="sum")
        posterior = None if _is_identity_posterior(pl_module) else pl_module.noisy_posterior
        histograms = self.histograms and bool(self._tensorboards(trainer))
        with torch.no_grad(), _single_thread(buffer.device):
            scalars, losses = summarize(
                buffer, self._noisy, self._clean, self._subsets, posterior, histograms
            )
        self.last = scalars
        logged = torch.tensor(list(scalars.values()))  # tensors log faster than floats
        for name, value in zip(scalars, logged, strict=True):
            pl_module.log(name, value, logger=False)
        epoch = trainer.current_epoch
        for logger in self._tensorboards(trainer):
            writer = logger.experiment
            for name, value in scalars.items():
                writer.add_scalar(name, value, global_step=epoch)
            if histograms:
                for subset, values in losses.items():
                    values = values[torch.isfinite(values)]
                    if values.numel():
                        writer.add_histogram(
                            tag("loss_hist", subset), values.float().cpu(), global_step=epoch
                        )


@contextmanager
def _single_thread(device: torch.device) -> Iterator[None]:
    """One intra-op CPU thread for the epoch-end summary: its few dozen ops on arrays of
    ~1e5 elements gain nothing from a thread pool and, on a busy machine, pay for waking it."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _is_identity_posterior(pl_module: L.LightningModule) -> bool:
    """Whether the module keeps the default ``noisy_posterior`` (``q = p``)."""
    from noisylabels.methods.base import NoisyLabelMethod

    method = getattr(type(pl_module), "noisy_posterior", None)
    return method is None or method is NoisyLabelMethod.noisy_posterior
