"""How a method runs fast on its device: ``torch.compile`` of its networks and of its loss
arithmetic, CUDA graphs, and the channels-last memory format.

Every network of the method (``self.networks``: ``self.net`` and those of ``add_network``) is,
once the run's device is known (``setup``), compiled in place (``nn.Module.compile``: the
state-dict keys, checkpoints and optimizers are unchanged) for training and evaluation; a
network added later is compiled as it is added. Weights are replaced in place
(``load_state_dict``, as ``warmup_model: best`` and ``main_stage_init: reinit/restart`` do), so
the compiled modules and their graphs stay valid. The base's per-sample loss of the current
stage and the VRNL arithmetic are compiled as functions.

``auto`` settings resolve by device: on CUDA, compile with CUDA graphs (mode
``reduce-overhead``) and channels-last; elsewhere (CPU) neither, since compiling does not pay
there (see the README's speed section for the measurements). Under CUDA graphs the outputs of
one step are overwritten by the next replay, so whatever a step keeps beyond itself (its
:class:`~noisylabels.methods.step.StepOutput` records, which callbacks hold for the whole epoch)
is copied out with :meth:`Acceleration.keep`.
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
from noisylabels.methods.vrnl import vrnl_objective

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
    """Mixin of :class:`~noisylabels.methods.base.NoisyLabelMethod`: compiled networks and loss
    arithmetic, CUDA-graph step boundaries, channels-last.

    Reads ``hparams.compile``, ``hparams.compile_backend`` and ``hparams.channels_last``;
    :meth:`init_acceleration` must run in ``__init__`` before the first ``build_network``.
    """

    def init_acceleration(self) -> None:
        """Check the options; until :meth:`resolve_acceleration` everything runs eagerly."""
        hp = self.hparams
        check_acceleration_options(hp.compile, hp.compile_backend, hp.channels_last)
        self._compile_kwargs: dict[str, Any] | None = None
        self._cudagraphs = False
        self._resolved = False
        self.channels_last_active = hp.channels_last is True
        self.stage_loss_fn: Callable[..., Tensor] = self.stage_loss
        self.vrnl_fn: Callable[..., Any] = vrnl_objective

    @property
    def compile_mode(self) -> str | None:
        """The resolved compile mode (``None``: eager)."""
        kwargs = self._compile_kwargs
        return None if kwargs is None else kwargs.get("mode") or "default"

    def layout_network(self, net: nn.Module) -> nn.Module:
        """``net`` in the memory format the run's settings give (channels-last or not)."""
        return net.to(memory_format=torch.channels_last) if self.channels_last_active else net

    def compile_network(self, net: nn.Module) -> nn.Module:
        """Lay out ``net`` and, once the settings are resolved, compile it in place as they
        say (a network added after ``setup``); return it."""
        self.layout_network(net)
        if self._resolved and self._compile_kwargs is not None:
            net.compile(**self._compile_kwargs)
        return net

    def resolve_acceleration(self, device: torch.device, world_size: int = 1) -> None:
        """Resolve ``auto`` for ``device`` and compile: the networks, the stage's per-sample
        loss, and (unless a global variance needs a collective mid-objective) the VRNL
        arithmetic. Runs once; later calls do nothing."""
        if self._resolved:
            return
        hp = self.hparams
        self.channels_last_active = resolve_channels_last(hp.channels_last, device)
        mode = resolve_compile(hp.compile, device)
        if mode is not None:
            kwargs: dict[str, Any] = {"backend": hp.compile_backend}
            if hp.compile_backend == "inductor" and mode != "default":
                kwargs["mode"] = mode
            self._compile_kwargs = kwargs
            self._cudagraphs = (
                device.type == "cuda" and "mode" in kwargs and kwargs["mode"] in CUDAGRAPH_MODES
            )
        self._resolved = True
        networks = self.networks
        for net in networks:
            self.compile_network(net)
        if self._compile_kwargs is None:
            return
        self.stage_loss_fn = torch.compile(self.stage_loss, **self._compile_kwargs)
        collective = world_size > 1 and self.variance_scope == "global"
        if not collective:  # the all-reduce of a global variance stays outside the graph
            self.vrnl_fn = torch.compile(vrnl_objective, **self._compile_kwargs)
        config = torch._dynamo.config
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        setattr(config, limit, max(getattr(config, limit), RECOMPILE_LIMIT))
        if "TORCH_LOGS" not in os.environ:
            torch._logging.set_logs(recompiles=True)  # each recompile, once, with its reason
        rank_zero_info(
            f"{type(self).__name__}: torch.compile ({hp.compile_backend}, mode "
            f"{self.compile_mode}{', CUDA graphs' if self._cudagraphs else ''}) of "
            f"{len(networks)} network(s), the per-sample loss"
            f"{'' if collective else ' and the VRNL objective'}; the first training and "
            "evaluation steps of each batch size compile (slow), later steps reuse the graphs"
        )

    def keep(self, tensor: Tensor | None) -> Tensor | None:
        """``tensor`` in memory of its own when CUDA graphs would overwrite it at the next step
        (for values kept beyond the step); ``tensor`` itself otherwise."""
        return tensor.clone() if self._cudagraphs and tensor is not None else tensor

    def begin_step(self) -> None:
        """Mark the start of a step for CUDA graphs (the previous step's outputs may then be
        overwritten); nothing without them."""
        if self._cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.begin_step()

    def on_validation_batch_start(
        self, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.begin_step()

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.begin_step()

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.begin_step()
