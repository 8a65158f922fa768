"""Compiled runs make a known, small set of static graphs: α and the other per-stage Python
numbers are constants of their graphs (never 0-d host tensor inputs, which would keep inductor
from CUDA graphs), and the smaller last batch of an epoch gets a graph of its own instead of
switching every later batch to symbolic shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch._dynamo
from torch._dynamo.backends.registry import lookup_backend

from noisylabels.data import DigitsDataModule
from noisylabels.methods import Forward
from noisylabels.methods.core.acceleration import Acceleration
from noisylabels.methods.core.vrnl import vrnl_objective

from conftest import tiny_trainer

SHAPE = (1, 8, 8)


class GraphLog:
    """A compile backend that records every graph it is given (the stage it was compiled in,
    its input shapes, whether any is symbolic or a 0-d float64 tensor) and hands it to
    ``delegate``; registered under ``name``."""

    def __init__(self, name: str, delegate: str) -> None:
        self.name, self.delegate = name, delegate
        self.graphs: list[dict[str, Any]] = []
        self.stage: Any = None
        torch._dynamo.register_backend(self, name=name)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        def symbolic(x: Any) -> bool:
            if isinstance(x, torch.SymInt | torch.SymFloat):
                return True
            return isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape)

        tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
        self.graphs.append(
            {
                "stage": self.stage,
                "shapes": [tuple(x.shape) for x in tensors],
                "symbolic": any(symbolic(x) for x in example_inputs),
                "host_scalar": any(x.ndim == 0 and x.dtype == torch.float64 for x in tensors),
            }
        )
        return lookup_backend(self.delegate)(gm, example_inputs)


EAGER_LOG = GraphLog("graph_log_eager_for_test", "eager")
INDUCTOR_LOG = GraphLog("graph_log_inductor_for_test", "inductor")


@pytest.fixture(autouse=True)
def fresh_logs(fresh_dynamo: None):
    """Dynamo's caches (conftest) and the graph logs empty before the test."""
    for log in (EAGER_LOG, INDUCTOR_LOG):
        log.graphs.clear()
    yield


def test_alpha_and_a_smaller_batch_make_static_graphs() -> None:
    """The compiled VRNL arithmetic across a stage change (α 0, then 0.1) and a smaller last
    batch: one static graph per (α, batch size), α a constant; Dynamo's default settings (the
    counterfactual) would make α a float64 host tensor input and the batch size symbolic."""
    spy = EAGER_LOG
    speed = Acceleration(True, spy.name, False)
    speed.resolve(torch.device("cpu"), [], lambda x: x, collective=False, name="Probe")
    calls = [(0.0, 8), (0.0, 8), (0.0, 3), (0.1, 8), (0.1, 3), (0.1, 8), (0.1, 3)]
    for alpha, n in calls:
        out = speed.vrnl_fn(torch.rand(n, requires_grad=True), alpha, "global")
        assert out.objective.shape == ()
    assert [g["shapes"][0] for g in spy.graphs] == [(8,), (3,), (8,), (3,)]
    assert not any(g["symbolic"] or g["host_scalar"] for g in spy.graphs)
    spy.graphs.clear()
    loose = torch.compile(vrnl_objective, backend=spy.name)  # Dynamo's defaults
    for alpha, n in calls:
        loose(torch.rand(n, requires_grad=True), alpha, "global")
    assert any(g["symbolic"] for g in spy.graphs) and any(g["host_scalar"] for g in spy.graphs)


# Forward-VRNL, T̂ estimated after one warm-up epoch, 1,295 training samples in batches of 128
# (a last batch of 15), validation (143) in one batch, the estimation pass in batches of 500:
EXPECTED_GRAPHS = 15
"""sanity validation: network (eval) and warm-up loss, 143 samples (2); warm-up epoch: network
(train), warm-up loss and VRNL (α = 0), each at 128 and 15 (6); estimation pass: network at 500
and 295 (2); first epoch of the method's stage: its loss and VRNL (α = 0.1) at 128 and 15 (4),
its validation loss (1); the next epoch: none."""


class Stage(L.Callback):
    def __init__(self, spy: GraphLog) -> None:
        self.spy = spy

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.spy.stage = trainer.current_epoch

    def on_validation_start(self, trainer, pl_module) -> None:
        self.spy.stage = (trainer.current_epoch, "validation")


@pytest.mark.slow
def test_inductor_run_compiles_a_known_number_of_static_graphs(tmp_path: Path) -> None:
    """A compiled run with inductor through a stage change and epochs with a smaller last batch
    (about 2 minutes on 2 CPU cores): at most :data:`EXPECTED_GRAPHS` graphs, none symbolic and
    none with a host scalar input, none compiled in the last epoch, no fall-back to eager."""
    spy = INDUCTOR_LOG
    L.seed_everything(0)
    dm = DigitsDataModule(noise_rate=0.3, batch_size=128, eval_batch_size=500)
    model = Forward(
        network={"backbone": "mlp"},
        input_shape=SHAPE,
        alpha=0.1,
        transition="estimate",
        schedule={"warmup_epochs": 1},
        speed={"compile": True, "compile_backend": spy.name},
    )
    trainer = tiny_trainer(
        max_epochs=3,
        callbacks=[Stage(spy)],
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=dm)
    stages = [g["stage"] for g in spy.graphs]
    assert model.speed.failure is None and model.speed.mode == "default"
    assert len(spy.graphs) <= EXPECTED_GRAPHS, stages
    assert not any(g["symbolic"] or g["host_scalar"] for g in spy.graphs), spy.graphs
    assert 2 not in stages and (2, "validation") not in stages, stages
    assert len(spy.graphs) == EXPECTED_GRAPHS  # the count is known: a change is seen
