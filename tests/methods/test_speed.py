"""Speed options: compiled training steps equal eager ones (every method, across stages and
networks), bounded recompiles, the ``auto`` settings, the options from the command line.

Compiled steps use the ``aot_eager`` backend here (AOTAutograd's forward/backward graphs without
code generation: seconds to compile on a CPU); their ``slow`` twins compile with ``inductor``,
the generated code a GPU run uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch._dynamo
from torch import Tensor

from noisylabels.callbacks import DivergenceGuard
from noisylabels.data import DigitsDataModule
from noisylabels.methods import (
    APL,
    CAL,
    CDR,
    CE,
    DISC,
    ELR,
    GCE,
    GLS,
    SCE,
    SOP,
    Backward,
    CoTeaching,
    ELRPlus,
    FDivergence,
    Forward,
    Mixup,
    NoisyLabelMethod,
    Peer,
    Reweight,
    SOPPlus,
    VolMinNet,
)
from noisylabels.methods.core import acceleration
from noisylabels.methods.core.acceleration import resolve_channels_last, resolve_compile
from noisylabels.run.cli import auto_precision

from conftest import CONFIGS, read_results, tiny_trainer

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
SHAPE = (1, 8, 8)
DIGITS_T = torch.full((10, 10), 0.3 / 9).fill_diagonal_(0.7)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # conftest: Dynamo's caches, emptied


def _model(cls: type[NoisyLabelMethod], compile: bool | str, **kwargs: Any) -> NoisyLabelMethod:
    torch.manual_seed(0)
    return cls(
        network={"backbone": "mlp"},
        num_classes=10,
        input_shape=SHAPE,
        alpha=kwargs.pop("alpha", 0.1),
        speed={"compile": compile, "compile_backend": "aot_eager", **kwargs.pop("speed", {})},
        **kwargs,
    )


def _batch(n: int = 32, seed: int = 1) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=gen)
    return {
        "image": torch.randn(n, *SHAPE, generator=gen),
        "strong": torch.randn(1, n, *SHAPE, generator=gen),  # SOP+'s strong view
        "label": labels,
        "clean_label": labels,
        "index": torch.arange(n),
    }


def _main_stage(
    model: NoisyLabelMethod, T: Tensor | None = None, extra: dict[str, Tensor] | None = None
) -> None:
    """Put ``model`` in its own stage after an estimate, as a resumed checkpoint would (with
    ``extra``: what else such a checkpoint holds)."""
    state = {**model.state_dict(), "main_started": torch.tensor(True), **(extra or {})}
    if T is not None and "T" in state:  # a method with a transition matrix
        state["T"] = T
    model.load_state_dict(state)


def _loss_and_grads(model: NoisyLabelMethod, batch: dict[str, Tensor]) -> tuple[Tensor, list]:
    model.zero_grad(set_to_none=True)
    loss = model.training_objective(batch)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return loss.detach().clone(), grads  # a copy: CUDA graphs reuse the memory next step


METHODS = {
    "CE": (CE, {}),
    "CE-bounded": (CE, {"alpha": 2.0, "vrnl_form": "bounded"}),  # some weights floored
    "Forward-true": (Forward, {"transition": True, "schedule": {"warmup_epochs": 0}}),
    "Forward-estimated": (Forward, {"transition": "estimate", "schedule": {"warmup_epochs": 1}}),
    "Reweight": (Reweight, {"transition": "estimate", "schedule": {"warmup_epochs": 1}}),
    "VolMinNet": (VolMinNet, {}),
    "GCE": (GCE, {}),
    "Backward-true": (Backward, {"transition": True, "schedule": {"warmup_epochs": 0}}),
    "Peer": (Peer, {"peer_alpha": 0.5}),
    "CDR": (CDR, {"clip_rate": 0.5}),
    "Mixup": (Mixup, {"mixup_alpha": 1.0}),  # the mixed batch and its keys
    "SCE": (SCE, {"ce_weight": 0.1, "rce_weight": 1.0}),  # the reverse CE's clamps
    "APL-NFL": (APL, {"losses": "nfl_rce"}),  # the focal factors detached
    "GLS-NLS": (GLS, {"smooth_rate": -0.5}),  # a negative smoothing rate
    "FDivergence-JS": (FDivergence, {"divergence": "jensen_shannon"}),  # peers from the step
    "CAL": (CAL, {"schedule": {"warmup_epochs": 1}}),  # the CORES² warm-up, then D̂'s term
    "SOPPlus": (SOPPlus, {}),  # u, v, both views in one pass, the balance term
    "ELRPlus": (ELRPlus, {}),  # two networks, the averages' targets, mixup
    # both views' CE warm-up, then the selection's CE and GCE and the mixup within it
    "DISC": (DISC, {"alpha": 0.05, "schedule": {"warmup_epochs": 1}}),
}
_DISC_FLAGS = torch.arange(32) % 4  # clean, hard, corrected, neither
MAIN_STATES = {  # what a checkpoint of a method's own stage holds beyond T: CAL's D̂ and ℓ̄
    "DISC": {  # and DISC's selection and corrected labels
        "disc_selection": torch.stack([_DISC_FLAGS == k for k in range(3)]),
        "disc_labels": (torch.arange(32) * 7) % 10,
    },
    "CAL": {
        "distilled_labels": torch.arange(32) % 10,
        "distilled_prior": torch.full((10,), 0.1),
        "loss_means": torch.rand(10, 10, generator=torch.Generator().manual_seed(0)) * 3,
    },
}


BACKENDS = ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(METHODS))
def test_compiled_step_equals_eager_step(name: str, backend: str) -> None:
    """Loss, gradients and step records of the compiled training step equal the eager ones,
    for two-stage methods in both stages (the change recompiles); ``inductor`` (the generated
    code a GPU run uses) in the slow suite."""
    cls, kwargs = METHODS[name]
    eager, compiled = _model(cls, False, **kwargs), _model(cls, True, **kwargs)
    compiled.speed.backend = backend
    for model in (eager, compiled):
        model.resolve_acceleration(CPU)
        if kwargs.get("transition") is True:
            model.store_transition(DIGITS_T)
        if isinstance(model, SOP):
            model.init_parameters(32)  # what setup does for the training set
        if isinstance(model, ELR):
            model.init_targets(32)
        if isinstance(model, DISC):
            model.init_tables(32)
    assert eager.speed.mode is None and compiled.speed.mode == "default"
    stages = ["warmup", "main"] if compiled.has_warmup_stage else ["main"]
    for stage in stages:
        if stage == "main" and compiled.has_warmup_stage:
            for model in (eager, compiled):
                _main_stage(model, DIGITS_T * 0.9 + 0.01, MAIN_STATES.get(name))
        for n in (7, 32) if backend == "inductor" else (32,):  # also a smaller last batch
            batch = _batch(n, seed=n)
            loss_e, grads_e = _loss_and_grads(eager, batch)
            loss_c, grads_c = _loss_and_grads(compiled, batch)
            torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-6)
            assert len(grads_c) == len(grads_e) > 0
            for g_c, g_e in zip(grads_c, grads_e, strict=True):
                torch.testing.assert_close(g_c, g_e, rtol=1e-4, atol=1e-5)
    step_e, step_c = eager._steps[-1], compiled._steps[-1]
    close = {"rtol": 1e-4, "atol": 1e-5}  # inductor reduces in another order
    for field in ("losses", "weights", "logits", "mean", "variance", "objective"):
        torch.testing.assert_close(getattr(step_c, field), getattr(step_e, field), **close)
    torch.testing.assert_close(compiled.epoch_stats.sums[0], eager.epoch_stats.sums[0], **close)


COTEACHING = {"forget_rate": 0.25, "ramp_epochs": 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_coteaching_every_network_is_compiled_and_its_step_equals_eager(backend: str) -> None:
    """Co-teaching's two networks (``self.networks``, the second from ``add_network``) are both
    compiled, and the compiled step (selection as ``used`` masks) equals the eager one."""
    eager, compiled = (
        _model(CoTeaching, False, **COTEACHING),
        _model(CoTeaching, True, **COTEACHING),
    )
    compiled.speed.backend = backend
    for model in (eager, compiled):
        model.resolve_acceleration(CPU)
        model.current_forget_rate = 0.25  # as at an epoch start of its own stage
    assert len(compiled.networks) == 2
    assert all(net._compiled_call_impl is not None for net in compiled.networks)
    assert all(net._compiled_call_impl is None for net in eager.networks)
    loss_e, grads_e = _loss_and_grads(eager, _batch())
    loss_c, grads_c = _loss_and_grads(compiled, _batch())
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-6)
    assert len(grads_c) == len(grads_e) == len(list(compiled.parameters()))
    for g_c, g_e in zip(grads_c, grads_e, strict=True):
        torch.testing.assert_close(g_c, g_e, rtol=1e-4, atol=1e-6)
    for k in (0, 1):
        step_c, step_e = compiled._steps[k], eager._steps[k]
        assert step_c.network == k and int(step_c.used.sum()) == 24
        assert torch.equal(step_c.used, step_e.used)
        assert torch.all(step_c.weights[~step_c.used] == 0)


def test_compiled_networks_survive_in_place_loads() -> None:
    """``add_network`` after setup compiles the new network; ``reinit_networks`` and
    ``load_network_state`` (``main_stage_init``, ``warmup_model: best``) load weights in place,
    so the compiled modules compute with the loaded weights, state-dict keys unchanged."""
    model = _model(CoTeaching, True, speed={"channels_last": True}, **COTEACHING)
    model.resolve_acceleration(CPU)
    keys = set(model.state_dict())
    images = _batch()["image"]
    before = [model.network_logits(images, k).detach().clone() for k in (0, 1)]
    saved = model.network_state(device="cpu")
    model.reinit_networks()
    after = [model.network_logits(images, k) for k in (0, 1)]
    assert all(not torch.allclose(a, b) for a, b in zip(after, before, strict=True))
    model.load_network_state(saved)
    for k, expected in enumerate(before):
        torch.testing.assert_close(model.network_logits(images, k), expected)
        assert model.networks[k]._compiled_call_impl is not None
    third = model.add_network()
    assert third._compiled_call_impl is not None and len(model.networks) == 3
    assert keys < set(model.state_dict())
    plain = _model(CE, False)
    plain.net.load_state_dict(third.state_dict())
    torch.testing.assert_close(model.network_logits(images, 2), plain(images))


def test_hook_name_is_set_without_module_bookkeeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's ``_current_fx_name`` (set around every hook call) skips ``nn.Module``'s
    ``__setattr__``; every other attribute still goes through it (parameters, submodules)."""
    model = _model(CE, False)
    calls: list[str] = []
    module_setattr = torch.nn.Module.__setattr__

    def counting(self, name: str, value: Any) -> None:
        if self is model:
            calls.append(name)
        module_setattr(self, name, value)

    monkeypatch.setattr(torch.nn.Module, "__setattr__", counting)
    model._current_fx_name = "training_step"
    assert model._current_fx_name == "training_step" and calls == []
    model.extra = torch.nn.Linear(2, 2)
    model.scale = torch.nn.Parameter(torch.ones(1))
    assert calls == ["extra", "scale"]
    assert "extra" in dict(model.named_children()) and "scale" in dict(model.named_parameters())
    trainer = tiny_trainer(
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=0,
    )
    trainer.fit(model, DigitsDataModule(noise_rate=0.2, batch_size=16))
    assert model._current_fx_name is None  # Lightning's own reset after fitting
    assert "_current_fx_name" not in calls


def test_auto_resolves_by_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` compiles with CUDA graphs on one CUDA device without gradient accumulation (the
    mode ``true`` gives there) and nowhere else: not on the CPU, not under DDP, not with
    accumulation, and nowhere while the GPU check has not passed; ``true`` compiles, with CUDA
    graphs on CUDA."""
    assert resolve_compile("auto", CUDA) == resolve_compile(True, CUDA) == "reduce-overhead"
    assert resolve_compile("auto", CPU) is None
    assert resolve_compile("auto", CUDA, world_size=2) is None
    assert resolve_compile("auto", CUDA, accumulate=4) is None
    assert resolve_compile(True, CUDA, world_size=2, accumulate=4) == "reduce-overhead"
    monkeypatch.setattr(acceleration, "AUTO_COMPILES_ON_CUDA", False)
    assert resolve_compile("auto", CUDA) is None
    assert resolve_compile(True, CUDA) == "reduce-overhead"
    assert resolve_compile(True, CPU) == "default"
    assert resolve_compile(False, CUDA) is None
    assert resolve_compile("max-autotune", CPU) == "max-autotune"
    assert not resolve_channels_last("auto", CPU) and resolve_channels_last("auto", CUDA)
    model = _model(CE, "auto")
    model.resolve_acceleration(CPU)
    assert model.speed.mode is None and not model.speed.channels_last
    assert model.net._compiled_call_impl is None


def test_setup_resolves_auto_with_the_runs_processes_and_accumulation(monkeypatch) -> None:
    """The method's ``setup`` hands the trainer's world size and gradient accumulation to the
    resolution (so ``auto`` on a GPU with ``accumulate_grad_batches 2`` runs eagerly instead of
    refusing the accumulation that CUDA graphs cannot hold)."""
    seen = []
    resolve = acceleration.Acceleration.resolve

    def recording(self, device, *args, world_size=1, accumulate=1):
        seen.append((device.type, world_size, accumulate))
        return resolve(self, device, *args, world_size=world_size, accumulate=accumulate)

    monkeypatch.setattr(acceleration.Acceleration, "resolve", recording)
    model = _model(CE, "auto", alpha=0.0)  # VRNL refuses accumulation
    trainer = tiny_trainer(
        max_epochs=1, limit_train_batches=2, limit_val_batches=0, accumulate_grad_batches=2
    )
    trainer.fit(model, DigitsDataModule(noise_rate=0.2, batch_size=16))
    assert seen == [("cpu", 1, 2)]
    speed = acceleration.Acceleration("auto", "inductor", "auto")
    speed.resolve(CUDA, [], lambda x: x, False, "Probe", accumulate=2)
    assert speed.mode is None and not speed.cudagraphs
    speed.check_accumulation(2)  # accepted: auto did not turn CUDA graphs on


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"compile": "fast"}, "--model.speed.compile must be"),
        ({"compile_backend": "nope"}, "--model.speed.compile_backend must be"),
        ({"channels_last": "yes"}, "--model.speed.channels_last must be"),
    ],
)
def test_bad_speed_options(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CE(network={"backbone": "mlp"}, input_shape=SHAPE, speed=kwargs)


def _fit(compile: bool, cls: type[NoisyLabelMethod], epochs: int, root: Path, **kwargs: Any):
    L.seed_everything(0)
    dm = DigitsDataModule(noise_rate=0.3, batch_size=128, eval_batch_size=512)
    model = cls(
        network={"backbone": "mlp"},
        num_classes=10,
        input_shape=SHAPE,
        alpha=0.05,
        speed={"compile": compile, "compile_backend": "aot_eager"},
        **kwargs,
    )
    graphs: list[int] = []

    class CountGraphs(L.Callback):
        def on_train_epoch_end(self, trainer, pl_module) -> None:
            graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    trainer = tiny_trainer(
        max_epochs=epochs,
        callbacks=[CountGraphs()],
        default_root_dir=root,
    )
    torch._dynamo.utils.counters.clear()
    trainer.fit(model, datamodule=dm)
    test = trainer.test(model, datamodule=dm, verbose=False)[0]["test/acc"]
    return model, test, graphs


def test_compiled_run_equals_eager_run(tmp_path: Path) -> None:
    """Same seed, compiled or not: the same test accuracy (within 0.3 pt, one digit of the 359
    test images) and parameters, across the stage change of a two-stage method (Forward with
    T estimated after a warm-up epoch). Graphs are compiled in the first epoch of each stage
    (and for the last, smaller batch) only."""
    kwargs = {"transition": "estimate", "schedule": {"warmup_epochs": 1}}
    eager, acc_eager, _ = _fit(False, Forward, 3, tmp_path / "eager", **kwargs)
    compiled, acc_compiled, graphs = _fit(True, Forward, 3, tmp_path / "compiled", **kwargs)
    assert abs(acc_compiled - acc_eager) <= 0.003
    for p_c, p_e in zip(compiled.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p_c, p_e, rtol=1e-3, atol=1e-4)
    assert graphs[0] > 0 and graphs[-1] == graphs[-2], f"graphs compiled per epoch: {graphs}"


# ---------------------------------------------------------------- host synchronization
SYNCING = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "nonzero", "cpu")


class NoHostSync(L.Callback):
    """Records, from the third step of the second epoch on, every call that makes the host wait
    for the device when the tensors live on a GPU: Tensor methods that read values into
    Python, and indexing by a boolean mask (``numpy()`` is not among them: it takes host
    tensors only, so it cannot wait for a device). (On a GPU the benchmark proves the same with
    ``torch.cuda.set_sync_debug_mode("error")``; this catches the Python-level causes on a
    CPU.) Adam's step counter is a CPU tensor by design and is left out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self.active = False
        for name in SYNCING:
            monkeypatch.setattr(torch.Tensor, name, self._spy(name, getattr(torch.Tensor, name)))
        getitem = torch.Tensor.__getitem__

        def spy_getitem(tensor: Tensor, index: Any) -> Any:
            parts = index if isinstance(index, tuple) else (index,)
            if any(isinstance(i, Tensor) and i.dtype == torch.bool for i in parts):
                self._record("boolean mask indexing")
            return getitem(tensor, index)

        monkeypatch.setattr(torch.Tensor, "__getitem__", spy_getitem)

    def _record(self, what: str) -> None:
        if self.active:
            import traceback

            frames = traceback.extract_stack(limit=8)[:-2]
            if not any("/torch/optim/" in f.filename for f in frames):
                self.calls.append(f"{what} at {frames[-1].filename}:{frames[-1].lineno}")

    def _spy(self, name: str, method: Any) -> Any:
        def spy(tensor: Tensor, *args: Any, **kwargs: Any) -> Any:
            self._record(name)
            return method(tensor, *args, **kwargs)

        return spy

    def on_train_start(self, trainer, pl_module) -> None:
        # the DivergenceGuard as on an accelerator (a device-side record, copied to the host
        # without waiting), polled every other step so that the spied steps include polls
        (guard,) = [c for c in trainer.callbacks if isinstance(c, DivergenceGuard)]
        guard.every_step, guard.check_every = False, 2

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.active = trainer.current_epoch >= 1 and batch_idx >= 2

    def on_validation_start(self, trainer, pl_module) -> None:
        self.active = False  # the training steps only, not validation or the epoch's end

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.active = False  # the epoch's end reduces its statistics once, by design


@pytest.mark.parametrize("cls", [Forward, CoTeaching], ids=["Forward", "CoTeaching"])
def test_training_steps_make_no_host_synchronization(
    cls: type[NoisyLabelMethod], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Steady-state training (data on the device, augmentation, the step, the step records,
    SubsetStatistics, SampleDynamics, Lightning's loop and progress bar) reads nothing back to
    the host."""
    from noisylabels.callbacks import SampleDynamics, SubsetStatistics

    L.seed_everything(0)
    dm = DigitsDataModule(batch_size=64, on_device=True)
    kwargs = {"transition": True} if cls is Forward else COTEACHING
    model = cls(network={"backbone": "mlp"}, num_classes=10, input_shape=SHAPE, alpha=0.1, **kwargs)
    spy = NoHostSync(monkeypatch)
    trainer = tiny_trainer(
        max_epochs=2,
        limit_train_batches=6,
        limit_val_batches=1,
        callbacks=[spy, SubsetStatistics(), SampleDynamics(), DivergenceGuard()],
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 12
    assert not spy.calls, spy.calls


# ---------------------------------------------------------------- the command line
def test_speed_options_from_the_command_line(run_cli, tmp_path: Path) -> None:
    """``--model.speed.compile`` and ``--data.on_device`` through ``noisylabels fit`` on a CPU, with
    VolMinNet's manual optimization, and the ``auto`` precision: config.yaml records what the
    run used, and the last-epoch and best-checkpoint tests run compiled. (The ``eager``
    backend: Dynamo's graphs run as they are, the quickest check of the plumbing; the numerics
    of compiled steps are checked above.)"""
    run_cli(
        *("fit", "--config", str(CONFIGS / "data" / "digits.yaml")),
        *("--config", str(CONFIGS / "method" / "volmin_vrnl.yaml")),
        *("--trainer.max_epochs", "1", "--trainer.accelerator", "cpu"),
        *("--model.speed.compile", "true", "--model.speed.compile_backend", "eager"),
        *("--data.on_device", "true"),
    )
    results = read_results(tmp_path)
    assert results["method"] == "VolMinNet-VRNL" and results["test_acc"] > 0.2
    # both test passes ran compiled: the last epoch's model, then the best checkpoint loaded in
    # place into the compiled networks (one epoch: the same weights, the same accuracy)
    assert results["test_acc_last"] == results["test_acc"]
    config = next(tmp_path.rglob("config.yaml")).read_text()
    assert "compile: true" in config and "on_device: true" in config
    assert "channels_last: auto" in config
    assert "precision: null" in config  # auto on a CPU: Lightning's 32-true


def test_auto_precision_is_bf16_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert auto_precision("auto") == auto_precision("gpu") == "bf16-mixed"
    assert auto_precision("cpu") is None
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert auto_precision("cuda") is None  # no bf16 (pre-Ampere): fp32, not fp16 with scaling
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert auto_precision("auto") is None


# ---------------------------------------------------------------- GPU and long checks
@pytest.mark.cuda
@pytest.mark.parametrize("name", ["Forward-true", "VolMinNet"])
def test_cuda_graph_steps_equal_eager_and_never_synchronize(name: str) -> None:
    """On a GPU: compiled with CUDA graphs (inductor, reduce-overhead), the step equals the
    eager one, its records survive the next step, and it never synchronizes with the host."""
    cls, kwargs = METHODS[name]
    eager, compiled = _model(cls, False, **kwargs), _model(cls, "reduce-overhead", **kwargs)
    compiled.speed.backend = "inductor"
    for model in (eager, compiled):
        model.to(CUDA).resolve_acceleration(CUDA)
        if cls is Forward:
            model.store_transition(DIGITS_T)
    records = []
    for i in range(6):
        batch = {k: v.to(CUDA) for k, v in _batch(32, seed=i).items()}
        for model in (eager, compiled):
            model.speed.begin_step()
            if i >= 3:  # warmed up and recorded: steady state
                torch.cuda.set_sync_debug_mode("error")
            try:
                loss, _ = _loss_and_grads(model, batch)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            records.append((model, loss, model._steps[-1]))
    for (_, loss_e, step_e), (_, loss_c, step_c) in zip(records[::2], records[1::2], strict=True):
        torch.testing.assert_close(loss_c, loss_e, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(step_c.losses, step_e.losses, rtol=1e-4, atol=1e-5)
