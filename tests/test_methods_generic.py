"""Every method exported by ``noisylabels.methods`` trains, with VRNL, through the same checks.

Methods are discovered from the base class, so a new method is covered without a new test.
"""

from __future__ import annotations

import inspect

import lightning as L
import pytest
import torch

import noisylabels.methods as methods
from noisylabels.data import DigitsDataModule
from noisylabels.methods import NoisyLabelMethod

ABSTRACT = {"NoisyLabelMethod", "TransitionMethod"}
METHODS = sorted(
    (
        obj
        for name, obj in vars(methods).items()
        if inspect.isclass(obj) and issubclass(obj, NoisyLabelMethod) and name not in ABSTRACT
    ),
    key=lambda cls: cls.__name__,
)


def test_methods_are_discovered() -> None:
    assert {m.__name__ for m in METHODS} >= {"CE", "Forward", "Reweight", "VolMinNet"}


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.__name__)
def test_method_trains_with_vrnl(method: type[NoisyLabelMethod], tmp_path) -> None:
    L.seed_everything(0)
    dm = DigitsDataModule(noise_rate=0.3, batch_size=64)
    kwargs = {}
    if any("warmup_epochs" in inspect.signature(c.__init__).parameters for c in method.__mro__):
        kwargs["warmup_epochs"] = 1  # two-stage methods: warm up for one of the two epochs
    model = method(backbone="mlp", num_classes=10, input_shape=(1, 8, 8), alpha=0.05, **kwargs)
    assert model.method_name.endswith("-VRNL")
    before = [p.detach().clone() for p in model.net.parameters()]
    outputs = []

    class Grab(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, out, batch, batch_idx):
            outputs.append(out)

    trainer = L.Trainer(
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Grab()],
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    trainer.fit(model, datamodule=dm)
    assert outputs, "no training step ran"
    for out in outputs:
        assert torch.isfinite(out["loss"]).all()
        (step,) = out["steps"]  # one network: one StepOutput per batch
        n = len(step.index)
        assert step.logits.shape == (n, 10) and step.weights.shape == step.losses.shape == (n,)
        assert torch.isfinite(step.losses).all() and not step.losses.requires_grad
    after = list(model.net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert 0.0 <= trainer.callback_metrics["val/acc"] <= 1.0
    assert 0.0 <= trainer.callback_metrics["train/nonpositive_weight_frac"] <= 1.0
    assert 0.0 <= trainer.callback_metrics["train/acc"] <= 1.0
    test = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert 0.0 <= test["test/acc"] <= 1.0
