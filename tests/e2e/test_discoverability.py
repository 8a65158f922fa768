"""What a new user finds: the subcommands in --help, options spelled out in full, runs in a
folder named after their experiment, predictions on disk, one paragraph for a constructor's
ValueError/TypeError, configs that compose, and documents that exist where configs point."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from noisylabels.callbacks import SubsetStatistics
from noisylabels.cli import SUBCOMMANDS, main, run
from noisylabels.compose import default_root_dir
from noisylabels.errors import InputError, OptionError
from noisylabels.run import run_callbacks
from noisylabels.run.cli import make_cli

from conftest import CONFIGS, REPO

QUICKSTART = str(CONFIGS / "quickstart.yaml")


def test_help_lists_every_subcommand_with_a_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "noisylabels.cli", "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0
    for name, (_, text) in SUBCOMMANDS.items():
        assert re.search(rf"^  {name} +{re.escape(text)}$", out.stdout, flags=re.M), name
    assert {"fit", "predict", "plot", "sweep", "report"} <= set(SUBCOMMANDS)


def test_option_prefixes_are_refused_everywhere(tmp_path: Path, capsys) -> None:
    """``--trainer.max_epoch`` (a prefix of max_epochs) is refused as ``--model.alph`` is, and
    as the options of a method's option group are (``--model.optim.l``)."""
    for option in ("--trainer.max_epoch", "--model.alph", "--test_after", "--model.optim.l",
                   "--model.schedule.main_epoch"):  # fmt: skip
        with pytest.raises(OptionError, match=re.escape(option.rsplit(".", 1)[-1])):
            run(["fit", "--config", QUICKSTART, option, "1"])
    with pytest.raises(InputError, match="unrecognized arguments: --scor"):
        run(["audit", str(tmp_path), "--scor", "loss"])
    for argv in (
        ["sweep", str(CONFIGS / "sweeps" / "fig1_mnist.yaml"), "--dry", "--roo", str(tmp_path)],
        ["report", str(tmp_path), "--pair"],
        ["plot", str(tmp_path), "--out", str(tmp_path / "a.png"), "--lab", "x"],
    ):
        with pytest.raises(SystemExit) as exc:
            run(argv)
        assert exc.value.code == 2
        assert "unrecognized arguments" in capsys.readouterr().err


def test_composed_runs_get_a_folder_named_after_data_and_method(tmp_path, monkeypatch) -> None:
    """Groups composed on the command line: runs/<dataset>_<method>, the preset's folder, and
    --ckpt_path last finds the run there."""
    monkeypatch.chdir(tmp_path)
    groups = ["--config", str(CONFIGS / "data" / "digits.yaml"),
              "--config", str(CONFIGS / "method" / "forward_vrnl.yaml"),
              "--config", str(CONFIGS / "protocol" / "true_t.yaml")]  # fmt: skip
    quiet = ["--trainer.enable_progress_bar", "false", "--test_after_fit", "false"]
    cli = run(["fit", *groups, "--trainer.max_epochs", "1", *quiet])
    assert Path(cli.trainer.default_root_dir) == Path("runs/digits_forward_vrnl")
    assert (tmp_path / "runs/digits_forward_vrnl/lightning_logs/version_0/config.yaml").is_file()
    cli = run(["fit", *groups, "--trainer.max_epochs", "2", "--ckpt_path", "last", *quiet])
    assert cli.trainer.current_epoch == 2
    logs = tmp_path / "runs/digits_forward_vrnl/lightning_logs"
    assert sorted(p.name for p in logs.iterdir()) == ["version_0", "version_1"]  # a new folder
    continued = json.loads((logs / "version_1" / "results.json").read_text())
    assert continued["resumed"][0]["from"].endswith("version_0/checkpoints/last.ckpt")
    cases = {
        ("MNISTDataModule", "Forward", "estimate", "dual_t", 0.1): "mnist_forward_dualt_vrnl",
        ("CIFAR10DataModule", "Reweight", True, "anchor", 0.0): "cifar10_reweight",
        ("CIFAR100DataModule", "CoTeaching", None, None, 0.0): "cifar100_coteaching",
    }
    for (data, method, transition, estimator, alpha), name in cases.items():
        config = {
            "data": {"class_path": f"noisylabels.data.{data}"},
            "model": {
                "class_path": f"noisylabels.methods.{method}",
                "init_args": {"transition": transition, "estimator": estimator, "alpha": alpha},
            },
        }
        assert default_root_dir(config) == Path("runs") / name


def test_test_and_predict_use_the_checkpoint_fit_reported(run_cli, tmp_path: Path, capsys) -> None:
    """`test` and `predict --ckpt_path RUN` evaluate the checkpoint fit selected and reported
    (results.json's), say which, write predictions.csv to the run folder and start no run
    folder of their own; a checkpoint file passed by its path is evaluated as named."""
    run_cli("fit", "--config", QUICKSTART, "--trainer.max_epochs", "3")
    folder = next(tmp_path.rglob("last.ckpt")).parent.parent
    fitted = json.loads((folder / "results.json").read_text())
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tested = run_cli("test", "--config", QUICKSTART, "--ckpt_path", str(folder))
    assert Path(tested.trainer.ckpt_path) == Path(fitted["checkpoint"])
    # Lightning's advice to pass fit's callbacks again (the recorder, the health monitor) does
    # not apply to evaluating weights: it is not shown
    assert not [w for w in caught if "callbacks used to create the checkpoint" in str(w.message)]
    notice = capsys.readouterr().err
    assert f"{fitted['checkpoint']} (the selected checkpoint its fit reported)" in notice
    assert tested.trainer.callback_metrics["test/acc"] == pytest.approx(fitted["test_acc"])
    # a checkpoint file named is the one evaluated, its run's selection notwithstanding
    last = folder / "checkpoints" / "last.ckpt"
    assert Path(fitted["checkpoint"]) != last
    tested = run_cli("test", "--config", QUICKSTART, "--ckpt_path", str(last))
    assert f"{last} (the file named)" in capsys.readouterr().err
    assert Path(tested.trainer.ckpt_path) == last
    assert tested.trainer.callback_metrics["test/acc"] == pytest.approx(fitted["test_acc_last"])
    cli = run_cli("predict", "--config", QUICKSTART, "--ckpt_path", "last")
    path = folder / "predictions.csv"
    assert f"predictions: {path}" in capsys.readouterr().out
    assert sorted(p.name for p in folder.parent.iterdir()) == ["version_0"]
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    classes = cli.datamodule.num_classes
    assert list(rows[0]) == ["index", "label", "predicted", *(f"p_{c}" for c in range(classes))]
    test_labels = cli.datamodule.data.test_labels
    assert [int(r["index"]) for r in rows] == list(range(len(test_labels)))
    assert [int(r["label"]) for r in rows] == test_labels.tolist()
    probs = torch.tensor([[float(r[f"p_{c}"]) for c in range(classes)] for r in rows])
    assert torch.allclose(probs.sum(1), torch.ones(len(rows)), atol=1e-4)
    predicted = [int(r["predicted"]) for r in rows]
    assert predicted == probs.argmax(1).tolist()
    accuracy = sum(p == y for p, y in zip(predicted, test_labels.tolist(), strict=True))
    assert accuracy / len(rows) == pytest.approx(fitted["test_acc"], abs=1e-6)


CONSTRUCTORS = '''
from noisylabels.data import DigitsDataModule
from noisylabels.methods import CE


class Picky(CE):
    """CE with an option of its own, checked as a new method might (a plain ValueError)."""

    def __init__(self, gamma: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        if gamma < 0:
            raise ValueError(f"gamma must be >= 0, got {gamma}")


class Typed(CE):
    def __init__(self, width: int = 4, **kwargs):
        super().__init__(**kwargs)
        if width % 2:
            raise TypeError("width must be even")


class PickyDigits(DigitsDataModule):
    def __init__(self, share: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
'''


@pytest.mark.parametrize(
    ("args", "paragraph"),
    [
        (["--model", "picky.Picky", "--model.gamma", "-1"],
         "--model (picky.Picky): gamma must be >= 0, got -1.0. Its options: noisylabels fit "
         "--model.help picky.Picky"),
        (["--model", "picky.Typed", "--model.width", "3"],
         "--model (picky.Typed): width must be even"),
        (["--data", "picky.PickyDigits", "--data.share", "2"],
         "--data (picky.PickyDigits): share must be in (0, 1], got 2.0. Its options: noisylabels "
         "fit --data.help picky.PickyDigits"),
        (["--model.network.backbone", "lenet5"],
         "--model.network.backbone_kwargs {'hidden': [128]} do not fit backbone 'lenet5'"),
    ],
    ids=["method-ValueError", "method-TypeError", "data-ValueError", "backbone_kwargs"],
)  # fmt: skip
def test_a_constructors_error_is_one_paragraph(args, paragraph, tmp_path, monkeypatch, capsys):
    (tmp_path / "picky.py").write_text(CONSTRUCTORS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", QUICKSTART, *args, "--trainer.default_root_dir", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("noisylabels: error: ") and paragraph in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    with pytest.raises(InputError):  # --debug: the error with its traceback
        main(["fit", "--config", QUICKSTART, *args, "--debug"])


def test_quickstart_composes_with_the_mnist_group(run_cli, tmp_path: Path, mnist_dir) -> None:
    """The digits' MLP options do not follow the run to MNIST's LeNet-5."""
    cli = run_cli("fit", "--config", QUICKSTART, "--config", str(CONFIGS / "data" / "mnist.yaml"),
                  "--data.data_dir", str(mnist_dir), "--trainer.fast_dev_run", "true")  # fmt: skip
    network = cli.model.hparams.network
    assert network["backbone"] == "lenet5" and network["backbone_kwargs"] is None


def test_the_observability_recipes_record_once(monkeypatch, tmp_path: Path) -> None:
    """docs/observability.md: options of the default callback in place; += after a config
    whose own callback list lacks it. Either way one SubsetStatistics, with the option."""
    monkeypatch.chdir(tmp_path)
    own_list = tmp_path / "my_config.yaml"
    monitor = "lightning.pytorch.callbacks.LearningRateMonitor"
    own_list.write_text(
        f"compose: [{QUICKSTART}]\ntrainer:\n  callbacks:\n    - class_path: {monitor}\n"
    )
    recipes = [
        ["--config", QUICKSTART, "--trainer.callbacks.init_args.source", "pass"],
        ["--config", str(own_list), "--trainer.callbacks+=noisylabels.callbacks.SubsetStatistics",
         "--trainer.callbacks.init_args.source", "pass"],
    ]  # fmt: skip
    text = (REPO / "docs" / "observability.md").read_text()
    assert "--trainer.callbacks.init_args.source pass" in text
    assert "--trainer.callbacks+=noisylabels.callbacks.SubsetStatistics" in text
    for args in recipes:
        cli = make_cli(args, run=False)
        found = [c for c in cli.trainer.callbacks if isinstance(c, SubsetStatistics)]
        assert [c.source for c in found] == ["pass"]


def test_a_run_has_each_run_callback_once(run_cli, tmp_path: Path) -> None:
    """The run's callbacks are attached once (noisylabels.run.attach_callbacks), so nothing is
    announced as overridden."""
    cli = run_cli("fit", "--config", QUICKSTART, "--trainer.max_epochs", "1",
                  "--test_after_fit", "false")  # fmt: skip
    names = [type(c).__name__ for c in cli.trainer.callbacks]
    for callback in run_callbacks(cli.datamodule):
        assert names.count(type(callback).__name__) == 1, names
    assert names.count("SubsetStatistics") == 1 and names.count("WarmupAwareCheckpoint") == 1


def test_documents_the_configs_point_to_exist() -> None:
    for path in sorted(CONFIGS.rglob("*.yaml")):
        for name in re.findall(r"[\w./-]+\.md\b", path.read_text()):
            found = [p for p in (REPO / name, REPO / "docs" / name) if p.is_file()]
            assert found, f"{path.relative_to(REPO)} points to {name}, which does not exist"


@pytest.mark.parametrize("stage", ["test", "validate", "predict"])
def test_an_evaluation_on_other_data_than_the_fits_says_so(
    finished_run: Path, tmp_path: Path, capsys, stage: str
) -> None:
    """`test`, `validate` and `predict` of a run's checkpoint with data options other than its
    fit's (here the inputs' normalization) say which, and that the figures are of that data
    (`predict` then refuses to write its predictions into the run's folder); the run's own
    data, or a difference that changes no figure (the evaluation batch size, where the data
    lies), says nothing."""
    config = str(finished_run / "config.yaml")
    common = ["--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"]
    if stage == "predict":
        run_copy = tmp_path / "run"  # predict writes predictions.csv into the run folder
        finished = Path(shutil.copytree(finished_run, run_copy))
    else:
        finished = finished_run
    for extra, said in (
        ([], None),
        (["--data.eval_batch_size", "7", "--data.data_dir", str(tmp_path)], None),
        (["--data.normalize", "false"], "data.normalize true -> false"),
    ):
        capsys.readouterr()
        argv = [stage, "--config", config, "--ckpt_path", str(finished), *common, *extra]
        if said is not None and stage == "predict":  # not into the run's folder: refused
            before = (finished / "predictions.csv").read_bytes()
            with pytest.raises(InputError, match="predictions of other data than the run's"):
                run(argv)
            assert (finished / "predictions.csv").read_bytes() == before
        else:
            run(argv)
        err = capsys.readouterr().err
        if said is None:
            assert "the data differs" not in err, extra
        else:
            assert "the data differs from the one " in err and said in err
            assert "the figures below are of this data, not the run's" in err


def test_a_copied_run_is_evaluated_from_its_own_checkpoint(finished_run: Path, tmp_path: Path):
    """`test --ckpt_path COPY` of a run folder copied elsewhere evaluates the copy's selected
    checkpoint, not the file of the same name in the original folder (which a later run there
    may have replaced)."""
    copy = Path(shutil.copytree(finished_run, tmp_path / "copy"))
    tested = run(["test", "--config", str(copy / "config.yaml"), "--ckpt_path", str(copy),
                  "--trainer.default_root_dir", str(tmp_path / "root"),
                  "--trainer.enable_progress_bar", "false"])  # fmt: skip
    assert Path(tested.trainer.ckpt_path).parent == copy / "checkpoints"
    assert Path(tested.trainer.ckpt_path).name.startswith("best-epoch")
