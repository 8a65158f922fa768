"""Every training sample's loss, margin, VRNL weight and posterior, summed over the epochs.

What ``noisylabels audit`` ranks suspect labels by (:mod:`noisylabels.audit`): per training
sample ``i`` with logits ``z`` of the step that trained on it, clean posterior
``p = softmax(z)`` and given (noisy) label ``y~``, each epoch adds

* the method's per-sample training loss ``l_i`` (e.g. Forward's ``-log (p @ T)_{y~}``);
* the margin ``z_{y~} - max_{j != y~} z_j``, whose mean over the epochs is the area under the
  margin (AUM; Pleiss et al. 2020, "Identifying Mislabeled Data using the Area Under the Margin
  Ranking");
* the VRNL weight ``w_i = 1 + 2 alpha (mean(l) - l_i)`` the step gave the sample (VRNL paper,
  "Do We Need to Penalize Variance of Losses for Learning with Label Noise?"; 1 for every
  sample when ``alpha`` is 0 or in a warm-up);
* ``p`` itself, whose mean over the epochs predicts the sample's class.

A training step costs nothing but keeping references to the detached values its
:class:`~noisylabels.methods.core.step.StepOutput` records already hold (no kernel, no host
sync); once per epoch they are written into a per-sample buffer
(:func:`~noisylabels.callbacks.subset_stats.fill_buffer`), summed across processes (once for
this callback and :class:`~noisylabels.callbacks.SubsetStatistics` together, see
:meth:`~noisylabels.callbacks.subset_stats.StepRecords.gather_records`) and added
to the running sums, which the run's checkpoints keep (a resumed run ends with the sums of an
uninterrupted one). :mod:`noisylabels.run` writes them to the run folder as
``sample_dynamics.pt`` when the fit ends.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from noisylabels.callbacks.subset_stats import StepRecords
from noisylabels.errors import warn
from noisylabels.noise import data_facts_of

# columns of the running sums after the C posterior columns
SUM_COLUMNS = ("loss", "margin", "weight", "loss_epochs", "weight_epochs")


def margins(logits: Tensor, labels: Tensor) -> Tensor:
    """``z_y - max_{j != y} z_j`` per row of ``logits`` ``(N, C)`` for labels ``y`` ``(N,)``:
    positive where the given label is the network's top class (AUM's margin)."""
    given = logits.gather(1, labels[:, None]).squeeze(1)
    others = logits.scatter(1, labels[:, None], float("-inf"))
    return given - others.max(dim=1).values


def epoch_values(buffer: Tensor, labels: Tensor) -> Tensor:
    """One epoch's per-sample values from a (process-summed) buffer of
    :func:`~noisylabels.callbacks.subset_stats.fill_buffer`: ``(N, C + 5)`` posterior ``p``,
    loss, margin, weight, and whether the sample had a loss / a weight this epoch (0 or 1);
    the values of a sample without one are 0."""
    c = buffer.shape[1] - 4
    n_loss, n_weight = buffer[:, c + 2], buffer[:, c + 3]
    has_loss, has_weight = (n_loss > 0).float(), (n_weight > 0).float()
    logits = buffer[:, :c] / n_loss.clamp_min(1)[:, None]
    probs = F.softmax(logits, dim=1) * has_loss[:, None]
    loss = buffer[:, c] / n_loss.clamp_min(1) * has_loss
    margin = margins(logits, labels) * has_loss
    weight = buffer[:, c + 1] / n_weight.clamp_min(1) * has_weight
    return torch.cat([probs, torch.stack([loss, margin, weight, has_loss, has_weight], 1)], 1)


class SampleDynamics(StepRecords):
    """Per-sample sums over the training epochs of the loss, the margin (AUM), the VRNL weight
    and the posterior ``p`` (see the module docstring), for ``noisylabels audit``.

    Args:
        network: which network's steps to record, for methods that train several (0: the
            first, the one a single-network method has).

    :meth:`record` returns the sums; every process holds the same (they are summed across
    processes at the end of each epoch; a sample seen by several processes in one epoch, the
    padding of a distributed sampler, counts once).
    """

    def __init__(self, network: int = 0) -> None:
        super().__init__(network)
        self.epochs = 0
        self._sums: Tensor | None = None
        self._restored: dict[str, Any] | None = None
        self._fitting = False
        self._labels: Tensor | None = None
        self._buffer: Tensor | None = None

    # ------------------------------------------------------------------ setup
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if stage == "fit":
            self._restored = None  # a state restored for an earlier test is not this fit's

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        facts = data_facts_of(trainer.datamodule)
        self._labels = self._buffer = None
        self._fitting = True
        restored, self._restored = self._restored, None
        if facts is None:
            self._sums = None
            warn(
                "SampleDynamics needs a noisylabels data module (the training labels); no "
                "per-sample record is kept for this run"
            )
            return
        device = pl_module.device
        n, c = facts.num_samples, facts.num_classes
        self._labels = facts.noisy_labels.long().to(device)
        self._buffer = torch.zeros(n, c + 4, device=device)
        # a new fit, or a checkpoint without the record, starts from nothing
        self._sums = torch.zeros(n, c + len(SUM_COLUMNS), device=device)
        self.epochs = 0
        if restored is not None:
            self._restore(restored)

    def _restore(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's sums (those of another dataset size are ignored)."""
        assert self._sums is not None
        sums = state.get("sums")
        if isinstance(sums, Tensor) and sums.shape == self._sums.shape:
            self._sums = sums.to(self._sums.device, torch.float32)
            self.epochs = int(state.get("epochs", 0))

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
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
        if self._sums is not None:
            self.record_steps(outputs)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._sums is None or self._buffer is None or self._labels is None:
            return
        with torch.no_grad():
            buffer = self.gather_records(trainer, self._buffer)
            self._sums += epoch_values(buffer.float(), self._labels)
        self.epochs += 1

    # ------------------------------------------------------------------ state
    def record(self) -> dict[str, Any] | None:
        """The sums on the CPU: ``probs`` ``(N, C)`` (of ``p``), ``loss``, ``margin``,
        ``weight`` ``(N,)``, ``loss_epochs`` / ``weight_epochs`` ``(N,)`` (how many epochs gave
        the sample a loss / a weight), ``epochs`` (recorded); ``None`` before a fit or without
        a noisylabels data module."""
        if self._sums is None:
            return None
        sums = self._sums.detach().cpu()
        c = sums.shape[1] - len(SUM_COLUMNS)
        record: dict[str, Any] = {"probs": sums[:, :c].clone(), "epochs": self.epochs}
        for k, name in enumerate(SUM_COLUMNS):
            record[name] = sums[:, c + k].clone()
        return record

    def state_dict(self) -> dict[str, Any]:
        if self._sums is None:
            return {}
        return {"sums": self._sums.detach().cpu(), "epochs": self.epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Lightning restores callbacks before on_fit_start, or after it for strategies that
        # restore after their setup: keep the state until then, or apply it now
        if not state_dict:
            return
        if self._fitting and self._sums is not None:
            self._restore(state_dict)
        else:
            self._restored = dict(state_dict)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._fitting = False
