"""Optimizers of the methods: their options, and the manual-optimization step they share.

:class:`OptimizerOptions` is the method's ``optim`` option group (``--model.optim.*``). Plain
functions over torch optimizers: a method builds its optimizers with :func:`make_optimizer` and
changes them at a stage change with :func:`set_momentum` and :func:`reset_state`; the learning
rate of every epoch is the stage schedule's (:class:`~noisylabels.methods.core.stages.StagedLR`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from torch import Tensor

from noisylabels.errors import InputError

OPTIMIZERS = ("sgd", "adam")
OPTION = "--model.optim."


@dataclass(frozen=True)
class OptimizerOptions:
    """The optimizer of the networks, and that of a revision stage.

    Attributes:
        optimizer: ``sgd`` (with ``momentum``) or ``adam``.
        lr: learning rate (the paper: 0.01).
        momentum: SGD momentum (the paper: 0.9); a warm-up may have its own
            (``schedule.warmup_momentum``).
        weight_decay: weight decay (the paper: 1e-4).
        revision_lr: learning rate of the revision stage's Adam (T-Revision, PTD: 5e-7), over
            the networks and the method's own parameters (ΔT).
        revision_weight_decay: weight decay of the revision stage's Adam.
    """

    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4
    revision_lr: float = 5e-7
    revision_weight_decay: float = 1e-4

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise InputError(
                f"{OPTION}optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}"
            )
        for name in ("lr", "revision_lr"):
            if not getattr(self, name) > 0:
                raise InputError(f"{OPTION}{name} must be positive, got {getattr(self, name)}")
        for name in ("weight_decay", "revision_weight_decay"):
            if not getattr(self, name) >= 0:
                raise InputError(f"{OPTION}{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.momentum < 1.0:
            raise InputError(f"{OPTION}momentum must be in [0, 1), got {self.momentum}")


def make_optimizer(
    params: Any, name: str, lr: float, weight_decay: float, momentum: float = 0.0
) -> torch.optim.Optimizer:
    """``sgd`` (with ``momentum``) or ``adam`` over ``params``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def set_momentum(optimizers: Iterable[Any], momentum: float) -> None:
    """Set the momentum of every SGD optimizer (at the start of the method's own stage)."""
    for optimizer in optimizers:
        if isinstance(optimizer, torch.optim.SGD):
            for group in optimizer.param_groups:
                group["momentum"] = momentum


def reset_state(optimizers: Iterable[Any]) -> None:
    """Drop every optimizer's state (momentum buffers, Adam's moments and step counts), as a
    newly made optimizer has none; learning rates and schedules are kept."""
    for optimizer in optimizers:
        optimizer.state.clear()


def manual_step(
    module: L.LightningModule, loss: Tensor, active: Sequence[int] | None = None
) -> None:
    """Backpropagate ``loss`` and step the ``active`` optimizers of ``module`` (indices; all by
    default) once (manual optimization).

    With one optimizer per network and networks with disjoint parameters, backpropagating the
    sum of the networks' objectives gives each network the gradient of its own.

    The first active optimizer steps through Lightning, so one batch is one ``global_step``
    (``max_steps``, ``fast_dev_run``); the others step their plain torch optimizer, through the
    precision plugin's loss scaler where there is one (16-bit mixed precision: it unscales and
    skips the step on inf/nan) before the first one's step updates the scale.
    """
    optimizers = module.optimizers()
    optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
    if active is not None:
        optimizers = [optimizers[i] for i in active]
    for optimizer in optimizers:
        optimizer.zero_grad()
    module.manual_backward(loss)
    scaler = getattr(module.trainer.precision_plugin, "scaler", None)
    for optimizer in optimizers[1:]:
        if scaler is not None:
            scaler.step(optimizer.optimizer)
        else:
            optimizer.optimizer.step()
    optimizers[0].step()


def step_schedulers(module: L.LightningModule) -> None:
    """Step every LR scheduler of ``module`` once (manual optimization: at each epoch's end)."""
    schedulers = module.lr_schedulers()
    if schedulers is None:
        return
    for scheduler in schedulers if isinstance(schedulers, list) else [schedulers]:
        scheduler.step()
