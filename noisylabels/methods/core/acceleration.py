"""How a method runs fast on its device: ``torch.compile`` of its networks and of its loss
arithmetic, CUDA graphs, and the channels-last memory format.

Every network of the method (``self.networks``: ``self.net`` and those of ``add_network``) is, once
the run's device is known (the method's ``setup``), compiled in place (as ``nn.Module.compile``
does: the state-dict keys, checkpoints and optimizers are unchanged) for training and evaluation;
a network added later is compiled as it is added. Weights are replaced in place
(``load_state_dict``, as ``warmup_model: best`` and ``main_stage_init: reinit/restart`` do), so
the compiled modules and their graphs stay valid. The base's per-sample loss of the current stage
and the VRNL arithmetic are compiled as functions.

Graphs are static (``dynamic=False``): a Python number such as α is a constant of its graph (a
stage change that changes it compiles once more, never turning it into a host tensor input), and
the smaller last batch of an epoch gets a graph of its own instead of switching every later batch
to symbolic shapes.

``auto`` settings resolve by device: channels-last on CUDA; compiling with CUDA graphs on one
CUDA device (:data:`AUTO_COMPILES_ON_CUDA`: ``make gpu-check`` has passed on a GPU), eager on the
CPU, under DDP (compiled collectives have not run on several GPUs) and with gradient
accumulation (which CUDA graphs cannot hold); ``compile: true`` compiles everywhere. Under CUDA
graphs the outputs of one step are overwritten by the next replay, so whatever a step keeps
beyond itself (its :class:`~noisylabels.methods.core.step.StepOutput` records, which callbacks
hold for the whole epoch) is copied out with :meth:`Acceleration.keep`.

A speed option never kills a run: every compiled callable is guarded. If a compiled call raises
(compiling or capturing failed, the recompile limit was hit) and the same call succeeds eagerly,
or the compiled functions break their graphs more than :data:`GRAPH_BREAK_LIMIT` times, the run
warns once, naming the option, and continues eagerly from the same state
(:meth:`Acceleration.fall_back`). :class:`SpeedOptions` is the method's ``speed`` option group
(``--model.speed.*``); :class:`Acceleration` holds these settings for one method.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo
import torch._dynamo.utils
import torch._functorch.config
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from noisylabels.errors import InputError, warn
from noisylabels.methods.core.vrnl import vrnl_objective

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""``torch.compile`` modes (of the ``inductor`` backend) that ``compile`` may name."""
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
CUDAGRAPH_BACKEND = "cudagraphs"
"""Dynamo's backend that records CUDA graphs without generating code."""
CUDA_MODE = "reduce-overhead"
"""The mode ``compile: true`` uses on CUDA."""
AUTO = "auto"
AUTO_COMPILES_ON_CUDA = True
"""Whether ``compile: auto`` compiles (with :data:`CUDA_MODE`) on one CUDA device: on since
``make gpu-check`` passed on an NVIDIA H200 (torch 2.11), docs/speed.md, "GPU acceptance check"."""
RECOMPILE_LIMIT = 16
"""Graphs per compiled function a run may make (train/evaluation x full/last batch size x
stage, each at most once): Dynamo's own default (8) is just reached by a two-stage method.
Beyond it the run continues eagerly (:meth:`Acceleration.fall_back`)."""
OPTION = "--model.speed."
GRAPH_BREAK_LIMIT = 16
"""Graph breaks in the compiled functions beyond which compiling is given up as a loss: the
project's own functions have none."""


def resolve_compile(
    value: bool | str, device: torch.device, world_size: int = 1, accumulate: int = 1
) -> str | None:
    """The compile mode of option value ``value`` on ``device``, or ``None`` (eager).

    ``auto``: :data:`CUDA_MODE` on CUDA (while :data:`AUTO_COMPILES_ON_CUDA`) in a run of one
    process (``world_size``) without gradient accumulation (``accumulate``), else eager;
    ``true``: :data:`CUDA_MODE` on CUDA, ``default`` elsewhere; ``false``: eager; a mode of
    :data:`COMPILE_MODES`: that mode."""
    if value is False:
        return None
    if value == AUTO:
        single = world_size == 1 and accumulate == 1
        return CUDA_MODE if AUTO_COMPILES_ON_CUDA and device.type == "cuda" and single else None
    if value is True:
        return CUDA_MODE if device.type == "cuda" else "default"
    return str(value)


def resolve_channels_last(value: bool | str, device: torch.device) -> bool:
    """Whether networks run channels-last: ``auto`` means on CUDA."""
    return device.type == "cuda" if value == AUTO else bool(value)


@dataclass(frozen=True)
class SpeedOptions:
    """How the networks run: none of it changes what a run computes (a resume may change it).

    Attributes:
        compile: ``torch.compile`` the networks, the per-sample loss and the VRNL arithmetic:
            ``auto`` (with CUDA graphs on one CUDA device without gradient accumulation, else
            eager), ``true`` (with CUDA graphs on CUDA), ``false``, or a mode (``default``,
            ``reduce-overhead``, ...); a failed compile warns and runs eagerly.
        compile_backend: ``torch.compile`` backend: ``inductor``, ``aot_eager`` (compiles in
            seconds, no code generated: to check a method), ``cudagraphs`` (CUDA only), ...
        channels_last: run convolutional backbones in channels-last memory format; ``auto``:
            on CUDA (where it pays with mixed precision), not on the CPU.
    """

    compile: bool | str = AUTO
    compile_backend: str = "inductor"
    channels_last: bool | str = AUTO

    def __post_init__(self) -> None:
        """Refuse values :func:`resolve_compile` and ``torch.compile`` would not take."""
        compile, backend, channels_last = self.compile, self.compile_backend, self.channels_last
        if not (isinstance(compile, bool) or compile == AUTO or compile in COMPILE_MODES):
            raise InputError(
                f"{OPTION}compile must be auto, true, false or a mode of {COMPILE_MODES}, "
                f"got {compile!r}"
            )
        backends = torch.compiler.list_backends(exclude_tags=())
        if backend not in backends:
            raise InputError(
                f"{OPTION}compile_backend must be one of {sorted(backends)}, got {backend!r}"
            )
        if not (isinstance(channels_last, bool) or channels_last == AUTO):
            raise InputError(
                f"{OPTION}channels_last must be auto, true or false, got {channels_last!r}"
            )


def _graph_breaks() -> int:
    """Graph breaks Dynamo has counted in this process, and functions it gave up tracing (a
    break it cannot resume from, as in a loop: the whole function then runs eagerly)."""
    counters = torch._dynamo.utils.counters
    return sum(counters["graph_break"].values()) + sum(counters["unimplemented"].values())


def module_setattr(module: nn.Module, name: str, value: Any) -> None:
    """``nn.Module.__setattr__``, except for ``_current_fx_name``: Lightning records the hook it
    runs there around every hook call (about 45 times a training step), a plain string that needs
    none of ``nn.Module``'s checks for parameters, buffers and submodules (0.2 µs a set instead of
    1.6 µs)."""
    if name == "_current_fx_name":
        object.__setattr__(module, name, value)
    else:
        nn.Module.__setattr__(module, name, value)


class Acceleration:
    """The speed settings of one method: compiled networks and loss arithmetic, CUDA-graph step
    boundaries, channels-last, and the fall-back to eager. A plain object the method holds; it
    never calls back into it.

    Args:
        compile, backend, channels_last: the :class:`SpeedOptions` ``compile``,
            ``compile_backend`` and ``channels_last`` (checked there).

    Until :meth:`resolve` everything runs eagerly.
    """

    def __init__(self, compile: bool | str, backend: str, channels_last: bool | str) -> None:
        SpeedOptions(compile, backend, channels_last)  # checks the values
        self.compile = compile
        self.backend = backend
        self.channels_last_option = channels_last
        self.compile_kwargs: dict[str, Any] | None = None
        self.cudagraphs = False
        self.resolved = False
        self.channels_last = channels_last is True
        self.vrnl_fn: Callable[..., Any] = vrnl_objective
        self.failure: str | None = None  # why compiling was given up (fall_back), if it was
        self.name = "the method"
        self._networks: list[nn.Module] = []
        self._breaks_at_start = 0

    @property
    def mode(self) -> str | None:
        """The resolved compile mode (``None``: eager, also after a fall-back)."""
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
            # what nn.Module.compile does, with the compiled call guarded
            eager = net._call_impl
            net._compiled_call_impl = self.guard(torch.compile(eager, **self.compile_kwargs), eager)
            self._networks.append(net)
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
        world_size: int = 1,
        accumulate: int = 1,
    ) -> Callable[..., Tensor]:
        """Resolve ``auto`` for ``device``, the run's processes (``world_size``) and gradient
        accumulation (``accumulate``), and compile: the ``networks`` (in place), the stage's
        per-sample loss ``stage_loss`` (returned, compiled or as it is), and the VRNL
        arithmetic (:attr:`vrnl_fn`) unless a global variance needs a collective mid-objective
        (``collective``). Runs once; later calls return ``stage_loss`` unchanged."""
        if self.resolved:
            return stage_loss
        self.name = name
        self.channels_last = resolve_channels_last(self.channels_last_option, device)
        mode = resolve_compile(self.compile, device, world_size, accumulate)
        if self.compile == AUTO and device.type == "cuda" and mode is None:
            why = "DDP" if world_size > 1 else "gradient accumulation"
            rank_zero_info(
                f"{name}: --model.speed.compile auto runs eagerly under {why} "
                f"({OPTION}compile true compiles)"
            )
        if mode is not None:
            cudagraphs = self.backend == CUDAGRAPH_BACKEND or (
                self.backend == "inductor" and mode in CUDAGRAPH_MODES
            )
            if self.backend == CUDAGRAPH_BACKEND and device.type != "cuda":
                raise InputError(
                    f"{OPTION}compile_backend {CUDAGRAPH_BACKEND} records CUDA graphs and needs a "
                    f"CUDA device, not {device.type}; use {OPTION}compile_backend inductor"
                )
            kwargs: dict[str, Any] = {"backend": self.backend, "dynamic": False}
            if self.backend == "inductor" and mode != "default":
                kwargs["mode"] = mode
            self.compile_kwargs = kwargs
            self.cudagraphs = cudagraphs and device.type == "cuda"
        self.resolved = True
        for net in networks:
            self.compile_network(net)
        if self.compile_kwargs is None:
            return stage_loss
        compiled = torch.compile(_own_code(stage_loss), **self.compile_kwargs)
        compiled = self.guard(compiled, stage_loss)
        if not collective:  # the all-reduce of a global variance stays outside the graph
            vrnl = torch.compile(_own_code(vrnl_objective), **self.compile_kwargs)
            self.vrnl_fn = self.guard(vrnl, vrnl_objective)
        config = torch._dynamo.config
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        setattr(config, limit, max(getattr(config, limit), RECOMPILE_LIMIT))
        # the recompile limit raises (and the guard falls back) instead of running a function
        # eagerly in silence; the backward compiles with the forward, so that a failure of
        # either surfaces in the guarded call
        for settings, key in (
            (config, "fail_on_recompile_limit_hit"),
            (torch._functorch.config, "force_non_lazy_backward_lowering"),
        ):
            if hasattr(settings, key):  # both in torch >= 2.6
                setattr(settings, key, True)
        if "TORCH_LOGS" not in os.environ:
            torch._logging.set_logs(recompiles=True)  # each recompile, once, with its reason
        self._breaks_at_start = _graph_breaks()
        rank_zero_info(
            f"{name}: torch.compile ({self.backend}, mode "
            f"{self.mode}{', CUDA graphs' if self.cudagraphs else ''}, static shapes) of "
            f"{len(networks)} network(s), the per-sample loss"
            f"{'' if collective else ' and the VRNL objective'}; the first training and "
            "evaluation steps of each batch size compile (slow), later steps reuse the graphs"
        )
        return compiled

    # ---------------------------------------------------------------- the fall-back
    def guard(self, compiled: Callable[..., Any], eager: Callable[..., Any]) -> Callable[..., Any]:
        """``compiled`` guarded: a call that raises is repeated by ``eager`` (whose error, if
        it raises too, is the run's: a bug, not a speed option's); if ``eager`` succeeds,
        compiling is given up (:meth:`fall_back`). After a fall-back, ``eager`` is called."""

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.compile_kwargs is None:
                return eager(*args, **kwargs)
            try:
                out = compiled(*args, **kwargs)
            except Exception as error:
                out = eager(*args, **kwargs)
                self.fall_back(_describe(error))
                return out
            breaks = _graph_breaks() - self._breaks_at_start
            if breaks > GRAPH_BREAK_LIMIT:
                self.fall_back(f"{breaks} graph breaks (a graph-break storm)")
            return out

        return call

    def fall_back(self, reason: str) -> None:
        """Give up compiling for the rest of the run: warn once (naming the option and how to
        turn it off), un-compile the networks, and call the eager loss arithmetic from now on.
        Weights, optimizer states and step records are untouched: the run goes on from the same
        state."""
        if self.compile_kwargs is None:
            return
        option = f"--model.speed.compile {str(self.compile).lower()}"
        if self.backend != "inductor":
            option += f" --model.speed.compile_backend {self.backend}"
        warn(
            f"{self.name}: torch.compile ({option}) failed and the run continues eagerly from "
            f"the same state, without compiled graphs{' or CUDA graphs' if self.cudagraphs else ''}"
            f" ({reason}). --model.speed.compile false turns compiling off; TORCH_LOGS=recompiles,"
            "graph_breaks shows what Dynamo did",
            every_process=True,
        )
        self.failure = reason
        self.compile_kwargs = None
        self.cudagraphs = False
        for net in self._networks:
            net._compiled_call_impl = None
        self._networks = []

    def leave_collectives_eager(self, networks: list[nn.Module]) -> None:
        """Run ``networks`` eagerly if they hold ``SyncBatchNorm`` layers (DDP with
        ``sync_batchnorm``, converted after compiling was set up): their all-reduce would
        otherwise run inside compiled (and CUDA) graphs, which is not tested. Warns once."""
        synced = [
            net
            for net in networks
            if net._compiled_call_impl is not None
            and any(isinstance(m, nn.SyncBatchNorm) for m in net.modules())
        ]
        if not synced:
            return
        warn(
            f"{self.name}: the networks run eagerly: they hold SyncBatchNorm layers "
            "(--trainer.sync_batchnorm true), whose all-reduce is not run inside compiled graphs; "
            "--trainer.sync_batchnorm false keeps them compiled",
            every_process=True,
        )
        for net in synced:
            net._compiled_call_impl = None
        self._networks = [n for n in self._networks if n not in synced]

    def check_accumulation(self, accumulate_grad_batches: int) -> None:
        """Refuse gradient accumulation under CUDA graphs (gradients would accumulate in memory
        the next replay overwrites)."""
        if self.cudagraphs and accumulate_grad_batches > 1:
            raise InputError(
                f"--trainer.accumulate_grad_batches {accumulate_grad_batches} cannot run with "
                f"CUDA graphs (--model.speed.compile {str(self.compile).lower()} on CUDA): set "
                "--trainer.accumulate_grad_batches 1, or --model.speed.compile default (compiled "
                "without CUDA graphs) or false"
            )

    # ---------------------------------------------------------------- CUDA-graph steps
    def keep(self, tensor: Tensor | None) -> Tensor | None:
        """``tensor`` in memory of its own when CUDA graphs would overwrite it at the next step
        (for values kept beyond the step); ``tensor`` itself otherwise."""
        return tensor.clone() if self.cudagraphs and tensor is not None else tensor

    def begin_step(self) -> None:
        """Mark the start of a step for CUDA graphs (the previous step's outputs may then be
        overwritten); nothing without them."""
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function (or bound method) ``fn`` with a code object of its own. Dynamo keeps a
    function's graphs, and counts them against the recompile limit, per code object (a method's
    for every object of its class): a copy per run keeps one run's graphs from counting against
    another's in the same process (several runs in one session, a test suite)."""
    if isinstance(fn, types.MethodType):
        return types.MethodType(_own_code(fn.__func__), fn.__self__)
    copy = types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__kwdefaults__ = fn.__kwdefaults__
    return functools.update_wrapper(copy, fn)


def _describe(error: BaseException) -> str:
    """``Type: first line`` of ``error``, followed by that of the error that caused it (Dynamo
    wraps a backend's own error), for a one-line warning."""
    parts = []
    current: BaseException | None = error
    while current is not None and len(parts) < 3:
        lines = [line.strip() for line in str(current).splitlines() if line.strip()]
        parts.append(f"{type(current).__name__}: {lines[0][:200] if lines else ''}".rstrip(": "))
        current = getattr(current, "inner_exception", None) or current.__cause__
    return " <- ".join(parts)
