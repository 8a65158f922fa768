"""The random number generator states a run saves in ``last.ckpt`` and restores on resume, so a
resumed run on the CPU draws exactly what the uninterrupted one does."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """The random number generator states of this process (torch, CUDA where initialised,
    numpy, Python), as tensors and numbers (loadable with ``weights_only=True``)."""
    key, pos, has_gauss, gauss = np.random.get_state(legacy=True)[1:]
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "key": torch.from_numpy(key.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    key = np_state["key"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", key, np_state["pos"], np_state["has_gauss"], np_state["gauss"]))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
