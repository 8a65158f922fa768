"""Estimates do not depend on the training precision: the passes that feed T̂ (anchor points,
Dual-T, PTD's features and parts) run in float32 under mixed precision (CPU bf16 autocast here,
as a GPU run's bf16-mixed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from noisylabels.data import DigitsDataModule
from noisylabels.methods import PTD, Forward, NoisyLabelMethod
from noisylabels.noise import anchor_transition

from conftest import tiny_trainer

SHAPE = (1, 8, 8)
CASES = {
    "Forward-anchor": (Forward, {"transition": "estimate"}),
    "Forward-dual_t": (Forward, {"transition": "estimate", "estimator": "dual_t"}),
    "PTD": (PTD, {"parts": 3, "nmf_max_iter": 50}),
}


def _data() -> DigitsDataModule:
    return DigitsDataModule(noise_rate=0.4, batch_size=128, eval_batch_size=256)


def _trainer(
    precision: str, root: Path, callbacks: list[L.Callback], accelerator: str = "cpu"
) -> L.Trainer:
    return tiny_trainer(
        max_epochs=2,
        precision=precision,
        accelerator=accelerator,
        limit_val_batches=0,
        callbacks=callbacks,
        default_root_dir=root,
    )


class SaveWarmup(L.Callback):
    """Writes the checkpoint of the end of the warm-up epoch (epoch 0)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)


class Estimate(L.Callback):
    """What the estimation point (at the start of epoch 1) found, read at its first batch."""

    def __init__(self) -> None:
        self.found: dict[str, torch.Tensor] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self.found:
            self.found = {
                k: v.detach().clone()
                for k, v in pl_module.state_dict().items()
                if k in ("T", "part_matrices", "mean_weights")
            }
            self.found["T_hat"] = pl_module.transition_estimate()


def _estimate(cls, kwargs, precision: str, ckpt: Path, root: Path, accelerator: str) -> dict:
    probe = Estimate()
    model = cls(
        network={"backbone": "mlp"},
        num_classes=10,
        input_shape=SHAPE,
        schedule={"warmup_epochs": 1},
        **kwargs,
    )
    trainer = _trainer(precision, root, [probe], accelerator)
    trainer.fit(model, datamodule=_data(), ckpt_path=ckpt)
    return {k: v.cpu() for k, v in probe.found.items()}


@pytest.mark.parametrize(
    ("name", "accelerator"),
    [(name, "cpu") for name in CASES]
    + [pytest.param("Forward-anchor", "gpu", marks=pytest.mark.cuda, id="Forward-anchor-cuda")],
)
def test_estimate_from_a_bf16_mixed_checkpoint_equals_fp32(
    name: str, accelerator: str, tmp_path: Path
) -> None:
    """A bf16-mixed run's warm-up checkpoint gives, resumed under bf16-mixed, the T̂ (and
    PTD's parts) it gives resumed in float32, bit for bit; the same model's outputs rounded to
    bf16 would not give it (the check can fail)."""
    cls, kwargs = CASES[name]
    L.seed_everything(0)
    ckpt = tmp_path / "warmup.ckpt"
    model = cls(
        network={"backbone": "mlp"},
        num_classes=10,
        input_shape=SHAPE,
        schedule={"warmup_epochs": 1},
        **kwargs,
    )
    trainer = _trainer("bf16-mixed", tmp_path, [SaveWarmup(ckpt)], accelerator)
    trainer.fit(model, datamodule=_data())
    mixed = _estimate(cls, kwargs, "bf16-mixed", ckpt, tmp_path, accelerator)
    full = _estimate(cls, kwargs, "32-true", ckpt, tmp_path, accelerator)
    assert set(mixed) == set(full) and "T_hat" in mixed
    for key, value in full.items():
        assert torch.equal(mixed[key], value), key
    assert not torch.equal(full["T_hat"], torch.eye(10))  # an estimate was made
    assert _anchor_estimates_differ(cls, ckpt)


def _anchor_estimates_differ(cls: type[NoisyLabelMethod], ckpt: Path) -> bool:
    """Whether anchor points of the checkpoint's outputs over the training split move when the
    forward runs under bf16 autocast (as the estimation pass did before it ran in float32)."""
    model = cls.load_from_checkpoint(ckpt, map_location="cpu").eval()
    dm = _data()
    dm.setup("fit")
    probs: dict[bool, list[torch.Tensor]] = {False: [], True: []}
    with torch.no_grad():
        for batch in dm.data_facts().eval_batches(torch.device("cpu")):
            for bf16 in (False, True):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    probs[bf16].append(F.softmax(model(batch["image"]).float(), dim=1))
    estimates: list[Any] = [anchor_transition(torch.cat(p)) for p in probs.values()]
    return not torch.equal(*estimates)
