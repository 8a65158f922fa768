"""A callback the caller gives the trainer is the one that runs: the run adds its own observers
(:func:`noisylabels.run.fit.run_callbacks`) only of the types the caller did not give, so a
caller's options apply as ``config.yaml`` records them, or are refused; never silently replaced
by a default."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from noisylabels.errors import InputError

from conftest import CONFIGS

QUICK = [
    "fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "1",
    "--trainer.limit_train_batches", "2", "--trainer.enable_progress_bar", "false",
]  # fmt: skip


def digits_forward() -> tuple:
    from noisylabels.data import DigitsDataModule
    from noisylabels.methods import Forward

    data = DigitsDataModule(noise_rate=0.4)
    model = Forward(num_classes=10, input_shape=data.input_shape,
                    network={"backbone": "mlp"}, transition=True)  # fmt: skip
    return model, data


def test_every_run_callback_the_caller_gives_is_the_one_that_runs(make_trainer) -> None:
    """For every type of callback the run attaches, a caller's instance stays in the trainer,
    alone of its type, through a run from Python."""
    from noisylabels.run import fit_and_test
    from noisylabels.run.plan import run_callbacks

    model, data = digits_forward()
    given = [type(c)() for c in run_callbacks(data)]  # a caller's own instance of each type
    assert {type(c).__name__ for c in given} >= {"TransitionMonitor", "SampleDynamics",
                                                  "DivergenceGuard", "EpochLog"}  # fmt: skip
    trainer = make_trainer(max_epochs=1, limit_train_batches=2, callbacks=given)
    fit_and_test(model, data, trainer)
    for callback in given:
        same_type = [c for c in trainer.callbacks if isinstance(c, type(callback))]
        assert same_type == [callback], type(callback).__name__


def test_a_callback_option_from_the_command_line_is_the_run_s(tmp_path: Path) -> None:
    from noisylabels.callbacks import DivergenceGuard
    from noisylabels.cli import run

    cli = run([*QUICK, "--trainer.default_root_dir", str(tmp_path),
               "--trainer.callbacks+=noisylabels.callbacks.DivergenceGuard",
               "--trainer.callbacks.init_args.check_every", "7"])  # fmt: skip
    guards = [c for c in cli.trainer.callbacks if isinstance(c, DivergenceGuard)]
    assert [g.check_every for g in guards] == [7]
    config = yaml.safe_load((Path(cli.trainer.log_dir) / "config.yaml").read_text())
    recorded = [c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("Guard")]
    assert recorded[0]["init_args"]["check_every"] == 7


def test_a_tail_test_among_the_callbacks_is_refused_for_the_run_option(tmp_path: Path) -> None:
    from noisylabels.cli import run

    with pytest.raises(InputError, match="--tail_test_epochs"):
        run([*QUICK, "--trainer.default_root_dir", str(tmp_path),
             "--trainer.callbacks+=noisylabels.callbacks.TailTest"])  # fmt: skip
    assert not list(tmp_path.rglob("results.json"))


def test_recording_a_network_the_method_lacks_is_refused(tmp_path: Path) -> None:
    from noisylabels.cli import run

    with pytest.raises(InputError, match=r"SampleDynamics\(network=1\): Forward trains 1"):
        run([*QUICK, "--trainer.default_root_dir", str(tmp_path),
             "--trainer.callbacks+=noisylabels.callbacks.SampleDynamics",
             "--trainer.callbacks.init_args.network", "1"])  # fmt: skip


def test_the_run_s_own_observers_of_an_earlier_run_are_replaced(make_trainer) -> None:
    """Those the run attached itself are marked: a later run on the same trainer replaces them
    with fresh ones (no record carried over), while a caller's stays."""
    from noisylabels.callbacks import DivergenceGuard
    from noisylabels.run.plan import BUILT, RunPlan
    from noisylabels.run.source import RunSource

    model, data = digits_forward()
    mine = DivergenceGuard(check_every=3)
    trainer = make_trainer(callbacks=[mine])
    plan = RunPlan()

    def attach() -> list:
        plan.attach(trainer, model, data, source=RunSource(), checkpoint=None, trainer_options={})
        return [c for c in trainer.callbacks if getattr(c, BUILT, False)]

    first = attach()
    second = attach()
    assert first and {type(c) for c in second} == {type(c) for c in first}
    assert DivergenceGuard not in {type(c) for c in first}
    assert all(c in trainer.callbacks for c in second)
    assert not any(c in trainer.callbacks for c in first)
    assert mine in trainer.callbacks


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize(
    ("monitor", "improves"),
    [("val/acc", "max"), ("train/acc", "max"), ("val/loss", "min"), ("train/loss", "min"),
     ("transition/t_estimation_error", "min"), ("epoch", None), ("val/f1", None)],
)  # fmt: skip
def test_the_best_checkpoint_is_chosen_the_way_its_value_improves(
    monitor: str, improves: str | None, mode: str
) -> None:
    """A checkpoint mode against the direction its monitored value improves in would select the
    run's worst epoch as its result: refused, naming the mode to give; a value whose name says
    nothing of its direction is taken in either mode."""
    from noisylabels.errors import InputError
    from noisylabels.run.checkpoints import WarmupAwareCheckpoint

    if improves is None or mode == improves:
        WarmupAwareCheckpoint(monitor=monitor, mode=mode)
        return
    with pytest.raises(InputError, match=rf"give --checkpoint\.mode {improves}$"):
        WarmupAwareCheckpoint(monitor=monitor, mode=mode)
