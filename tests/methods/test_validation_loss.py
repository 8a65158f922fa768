"""``--checkpoint.monitor val/loss`` selects among epochs by one loss: a method whose validation
loss changes its definition over the epochs of its own stage (a term's weight on a schedule, a
loss switched mid-stage) refuses it, and every other method's validation loss is one function
of the model over those epochs (checked for every method of the registry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from noisylabels.errors import InputError
from noisylabels.methods import TransitionMethod, registry

from conftest import CONFIGS

METHODS = registry()
COMMON = [
    "--config", str(CONFIGS / "data" / "digits.yaml"),
    "--model.schedule.warmup_epochs", "1", "--data.noise_rate", "0.3",
    "--trainer.limit_train_batches", "6", "--trainer.limit_val_batches", "1",
    "--trainer.accelerator", "cpu", "--trainer.enable_model_summary", "false",
]  # fmt: skip


def method_args(name: str) -> list[str]:
    """What a method needs to train on the digits (a T to correct with, its views)."""
    cls = METHODS[name]
    args = ["--model", f"noisylabels.methods.{name}"]
    if issubclass(cls, TransitionMethod):
        args += ["--model.transition", "estimate"]
    args += cls.data_options()
    return args


class FixedLogitsLoss(L.Callback):
    """At the end of every validation of the method's own stage: the validation loss of fixed
    logits on the first validation batch, with the model's state of the stage's first epoch
    (so that only what the method changes beside its model — a schedule, a switch — can move
    it)."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.state: dict[str, torch.Tensor] | None = None

    @torch.no_grad()
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking or pl_module.in_warmup:
            return
        facts = pl_module.data_facts()
        batch = next(iter(facts.eval_batches(pl_module.device, None, 0, 1, "val")))
        generator = torch.Generator().manual_seed(0)
        logits = torch.randn(len(batch["label"]), pl_module.num_classes, generator=generator)
        now = {k: v.clone() for k, v in pl_module.state_dict().items()}
        if self.state is None:
            self.state = now
        pl_module.load_state_dict(self.state)
        try:
            self.values.append(float(pl_module.stage_loss(logits, batch).mean()))
        finally:
            pl_module.load_state_dict(now)


PROBE = ["--trainer.callbacks+=test_validation_loss.FixedLogitsLoss"]


def probed(cli: Any) -> FixedLogitsLoss:
    """The run's :class:`FixedLogitsLoss` (given by its class path, as a user's callback)."""
    return next(c for c in cli.trainer.callbacks if type(c).__name__ == "FixedLogitsLoss")


@pytest.mark.parametrize("name", list(METHODS))
def test_a_method_s_validation_loss_keeps_its_definition_or_it_says_so(
    name: str, run_cli, tmp_path: Path
) -> None:
    """Three epochs of the method's own stage with its defaults: where the method does not say
    its validation loss changes (``val_loss_changes``), fixed logits get the same loss at the
    end of each epoch from the same model state."""
    cli = run_cli("fit", *COMMON, *method_args(name), "--trainer.max_epochs", "3", *PROBE)
    probe = probed(cli)
    assert len(probe.values) >= 2  # (a run at chance is stopped after two epochs)
    if cli.model.val_loss_changes() is None:
        assert probe.values == pytest.approx([probe.values[0]] * len(probe.values), rel=1e-6)


# each method whose validation loss its options make change over the stage, so configured
CHANGING = {
    "CoTeachingPlus": ["--model.init_epochs", "1", "--model.loss", "softmax_ce"],
    "CORES": ["--model.beta_start", "0", "--model.beta_ramp_epochs", "3"],
    "CAL": ["--model.beta_start", "0", "--model.beta_ramp_epochs", "3"],
    "Peer": ["--model.peer_alpha_segments", "[[1, 0.1, 0.1], [2, 0.5, 0.9]]"],
}


@pytest.mark.parametrize("name", list(CHANGING))
def test_a_method_whose_validation_loss_changes_refuses_to_select_by_it(
    name: str, run_cli, tmp_path: Path
) -> None:
    """The loss does change (fixed logits, the same model state, three epochs), the method says
    why, and a run selecting by ``val/loss`` is refused before training, naming the reason and
    the monitor to use."""
    cli = run_cli("fit", *COMMON, *method_args(name), *CHANGING[name],
                  "--trainer.max_epochs", "3", *PROBE)  # fmt: skip
    probe = probed(cli)
    reason = cli.model.val_loss_changes()
    assert reason and len(set(probe.values)) > 1, probe.values
    with pytest.raises(InputError, match="val/loss") as refused:
        run_cli("fit", *COMMON, *method_args(name), *CHANGING[name], "--trainer.max_epochs", "4",
                "--checkpoint.monitor", "val/loss", "--checkpoint.mode", "min",
                root=tmp_path / "by-loss")  # fmt: skip
    assert reason in str(refused.value) and "val/acc" in str(refused.value)
    assert not (tmp_path / "by-loss").exists() or not list((tmp_path / "by-loss").rglob("*.ckpt"))
