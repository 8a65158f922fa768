"""The command line's parsers are built once per process and reused (noisylabels.run.cli): a
command parsed by parsers that earlier commands used resolves to what it resolves to in a new
process, whose parsers are built afresh, whatever the commands before it gave."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from conftest import CONFIGS, config_args

QUICKSTART = str(CONFIGS / "quickstart.yaml")
MNIST_CE = config_args("mnist_ce")
# commands that differ in what parsing keeps apart: the method (its init_args), a list default
# replaced, group options, the stage, a config text, a default of the trainer
COMMANDS: dict[str, list[str]] = {
    "quickstart": ["fit", "--config", QUICKSTART],
    "other-method": ["fit", "--config", QUICKSTART, "--model", "CE",
                     "--model.schedule.warmup_epochs", "0", "--model.optim.lr", "0.3",
                     "--trainer.callbacks", "[]", "--data.batch_size", "7"],
    "group-null": ["fit", "--config", QUICKSTART, "--model.schedule.milestones", "null",
                   "--seed_everything", "5", "--checkpoint.monitor", "val/loss",
                   "--checkpoint.mode", "min"],
    "test-stage": ["test", *MNIST_CE, "--trainer.max_epochs", "3"],
    "config-text": ["validate", "--config", QUICKSTART, "--config",
                    "{trainer: {limit_val_batches: 2}, data: {noise_rate: 0.4}}"],
}  # fmt: skip


def fresh() -> None:
    """Forget the idle parsers: the next command builds its own, as in a new process."""
    from noisylabels.run import cli

    cli._PARSERS.clear()


def resolved(args: list[str]) -> str:
    """The config ``noisylabels ARGS`` resolves to (``--print_config``)."""
    from noisylabels.run.cli import make_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        make_cli([*args, "--print_config"])
    assert done.value.code in (0, None)
    return out.getvalue()


def test_commands_in_one_process_resolve_as_each_in_a_new_one() -> None:
    from noisylabels.run import cli

    alone = {}
    for name, args in COMMANDS.items():
        fresh()
        alone[name] = resolved(args)
    assert len(set(alone.values())) == len(alone)  # the commands differ in what they resolve to
    fresh()
    order = [*COMMANDS, *reversed(COMMANDS)]  # each command after every other one
    together = [(name, resolved(COMMANDS[name])) for name in order]
    for name, text in together:
        assert text == alone[name], name
    idle = [parser for pool in cli._PARSERS.values() for parser in pool]
    stages = {args[0] for args in COMMANDS.values()}
    assert sorted(p.prog for p in idle) == sorted(f"noisylabels {s}" for s in stages), (
        "one parser per stage served every command"
    )


def test_a_print_config_cut_short_by_an_error_is_not_printed_by_the_next_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from argparse import ArgumentError

    from noisylabels.run import cli
    from noisylabels.run.cli import make_cli

    fresh()
    base = ["--config", QUICKSTART, "--trainer.accelerator", "cpu"]
    with pytest.raises(ArgumentError, match="lr"):  # --print_config seen, then this
        make_cli([*base, "--print_config", "--model.optim.lr", "abc"], run=False)
    capsys.readouterr()
    built = make_cli(base, run=False)
    assert capsys.readouterr().out == ""
    assert type(built.model).__name__ == "Forward"
    assert [len(pool) for pool in cli._PARSERS.values()] == [1]  # not the parser of the error


def test_each_cli_builds_its_own_classes_from_reused_parsers() -> None:
    """The model's hyperparameters come from its own command (Lightning binds the instantiators
    to the CLI object), not from the command the parsers served before."""
    from noisylabels.run.cli import make_cli

    fresh()
    base = ["--config", QUICKSTART, "--trainer.accelerator", "cpu"]
    first = make_cli([*base, "--model.alpha", "0.7"], run=False)
    second = make_cli([*base, "--model", "CE", "--model.schedule.warmup_epochs", "0"], run=False)
    assert first.parser is second.parser  # reused
    assert first.model.hparams["alpha"] == 0.7
    assert second.model.hparams["_class_path"].endswith(".CE")
    assert type(second.model).__name__ == "CE" and type(first.model).__name__ == "Forward"


def test_a_fit_leaves_the_parsers_as_built(run_cli: Any) -> None:
    """After a fit through them the parsers' defaults, and what a command resolves to, are
    those of parsers built afresh."""
    from noisylabels.run import cli

    def defaults(parser: Any) -> str:
        return parser.dump(parser.get_defaults(), skip_none=False, skip_validation=True)

    def idle() -> list[Any]:
        return [parser for pool in cli._PARSERS.values() for parser in pool]

    fresh()
    run_cli("fit", "--config", QUICKSTART, "--trainer.max_epochs", "1",
            "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
            "--trainer.limit_test_batches", "1")  # fmt: skip
    [used] = idle()
    after = [resolved(args) for args in COMMANDS.values()]
    assert used in idle()  # the fit commands used it again
    fresh()
    assert [resolved(args) for args in COMMANDS.values()] == after
    [built] = [p for p in idle() if p.prog == used.prog]
    assert built is not used
    assert defaults(used) == defaults(built)


@pytest.mark.parametrize("name", ["quickstart", "other-method", "config-text"])
def test_the_dumps_skip_only_the_second_validation(name: str) -> None:
    """The hyperparameters Lightning hands the method and data module, and ``config.yaml``'s
    text, are dumped without validating again what the parse validated: both equal the
    validated dumps."""
    import yaml

    from noisylabels.run.cli import make_cli

    _, *args = COMMANDS[name]
    cli = make_cli(args, run=False)  # the model and data module built, nothing run
    parsed = cli.config
    assert cli.config_dump == yaml.safe_load(
        cli.parser.dump(parsed, skip_link_targets=False, skip_none=False)
    )
    assert cli.config_dump["model"]["init_args"]["num_classes"] == 10  # a link target, kept
    assert cli.model.hparams["num_classes"] == 10
    text = cli.config_text
    assert text == cli.parser.dump(parsed, skip_none=False)
    assert "num_classes" not in text  # config.yaml leaves the link targets out
