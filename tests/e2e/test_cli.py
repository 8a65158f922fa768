"""The real CLI, end to end, on tiny files written in the datasets' on-disk formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import CONFIGS, config_args, pair_params, pairs, read_results

DATASET_PAIRS = pairs("mnist", "cifar10", "cifar100")


def _fast_dev_run(pair: str, run_cli, tmp_path: Path, dirs: dict[str, Path]) -> None:
    cli = run_cli(
        "fit",
        *config_args(pair),
        "--data.data_dir",
        str(dirs[pair.partition("_")[0]]),
        "--trainer.fast_dev_run",
        "2",
        "--trainer.accelerator",
        "cpu",
        "--data.batch_size",
        "16",
    )
    results = cli.results
    assert results["test_acc"] is not None and 0.0 <= results["test_acc"] <= 1.0
    # every stage ran: methods with a T̂ (or a true T) report its error
    if results["method"].startswith(("Forward", "Reweight", "VolMinNet", "TRevision", "PTD")):
        assert results["t_estimation_error"] is not None
    # a smoke test, not a result: it writes no results.json, run folder or checkpoint
    written = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert not {"results.json", "noise.pt", "config.yaml", "last.ckpt"} & set(written), written


@pytest.mark.parametrize("pair", pair_params(DATASET_PAIRS))
def test_fast_dev_run_every_pair(
    pair: str, run_cli, tmp_path: Path, mnist_dir, cifar10_dir, cifar100_dir, tiny_backbones
) -> None:
    """Every MNIST/CIFAR data group x method group pair (its preset where it has one) trains,
    validates and tests through the CLI (every stage, with a stand-in for the ResNets); the
    pairs of groups that run here already, under ``-m slow`` (conftest.pair_params)."""
    dirs = {"mnist": mnist_dir, "cifar10": cifar10_dir, "cifar100": cifar100_dir}
    _fast_dev_run(pair, run_cli, tmp_path, dirs)


@pytest.mark.slow
@pytest.mark.parametrize("pair", [p for p in DATASET_PAIRS if not p.startswith("mnist")])
def test_fast_dev_run_every_cifar_pair_with_its_resnet(
    pair: str, run_cli, tmp_path: Path, cifar10_dir, cifar100_dir
) -> None:
    _fast_dev_run(pair, run_cli, tmp_path, {"cifar10": cifar10_dir, "cifar100": cifar100_dir})


def test_quickstart_end_to_end(run_cli, tmp_path: Path) -> None:
    run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "3")
    results = read_results(tmp_path)
    for key in (
        "method",
        "alpha",
        "dataset",
        "noise",
        "seed",
        "best_epoch",
        "val_acc",
        "test_acc",
        "t_estimation_error",
        "wall_time_s",
    ):
        assert key in results, key
    assert results["method"] == "Forward-VRNL" and results["alpha"] == 0.1
    assert results["dataset"] == "digits"
    assert set(results["noise"]) >= {"type", "rate_nominal", "rate_actual", "seed"}
    assert abs(results["noise"]["rate_actual"] - 0.4) < 0.05
    assert results["t_estimation_error"] == 0.0
    assert 0 <= results["best_epoch"] < 3
    assert results["test_acc"] > 0.5  # well above chance (0.1) even with 40 % noise
    run_dir = next(tmp_path.rglob("results.json")).parent
    noise = torch.load(run_dir / "noise.pt", weights_only=False)
    assert noise["noisy_labels"].shape == noise["clean_labels"].shape
    assert (run_dir / "transition.csv").is_file()
    assert (run_dir / "config.yaml").is_file()
    json.loads((run_dir / "results.json").read_text())


def test_transition_file_is_validated_before_training(run_cli, tmp_path: Path) -> None:
    bad = tmp_path / "T.csv"
    bad.write_text("0.5,0.6\n0.5,0.5\n")  # 2x2, rows not stochastic, wrong class count
    with pytest.raises(ValueError, match="expected 10 x 10"):
        run_cli(
            "fit",
            "--config",
            str(CONFIGS / "quickstart.yaml"),
            "--model.transition",
            str(bad),
        )
    assert not list(tmp_path.rglob("*.ckpt"))


def test_transition_file_is_used(run_cli, tmp_path: Path) -> None:
    from noisylabels.noise import save_transition, symmetric_transition

    path = tmp_path / "given_T.csv"
    save_transition(symmetric_transition(10, 0.3), path)
    run_cli(
        "fit",
        "--config",
        str(CONFIGS / "quickstart.yaml"),
        "--model.transition",
        str(path),
        "--trainer.max_epochs",
        "1",
        root=tmp_path / "run",
    )
    results = read_results(tmp_path / "run")
    # the true T is symmetric 0.4; the given one 0.3: the error is measured against the truth
    assert results["t_estimation_error"] > 0.0


def test_non_stochastic_transition_file_names_the_rows(run_cli, tmp_path: Path) -> None:
    import torch

    T = torch.eye(10)
    T[3, 4] = 0.5  # row 3 sums to 1.5
    path = tmp_path / "T.pt"
    torch.save(T, path)
    with pytest.raises(ValueError, match="3"):
        run_cli(
            "fit", "--config", str(CONFIGS / "quickstart.yaml"), "--model.transition", str(path)
        )


@pytest.mark.filterwarnings("ignore:Total length of .DataLoader. across ranks is zero")
@pytest.mark.filterwarnings("ignore:.ModelCheckpoint.monitor='val/acc'.. could not find")
def test_a_run_without_validation_data_says_its_figure_is_the_last_epochs(
    run_cli, tmp_path: Path, capsys
) -> None:
    """No validation data (``--data.val_fraction 0``): no checkpoint is selected, the command
    says that its accuracy is the last epoch's, and ``report`` keeps the run out of the selected
    checkpoint's table."""
    from noisylabels.cli import run
    from noisylabels.errors import InputError

    run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"), "--data.val_fraction", "0",
            "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2")  # fmt: skip
    out = capsys.readouterr().out
    results = read_results(tmp_path)
    assert results["best_epoch"] is None and results["test_acc"] == results["test_acc_last"]
    assert f"{results['test_acc']:.4f} (Forward-VRNL) (the last epoch's: no checkpoint" in out
    with pytest.raises((SystemExit, InputError)):
        run(["report", str(tmp_path)])
    assert "no checkpoint was selected" in capsys.readouterr().err
