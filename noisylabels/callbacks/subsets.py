"""Loss statistics of mislabeled vs correctly labeled training samples, per epoch.

The VRNL paper ("Do We Need to Penalize Variance of Losses for Learning with Label Noise?")
argues with these curves: the average training loss of mislabeled and of correctly labeled
samples over training (its Fig. 1), and the cross-entropy of the clean posterior against the
clean label and of the noisy posterior against the noisy label, mean and std per subset (its
Figs. 4 and 5). :class:`SubsetStatistics` records them for any run, writes them to the run
folder as ``subsets.csv`` (one row per recorded epoch, whatever the logger) and logs them to
every logger of the run (TensorBoard, CSV, W&B, MLflow, ...); ``noisylabels plot`` draws the
paper-style figures from ``subsets.csv``.

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
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from noisylabels.callbacks.folder import run_dir
from noisylabels.callbacks.subset_board import SubsetBoard, add_figure, custom_scalars_layout
from noisylabels.callbacks.subset_stats import (
    CSV_FILE,
    PREFIX,
    StepRecords,
    subset_ids,
    summarize,
    tag,
    write_csv_row,
)
from noisylabels.errors import warn
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.noise import data_facts_of

SOURCES = ("train_step", "pass")


class SubsetStatistics(StepRecords):
    """Per-epoch loss statistics of mislabeled vs correctly labeled training samples.

    Reproduces the quantities of the VRNL paper's Figs. 1, 4 and 5 (see the module docstring):
    per subset the mean and std of the method's training loss, of the noisy posterior's CE
    against the noisy label and of the clean posterior's CE against the clean label, the mean
    VRNL weight ``w_i`` and the fraction of ``w_i <= 0``, plus loss histograms. Written to the
    run folder as ``subsets.csv`` (a row per recorded epoch, a column per statistic, named by
    its tag; not under ``fast_dev_run``) and logged with ``pl_module.log`` at epoch level as
    ``subsets/<quantity>/<subset>``, so every logger of the trainer gets them (with the
    ``epoch``, at the step of Lightning's other epoch metrics) and ``trainer.callback_metrics``
    holds them. TensorBoard also gets, first on its first screen, each subset's statistics as
    a run of its own (``by_subset/mislabeled``, ``by_subset/correctly_labeled``: one named
    line per subset in each chart) with the figure ``noisylabels plot`` draws
    (:mod:`~noisylabels.callbacks.subset_board`), a Custom Scalars layout of those charts, the
    histograms (step = epoch, 0-based) and the subsets' sizes as text.

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

    The values come from the :class:`~noisylabels.methods.core.step.StepOutput` records the method's
    training steps return under ``"steps"``: losses and logits of every sample of the batch,
    weights of the samples the objective used (a method that selects samples, such as
    Co-teaching, gives weights only to those).

    Under multi-process training every process records the samples it trained on and the
    per-sample buffers are summed across processes once per epoch (with ``source:
    train_step``, once for this callback and a :class:`~noisylabels.callbacks.SampleDynamics`
    of the same network together); a sample seen by several processes (sampler padding) counts
    once.
    """

    def __init__(
        self,
        source: str = "train_step",
        every_n_epochs: int = 1,
        histograms: bool = True,
        network: int = 0,
    ) -> None:
        super().__init__(network)
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        self.source = source
        self.every_n_epochs = every_n_epochs
        self.histograms = histograms
        self.last: dict[str, float] = {}
        self._buffer: Tensor | None = None
        self._noisy: Tensor | None = None
        self._clean: Tensor | None = None
        self._subsets: Tensor | None = None
        self._active = False
        self._boards: list[tuple[TensorBoardLogger, SubsetBoard]] = []

    # ------------------------------------------------------------------ setup
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._buffer = None
        mine = [cb for cb in trainer.callbacks if isinstance(cb, SubsetStatistics)]
        if mine and mine[0] is not self:
            warn(
                f"{len(mine)} SubsetStatistics callbacks would write the same statistics; only "
                "the first one in trainer.callbacks records. To change the options of a "
                "config's callback, use --trainer.callbacks.init_args.KEY VALUE rather than "
                "adding another with --trainer.callbacks+=..."
            )
            return
        facts = data_facts_of(trainer.datamodule)
        if facts is None:
            warn(
                "SubsetStatistics needs a noisylabels data module (noisy and clean labels of "
                "the training set); no subset statistics are recorded for this run"
            )
            return
        clean = facts.clean_labels.long()
        noisy = facts.noisy_labels.long()
        known = clean >= 0
        device = pl_module.device
        self._noisy, self._clean = noisy.to(device), clean.to(device)
        self._subsets = subset_ids(self._noisy, self._clean)
        self._buffer = torch.zeros(len(noisy), facts.num_classes + 4, device=device)
        train = facts.train_indices
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
            warn(
                "SubsetStatistics: no training sample has a known clean label, so there are no "
                "mislabeled/correct subsets; only the overall weight statistics are recorded"
            )
        self._boards = []
        for logger in self._tensorboards(trainer):
            logger.experiment.add_custom_scalars(custom_scalars_layout())
            logger.experiment.add_text(f"{PREFIX}/summary", message)
            if not trainer.fast_dev_run:
                self._boards.append((logger, SubsetBoard(logger.log_dir)))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for _, board in self._boards:
            board.close()
        self._boards = []

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
        self.start_epoch()

    # ------------------------------------------------------------------ recording
    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._active:
            self.record_steps(outputs, losses=self.source == "train_step")

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
        shared = self.source == "train_step"  # the steps' records only
        buffer = self.gather_records(trainer, self._buffer, shared=shared)
        posterior = None if _is_identity_posterior(pl_module) else pl_module.noisy_posterior
        histograms = self.histograms and bool(self._tensorboards(trainer))
        with torch.no_grad(), _single_thread(buffer.device):
            scalars, losses = summarize(
                buffer, self._noisy, self._clean, self._subsets, posterior, histograms
            )
        self.last = scalars
        # every logger gets the scalars through Lightning's epoch-level logging (with the
        # epoch, at the step of the run's other epoch metrics); the values are already summed
        # over processes and the same on each, so no sync_dist
        logged = torch.tensor(list(scalars.values()))  # tensors log faster than floats
        for name, value in zip(scalars, logged, strict=True):
            pl_module.log(name, value, on_step=False, on_epoch=True)
        epoch = trainer.current_epoch
        if trainer.is_global_zero and not trainer.fast_dev_run:
            folder = run_dir(trainer)
            folder.mkdir(parents=True, exist_ok=True)
            write_csv_row(folder / CSV_FILE, epoch, scalars)
            self._show(trainer, pl_module, folder / CSV_FILE, scalars)
        if histograms:
            for logger in self._tensorboards(trainer):
                for subset, values in losses.items():
                    values = values[torch.isfinite(values)]
                    if values.numel():
                        logger.experiment.add_histogram(
                            tag("loss_hist", subset), values.float().cpu(), global_step=epoch
                        )

    # the figure goes to TensorBoard at every FIGURE_EVERY-th epoch and the last (not for a
    # run of fewer epochs: drawing it costs a few tenths of a second, and it says little there)
    FIGURE_EVERY = 5

    def _show(
        self, trainer: L.Trainer, pl_module: L.LightningModule, table: Any, scalars: dict
    ) -> None:
        """The subsets' runs and (now and then) the figure, on TensorBoard's first screen."""
        epoch = trainer.current_epoch
        last = trainer.max_epochs is not None and epoch + 1 >= trainer.max_epochs
        every = self.FIGURE_EVERY
        figure = (epoch + 1) % every == 0 or (last and epoch + 1 >= every)
        label = getattr(pl_module, "method_name", type(pl_module).__name__)
        for logger, board in self._boards:
            board.write(scalars, trainer.global_step)
            if figure:
                add_figure(logger.experiment, table, f"{label}, epoch {epoch + 1}", epoch)


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
    method = getattr(type(pl_module), "noisy_posterior", None)
    return method is None or method is NoisyLabelMethod.noisy_posterior
