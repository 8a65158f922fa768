"""Method options that cannot learn are refused before any training, for every method: a given
T that is singular or keeps a class no more often than chance (every method that corrects with
it, Forward included)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from noisylabels.cli import run
from noisylabels.errors import InputError
from noisylabels.methods import TransitionMethod, registry

from conftest import CONFIGS

C = 10
METHODS = sorted(registry())
TRANSITION_METHODS = sorted(n for n, cls in registry().items() if issubclass(cls, TransitionMethod))
QUICKSTART = str(CONFIGS / "quickstart.yaml")


def _method(name: str, **kwargs):
    return registry()[name](backbone="mlp", num_classes=C, input_shape=(1, 8, 8), **kwargs)


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
    method = _method(name, transition=True)
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
