"""Stop a run whose training loss became NaN or infinite, naming where and the likely cause.

On the CPU every step's loss is checked at once (reading a CPU scalar costs nothing). On an
accelerator reading the loss would synchronize the host with the device every step, so the
check keeps a device-side record of the first non-finite step of the epoch (one ``where`` per
step, no synchronization). Every :data:`CHECK_EVERY` steps it starts copying that record to
pinned host memory without waiting and reads the copy once the device has made it (at the
next such step at the latest), so steady-state steps never wait for the device; before
validation, before any checkpoint is written and at the end of the epoch it reads the record
itself (one synchronization). The run stops at most ``2 * CHECK_EVERY`` steps after the loss
diverged, still naming the exact first bad step, and no checkpoint of the diverged weights is
ever written. Where the method corrects with a transition matrix, the message names its
condition (smallest diagonal entry, all-zero columns, rank) before α and the learning rate,
computed once the run has diverged."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor

from noisylabels.errors import DivergenceError
from noisylabels.noise import transition_condition

CHECK_EVERY = 50
"""Steps between copies of the device-side record to the host on an accelerator (the CPU checks
each step)."""


def _loss_of(outputs: Any) -> Tensor | None:
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return loss.detach() if isinstance(loss, Tensor) else None


class DivergenceGuard(L.Callback):
    """Raise :class:`~noisylabels.errors.DivergenceError` when a training step's loss is NaN or
    infinite (every run attaches it, see :func:`noisylabels.run.run_callbacks`).

    Args:
        check_every: copy the device-side record to the host every this many steps (default
            :data:`CHECK_EVERY`).
        every_step: check each step's loss at once (a host-device synchronization per step off
            the CPU); default: on the CPU only.
    """

    def __init__(self, check_every: int = CHECK_EVERY, every_step: bool | None = None) -> None:
        if check_every < 1:
            raise ValueError(f"check_every must be >= 1, got {check_every}")
        self.check_every = check_every
        self.every_step = every_step
        self._first_bad: Tensor | None = None  # batch index of the first bad step, -1 if none
        self._bad_value: Tensor | None = None
        self._host: Tensor | None = None  # host copy of the record: (first bad step, value)
        self._copy: torch.cuda.Event | bool | None = None  # a copy in flight (True: made)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._first_bad = self._bad_value = self._copy = None

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        loss = _loss_of(outputs)
        if loss is None:
            return
        every_step = loss.device.type == "cpu" if self.every_step is None else self.every_step
        if every_step:
            if not bool(torch.isfinite(loss).all()):
                self._raise(trainer, pl_module, batch_idx, float(loss.float().sum()))
            return
        if self._first_bad is None:
            self._first_bad = torch.full((), -1, dtype=torch.long, device=loss.device)
            self._bad_value = torch.zeros((), dtype=torch.float32, device=loss.device)
        first = ~torch.isfinite(loss).all() & (self._first_bad < 0)
        self._first_bad = torch.where(first, batch_idx, self._first_bad)
        self._bad_value = torch.where(first, loss.float().sum(), self._bad_value)
        if (batch_idx + 1) % self.check_every == 0:
            self.poll(trainer, pl_module)

    def poll(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Without waiting for the device: raise if a finished host copy of the record shows a
        bad step, and start copying the current record (on the CPU it is made at once)."""
        self._read_copy(trainer, pl_module)
        if self._first_bad is None or self._bad_value is None:
            return
        record = torch.stack([self._first_bad.float(), self._bad_value])
        if self._host is None:
            self._host = torch.empty(2, pin_memory=record.device.type == "cuda")
        self._host.copy_(record, non_blocking=True)
        if record.device.type == "cuda":
            self._copy = torch.cuda.Event()
            self._copy.record()
        else:
            self._copy = True
        self._read_copy(trainer, pl_module)

    def _read_copy(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        copy = self._copy
        if copy is None or (copy is not True and not copy.query()):
            return
        self._copy = None
        step, value = self._host.numpy().tolist()  # host memory: nothing to wait for
        if step >= 0:
            self._raise(trainer, pl_module, int(step), value)

    def check(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Read the device-side record (one synchronization) and raise if a step diverged."""
        if self._first_bad is None or self._bad_value is None:
            return
        step, value = torch.stack([self._first_bad.float(), self._bad_value]).tolist()
        if step >= 0:
            self._raise(trainer, pl_module, int(step), value)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self.check(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.check(trainer, pl_module)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self.check(trainer, pl_module)

    def _raise(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch_idx: int, value: float
    ) -> None:
        self._first_bad = self._bad_value = self._copy = None
        raise DivergenceError(divergence_message(trainer, pl_module, batch_idx, value))


def transition_cause(pl_module: L.LightningModule) -> tuple[str, bool]:
    """What a diverged run's message says first about the transition matrix the method
    corrects with (``T̂``, estimated or given; row-stochastic, ``T[i, j] = P(noisy=j |
    clean=i)``), and whether it is degenerate (then the likely cause); ``("", False)`` for a
    method without one, or in its warm-up. Read once, when the run has diverged."""
    current = getattr(pl_module, "transition_estimate", None)
    T = current() if callable(current) else None
    if T is None or T.dim() != 2:
        return "", False
    given = getattr(pl_module, "estimates_transition", None) is False
    what, T_ = ("given transition matrix", "T") if given else ("estimated transition matrix", "T̂")
    condition = transition_condition(T)
    text = f"The {what} {T_} the method corrects with has {condition.describe()}"
    if not condition.degenerate:
        return f"{text}: it looks sound. ", False
    advice = (
        "fix T or give another one"
        if given
        else "estimate T̂ after more warm-up epochs, "
        "--model.schedule.warmup_epochs, or give a sound T: --model.transition true or a T file"
    )
    return (
        f"{text}: it is degenerate, which makes the corrected loss -log((p @ {T_})_y) or the "
        f"importance weights p_y / (p @ {T_})_y unbounded, and is the likely cause ({advice}). ",
        True,
    )


def divergence_message(
    trainer: L.Trainer, pl_module: L.LightningModule, batch_idx: int, value: float
) -> str:
    """The one paragraph that explains a diverged run: where, the condition of the method's T̂
    (where it has one), the likely cause, what to do."""
    hp = getattr(pl_module, "hparams", {})
    alpha = 0.0 if getattr(pl_module, "in_warmup", False) else float(hp.get("alpha", 0.0))
    lr = (hp.get("optim") or {}).get("lr")
    n = trainer.num_training_batches
    of = f" of {n}" if isinstance(n, int) else ""
    where = f"epoch {trainer.current_epoch}, training step {batch_idx}{of}"
    lr_cause = (
        f"the learning rate (lr={lr}) is too high for this model and data; lower --model.optim.lr"
    )
    if alpha > 0 and hp.get("vrnl_form", "paper") == "paper":
        cause = (
            f"the VRNL coefficient alpha={alpha} is too large for the scale of the losses "
            "(-alpha*Var(loss) grows without bound as the losses spread apart: lower "
            "--model.alpha, or give --model.vrnl_form bounded, whose weights never push a "
            f"loss up), or {lr_cause}"
        )
    else:
        cause = lr_cause
    transition, degenerate = transition_cause(pl_module)
    likely = "Otherwise" if degenerate else "The likely cause"
    return (
        f"Training diverged: the training loss was {value} at {where} (epochs and steps count "
        f"from 0). {transition}{likely}: {cause}. The run was stopped; no results.json is written "
        "and no checkpoint of the diverged weights is kept. Start a new run with the lower value "
        "(a resume continues the same experiment, so `--ckpt_path last` refuses changed "
        "options; resumed as it is, the run would diverge again)."
    )
