"""Where a run comes from: :class:`RunSource`, the command line and config it was started
with, as its record keeps them.

A run from the command line has its command, its resolved config and the text of
``config.yaml``; a run from Python has none of these, and gets the text of ``config.yaml`` from
the objects themselves (:func:`python_config_text`): the model's and the data module's class
and hyperparameters, the trainer's settings and the seed, in the command line's layout, so that
``noisylabels fit --config RUN/config.yaml`` runs the same experiment again (the trainer's
strategy, loggers and callbacks, objects of the caller's, are listed in a comment at its top).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.loggers import TensorBoardLogger

from noisylabels.run.identity import class_path, plain

CONFIG_FILE = "config.yaml"


@dataclass(frozen=True, kw_only=True)
class RunSource:
    """The command line and config a run was started with (none of them from Python).

    Parameters
    ----------
    command : sequence of str or None, default None
        The command line (``["fit", "--config", ...]``), recorded with its hash in
        ``results.json``'s provenance (a sweep compares it with the run it plans).
    config : mapping or None, default None
        The resolved configuration, hashed into the provenance; ``None``: the model's and data
        module's classes and hyperparameters and the trainer's settings (:func:`run_config`).
    config_text : str or None, default None
        ``config.yaml`` as the command line resolved it; ``None``: :func:`python_config_text`.
    protocol_epochs : int or None, default None
        The epochs the run's config files plan before command-line options
        (``results.json``'s ``protocol_epochs``; a report flags a shorter run).
    """

    command: Sequence[str] | None = None
    config: Mapping[str, Any] | None = None
    config_text: str | None = None
    protocol_epochs: int | None = None

    __hash__ = None  # type: ignore[assignment]


# the trainer's settings config.yaml records (Trainer arguments a Trainer object still knows)
TRAINER_SETTINGS = (
    "max_epochs", "min_epochs", "max_steps", "precision", "num_nodes", "limit_train_batches",
    "limit_val_batches", "limit_test_batches", "check_val_every_n_epoch",
    "val_check_interval", "log_every_n_steps", "accumulate_grad_batches", "gradient_clip_val",
    "gradient_clip_algorithm", "default_root_dir"
)  # fmt: skip


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
