"""The stop on a NaN/Inf training loss: where it is caught, and what it says."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from noisylabels.callbacks import DivergenceGuard
from noisylabels.errors import DivergenceError


def _trainer(epoch: int = 4) -> SimpleNamespace:
    return SimpleNamespace(current_epoch=epoch, num_training_batches=20, state=SimpleNamespace())


def _module(alpha: float = 0.1, lr: float = 0.5, in_warmup: bool = False) -> SimpleNamespace:
    return SimpleNamespace(hparams={"alpha": alpha, "optim": {"lr": lr}}, in_warmup=in_warmup)


def _steps(guard: DivergenceGuard, trainer, module, losses) -> None:
    guard.on_train_epoch_start(trainer, module)
    for i, value in enumerate(losses):
        guard.on_train_batch_end(trainer, module, {"loss": torch.tensor(value)}, None, i)


def test_the_cpu_stops_at_the_first_bad_step() -> None:
    guard, trainer = DivergenceGuard(), _trainer()
    with pytest.raises(DivergenceError) as err:
        _steps(guard, trainer, _module(), [1.0, 2.0, float("nan"), 1.0])
    message = str(err.value)
    assert "epoch 4, training step 2 of 20" in message and "nan" in message
    assert "alpha=0.1" in message and "--model.alpha" in message and "--model.optim.lr" in message


def test_the_deferred_check_names_the_first_bad_step_without_reading_each_loss() -> None:
    """The accelerator path (a device-side record, read every ``check_every`` steps and at the
    epoch's end), run here on the CPU."""
    guard, trainer, module = DivergenceGuard(check_every=5, every_step=False), _trainer(), _module()
    _steps(guard, trainer, module, [1.0, float("inf"), float("nan"), 1.0])  # 4 steps: no read
    with pytest.raises(DivergenceError, match="training step 1 of 20") as err:
        guard.on_train_epoch_end(trainer, module)
    assert "was inf" in str(err.value)
    # read every check_every steps, too
    with pytest.raises(DivergenceError, match="training step 3 of 20"):
        _steps(guard, trainer, module, [1.0, 1.0, 1.0, float("nan"), 1.0])
    # and before any checkpoint is written
    _steps(guard, trainer, module, [float("nan")])
    with pytest.raises(DivergenceError):
        guard.on_save_checkpoint(trainer, module, {})
    # finite losses pass
    _steps(guard, trainer, module, [1.0] * 12)
    guard.on_train_epoch_end(trainer, module)


def test_without_vrnl_the_learning_rate_is_the_likely_cause() -> None:
    for module in (_module(alpha=0.0), _module(alpha=0.1, in_warmup=True)):
        with pytest.raises(DivergenceError) as err:
            _steps(DivergenceGuard(), _trainer(), module, [float("inf")])
        assert "alpha" not in str(err.value) and "--model.optim.lr" in str(err.value)


def _with_transition(T: torch.Tensor, estimated: bool = True) -> SimpleNamespace:
    module = _module()
    module.transition_estimate = lambda: T
    module.estimates_transition = estimated
    return module


def test_a_degenerate_transition_matrix_is_named_first() -> None:
    """T̂ with zero columns and rank 1 (every anchor the same sample): the message names its
    condition and blames it before α and the learning rate."""
    T = torch.zeros(10, 10)
    T[:, 0] = 1.0
    with pytest.raises(DivergenceError) as err:
        _steps(DivergenceGuard(), _trainer(), _with_transition(T), [float("nan")])
    message = str(err.value)
    condition = (
        "The estimated transition matrix T̂ the method corrects with has smallest diagonal "
        "entry 0 (row 1), 9 all-zero columns (1, 2, 3, 4, 5, 6, 7, 8, 9), rank 1 of 10"
    )
    assert condition in message and "it is degenerate" in message
    assert message.index("degenerate") < message.index("Otherwise: the VRNL coefficient alpha")
    assert message.index("T̂") < message.index("alpha=0.1") < message.index("lr=0.5")


def test_a_sound_transition_matrix_is_named_and_cleared() -> None:
    T = torch.full((4, 4), 0.1) + 0.6 * torch.eye(4)
    with pytest.raises(DivergenceError) as err:
        _steps(DivergenceGuard(), _trainer(), _with_transition(T, estimated=False), [float("inf")])
    message = str(err.value)
    assert "The given transition matrix T the method corrects with has smallest diagonal " in (
        message
    )
    assert "rank 4 of 4: it looks sound. The likely cause: the VRNL coefficient" in message


def test_a_method_in_its_warmup_has_no_transition_to_name() -> None:
    module = _with_transition(torch.eye(3))
    module.transition_estimate = lambda: None  # in the warm-up there is no T̂ yet
    with pytest.raises(DivergenceError) as err:
        _steps(DivergenceGuard(), _trainer(), module, [float("nan")])
    assert "transition matrix" not in str(err.value)
