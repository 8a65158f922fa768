"""How a method runs fast on its device: ``torch.compile`` of its networks and of its loss
arithmetic, CUDA graphs, and the channels-last memory format.

Every network of the method (``self.networks``: ``self.net`` and those of ``add_network``) is, once
the run's device is known (the method's ``setup``), compiled in place (``nn.Module.compile``: the
state-dict keys, checkpoints and optimizers are unchanged) for training and evaluation; a network
added later is compiled as it is added. Weights are replaced in place (``load_state_dict``, as
``warmup_model: best`` and ``main_stage_init: reinit/restart`` do), so the compiled modules and
their graphs stay valid. The base's per-sample loss of the current stage and the VRNL arithmetic are
compiled as functions.

``auto`` settings resolve by device: on CUDA, compile with CUDA graphs (mode ``reduce-overhead``)
and channels-last; elsewhere (CPU) neither, since compiling does not pay there (see the README's
speed section for the measurements). Under CUDA graphs the outputs of one step are overwritten by
the next replay, so whatever a step keeps beyond itself (its
:class:`~noisylabels.methods.core.step.StepOutput` records, which callbacks hold for the whole
epoch) is copied out with :meth:`Acceleration.keep`. :class:`Acceleration` holds these settings for
one method.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.vrnl import vrnl_objective

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""``torch.compile`` modes (of the ``inductor`` backend) that ``compile`` may name."""
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
CUDA_MODE = "reduce-overhead"
"""The mode ``compile: auto`` and ``compile: true`` use on CUDA."""
AUTO = "auto"
RECOMPILE_LIMIT = 16
"""Graphs per compiled function a run may make (train/evaluation x full/last batch size x
stage, each at most once): Dynamo's own default (8) is just reached by a two-stage method."""


def resolve_compile(value: bool | str, device: torch.device) -> str | None:
    """The compile mode of option value ``value`` on ``device``, or ``None`` (eager).

    ``auto``: :data:`CUDA_MODE` on CUDA, eager elsewhere; ``true``: :data:`CUDA_MODE` on CUDA,
    ``default`` elsewhere; ``false``: eager; a mode of :data:`COMPILE_MODES`: that mode."""
    if value is False:
        return None
    if value is True or value == AUTO:
        if device.type == "cuda":
            return CUDA_MODE
        return "default" if value is True else None
    return str(value)


def resolve_channels_last(value: bool | str, device: torch.device) -> bool:
    """Whether networks run channels-last: ``auto`` means on CUDA."""
    return device.type == "cuda" if value == AUTO else bool(value)


def check_acceleration_options(
    compile: bool | str, backend: str, channels_last: bool | str
) -> None:
    """Refuse option values :func:`resolve_compile` and ``torch.compile`` would not take."""
    if not (isinstance(compile, bool) or compile == AUTO or compile in COMPILE_MODES):
        raise InputError(
            f"--model.compile must be auto, true, false or a mode of {COMPILE_MODES}, "
            f"got {compile!r}"
        )
    backends = torch.compiler.list_backends(exclude_tags=())
    if backend not in backends:
        raise InputError(
            f"--model.compile_backend must be one of {sorted(backends)}, got {backend!r}"
        )
    if not (isinstance(channels_last, bool) or channels_last == AUTO):
        raise InputError(
            f"--model.channels_last must be auto, true or false, got {channels_last!r}"
        )


class Acceleration:
    """The speed settings of one method: compiled networks and loss arithmetic, CUDA-graph step
    boundaries, channels-last. A plain object the method holds; it never calls back into it.

    Args:
        compile, backend, channels_last: the method's ``compile``, ``compile_backend`` and
            ``channels_last`` options (checked here).

    Until :meth:`resolve` everything runs eagerly.
    """

    def __init__(self, compile: bool | str, backend: str, channels_last: bool | str) -> None:
        check_acceleration_options(compile, backend, channels_last)
        self.compile = compile
        self.backend = backend
        self.channels_last_option = channels_last
        self.compile_kwargs: dict[str, Any] | None = None
        self.cudagraphs = False
        self.resolved = False
        self.channels_last = channels_last is True
        self.vrnl_fn: Callable[..., Any] = vrnl_objective

    @property
    def mode(self) -> str | None:
        """The resolved compile mode (``None``: eager)."""
        kwargs = self.compile_kwargs
        return None if kwargs is None else kwargs.get("mode") or "default"

    def layout(self, net: nn.Module) -> nn.Module:
        """``net`` in the memory format the run's settings give (channels-last or not)."""
        return net.to(memory_format=torch.channels_last) if self.channels_last else net

    def compile_network(self, net: nn.Module) -> nn.Module:
        """Lay out ``net`` and, once the settings are resolved, compile it in place as they
        say (a network added after ``setup``); return it."""
        self.layout(net)
        if self.resolved and self.compile_kwargs is not None:
            net.compile(**self.compile_kwargs)
        return net

    def network_input(self, images: Tensor) -> Tensor:
        """``images`` in the memory format the networks run in."""
        if self.channels_last and images.ndim == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return images

    def resolve(
        self,
        device: torch.device,
        networks: list[nn.Module],
        stage_loss: Callable[..., Tensor],
        collective: bool,
        name: str,
    ) -> Callable[..., Tensor]:
        """Resolve ``auto`` for ``device`` and compile: the ``networks`` (in place), the
        stage's per-sample loss ``stage_loss`` (returned, compiled or as it is), and the VRNL
        arithmetic (:attr:`vrnl_fn`) unless a global variance needs a collective mid-objective
        (``collective``). Runs once; later calls return ``stage_loss`` unchanged."""
        if self.resolved:
            return stage_loss
        self.channels_last = resolve_channels_last(self.channels_last_option, device)
        mode = resolve_compile(self.compile, device)
        if mode is not None:
            kwargs: dict[str, Any] = {"backend": self.backend}
            if self.backend == "inductor" and mode != "default":
                kwargs["mode"] = mode
            self.compile_kwargs = kwargs
            self.cudagraphs = (
                device.type == "cuda" and "mode" in kwargs and kwargs["mode"] in CUDAGRAPH_MODES
            )
        self.resolved = True
        for net in networks:
            self.compile_network(net)
        if self.compile_kwargs is None:
            return stage_loss
        compiled = torch.compile(stage_loss, **self.compile_kwargs)
        if not collective:  # the all-reduce of a global variance stays outside the graph
            self.vrnl_fn = torch.compile(vrnl_objective, **self.compile_kwargs)
        config = torch._dynamo.config
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        setattr(config, limit, max(getattr(config, limit), RECOMPILE_LIMIT))
        if "TORCH_LOGS" not in os.environ:
            torch._logging.set_logs(recompiles=True)  # each recompile, once, with its reason
        rank_zero_info(
            f"{name}: torch.compile ({self.backend}, mode "
            f"{self.mode}{', CUDA graphs' if self.cudagraphs else ''}) of "
            f"{len(networks)} network(s), the per-sample loss"
            f"{'' if collective else ' and the VRNL objective'}; the first training and "
            "evaluation steps of each batch size compile (slow), later steps reuse the graphs"
        )
        return compiled

    def keep(self, tensor: Tensor | None) -> Tensor | None:
        """``tensor`` in memory of its own when CUDA graphs would overwrite it at the next step
        (for values kept beyond the step); ``tensor`` itself otherwise."""
        return tensor.clone() if self.cudagraphs and tensor is not None else tensor

    def begin_step(self) -> None:
        """Mark the start of a step for CUDA graphs (the previous step's outputs may then be
        overwritten); nothing without them."""
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
