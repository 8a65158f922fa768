"""A misspelt option, for every subcommand: refused with exit status 2 and ``did you mean`` the
real option. Every option of the project's own subcommands with each one of its letters
dropped; for the Lightning stages, an option of the stage, of the trainer, of the method and of
the dataset (those two through their own parsers), each with its last letter dropped, which is
also what an abbreviation would be: no command takes one."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from noisylabels.arguments import closest_options, suggestion, with_suggestion
from noisylabels.audit.cli import build_parser as audit_parser
from noisylabels.cli import main
from noisylabels.report.cli import build_parser as report_parser
from noisylabels.report.plot import build_parser as plot_parser
from noisylabels.sweep.cli import build_parser as sweep_parser

from conftest import CONFIGS, REPO

QUICKSTART = str(CONFIGS / "quickstart.yaml")
PARSERS: dict[str, Callable[[], Any]] = {
    "plot": plot_parser,
    "sweep": sweep_parser,
    "report": report_parser,
    "audit": audit_parser,
}
# (stage, a real option of it); the stage's own, the trainer's, the method's, the dataset's
STAGE_OPTIONS = [
    ("fit", "--ckpt_path"),
    ("fit", "--trainer.max_epochs"),
    ("fit", "--model.alpha"),
    ("fit", "--model.schedule.main_epochs"),
    ("fit", "--data.noise_rate"),
    ("validate", "--ckpt_path"),
    ("validate", "--trainer.limit_val_batches"),
    ("test", "--ckpt_path"),
    ("test", "--model.optim.lr"),
    ("predict", "--return_predictions"),
    ("predict", "--data.batch_size"),
]
HINT = re.compile(r"did you mean (--\S+(?: or --\S+)*)\?")


def misspellings(option: str) -> list[str]:
    """``option`` with each one of its letters (after the ``--``) dropped, each spelling once."""
    return list(dict.fromkeys(option[:i] + option[i + 1 :] for i in range(2, len(option))))


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The stderr of ``noisylabels ARGV``, which must end with exit status 2."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2, (argv, err)
    assert "Traceback" not in err, (argv, err)
    return err


def named(err: str) -> list[str]:
    """The options a ``did you mean`` of ``err`` names."""
    found = HINT.search(err)
    return found.group(1).split(" or ") if found else []


@pytest.mark.parametrize("subcommand", sorted(PARSERS))
def test_every_misspelt_option_of_a_subcommand_names_the_real_one(
    subcommand: str, capsys: pytest.CaptureFixture[str]
) -> None:
    real = {o for o in PARSERS[subcommand]()._option_string_actions if o.startswith("--")}
    checked = 0
    for option in sorted(real - {"--help"}):
        for wrong in misspellings(option):
            if wrong in real:
                continue
            err = refused([subcommand, wrong], capsys)
            assert option in named(err), (wrong, err)
            checked += 1
    assert checked > 10


@pytest.mark.parametrize(("stage", "option"), STAGE_OPTIONS)
def test_a_misspelt_option_of_a_stage_names_the_real_one(
    stage: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = option[:-1]  # also what an abbreviation of it would be
    err = refused([stage, "--config", QUICKSTART, wrong, "1"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("noisylabels: error:"), err
    assert named(err) == [option], err
    assert f"Run `noisylabels {stage} --help`" in err  # the help of the command given


def test_an_option_written_with_its_value_and_init_args(capsys) -> None:
    err = refused(["fit", "--config", QUICKSTART, "--trainer.max_epoch=3"], capsys)
    assert named(err) == ["--trainer.max_epochs"], err
    err = refused(["fit", "--config", QUICKSTART, "--model.init_args.alph", "0.1"], capsys)
    assert named(err) == ["--model.init_args.alpha"], err


def test_nothing_close_names_nothing(capsys) -> None:
    """An option nothing real is close to, and a real option with a value that does not
    parse, name no other."""
    err = refused(["fit", "--config", QUICKSTART, "--model.alpha", "many"], capsys)
    assert "--model.alpha" in err and "did you mean" not in err
    err = refused(["fit", "--config", QUICKSTART, "--zzzz", "1"], capsys)
    assert "unrecognized arguments: --zzzz" in err and "did you mean" not in err
    err = refused(["report", "runs", "--zzzz"], capsys)
    assert "unrecognized arguments: --zzzz" in err and "did you mean" not in err


def test_the_hint() -> None:
    options = ["--kind", "--out", "--labels", "--title", "-h", "--input_shape+"]
    assert closest_options("--kin", options) == ["--kind"]
    assert closest_options("--foo", options) == []
    assert closest_options("--input_shap", options) == []  # jsonargparse's "+" forms: not named
    assert suggestion(["--kin", "--titl"], options) == (
        "--kin: did you mean --kind?; --titl: did you mean --title?"
    )
    assert with_suggestion("unrecognized arguments: --ou x.png", options) == (
        "unrecognized arguments: --ou x.png (did you mean --out?)"
    )
    assert with_suggestion("unrecognized arguments: -0.1", options).endswith("-0.1")
    assert with_suggestion("argument --kind: invalid choice", options).endswith("choice")


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "results/table1_mnist", "--out", "a.md", "--out", "b.md"],
        ["report", "results/table1_mnist", "--paper-file=a.csv", "--paper-file", "b.csv"],
        ["sweep", "configs/sweeps/demo.yaml", "--dry-run", "--root", "r1", "--root", "r2"],
        ["plot", "results/fig1_mnist", "--out", "a.png", "--out", "b.png"],
    ],
    ids=["report --out", "report --paper-file", "sweep --root", "plot --out"],
)
def test_an_option_of_one_value_given_twice_is_refused(
    argv: list[str], capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch
) -> None:
    """The last would win and the first be dropped without a word: refused, naming both."""
    from noisylabels.cli import run

    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as exc:
        run(argv)
    assert exc.value.code == 2
    option = argv[-2] if not argv[-2].startswith("--paper-file=") else "--paper-file"
    assert f"{option.split('=')[0]} is given 2 times" in capsys.readouterr().err
