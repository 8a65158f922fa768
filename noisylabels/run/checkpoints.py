"""The best checkpoint of a run: model selection by noisy-validation accuracy, never of a warm-up
epoch, kept across a resume (also of a run folder that was copied or moved).

``checkpoints/last.ckpt``, the state a killed run resumes from, is the run record's
(:class:`~noisylabels.run.record.RunRecorder`), as is every file of a run folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor

from noisylabels.errors import InputError

# the best checkpoint of every run: highest noisy-validation accuracy, one file, named by its epoch
BEST_CHECKPOINT: dict[str, Any] = {
    "monitor": "val/acc",
    "mode": "max",
    "filename": "best-epoch{epoch:03d}",
    "auto_insert_metric_name": False,
}
# the direction in which a monitored value improves, by the last part of its name
_IMPROVES = (("acc", "max"), ("loss", "min"), ("error", "min"))


def improves(monitor: str | None) -> str | None:
    """``max`` or ``min``: the mode in which ``monitor`` improves, where its name says
    (``val/acc`` up, ``val/loss`` and ``t_estimation_error`` down); ``None`` where it does not."""
    name = str(monitor or "").rsplit("/", 1)[-1].lower()
    found = {mode for part, mode in _IMPROVES if part in name}
    return found.pop() if len(found) == 1 else None


def check_direction(monitor: str | None, mode: str) -> None:
    """Refuse a checkpoint mode against the direction its monitored value improves in: the
    run would select its worst epoch and report it as its result."""
    direction = improves(monitor)
    if direction is not None and mode != direction:
        worst = "highest" if mode == "max" else "lowest"
        raise InputError(
            f"--checkpoint.mode {mode} with --checkpoint.monitor {monitor} would select the epoch "
            f"with the {worst} {monitor}, its worst, and report it as the run's result; give "
            f"--checkpoint.mode {direction}"
        )


# the checkpoint state that names files in the checkpoint's folder
_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


class WarmupAwareCheckpoint(ModelCheckpoint):
    """:class:`~lightning.pytorch.callbacks.ModelCheckpoint` that never keeps a checkpoint of a
    warm-up epoch (``pl_module.in_warmup``) as best/top-k, so model selection only sees the
    method's own objective.

    A resumed run keeps its best checkpoint and score even where its run folder was copied or
    moved since (Lightning's own resets them when the folder's path changed, and would then
    select a worse epoch as best). A monitored value that the run never logs (a misspelt
    ``--checkpoint.monitor``) is refused at the end of the first epoch, naming the values logged.

    ``last.ckpt`` is not this callback's: the run record writes it at the end of every epoch
    of every run (warm-up included), so ``save_last`` changes nothing here.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_direction(self.monitor, self.mode)
        self._replaced: list[str] = []

    def _remove_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        """A best checkpoint replaced by a better one is removed once the run's ``last.ckpt``
        no longer refers to it (:meth:`remove_replaced`, at the end of the epoch), so that a run
        killed in between keeps the checkpoint its last state selected."""
        self._replaced.append(filepath)

    def remove_replaced(self, trainer: L.Trainer) -> None:
        """Remove the best checkpoints replaced since the last call (the run record calls it
        after writing ``last.ckpt``); one this callback selected again is kept."""
        current = {str(p) for p in (self.best_model_path, *self.best_k_models) if p}
        for path in self._replaced:
            if path not in current:
                trainer.strategy.remove_checkpoint(path)
        self._replaced = []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse selecting by ``val/loss`` where the method's validation loss changes its
        definition over the epochs it would select among (``val_loss_changes``)."""
        changes = getattr(pl_module, "val_loss_changes", None)
        reason = changes() if self.monitor == "val/loss" and callable(changes) else None
        if reason:
            raise InputError(
                f"--checkpoint.monitor val/loss with {type(pl_module).__name__}: {reason}, so "
                "the validation losses of two epochs are not one loss and the best checkpoint "
                "would be chosen across definitions; select by --checkpoint.monitor val/acc "
                "--checkpoint.mode max (the default)"
            )
        super().setup(trainer, pl_module, stage)

    def check_monitor_top_k(self, trainer: L.Trainer, current: Tensor | None = None) -> bool:
        if getattr(trainer.lightning_module, "in_warmup", False):
            return False
        return super().check_monitor_top_k(trainer, current)

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: Any) -> None:
        """``last.ckpt`` is the run record's."""

    def _save_topk_checkpoint(self, trainer: L.Trainer, monitor_candidates: Any) -> None:
        """Lightning's choice of the best checkpoint, after refusing a monitored value that the
        run does not log once it has validated (one paragraph naming the values it logs)."""
        missing = self.monitor is not None and self.monitor not in monitor_candidates
        if missing and self.save_top_k != 0 and trainer.fit_loop.epoch_loop.val_loop._has_run:
            logged = [k for k in monitor_candidates if str(k).startswith(("val/", "train/"))]
            values = ", ".join(sorted(logged)) or "none"
            raise InputError(
                f"--checkpoint.monitor {self.monitor}: the run logs no such value, so no best "
                f"checkpoint could be chosen; it logs {values} (e.g. --checkpoint.monitor "
                "val/acc --checkpoint.mode max, or val/loss with mode min)"
            )
        super()._save_topk_checkpoint(trainer, monitor_candidates)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Lightning's restore, with the state's paths moved into this callback's folder where
        the checkpoint's folder moved and its files are there (a copied run folder)."""
        saved = state_dict.get("dirpath")
        if saved and self.dirpath and Path(saved) != Path(self.dirpath):
            state_dict = moved_state(state_dict, Path(saved), Path(self.dirpath))
        super().load_state_dict(state_dict)


def moved_state(state: dict[str, Any], old: Path, new: Path) -> dict[str, Any]:
    """``state`` (a ModelCheckpoint's) with its folder ``old`` replaced by ``new``, where every
    checkpoint file it names is in ``new``; unchanged otherwise (another folder: Lightning's
    reset then applies)."""

    def moved(path: Any) -> Any:
        if not path:
            return path
        target = new / Path(str(path)).name
        return str(target) if Path(str(path)).parent == old and target.is_file() else None

    paths = [state.get(key) for key in _PATH_KEYS] + list(state.get("best_k_models", {}))
    if any(p and moved(p) is None for p in paths):
        return state
    out = dict(state)
    out["dirpath"] = str(new)
    for key in _PATH_KEYS:
        out[key] = moved(state.get(key)) or state.get(key)
    out["best_k_models"] = {moved(k): v for k, v in state.get("best_k_models", {}).items()}
    return out
