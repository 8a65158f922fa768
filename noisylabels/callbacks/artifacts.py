"""Run artifacts: the exact noise of a run (``noise.pt``, ``transition.csv``) in its run dir."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from noisylabels.noise import save_transition


def run_dir(trainer: L.Trainer) -> Path:
    """The folder a run writes its logs, checkpoints and results to.

    Unlike ``trainer.log_dir`` (a broadcast that every DDP process must join) this is local, so
    rank-0-only code may call it; rank 0's answer is the run's folder.
    """
    loggers = trainer.loggers
    if not loggers:
        return Path(trainer.default_root_dir)
    first = loggers[0]
    path = first.log_dir if isinstance(first, (TensorBoardLogger, CSVLogger)) else first.save_dir
    return Path(path or trainer.default_root_dir)


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
        if stage != "fit" or datamodule is None or not hasattr(datamodule, "noise_state"):
            return
        if getattr(trainer, "fast_dev_run", False):  # a smoke test writes no run folder
            return
        if not trainer.is_global_zero:
            return
        out = run_dir(trainer)
        out.mkdir(parents=True, exist_ok=True)
        state = datamodule.noise_state()
        torch.save(state, out / "noise.pt")
        if state.get("transition") is not None:
            save_transition(state["transition"], out / "transition.csv")
        elif state.get("empirical_transition") is not None:
            save_transition(state["empirical_transition"], out / "empirical_transition.csv")
