"""What a run records about its noise and its samples, as content (the run record,
:class:`~noisylabels.run.record.RunRecorder`, writes it): the exact noisy labels and T
(``noise.pt``), the final T̂ and ε_T (``transition_estimate.csv``/``.json``), every training
sample's record over the epochs (``sample_dynamics.pt``, what ``noisylabels audit`` ranks labels
by); and ``hp_metric`` and :func:`run_dir`, the folder of a run."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from noisylabels.callbacks import SampleDynamics
from noisylabels.callbacks.folder import run_dir
from noisylabels.data import NoisyDataModule
from noisylabels.methods import NoisyLabelMethod
from noisylabels.run.rules import DYNAMICS_FILE, ERROR_FILE, ESTIMATE_FILE, NOISE_FILE

HP_METRIC = "hp_metric"  # the metric of TensorBoard's HParams tab
DYNAMICS_VERSION = 1

__all__ = [
    "DYNAMICS_FILE",
    "ERROR_FILE",
    "ESTIMATE_FILE",
    "NOISE_FILE",
    "differing_entries",
    "defer_hp_metric",
    "log_hp_metric",
    "noise_record",
    "run_dir",
    "sample_dynamics",
    "transition_estimate",
]


def noise_record(datamodule: Any) -> dict[str, Any] | None:
    """The content of ``noise.pt``: the noisy labels, split and T of the run, which re-create
    its labels with ``--data.noise_type file --data.noise_file RUN/noise.pt``. ``transition``
    is the true T (row-stochastic, ``T[i, j] = P(noisy = j | clean = i)``) where the noise has
    one, ``empirical_transition`` the measured one (instance-dependent, file and real noise).
    ``None`` for a data module that is not a :class:`~noisylabels.data.NoisyDataModule`."""
    if not isinstance(datamodule, NoisyDataModule):
        return None
    return datamodule.noise_state()


def differing_entries(saved: Any, record: dict[str, Any]) -> list[str]:
    """The entries in which ``saved`` (a ``noise.pt`` read back) differs from ``record`` (the
    noise a run regenerates, :func:`noise_record`): a tensor of another shape, type or value,
    another number or name, an entry missing or added; ``["its content"]`` where ``saved`` is
    not a mapping."""
    if not isinstance(saved, dict):
        return ["its content (not a mapping of entries)"]
    out = []
    for key in sorted(set(saved) | set(record), key=str):
        a, b = saved.get(key), record.get(key)
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            same = (
                isinstance(a, torch.Tensor)
                and isinstance(b, torch.Tensor)
                and a.shape == b.shape
                and a.dtype == b.dtype
                and torch.equal(a.cpu(), b.cpu())
            )
        else:
            same = key in saved and key in record and a == b
        if not same:
            out.append(str(key))
    return out


def transition_estimate(model: Any) -> dict[str, Any]:
    """The method's final T̂ (``transition_estimate.csv``: the matrix) and ε_T
    (``transition_estimate.json``); empty for a method without a T̂."""
    if not isinstance(model, NoisyLabelMethod):
        return {}
    T_hat = model.transition_estimate()
    if T_hat is None:
        return {}
    summary = {
        "method": model.method_name,
        "epoch": model.current_epoch,
        "t_estimation_error": model.t_estimation_error(T_hat),
    }
    return {ESTIMATE_FILE: T_hat, ERROR_FILE: summary}


def defer_hp_metric(trainer: L.Trainer) -> None:
    """Keep TensorBoard's ``hp_metric`` for the clean test accuracy alone: Lightning logs -1
    there when a fit starts (``default_hp_metric``), and that point, smoothed with the test
    accuracy, is what the Scalars tab then shows (0.2152 for an accuracy of 0.9443). With it
    off, the hyperparameters are written to TensorBoard with the metric once it exists
    (:func:`log_hp_metric`)."""
    for logger in trainer.loggers:
        # the option of Lightning's constructor; the logger offers no setter once built
        if isinstance(logger, TensorBoardLogger) and getattr(logger, "_default_hp_metric", False):
            logger._default_hp_metric = False


def log_hp_metric(trainer: L.Trainer, test_acc: float | None) -> None:
    """Log the clean test accuracy as ``hp_metric`` to every logger (process 0): to a
    TensorBoard logger with the run's hyperparameters, so that the HParams tab shows it beside
    them and the scalar has this one value (:func:`defer_hp_metric`); nothing where the run was
    not tested."""
    if test_acc is None or not trainer.is_global_zero:
        return
    metric = {HP_METRIC: float(test_acc)}
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.log_hyperparams(dict(logger.hparams), metrics=metric, step=trainer.global_step)
            logger.save()
            logger.experiment.flush()
        else:
            logger.log_metrics(metric, step=trainer.global_step)
            logger.save()


def sample_dynamics(trainer: L.Trainer, model: Any) -> dict[str, Any] | None:
    """The content of ``sample_dynamics.pt``: the run's
    :class:`~noisylabels.callbacks.SampleDynamics` sums with the training labels, the training
    split, the method's ``alpha`` and the run's epoch count (tensors, numbers and strings only:
    it loads with ``torch.load(weights_only=True)``); ``None`` where the trainer has no such
    callback or it recorded nothing."""
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
    return record
