"""Method options that cannot learn are refused before any training, for every method: a given
T that is singular or keeps a class no more often than chance (every method that corrects with
it, Forward included), and VRNL with fewer than 2 losses per variance."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from noisylabels.cli import run
from noisylabels.errors import InputError
from noisylabels.methods import SmallLossMethod, TransitionMethod, registry

from conftest import CONFIGS, synthetic_facts

C = 10
METHODS = sorted(registry())
TRANSITION_METHODS = sorted(n for n, cls in registry().items() if issubclass(cls, TransitionMethod))
QUICKSTART = str(CONFIGS / "quickstart.yaml")


def _method(name: str, **kwargs):
    return registry()[name](
        network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 8, 8), **kwargs
    )


def _facts(batch_size: int, noise_rate: float = 0.4):
    clean = torch.arange(200) % C
    facts = synthetic_facts(C, clean.clone(), clean, torch.arange(180), noise_rate)
    return dataclasses.replace(facts, batch_size=batch_size)


def _rank_one() -> torch.Tensor:
    return torch.full((C, C), 1.0 / C)  # every row equal: p @ T is the same for every p


def _two_rows_equal() -> torch.Tensor:
    T = torch.eye(C) * 0.8 + 0.2 / C
    T[5] = T[2]
    return T


def _at_chance() -> torch.Tensor:
    T = torch.eye(C)
    T[3] = 1.0 / C  # class 3 keeps its label as often as a random one: rank C still
    return T


def _sound() -> torch.Tensor:
    return torch.eye(C) * 0.6 + 0.4 / C


# ------------------------------------------------------------------------------ a given T
@pytest.mark.parametrize("name", TRANSITION_METHODS)
def test_every_method_correcting_with_a_given_T_refuses_a_T_it_cannot_use(name: str) -> None:
    assert {"Forward", "Reweight", "TRevision"} <= set(TRANSITION_METHODS)
    method = _method(name, transition=True, schedule={"warmup_epochs": 0})
    method.check_given_transition(_sound())
    for T, match in (
        (_rank_one(), r"the true T is singular \(.*rank 1 of 10.*cannot tell them apart"),
        (_two_rows_equal(), r"rank 9 of 10 \(rows 2, 5 are linearly dependent\)"),
        (_at_chance(), r"T\[3, 3\] = 0.1, at or below chance \(1/C = 0.1\)"),
    ):
        with pytest.raises(InputError, match=match) as err:
            method.check_given_transition(T)
        assert name in str(err.value) and "--model.transition estimate" in str(err.value)


def test_forward_refuses_a_rank_one_T_file_before_training(tmp_path: Path) -> None:
    path = tmp_path / "T.csv"
    np.savetxt(path, _rank_one().numpy(), delimiter=",")
    root = tmp_path / "run"
    with pytest.raises(InputError, match=r"the T file .*T.csv is singular .*Forward corrects by"):
        run(
            ["fit", "--config", QUICKSTART, "--model.transition", str(path)]
            + ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
        )
    assert not list(root.rglob("*.ckpt")) and not list(root.rglob("results.json"))


# ----------------------------------------------------------------------------- VRNL's variance
def _expected_samples(name: str, batch: int, world: int, scope: str, rate: float) -> int:
    n = batch * (world if scope == "global" else 1)
    if issubclass(registry()[name], SmallLossMethod):  # keeps floor((1 - tau) n) of them
        n = max(1, int((1.0 - rate) * n))
    return n


@pytest.mark.parametrize("name", METHODS)
def test_vrnl_needs_two_losses_per_variance_for_every_method(name: str, monkeypatch) -> None:
    """The property over batch sizes, process counts and variance scopes: VRNL is refused
    exactly where a step's variance covers fewer than 2 losses; the base method never is."""
    rate = 0.5
    for alpha in (0.0, 0.1, -0.1):
        for scope in ("global", "local"):
            method = _method(name, alpha=alpha, variance_scope=scope)
            for batch in (1, 2, 3, 4, 64):
                monkeypatch.setattr(method, "data_facts", lambda b=batch: _facts(b, rate))
                for world in (1, 2):
                    kept = _expected_samples(name, batch, world, scope, rate)
                    if alpha == 0 or kept >= 2:
                        method.check_variance_samples(world)
                        continue
                    with pytest.raises(InputError) as err:
                        method.check_variance_samples(world)
                    message = str(err.value)
                    assert f"covers {kept} sample" in message, message
                    assert f"--data.batch_size {batch}" in message
                    assert f"silently train {method.base_method_name} without VRNL" in message


def test_batch_size_one_with_vrnl_is_refused_before_training(tmp_path: Path) -> None:
    root = tmp_path / "run"
    args = ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    with pytest.raises(InputError, match=r"--model.alpha 0.1 asks for VRNL.*--data.batch_size 1"):
        run(["fit", "--config", QUICKSTART, "--data.batch_size", "1", *args])
    assert not list(root.rglob("*.ckpt")) and not list(root.rglob("results.json"))
