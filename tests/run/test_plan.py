"""A run's own options are one object (noisylabels.run.plan.RunPlan): the command line's
defaults are the plan's, both doors get the same callbacks from it, and what it cannot run it
refuses in one paragraph, in the same words from either door."""

from __future__ import annotations

import inspect
from pathlib import Path

import lightning as L
import pytest

from noisylabels.errors import InputError
from noisylabels.run.checkpoints import BEST_CHECKPOINT, WarmupAwareCheckpoint
from noisylabels.run.plan import RunPlan
from noisylabels.run.source import RunSource

from conftest import CONFIGS, read_results

QUICKSTART = str(CONFIGS / "quickstart.yaml")
SHORT = ("--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
         "--trainer.limit_val_batches", "2", "--trainer.limit_test_batches", "2")  # fmt: skip


def checkpoint_defaults() -> dict:
    """Every option of the best checkpoint at its default: ModelCheckpoint's, then the plan's."""
    signature = inspect.signature(WarmupAwareCheckpoint.__mro__[1].__init__)
    found = {
        name: p.default
        for name, p in signature.parameters.items()
        if name != "self" and p.default is not inspect.Parameter.empty
    }
    return {**found, **BEST_CHECKPOINT}


def test_the_command_line_s_defaults_are_the_plan_s() -> None:
    from noisylabels.run.cli import make_cli

    cli = make_cli(["--config", QUICKSTART, "--trainer.accelerator", "cpu"], run=False)
    plan = RunPlan.from_config(cli.config)
    default = RunPlan(seed=0)  # the command line's --seed_everything default
    for name in ("seed", "resume", "weights_only", "test_after_fit", "tail_test_epochs"):
        assert getattr(plan, name) == getattr(default, name), name
    assert plan.subset_statistics is default.subset_statistics is True
    assert plan.checkpoint == checkpoint_defaults()
    assert {k: plan.checkpoint[k] for k in BEST_CHECKPOINT} == default.checkpoint


def project_callbacks(trainer: L.Trainer) -> list[str]:
    return sorted(
        type(c).__name__ for c in trainer.callbacks if type(c).__module__.startswith("noisylabels")
    )


def test_both_doors_give_a_run_the_same_callbacks(finished_cli, tmp_path: Path) -> None:
    """The callbacks of conftest's finished command-line run are those the plan gives a plain
    Python trainer for the same method and data: one place builds them."""
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", default_root_dir=tmp_path, enable_progress_bar=False
    )
    RunPlan().attach(
        trainer,
        finished_cli.model,
        finished_cli.datamodule,
        source=RunSource(),
        checkpoint=None,
        trainer_options={},
    )
    python = project_callbacks(trainer)
    assert python == project_callbacks(finished_cli.trainer)
    assert {"HealthMonitor", "SubsetStatistics", "RunRecorder", "WarmupAwareCheckpoint"} <= set(
        python
    )
    assert not any(
        type(c).__name__ == "ModelCheckpoint" for c in trainer.callbacks
    )  # Lightning's default one replaced


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"seed": -1}, "--seed_everything must be an integer from 0 to 4294967295"),
        ({"seed": 2**32}, "--seed_everything must be an integer from 0 to 4294967295"),
        ({"tail_test_epochs": -1}, "--tail_test_epochs must be a whole number of epochs"),
        ({"tail_test_epochs": True}, "--tail_test_epochs must be a whole number of epochs"),
    ],
)
def test_a_plan_that_cannot_run_is_refused(options: dict, says: str) -> None:
    with pytest.raises(InputError, match=says):
        RunPlan(**options)


def test_a_negative_tail_is_refused_on_the_command_line(run_cli, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--tail_test_epochs must be a whole number"):
        run_cli("fit", "--config", QUICKSTART, "--tail_test_epochs", "-1", *SHORT)
    assert not list(tmp_path.rglob("*.json"))  # refused before anything is written


@pytest.mark.parametrize("value", ["best", "registry"])
def test_lightning_s_names_are_refused_in_one_text_from_both_doors(
    value: str, run_cli, tmp_path: Path
) -> None:
    from noisylabels.data import DigitsDataModule
    from noisylabels.methods import CE
    from noisylabels.run import fit_and_test

    with pytest.raises(InputError) as from_cli:
        run_cli("fit", "--config", QUICKSTART, "--ckpt_path", value, *SHORT)
    data = DigitsDataModule()
    model = CE(
        num_classes=data.num_classes, input_shape=data.input_shape, network={"backbone": "mlp"}
    )
    trainer = L.Trainer(max_epochs=1, default_root_dir=tmp_path / "python", logger=False)
    with pytest.raises(InputError) as from_python:
        fit_and_test(model, data, trainer, RunPlan(resume=value))
    assert str(from_cli.value) == str(from_python.value)
    says = {"best": "names the best checkpoint of a fit in this same process",
            "registry": "is not a run to continue"}  # fmt: skip
    assert f"--ckpt_path {value} {says[value]}" in str(from_cli.value)


def test_a_trainer_without_checkpointing_tests_its_last_epoch(run_cli, tmp_path: Path) -> None:
    """``--trainer.enable_checkpointing false``: the plan adds no best checkpoint, and the run
    tests (and records) its last epoch's model."""
    run_cli("fit", "--config", QUICKSTART, "--trainer.enable_checkpointing", "false", *SHORT)
    results = read_results(tmp_path)
    assert results["best_epoch"] is None
    assert results["test_acc"] == results["test_acc_last"]
    assert not list(tmp_path.rglob("best-*.ckpt"))


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_an_evaluation_hands_the_trainer_every_option_of_its_stage(
    stage: str, finished_run: Path, run_cli, monkeypatch
) -> None:
    """``--weights_only`` (and the stage's other Trainer options) reach the trainer's method:
    an option the command accepts is applied."""
    import functools

    called: dict = {}
    real = getattr(L.Trainer, stage)

    @functools.wraps(real)  # the parser reads the options from the real signature
    def spy(self, model, datamodule=None, **options):
        called.update(options)

    monkeypatch.setattr(L.Trainer, stage, spy)
    folder = next(finished_run.rglob("results.json")).parent
    run_cli(stage, "--config", QUICKSTART, "--ckpt_path", str(folder), "--weights_only", "false")
    assert called["weights_only"] is False
    assert called["ckpt_path"] == str(Path(read_results(finished_run)["checkpoint"]))
    assert ("return_predictions" in called) == (stage == "predict")


def test_seed_everything_true_draws_a_seed_and_records_it() -> None:
    """``--seed_everything true`` is a random seed, as its help says (Lightning's own would seed
    0), and the run records the seed it drew."""
    from noisylabels.run.cli import make_cli

    args = ["--config", QUICKSTART, "--trainer.accelerator", "cpu", "--seed_everything", "true"]
    seeds = [make_cli(args, run=False).config["seed_everything"] for _ in range(3)]
    assert all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    assert len(set(seeds)) > 1
    cli = make_cli(args, run=False)
    assert f"seed_everything: {cli.config['seed_everything']}" in cli.config_text


@pytest.mark.parametrize(
    ("given", "replaced"),
    [({}, True), ({"save_top_k": -1}, False), ({"every_n_epochs": 3}, False),
     ({"monitor": "val/acc", "mode": "max"}, False), ({"dirpath": "elsewhere"}, False)],
)  # fmt: skip
def test_only_lightning_s_default_checkpoint_is_replaced(
    given: dict, replaced: bool, tmp_path: Path
) -> None:
    """A ModelCheckpoint with settings of the caller's (every epoch, keep all, a monitor) is
    the run's checkpoint as given; Lightning's default one (``ModelCheckpoint()``, which keeps
    the last epoch) gives way to the best checkpoint."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from noisylabels.data import DigitsDataModule
    from noisylabels.methods import CE

    data = DigitsDataModule()
    model = CE(
        num_classes=data.num_classes, input_shape=data.input_shape, network={"backbone": "mlp"}
    )
    mine = ModelCheckpoint(**given)
    trainer = L.Trainer(max_epochs=1, default_root_dir=tmp_path, callbacks=[mine])
    RunPlan().attach(trainer, model, data, source=RunSource(), checkpoint=None, trainer_options={})
    best = [c for c in trainer.callbacks if isinstance(c, WarmupAwareCheckpoint)]
    assert (mine in trainer.callbacks) is not replaced
    assert bool(best) is replaced


@pytest.mark.parametrize(("given", "parsed"), [("1", 1), ("7", 7), ("1.0", 1.0), ("0.5", 0.5)])
def test_an_integer_batch_limit_is_a_number_of_batches(given: str, parsed: int | float) -> None:
    """``--trainer.limit_*_batches 1`` is one batch, ``1.0`` every batch (Lightning's rule; and
    ``val_check_interval`` 1 every batch, 1.0 once an epoch): the integer is parsed as an
    integer, though Lightning annotates the limits float first."""
    from noisylabels.run.cli import INTEGER_FIRST, make_cli

    for name in INTEGER_FIRST:  # the batch limits and val_check_interval
        args = ["--config", QUICKSTART, "--trainer.accelerator", "cpu", f"--trainer.{name}", given]
        value = make_cli(args, run=False).config["trainer"][name]
        assert value == parsed and type(value) is type(parsed), (name, value)
