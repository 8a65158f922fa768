"""Accelerators and devices this machine does not have, as one paragraph.

Lightning refuses a trainer that asks for hardware the machine lacks (a GPU config on a machine
without a GPU, more GPUs than are visible, an Apple GPU on Linux, a device count the accelerator
does not take) with an exception about its own ``Trainer`` arguments and a long traceback.
:func:`device_error` turns it into an :class:`~noisylabels.errors.InputError` that says what the
run asked for (its ``--trainer.*`` options), what this machine has and what to use instead.
"""

from __future__ import annotations

import os
import re
from types import TracebackType
from typing import Any

import torch

from noisylabels.errors import InputError

# Lightning's refusals of the hardware a trainer asks for, by what they mean
NO_GPU = (
    "No supported gpu backend found",
    "`CUDAAccelerator` can not run on your system",
    "GPUs requested but none are available",
    "there are no visible CUDA devices",
)
TOO_FEW_GPUS = ("You requested gpu:", "this machine only has", "are currently available")
UNAVAILABLE = "can not run on your system"  # another accelerator (MPS, XLA)
BAD_DEVICES = ("value is not a valid input using", "`devices` selected with")
BAD_NAME = "invalid accelerator name"
NEEDS_XLA = "torch_xla"
TRAINER_OPTIONS = ("accelerator", "devices", "num_nodes", "strategy")
DEFAULTS = {"accelerator": "auto", "devices": "auto", "num_nodes": 1, "strategy": "auto"}
ON_THE_CPU = (
    "Run on the CPU instead: --trainer.accelerator cpu, or, for DDP, compose "
    "configs/trainer/ddp_cpu.yaml (DDP over CPU processes) in place of configs/trainer/ddp.yaml"
)


def _frames(tb: TracebackType | None) -> list[Any]:
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def requested(err: BaseException) -> dict[str, Any]:
    """The hardware options of the ``Trainer`` whose construction raised ``err`` (its
    ``accelerator``, ``devices``, ``num_nodes`` and ``strategy`` arguments, from the frame of
    ``Trainer.__init__`` in the traceback); empty where that frame is not in it."""
    for frame in _frames(err.__traceback__):
        owner = frame.f_locals.get("self")
        if frame.f_code.co_name == "__init__" and type(owner).__name__ == "Trainer":
            return {k: frame.f_locals[k] for k in TRAINER_OPTIONS if k in frame.f_locals}
    return {}


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, list, tuple)) or value is None:
        return str(list(value) if isinstance(value, tuple) else value)
    return type(value).__name__  # an Accelerator or Strategy object


def asked(options: dict[str, Any]) -> str:
    """The options as the command line gives them, those left at their default left out:
    ``--trainer.accelerator gpu --trainer.devices -1 --trainer.strategy ddp``."""
    given = [
        f"--trainer.{key} {_shown(options[key])}"
        for key in TRAINER_OPTIONS
        if key in options and _shown(options[key]) != str(DEFAULTS[key])
    ]
    return " ".join(given) or "the trainer's accelerator and devices"


def cuda_here() -> str:
    """What CUDA GPUs this process sees, as a clause."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    note = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not count:
        return f"no CUDA GPU is visible on this machine{note}"
    return f"this machine has {count} visible CUDA GPU(s), ids 0 to {count - 1}{note}"


def _lightning(message: str) -> str:
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def describe(err: BaseException, options: dict[str, Any]) -> str | None:
    """The paragraph for Lightning's refusal ``err`` of the hardware ``options`` ask for;
    ``None`` where ``err`` is not such a refusal."""
    message = str(err)
    what = asked(options)
    said = f" (Lightning: {_lightning(message)})"
    if any(text in message for text in NO_GPU):
        return f"{what} asks for CUDA GPUs, but {cuda_here()}. {ON_THE_CPU}{said}"
    if any(text in message for text in TOO_FEW_GPUS):
        return (
            f"{what} asks for more GPUs than there are: {cuda_here()}. Give --trainer.devices N "
            "with N at most the number visible (-1: every visible GPU), or a list of their "
            f"ids{said}"
        )
    if UNAVAILABLE in message:
        found = re.search(r"`(\w+)Accelerator`", message)
        name = found.group(1) if found else "that accelerator"
        have = re.search(r"\[([^\]]*)\]\.?\s*$", message)
        here = have.group(1).replace("'", "") if have else "cpu"
        return (
            f"{what} asks for the {name} accelerator, which this machine does not have; the "
            f"accelerators here: {here}. Use --trainer.accelerator cpu (or auto: the best one "
            f"here){said}"
        )
    if any(text in message for text in BAD_DEVICES):
        return (
            f"{what}: --trainer.devices {_shown(options.get('devices', '?'))} is not a number of "
            "devices this accelerator takes; give a count of at least 1 (on GPUs also -1: "
            f"every visible GPU) or a list of GPU ids{said}"
        )
    if BAD_NAME in message:
        names = re.search(r"Available names are: ([^.]*)", message)
        listed = f"; the names are {names.group(1)}" if names else ""
        name = _shown(options.get("accelerator", "?"))
        return f"--trainer.accelerator {name} is not an accelerator{listed}{said}"
    if NEEDS_XLA in message:
        return (
            f"{what} asks for TPUs, which need torch_xla and a TPU machine; this one has "
            f"neither. {ON_THE_CPU}{said}"
        )
    return None


def device_error(err: BaseException) -> InputError | None:
    """An :class:`InputError` for Lightning's refusal ``err`` of an accelerator or devices
    this machine does not have, raised while the ``Trainer`` was built; ``None`` for any other
    error."""
    options = requested(err)
    if not options:  # raised elsewhere than in building the trainer
        return None
    text = describe(err, options)
    return None if text is None else InputError(text)
