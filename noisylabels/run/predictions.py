"""``predictions.csv``: what ``noisylabels predict`` writes to the run folder.

One row per sample of the prediction set (the clean test set), ordered by its index:
``index``, ``label`` (its clean label; ``-1`` where unknown), ``predicted`` (the class of highest
probability) and ``p_0`` … ``p_{C-1}``, the model's clean class posterior ``p = softmax(z)``. The
test set is never corrupted, so it has no noisy label (the training labels' are in the run's
``noise.pt``, and ``noisylabels audit`` ranks them).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from noisylabels.disk.lock import hold
from noisylabels.disk.storage import replacing
from noisylabels.errors import InputError
from noisylabels.run.artifacts import run_dir

PREDICTIONS_FILE = "predictions.csv"


class PredictionWriter(Callback):
    """Collect the probabilities ``predict_step`` returns for each batch (a ``{"image",
    "label", "clean_label", "index"}`` dict) and write them to ``path`` when the prediction
    epoch ends (process 0, the processes' rows gathered; a sample repeated to pad the last
    batch of a process is written once)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._batches: list[tuple[Tensor, Tensor, Tensor]] = []

    def on_predict_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._batches = []

    def on_predict_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not isinstance(batch, dict) or not isinstance(outputs, Tensor):
            return
        clean = batch.get("clean_label", batch["label"])
        self._batches.append((batch["index"], clean, outputs.detach().float()))

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._batches:
            return
        index, clean, probs = (torch.cat(parts) for parts in zip(*self._batches, strict=True))
        self._batches = []
        if trainer.world_size > 1:
            gathered = [trainer.strategy.all_gather(t) for t in (index, clean, probs)]
            index, clean, probs = (t.flatten(0, 1) for t in gathered)
        if trainer.is_global_zero:
            write_predictions(self.path, index, clean, probs)


def write_predictions(path: Path, index: Tensor, clean: Tensor, probs: Tensor) -> None:
    """Write the rows of ``predictions.csv`` (see the module docstring), once per index, in
    index order; the file is replaced atomically (:func:`~noisylabels.disk.storage.replacing`)."""
    index, clean, probs = (t.cpu() for t in (index, clean, probs))
    order = torch.argsort(index, stable=True)
    index, clean, probs = index[order], clean[order], probs[order]
    keep = torch.ones(len(index), dtype=torch.bool)
    keep[1:] = index[1:] != index[:-1]
    index, clean, probs = index[keep], clean[keep], probs[keep]
    predicted = probs.argmax(1)
    header = ["index", "label", "predicted"]
    header += [f"p_{c}" for c in range(probs.shape[1])]
    with replacing(path) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for i, y, k, p in zip(
            index.tolist(), clean.tolist(), predicted.tolist(), probs.tolist(), strict=True
        ):
            writer.writerow([i, y, k, *(f"{v:.6g}" for v in p)])


def predict_into(
    trainer: L.Trainer,
    model: L.LightningModule,
    datamodule: L.LightningDataModule | None,
    checkpoint: Any,
    data_differs: dict[str, Any],
    options: dict[str, Any],
) -> Path:
    """``noisylabels predict``: the trainer's predict, with the class probabilities of every
    sample written to ``predictions.csv`` in the run folder of ``checkpoint`` (the new run
    folder where the checkpoint is of none), which this process holds while it writes.
    Predictions of other data than the run's (``data_differs``) are refused there. Returns
    the file."""
    folder = getattr(checkpoint, "origin", None)
    if data_differs and folder is not None:
        raise InputError(
            f"predictions of other data than the run's are not written into its folder "
            f"({folder}), where they would pass for its own: give the run's data options "
            f"({', '.join(data_differs)} as in its config.yaml), or copy the checkpoint file "
            "out of the run folder and predict from the copy"
        )
    path = (folder or run_dir(trainer)) / PREDICTIONS_FILE
    trainer.callbacks.append(PredictionWriter(path))
    lock = None
    if trainer.is_global_zero:  # the one writer of the folder while it predicts
        lock = hold(path.parent, "noisylabels predict", doing="this predict")
    try:
        trainer.predict(model, datamodule=datamodule, **options)
    finally:
        if lock is not None:
            lock.release()
    if trainer.is_global_zero:
        print(f"predictions: {path}")
    return path
