"""Every method of the registry, with VRNL, killed in the middle of its own stage and resumed with
``--ckpt_path last``, ends bit for bit as the run that was never interrupted: its weights and
every other entry of its state dict (a method's per-sample state included: ELR's targets, SOP's
u and v, CAL's D̂), its results and every sample's record.

Each case is three epochs on the digits: one warm-up epoch (T estimated after it where a method
corrects with one), then two of the method's own, killed (SIGKILL, in a process of its own)
before the second batch of the last epoch. The methods with per-sample state, Peer loss and the
f-divergence run by default, every method under ``slow``.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from test_ddp_methods import method_options
from test_resume import assert_same_run, run_cli_process

from noisylabels.methods import registry

from conftest import CONFIGS

DEFAULT_CASES = {"ELR", "SOP", "CORES", "DivideMix", "Peer", "FDivergence", "CAL"}
"""The methods whose own state is per sample (CAL: its D̂ and ℓ̄), and Peer loss and the
f-divergence, whose peers are drawn from the seed and the step (run without ``-m slow``)."""


def _cases() -> list:
    return [
        pytest.param(name, marks=() if name in DEFAULT_CASES else (pytest.mark.slow,), id=name)
        for name in registry()
    ]


def fit_args(name: str) -> list[str]:
    args = [
        *("--config", str(CONFIGS / "data" / "digits.yaml")),
        *("--model", f"noisylabels.methods.{name}", "--model.alpha", "0.05"),
        *("--model.network.backbone_kwargs", "{hidden: [64], dropout: 0.2}"),
        *("--model.schedule.warmup_epochs", "1", "--trainer.max_epochs", "3"),
        *("--trainer.limit_train_batches", "5", "--trainer.limit_val_batches", "2"),
        *("--trainer.accelerator", "cpu", "--data.noise_rate", "0.3"),
        *("--trainer.enable_model_summary", "false"),
    ]
    return args + method_options(name)


@pytest.mark.parametrize("name", _cases())
def test_a_killed_and_resumed_run_equals_the_uninterrupted_one(
    name: str, run_cli, tmp_path: Path
) -> None:
    args = fit_args(name)
    run_cli("fit", *args, root=tmp_path / "straight")
    root = tmp_path / "killed"
    killed = run_cli_process(root, *args, interrupt=(2, 1, signal.SIGKILL))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    run_cli("fit", *args, "--ckpt_path", "last", root=root)
    resumed = assert_same_run(tmp_path / "straight", root)
    assert resumed["resumed"][0]["epochs_done"] == 2
