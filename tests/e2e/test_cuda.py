"""On a CUDA GPU (``pytest -m cuda``, part of ``make gpu-check``): a run compiled with CUDA graphs
(what ``compile: auto`` gives on one GPU) and an eager run train through a stage change, and
their steady-state steps never make the host wait for the device
(``torch.cuda.set_sync_debug_mode("error")`` around them)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from noisylabels.callbacks import SubsetStatistics
from noisylabels.data import DigitsDataModule
from noisylabels.methods import (
    DISC,
    CoTeaching,
    CoTeachingPlus,
    ELRPlus,
    Forward,
    JoCoR,
    NoisyLabelMethod,
    SOPPlus,
)
from noisylabels.run import WarmupAwareCheckpoint, fit_and_test

pytestmark = pytest.mark.cuda


class SyncWatch(L.Callback):
    """``set_sync_debug_mode("error")`` from the start of each steady-state step (from the
    second epoch on, batch 2 to the third-last) to the start of the next: the step, every
    callback's hooks, Lightning's loop and the next batch's data and augmentation. A
    synchronization raises there, with its stack."""

    def __init__(self) -> None:
        self.on, self.checked = False, 0

    def _set(self, on: bool) -> None:
        torch.cuda.set_sync_debug_mode("error" if on else "default")
        self.on = on

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.on:
            self._set(False)
            self.checked += 1
        if trainer.current_epoch >= 1 and 2 <= batch_idx < trainer.num_training_batches - 2:
            self._set(True)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.on:
            self._set(False)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._set(False)


CASES = {
    "Forward-VRNL": (Forward, {"alpha": 0.1, "transition": "estimate"}),
    "CoTeaching": (CoTeaching, {"forget_rate": "estimate", "ramp_epochs": 1}),
    "CoTeachingPlus-VRNL": (CoTeachingPlus, {"alpha": 0.1, "forget_rate": 0.3, "ramp_epochs": 1}),
    "JoCoR-VRNL": (JoCoR, {"alpha": 0.1, "forget_rate": 0.3, "co_lambda": 0.5}),
    "SOPPlus-VRNL": (SOPPlus, {"alpha": 0.1}),  # the strong views' policy and Cutout too
    "ELRPlus-VRNL": (ELRPlus, {"alpha": 0.01}),  # the weight averages, mixup's draw
    "DISC-VRNL": (DISC, {"alpha": 0.01}),  # the tables, RandAugment, mixup within a selection
}
DATA = {
    "SOPPlus-VRNL": {"strong_views": 1, "cutout": 4},
    "DISC-VRNL": {"strong_views": 1, "strong_augment": "randaugment-disc-m5"},
}
"""Data options of a case beyond the digits' defaults."""


@pytest.mark.parametrize("compile", [True, False], ids=["cuda-graphs", "eager"])
@pytest.mark.parametrize("name", list(CASES))
def test_steady_state_training_never_synchronizes(name: str, compile, tmp_path: Path) -> None:
    cls, kwargs = CASES[name]
    L.seed_everything(0)
    dm = DigitsDataModule(noise_rate=0.3, batch_size=128, **DATA.get(name, {}))  # on the GPU
    model: NoisyLabelMethod = cls(
        network={"backbone": "mlp"},
        input_shape=(1, 8, 8),
        optim={"lr": 0.1},
        schedule={"warmup_epochs": 1},
        speed={"compile": compile},
        **kwargs,
    )
    watch = SyncWatch()
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="gpu",
        devices=1,
        precision="bf16-mixed",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[watch, SubsetStatistics(), WarmupAwareCheckpoint(monitor="val/acc", mode="max")],
        default_root_dir=tmp_path,
    )
    results = fit_and_test(model, dm, trainer)
    assert watch.checked >= 10
    assert model.speed.failure is None
    assert model.speed.cudagraphs == (compile is True)
    assert results["test_acc"] > 0.3 and results["estimation_epoch"] == 0
