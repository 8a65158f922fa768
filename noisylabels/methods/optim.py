"""Optimizers and LR schedules of the methods, and the manual-optimization step they share."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

OPTIMIZERS = ("sgd", "adam")


class Optimization:
    """Mixin of :class:`~noisylabels.methods.base.NoisyLabelMethod`: optimizers from the
    options, MultiStepLR schedules, and one manual-optimization step for methods with
    ``automatic_optimization = False`` and several optimizers."""

    def make_optimizer(self, params: Any, name: str, lr: float, weight_decay: float) -> Any:
        """Build ``sgd`` (with the current stage's momentum: ``warmup_momentum`` in a warm-up
        where it is set, else ``momentum``) or ``adam`` over ``params``."""
        if name == "sgd":
            return torch.optim.SGD(
                params, lr=lr, momentum=self.stage_momentum(), weight_decay=weight_decay
            )
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)

    def _torch_optimizers(self) -> list[Any]:
        trainer = self._trainer
        return list(trainer.optimizers) if trainer is not None else []

    def set_optimizer_momentum(self, momentum: float) -> None:
        """Set the momentum of every SGD optimizer (at the start of the method's own stage)."""
        for optimizer in self._torch_optimizers():
            if isinstance(optimizer, torch.optim.SGD):
                for group in optimizer.param_groups:
                    group["momentum"] = momentum

    def reset_optimizer_state(self) -> None:
        """Drop every optimizer's state (momentum buffers, Adam's moments and step counts), as
        a newly made optimizer has none; learning rates and schedules are kept."""
        for optimizer in self._torch_optimizers():
            optimizer.state.clear()

    def make_scheduler(self, optimizer: Any) -> Any:
        """MultiStepLR with the module's milestones (counted from the start of the method's
        own stage unless ``milestones_from: start``), shared by every optimizer of a method."""
        return torch.optim.lr_scheduler.MultiStepLR(
            optimizer, milestones=self.stage_milestones(), gamma=self.hparams.lr_gamma
        )

    def configure_optimizers(self) -> Any:
        """One optimizer (with its LR schedule) per network of the method (``self.networks``);
        several networks train by manual optimization, every optimizer stepping once per
        batch."""
        hp = self.hparams
        optimizers = [
            self.make_optimizer(net.parameters(), hp.optimizer, hp.lr, hp.weight_decay)
            for net in self.networks
        ]
        schedulers = [self.make_scheduler(opt) for opt in optimizers]
        if len(optimizers) == 1:
            return {"optimizer": optimizers[0], "lr_scheduler": schedulers[0]}
        return optimizers, schedulers

    def manual_step(self, loss: Tensor) -> None:
        """Backpropagate ``loss`` and step every optimizer once (manual optimization).

        With one optimizer per network and networks with disjoint parameters, backpropagating
        the sum of the networks' objectives gives each network the gradient of its own.

        The first optimizer steps through Lightning, so one batch is one ``global_step``
        (``max_steps``, ``fast_dev_run``); the others step their plain torch optimizer, through
        the precision plugin's loss scaler where there is one (16-bit mixed precision: it
        unscales and skips the step on inf/nan) before the first one's step updates the scale.
        """
        optimizers = self.optimizers()
        optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
        for optimizer in optimizers:
            optimizer.zero_grad()
        self.manual_backward(loss)
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        for optimizer in optimizers[1:]:
            if scaler is not None:
                scaler.step(optimizer.optimizer)
            else:
                optimizer.optimizer.step()
        optimizers[0].step()

    def step_schedulers(self) -> None:
        """Step every LR scheduler once (manual optimization: at the end of each epoch)."""
        schedulers = self.lr_schedulers()
        if schedulers is None:
            return
        for scheduler in schedulers if isinstance(schedulers, list) else [schedulers]:
            scheduler.step()
