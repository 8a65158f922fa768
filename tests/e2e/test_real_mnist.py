"""Real MNIST (needs the data: set NOISYLABELS_DATA_DIR to the folder holding MNIST/raw)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CONFIGS, config_args, read_results, real_mnist_dir

DATA = real_mnist_dir()

pytestmark = [
    pytest.mark.realdata,
    pytest.mark.skipif(DATA is None, reason="set NOISYLABELS_DATA_DIR to a folder with MNIST/raw"),
]


def test_one_epoch_forward_vrnl_sym20_beats_95(run_cli, tmp_path: Path) -> None:
    run_cli(
        "fit",
        *config_args("mnist_forward_vrnl"),
        "--config",
        str(CONFIGS / "protocol" / "true_t.yaml"),
        "--data.data_dir",
        str(DATA),
        "--data.noise_type",
        "symmetric",
        "--data.noise_rate",
        "0.2",
        "--trainer.max_epochs",
        "1",
        "--trainer.accelerator",
        "cpu",
    )
    results = read_results(tmp_path)
    assert results["dataset"] == "mnist" and results["method"] == "Forward-VRNL"
    assert abs(results["noise"]["rate_actual"] - 0.2) < 0.01
    assert results["test_acc"] > 0.95, results


@pytest.mark.slow
def test_compiled_run_reaches_the_eager_runs_accuracy(run_cli, tmp_path: Path) -> None:
    """Five epochs of Forward-VRNL on MNIST, compiled with inductor or eager, same seed: the
    test accuracies agree within 0.3 points."""
    accuracy = {}
    for compile in ("false", "true"):
        run_cli(
            *("fit", *config_args("mnist_forward_vrnl")),
            *("--config", str(CONFIGS / "protocol" / "true_t.yaml")),
            *("--data.data_dir", str(DATA), "--trainer.max_epochs", "5"),
            *("--trainer.accelerator", "cpu", "--model.speed.compile", compile),
            root=tmp_path / compile,
        )
        results = read_results(tmp_path / compile)
        accuracy[compile] = results["test_acc"]
        accuracy[f"{compile}, last epoch"] = results["test_acc_last"]
    assert abs(accuracy["true"] - accuracy["false"]) <= 0.003, accuracy
    assert abs(accuracy["true, last epoch"] - accuracy["false, last epoch"]) <= 0.003, accuracy
