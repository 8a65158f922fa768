"""The folder of a run, where its callbacks and :mod:`noisylabels.run` write their files."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger


def run_dir(trainer: L.Trainer) -> Path:
    """The folder a run writes its logs, checkpoints and results to: the first logger's folder
    (``ROOT/lightning_logs/version_N`` for TensorBoard and CSV loggers), the trainer's
    ``default_root_dir`` without a logger.

    Unlike ``trainer.log_dir`` (a broadcast that every DDP process must join) this is local, so
    rank-0-only code may call it; rank 0's answer is the run's folder.
    """
    loggers = trainer.loggers
    if not loggers:
        return Path(trainer.default_root_dir)
    first = loggers[0]
    path = first.log_dir if isinstance(first, (TensorBoardLogger, CSVLogger)) else first.save_dir
    return Path(path or trainer.default_root_dir)
