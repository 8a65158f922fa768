"""What a run writes about its noise: the exact noisy labels and T (``noise.pt``,
``transition.csv``) at the start, the final T̂ and ε_T (``transition_estimate.csv``/``.json``)
and every training sample's record over the epochs (``sample_dynamics.pt``, what
``noisylabels audit`` ranks labels by) at the end, ``hp_metric``, and :func:`run_dir`, the
folder of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from noisylabels.callbacks import SampleDynamics
from noisylabels.callbacks.folder import run_dir
from noisylabels.data import NoisyDataModule
from noisylabels.methods import NoisyLabelMethod
from noisylabels.noise import save_transition
from noisylabels.run.storage import replacing, save_torch, write_json

ESTIMATE_FILE = "transition_estimate.csv"
ERROR_FILE = "transition_estimate.json"
HP_METRIC = "hp_metric"  # the metric of TensorBoard's HParams tab
DYNAMICS_FILE = "sample_dynamics.pt"
NOISE_FILE = "noise.pt"
DYNAMICS_VERSION = 1

__all__ = [
    "NoiseRecorder",
    "log_hp_metric",
    "run_dir",
    "write_sample_dynamics",
    "write_transition_estimate",
]


class NoiseRecorder(L.Callback):
    """Save the noisy labels, split and T of the run (rank 0, once, at setup).

    ``noise.pt`` re-creates the run's labels with ``--data.noise_type file --data.noise_file
    RUN/noise.pt``; ``transition.csv`` is the true T (row-stochastic,
    ``T[i, j] = P(noisy = j | clean = i)``) where the noise has one, and
    ``empirical_transition.csv`` the measured one where it has none (instance-dependent, file
    and real noise).
    """

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        datamodule = trainer.datamodule
        if stage != "fit" or not isinstance(datamodule, NoisyDataModule):
            return
        if getattr(trainer, "fast_dev_run", False):  # a smoke test writes no run folder
            return
        if not trainer.is_global_zero:
            return
        out = run_dir(trainer)
        state = datamodule.noise_state()
        save_torch(state, out / NOISE_FILE)
        if state.get("transition") is not None:
            _save_transition(state["transition"], out / "transition.csv")
        elif state.get("empirical_transition") is not None:
            _save_transition(state["empirical_transition"], out / "empirical_transition.csv")


def _save_transition(T: torch.Tensor, path: Path) -> None:
    """:func:`~noisylabels.noise.save_transition`, atomically."""
    with replacing(path) as tmp:
        save_transition(T, tmp)


def write_transition_estimate(out: Path, model: Any) -> None:
    """Write the method's T̂ (``transition_estimate.csv``) and ε_T (``transition_estimate.json``)
    to ``out``; nothing for a method without a T̂."""
    if not isinstance(model, NoisyLabelMethod):
        return
    T_hat = model.transition_estimate()
    if T_hat is None:
        return
    _save_transition(T_hat, out / ESTIMATE_FILE)
    summary = {
        "method": model.method_name,
        "epoch": model.current_epoch,
        "t_estimation_error": model.t_estimation_error(T_hat),
    }
    write_json(out / ERROR_FILE, summary)


def log_hp_metric(trainer: L.Trainer, test_acc: float | None) -> None:
    """Log the clean test accuracy as ``hp_metric`` to every logger (process 0), so that
    TensorBoard's HParams tab shows it beside the hyperparameters (Lightning logs -1 there at
    the start of a run); nothing where the run was not tested."""
    if test_acc is None or not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        logger.log_metrics({HP_METRIC: float(test_acc)}, step=trainer.global_step)
        logger.save()
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.flush()


def write_sample_dynamics(out: Path, trainer: L.Trainer, model: Any) -> Path | None:
    """Write the run's :class:`~noisylabels.callbacks.SampleDynamics` sums to
    ``out/sample_dynamics.pt`` (tensors, numbers and strings only: it loads with
    ``torch.load(weights_only=True)``), with the training labels, the training split, the
    method's ``alpha`` and the run's epoch count; nothing where the trainer has no such callback
    or it recorded nothing. Returns the path written."""
    found = [c for c in trainer.callbacks if isinstance(c, SampleDynamics)]
    record = found[0].record() if found else None
    datamodule = trainer.datamodule
    if record is None or not isinstance(datamodule, NoisyDataModule):
        return None
    facts = datamodule.data_facts()
    record.update(
        version=DYNAMICS_VERSION,
        network=found[0].network,
        num_classes=facts.num_classes,
        noisy_labels=facts.noisy_labels.long().cpu(),
        train_indices=facts.train_indices.long().cpu(),
        alpha=float(getattr(model, "alpha", 0.0)),
        method=str(getattr(model, "method_name", type(model).__name__)),
        trained_epochs=int(trainer.current_epoch),
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / DYNAMICS_FILE
    save_torch(record, path)
    return path
