"""The stage schedule every method shares: warm-up → estimation point → the method's objective.

A run of a method with a warm-up stage trains ``warmup_epochs`` of plain cross-entropy on the
noisy labels (VRNL off; checkpoint selection skips these epochs), then calls
:meth:`StageSchedule.on_main_stage_start` once (the estimation point, e.g. of T̂) and trains the
method's own objective for the remaining epochs. The stage is a checkpointed buffer, so a resumed
run never repeats the estimation point. Methods without a warm-up start in their own stage.

Three options decide what the estimation point sees and what the method's own stage starts
from; the references of the field differ here (VRNL paper's Table 1 protocol: docs/methods.md):

* ``warmup_model``: ``last`` (the model of the last warm-up epoch) or ``best`` (the warm-up
  epoch with the best noisy-validation accuracy: early stopping, as T-Revision's and Dual-T's
  code estimate T̂);
* ``main_stage_init``: ``continue`` (the last warm-up network and its optimizer state; the VRNL
  paper's Reweight is "further optimized"), ``reinit`` (newly initialised network(s) and fresh
  optimizer state; Patrini et al.'s Forward and the Dual-T code) or ``restart`` (the network T̂
  was estimated from, fresh optimizer state; T-Revision);
* ``warmup_momentum``: the SGD momentum of the warm-up (T-Revision and Dual-T warm up without
  momentum); ``null`` keeps ``momentum``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.losses import cross_entropy

WARMUP_MODELS = ("last", "best")
MAIN_STAGE_INITS = ("continue", "reinit", "restart")
CHECKPOINT_KEY = "stage_schedule"


class StageSchedule:
    """Mixin of :class:`~noisylabels.methods.base.NoisyLabelMethod` holding the stage state.

    Reads ``hparams.warmup_epochs``, ``warmup_model``, ``main_stage_init`` and
    ``warmup_momentum``; :meth:`init_stages` must run in ``__init__``.
    """

    def init_stages(self) -> None:
        """Check the stage options and register the checkpointed stage flag."""
        hp = self.hparams
        if hp.warmup_model not in WARMUP_MODELS:
            raise InputError(
                f"--model.warmup_model must be one of {WARMUP_MODELS}, got {hp.warmup_model!r}"
            )
        if hp.main_stage_init not in MAIN_STAGE_INITS:
            raise InputError(
                f"--model.main_stage_init must be one of {MAIN_STAGE_INITS}, "
                f"got {hp.main_stage_init!r}"
            )
        self.register_buffer("main_started", torch.tensor(False))
        self._main_started = False
        # warmup_model: best: {"epoch", "score", "state"} of the best warm-up epoch so far
        self._warmup_best: dict[str, Any] | None = None
        self.estimation_epoch: int | None = None
        self.register_load_state_dict_post_hook(_sync_stage_flag)

    @property
    def has_warmup_stage(self) -> bool:
        """Whether this run starts with a plain-CE warm-up stage (``warmup_epochs > 0``)."""
        return int(self.hparams.warmup_epochs) > 0

    def on_main_stage_start(self) -> None:
        """Called once when the method's own stage begins after a warm-up (the estimation
        point, e.g. of T̂); the model is the warm-up model ``warmup_model`` names."""

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

    def stage_momentum(self) -> float:
        """The SGD momentum of the current stage (``warmup_momentum`` in a warm-up, if set)."""
        hp = self.hparams
        if self.in_warmup and hp.warmup_momentum is not None:
            return float(hp.warmup_momentum)
        return float(hp.momentum)

    def record_warmup_score(self, score: float | Tensor) -> None:
        """At the end of a warm-up validation epoch: with ``warmup_model: best``, keep a copy of
        the model if its noisy-validation accuracy ``score`` is the best of the warm-up so far
        (the earliest epoch wins a tie). A tensor ``score`` is read to the host only then."""
        trainer = self._trainer
        if not self.in_warmup or self.hparams.warmup_model != "best":
            return
        if trainer is not None and trainer.sanity_checking:
            return
        score = float(score)
        best = self._warmup_best
        if best is None or score > best["score"]:
            state = self.network_state(device="cpu")
            self._warmup_best = {"epoch": self.current_epoch, "score": score, "state": state}

    def named_networks(self) -> dict[str, nn.Module]:
        """The networks a warm-up trains, by name (``net``, then ``net1``, ``net2``, ... of
        ``add_network``): what ``warmup_model: best`` keeps and ``main_stage_init: reinit``
        re-initialises."""
        return {("net" if k == 0 else f"net{k}"): net for k, net in enumerate(self.networks)}

    def network_state(self, device: str | torch.device | None = None) -> dict[str, Any]:
        """A copy of the :meth:`named_networks`' weights and buffers (on ``device``, else where
        they are)."""
        return {
            name: {k: v.detach().to(device, copy=True) for k, v in net.state_dict().items()}
            for name, net in self.named_networks().items()
        }

    def load_network_state(self, state: Mapping[str, Any]) -> None:
        """Load :meth:`network_state` output into the networks, in place."""
        for name, net in self.named_networks().items():
            net.load_state_dict(state[name])

    def start_main_stage(self) -> None:
        """Begin the method's own stage now: the estimation point on the warm-up model that
        ``warmup_model`` names, then the network and optimizer state that ``main_stage_init``
        names, with the main stage's momentum."""
        hp = self.hparams
        best, last = self._warmup_best, None
        self.estimation_epoch = self.current_epoch - 1 if self.warmup_length() > 0 else None
        if best is not None:
            if hp.main_stage_init == "continue":
                last = self.network_state()
            self.load_network_state(best["state"])
            self.estimation_epoch = best["epoch"]
            rank_zero_info(
                f"{type(self).__name__}: the warm-up model of epoch {best['epoch']} "
                f"(best noisy-validation accuracy, {best['score']:.4f}) is the estimation model"
            )
        elif hp.warmup_model == "best" and self.warmup_length() > 0:
            warnings.warn(
                "warmup_model: best, but no warm-up epoch was validated; the last warm-up epoch's "
                "model is used (validate every epoch: --trainer.check_val_every_n_epoch 1)",
                stacklevel=2,
            )
        self.on_main_stage_start()
        if last is not None:
            self.load_network_state(last)
        if hp.main_stage_init == "reinit":
            self.reinit_networks()
        if hp.main_stage_init != "continue":
            self.reset_optimizer_state()
        self.set_optimizer_momentum(float(hp.momentum))
        self._warmup_best = None
        self.main_started.fill_(True)
        self._main_started = True

    def reinit_networks(self) -> None:
        """Give the :meth:`named_networks` newly initialised weights (:meth:`build_network`), in
        place (the optimizers keep their parameters) and identical on every process."""
        fresh = {name: self.build_network().state_dict() for name in self.named_networks()}
        trainer = self._trainer
        if trainer is not None:
            fresh = trainer.strategy.broadcast(fresh, src=0)
        self.load_network_state(fresh)

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

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # the best warm-up model so far (a run resumed in its warm-up still estimates from it)
        # and the epoch T̂ was estimated from
        checkpoint[CHECKPOINT_KEY] = {
            "warmup_best": self._warmup_best,
            "estimation_epoch": self.estimation_epoch,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # checkpoints written before the stage schedule was shared kept the flag as ``t_ready``
        state = checkpoint.get("state_dict")
        if state is not None and "main_started" not in state:
            state["main_started"] = state.pop("t_ready", torch.tensor(False))
        saved = checkpoint.get(CHECKPOINT_KEY)
        if isinstance(saved, Mapping):
            self._warmup_best = saved.get("warmup_best")
            self.estimation_epoch = saved.get("estimation_epoch")


def _sync_stage_flag(module: nn.Module, incompatible_keys: Any) -> None:
    """After ``load_state_dict``: mirror the loaded ``main_started`` buffer in the Python flag."""
    module._main_started = bool(module.main_started)
