"""The stage schedule every method shares: warm-up → estimation point → the method's objective.

A run of a method with a warm-up stage trains ``warmup_epochs`` of plain cross-entropy on the
noisy labels (VRNL off; checkpoint selection skips these epochs), then calls
:meth:`StageSchedule.on_main_stage_start` once (the estimation point, e.g. of T̂) and trains the
method's own objective for the remaining epochs. The stage is a checkpointed buffer, so a resumed
run never repeats the estimation point. Methods without a warm-up start in their own stage.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.losses import cross_entropy


class StageSchedule:
    """Mixin of :class:`~noisylabels.methods.base.NoisyLabelMethod` holding the stage state.

    Reads ``hparams.warmup_epochs``; :meth:`init_stages` must run in ``__init__``.
    """

    def init_stages(self) -> None:
        """Register the checkpointed stage flag."""
        self.register_buffer("main_started", torch.tensor(False))
        self._main_started = False
        self.register_load_state_dict_post_hook(_sync_stage_flag)

    @property
    def has_warmup_stage(self) -> bool:
        """Whether this run starts with a plain-CE warm-up stage (``warmup_epochs > 0``)."""
        return int(self.hparams.warmup_epochs) > 0

    def on_main_stage_start(self) -> None:
        """Called once when the method's own stage begins after a warm-up (the estimation
        point, e.g. of T̂); the model is the warm-up model."""

    @property
    def in_warmup(self) -> bool:
        """``True`` while the run is in its warm-up stage: plain cross-entropy, VRNL off, and
        checkpoint selection skips these epochs."""
        return self.has_warmup_stage and not self._main_started

    def warmup_length(self) -> int:
        """Warm-up epochs of this run (0 without a warm-up stage, and under ``fast_dev_run`` so
        that every stage runs)."""
        trainer = self._trainer
        if not self.has_warmup_stage or (trainer is not None and trainer.fast_dev_run):
            return 0
        return int(self.hparams.warmup_epochs)

    def start_main_stage(self) -> None:
        """Begin the method's own stage now: the estimation point, then its objective."""
        self.on_main_stage_start()
        self.main_started.fill_(True)
        self._main_started = True

    def maybe_start_main_stage(self) -> None:
        """Begin the method's own stage if the warm-up is over (at a training epoch's start)."""
        if self.in_warmup and self.current_epoch >= self.warmup_length():
            self.start_main_stage()

    def check_stages_fit(self) -> None:
        """Refuse a warm-up that leaves no epoch of the method's own stage."""
        trainer = self._trainer
        if not self.in_warmup or trainer is None or trainer.fast_dev_run:
            return
        warmup, max_epochs = self.warmup_length(), trainer.max_epochs
        if max_epochs is not None and max_epochs >= 0 and warmup >= max_epochs:
            raise InputError(
                f"warmup_epochs={warmup} leaves no epoch of the method's own stage with "
                f"max_epochs={max_epochs}; lower --model.warmup_epochs or raise "
                "--trainer.max_epochs"
            )

    def stage_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Per-sample loss of the current stage: cross-entropy in the warm-up, then the
        method's ``per_sample_loss``."""
        if self.in_warmup:
            return cross_entropy(logits, batch["label"])
        return self.per_sample_loss(logits, batch)

    def stage_milestones(self) -> list[int]:
        """The LR milestones as absolute epochs: shifted by the warm-up when they count from
        the method's own stage (``milestones_from: main``)."""
        shift = self.warmup_length() if self.hparams.milestones_from == "main" else 0
        return [int(m) + shift for m in self.hparams.milestones]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # checkpoints written before the stage schedule was shared kept the flag as ``t_ready``
        state = checkpoint.get("state_dict")
        if state is not None and "main_started" not in state:
            state["main_started"] = state.pop("t_ready", torch.tensor(False))


def _sync_stage_flag(module: nn.Module, incompatible_keys: Any) -> None:
    """After ``load_state_dict``: mirror the loaded ``main_started`` buffer in the Python flag."""
    module._main_started = bool(module.main_started)
