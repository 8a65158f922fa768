"""How a run's arithmetic was executed: what the machine-dependent (``auto``) settings resolved
to. ``results.json`` records it for the run's last part under ``execution``, and for every
earlier part of a resumed run under its ``resumed`` entry, with the seconds that part ran."""

from __future__ import annotations

import platform
from typing import Any

import torch


def execution(trainer: Any, model: Any) -> dict[str, Any]:
    """How ``trainer`` runs ``model``'s arithmetic: the ``device`` type and ``device_name`` (the
    GPU's, or the CPU's architecture), the processes (``world_size``), the ``precision``
    (``auto`` gives ``bf16-mixed`` on a GPU with bf16), the compile ``mode`` in force (``null``:
    eager), whether steps run as CUDA graphs, why compiling was given up mid-run
    (``compile_fallback``, ``null`` if it was not), and channels-last. The same command on
    another machine can run in other arithmetic: this says in which."""
    strategy = getattr(trainer, "strategy", None)
    device = strategy.root_device if strategy is not None else torch.device("cpu")
    name = platform.machine() or "unknown"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    speed = getattr(model, "speed", None)
    return {
        "device": device.type,
        "device_name": name,
        "world_size": int(getattr(trainer, "world_size", 1)),
        "precision": str(trainer.precision),
        "compile_mode": getattr(speed, "mode", None),
        "cuda_graphs": bool(getattr(speed, "cudagraphs", False)),
        "compile_fallback": getattr(speed, "failure", None),
        "channels_last": bool(getattr(speed, "channels_last", False)),
    }
