"""Optimizers and LR schedules of the methods, and the manual-optimization step they share.

Plain functions over torch optimizers: a method builds its optimizers with
:func:`make_optimizer` and :func:`multistep`, and changes them at a stage change with
:func:`set_momentum` and :func:`reset_state`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor

OPTIMIZERS = ("sgd", "adam")


def make_optimizer(
    params: Any, name: str, lr: float, weight_decay: float, momentum: float = 0.0
) -> torch.optim.Optimizer:
    """``sgd`` (with ``momentum``) or ``adam`` over ``params``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def multistep(optimizer: torch.optim.Optimizer, milestones: Sequence[int], gamma: float) -> Any:
    """MultiStepLR at the absolute epochs ``milestones``, stepped once per epoch."""
    return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=list(milestones), gamma=gamma)


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
