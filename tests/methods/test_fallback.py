"""A speed option never kills or silently changes a run: a compile that fails (in the forward or
the backward graph), a graph-break storm or the recompile limit costs one warning, and the run
goes on eagerly from the same state; options that cannot work together are refused."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo
from functorch.compile import make_boxed_func
from torch import nn
from torch._dynamo.backends.common import aot_autograd

from noisylabels.errors import InputError
from noisylabels.methods import CE
from noisylabels.methods.core import acceleration
from noisylabels.methods.core.acceleration import Acceleration

from conftest import CONFIGS, read_results

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
FALLBACK = "failed and the run continues eagerly from the same state"


def _fail(gm: torch.fx.GraphModule, example_inputs: list) -> None:
    raise RuntimeError("injected compile failure")


FAILING = {  # backend name: what fails
    "failing_forward_for_test": _fail,  # every graph, at its first call
    "failing_backward_for_test": aot_autograd(  # the backward graph of a training step only
        fw_compiler=lambda gm, example_inputs: make_boxed_func(gm.forward), bw_compiler=_fail
    ),
}
for _name, _backend in FAILING.items():
    if _name not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(_backend, name=_name)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # conftest: Dynamo's caches, emptied


def _fit(run_cli, root: Path, *extra: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = run_cli(
            *("fit", "--config", str(CONFIGS / "quickstart.yaml")),
            *("--trainer.max_epochs", "2", "--trainer.accelerator", "cpu"),
            *extra,
            root=root,
        )
    fallbacks = [str(w.message) for w in caught if FALLBACK in str(w.message)]
    return cli, read_results(root), fallbacks


@pytest.mark.parametrize("backend", list(FAILING))
def test_a_failing_compile_backend_costs_a_warning_not_the_run(
    backend: str, run_cli, tmp_path: Path
) -> None:
    """A compile backend that raises (at the first compiled call, or only for the backward of
    the first training step, which compiles with its forward) gives one warning naming the
    option and how to turn it off; the run goes on eagerly and ends with the eager run's
    results, metric for metric."""
    _, eager, none = _fit(run_cli, tmp_path / "eager", "--model.speed.compile", "false")
    cli, failed, fallbacks = _fit(
        run_cli,
        tmp_path / "failed",
        *("--model.speed.compile", "true", "--model.speed.compile_backend", backend),
    )
    assert none == []
    assert len(fallbacks) == 1, fallbacks
    assert f"--model.speed.compile true --model.speed.compile_backend {backend}" in fallbacks[0]
    assert "--model.speed.compile false turns compiling off" in fallbacks[0]
    assert "injected compile failure" in fallbacks[0]
    assert cli.model.speed.mode is None and "injected" in cli.model.speed.failure
    assert all(net._compiled_call_impl is None for net in cli.model.networks)
    for key in ("val_acc", "test_acc", "test_acc_last", "best_epoch"):
        assert failed[key] == eager[key], key


def _guarded(fn, speed: Acceleration):
    speed.resolve(CPU, [], fn, collective=True, name="Probe")
    return speed.guard(torch.compile(fn, **speed.compile_kwargs), fn)


def _step(x: torch.Tensor) -> torch.Tensor:
    x = x + 1
    torch._dynamo.graph_break()
    return x * 1


def test_a_graph_break_storm_falls_back_to_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """A function that breaks its graph more than GRAPH_BREAK_LIMIT times (here lowered to 2)
    is not worth its graphs: one warning, then the eager function; its results are the eager
    ones. One break is no storm."""
    monkeypatch.setattr(acceleration, "GRAPH_BREAK_LIMIT", 2)

    def one_break(x: torch.Tensor) -> torch.Tensor:
        return _step(x)

    def stormy(x: torch.Tensor) -> torch.Tensor:
        return _step(_step(_step(_step(x))))

    speed = Acceleration(True, "eager", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(_guarded(one_break, speed)(torch.zeros(3)), torch.ones(3))
    fn = _guarded(stormy, speed)
    with pytest.warns(UserWarning, match="graph-break storm") as caught:
        out = fn(torch.zeros(3))
    assert torch.equal(out, torch.full((3,), 4.0))
    assert speed.mode is None and "graph breaks" in speed.failure
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: no second warning
        assert torch.equal(fn(torch.ones(2)), torch.full((2,), 5.0))
    assert len([w for w in caught if FALLBACK in str(w.message)]) == 1


@pytest.fixture()
def low_recompile_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """RECOMPILE_LIMIT (and Dynamo's own limit, which a run only raises) lowered to 3, so that
    reaching it takes a few compiles rather than sixteen."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(acceleration, "RECOMPILE_LIMIT", 3)
    with config.patch(**{name: 3}):
        yield 3


def test_the_recompile_limit_falls_back_to_eager_instead_of_silently(
    low_recompile_limit: int,
) -> None:
    """A function recompiled at every call (a Python number that changes, specialized in a
    static graph) reaches the recompile limit: Dynamo would run it eagerly without a word; the
    run warns and runs eagerly."""

    def scaled(x: torch.Tensor, k: int) -> torch.Tensor:
        return x * k

    speed = Acceleration(True, "eager", False)
    fn = _guarded(scaled, speed)
    with pytest.warns(UserWarning, match=FALLBACK):
        for k in range(low_recompile_limit + 2):
            assert torch.equal(fn(torch.ones(2), k), torch.full((2,), float(k)))
    assert speed.mode is None and "Recompile" in speed.failure


class _Scaler:
    def loss(self, x: torch.Tensor, k: int) -> torch.Tensor:
        return x * k


def test_earlier_runs_graphs_do_not_count_against_a_new_run(low_recompile_limit: int) -> None:
    """Many runs in one process (a session, a test suite), each with graphs of its own (here
    another constant each): every run's compiled functions get their own recompile limit, so
    none falls back to eager."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(low_recompile_limit + 4):
            speed = Acceleration(True, "eager", False)
            loss = speed.resolve(CPU, [], _Scaler().loss, collective=False, name="Probe")
            assert torch.equal(loss(torch.ones(2), k), torch.full((2,), float(k)))
            out = speed.vrnl_fn(torch.ones(3), 0.01 * k, "global")
            assert float(out.objective) == 1.0 and speed.mode == "default"


def test_an_error_of_the_function_itself_is_raised_not_hidden() -> None:
    """A call that fails eagerly too is a bug of the run, not of a speed option: its error
    propagates and compiling stays on."""

    def broken(x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(5, 5)

    speed = Acceleration(True, "eager", False)
    fn = _guarded(broken, speed)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        fn(torch.ones(2, 3))
    assert speed.mode == "default" and speed.failure is None


def test_the_cudagraphs_backend_is_cuda_graphs_and_needs_cuda(monkeypatch) -> None:
    """``compile_backend: cudagraphs`` records CUDA graphs: refused on the CPU, and on CUDA
    treated as CUDA graphs (step records copied out, step boundaries marked). (What the
    settings resolve to, without compiling: ``torch.compile`` is a stand-in here.)"""
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    with pytest.raises(InputError, match="cudagraphs records CUDA graphs and needs a CUDA"):
        Acceleration(True, "cudagraphs", False).resolve(CPU, [], lambda x: x, False, "Probe")
    Acceleration("auto", "cudagraphs", False).resolve(CPU, [], lambda x: x, False, "Probe")
    speed = Acceleration(True, "cudagraphs", False)
    speed.resolve(CUDA, [nn.Linear(2, 2)], lambda x: x, False, "Probe")  # compiles lazily
    assert speed.cudagraphs and speed.compile_kwargs["backend"] == "cudagraphs"
    record = torch.ones(2)
    assert speed.keep(record) is not record and torch.equal(speed.keep(record), record)


@pytest.mark.parametrize(
    ("compile", "backend", "refused"),
    [(True, "inductor", True), ("reduce-overhead", "inductor", True), (True, "cudagraphs", True)]
    + [("default", "inductor", False), (False, "inductor", False)],
)
def test_gradient_accumulation_is_refused_under_cuda_graphs(compile, backend, refused) -> None:
    speed = Acceleration(compile, backend, False)
    speed.resolve(CUDA, [], lambda x: x, False, "Probe")
    speed.check_accumulation(1)
    if not refused:
        speed.check_accumulation(4)
        return
    with pytest.raises(InputError) as err:
        speed.check_accumulation(4)
    assert str(err.value) == (
        "--trainer.accumulate_grad_batches 4 cannot run with CUDA graphs (--model.speed.compile "
        f"{str(compile).lower()} on CUDA): set --trainer.accumulate_grad_batches 1, or "
        "--model.speed.compile default (compiled without CUDA graphs) or false"
    )


def test_networks_with_sync_batchnorm_run_eagerly() -> None:
    """DDP's ``sync_batchnorm`` swaps BatchNorm for SyncBatchNorm after the networks were set
    up to compile; its all-reduce is not run inside compiled graphs: those networks run
    eagerly (one warning), the loss arithmetic stays compiled."""
    speed = {"compile": True, "compile_backend": "eager"}
    model = CE(network={"backbone": "resnet18"}, input_shape=(3, 8, 8), speed=speed)
    model.resolve_acceleration(CPU)
    model.speed.leave_collectives_eager(model.networks)  # no SyncBatchNorm: nothing changes
    assert model.net._compiled_call_impl is not None
    nn.SyncBatchNorm.convert_sync_batchnorm(model)
    with pytest.warns(UserWarning, match="--trainer.sync_batchnorm false keeps them compiled"):
        model.speed.leave_collectives_eager(model.networks)
    assert model.net._compiled_call_impl is None and model.speed.mode == "default"
