"""What a run from Python gets so that it equals ``noisylabels fit``'s run.

What the command line configures that a ``Trainer`` built in Python lacks;
:func:`~noisylabels.run.fit.fit_and_test` adds it to every run, whichever door:

* the best checkpoint by noisy-validation accuracy (:data:`BEST_CHECKPOINT`, a
  :class:`~noisylabels.run.checkpoints.WarmupAwareCheckpoint`) in place of Lightning's default
  checkpoint, which monitors nothing and so keeps (and tests) the last epoch;
* the per-subset loss statistics (:class:`~noisylabels.callbacks.SubsetStatistics`) of a
  :class:`~noisylabels.methods.NoisyLabelMethod`;
* the text of ``config.yaml`` (:func:`python_config_text`, written by the run record): the
  model's and the data module's class and hyperparameters, the trainer's settings and the seed,
  in the command line's layout, so that ``noisylabels fit --config RUN/config.yaml`` runs the
  same experiment again (the trainer's strategy, loggers and callbacks, objects of the caller's,
  are listed in a comment at its top).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import yaml
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from noisylabels.callbacks import HealthMonitor, SubsetStatistics
from noisylabels.methods import NoisyLabelMethod
from noisylabels.run.checkpoints import BEST_CHECKPOINT, WarmupAwareCheckpoint
from noisylabels.run.identity import class_path, plain

CONFIG_FILE = "config.yaml"
# the trainer's settings config.yaml records (Trainer arguments a Trainer object still knows)
TRAINER_SETTINGS = (
    "max_epochs",
    "min_epochs",
    "max_steps",
    "precision",
    "num_nodes",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "check_val_every_n_epoch",
    "val_check_interval",
    "log_every_n_steps",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "default_root_dir",
)


def has_default_checkpoint(trainer: L.Trainer) -> bool:
    """Whether the trainer's model checkpoints all monitor nothing (Lightning's default one:
    it keeps the last epoch, so the "best" checkpoint tested would be the last model)."""
    checkpoints = [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
    return bool(checkpoints) and all(c.monitor is None for c in checkpoints)


def command_line_callbacks(
    trainer: L.Trainer,
    model: L.LightningModule,
    *,
    select_best: bool = True,
    subset_statistics: bool = True,
) -> list[Callback]:
    """The callbacks the command line configures that ``trainer`` lacks: with ``select_best``,
    the best checkpoint by noisy-validation accuracy where the trainer has only Lightning's
    default checkpoint (a checkpoint of the caller's that monitors something is kept; a trainer
    with ``enable_checkpointing=False`` gets none); with ``subset_statistics``, the per-subset
    statistics of a :class:`NoisyLabelMethod` where the trainer has none; and the health
    check (:class:`~noisylabels.callbacks.HealthMonitor`, whose verdict is ``results.json``'s
    ``health``) where the trainer has none (one of the caller's, e.g. with another patience, is
    kept)."""
    callbacks: list[Callback] = []
    if not any(isinstance(c, HealthMonitor) for c in trainer.callbacks):
        callbacks.append(HealthMonitor())
    if select_best and has_default_checkpoint(trainer):
        callbacks.append(WarmupAwareCheckpoint(**BEST_CHECKPOINT))
    has_statistics = any(isinstance(c, SubsetStatistics) for c in trainer.callbacks)
    if subset_statistics and isinstance(model, NoisyLabelMethod) and not has_statistics:
        callbacks.append(SubsetStatistics())
    return callbacks


def _init_args(obj: Any) -> dict[str, Any]:
    hparams = getattr(obj, "hparams", None) or {}
    return {k: plain(v) for k, v in dict(hparams).items() if not str(k).startswith("_")}


def trainer_settings(trainer: L.Trainer) -> dict[str, Any]:
    """The settings of ``trainer`` as ``config.yaml`` records them (``Trainer`` arguments)."""
    settings: dict[str, Any] = {
        "accelerator": type(trainer.accelerator).__name__.removesuffix("Accelerator").lower(),
        "devices": trainer.num_devices,
    }
    for name in TRAINER_SETTINGS:
        settings[name] = plain(getattr(trainer, name, None))
    settings["enable_progress_bar"] = trainer.progress_bar_callback is not None
    return settings


def trainer_objects(trainer: L.Trainer) -> str:
    """The trainer's strategy, loggers and callbacks by class, as comment lines of
    ``config.yaml``."""
    loggers = ", ".join(class_path(logger) for logger in trainer.loggers) or "none"
    lines = [
        "# a run of noisylabels.run.fit_and_test, from Python; the trainer's objects:",
        f"#   strategy: {class_path(trainer.strategy)}",
        f"#   loggers: {loggers}",
        "#   callbacks:",
        *(f"#     - {class_path(c)}" for c in trainer.callbacks),
    ]
    return "\n".join(lines) + "\n"


def run_config(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    trainer: L.Trainer,
    seed: int | None,
) -> dict[str, Any]:
    """A run from Python in the layout of the command line's ``config.yaml``: ``seed_everything``,
    ``trainer`` (:func:`trainer_settings`), ``model`` and ``data`` (``class_path`` and their
    saved hyperparameters as ``init_args``)."""
    return {
        "seed_everything": seed,
        "trainer": trainer_settings(trainer),
        "model": {"class_path": class_path(model), "init_args": _init_args(model)},
        "data": {"class_path": class_path(datamodule), "init_args": _init_args(datamodule)},
    }


def config_block(text: str) -> str:
    """A config's YAML ``text`` as a Markdown code block (TensorBoard's Text tab)."""
    return "\n".join("    " + line for line in text.splitlines())


def add_config_text(trainer: L.Trainer, text: str) -> None:
    """Show a config's YAML ``text`` in the Text tab (tag ``config``) of each of the trainer's
    TensorBoard loggers."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_text("config", config_block(text))


def python_config_text(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    trainer: L.Trainer,
    seed: int | None,
) -> str:
    """``config.yaml`` of a run from Python: :func:`run_config` as YAML, under a comment naming
    the trainer's strategy, loggers and callbacks (:func:`trainer_objects`)."""
    config = run_config(model, datamodule, trainer, seed)
    return trainer_objects(trainer) + yaml.safe_dump(config, sort_keys=False)
