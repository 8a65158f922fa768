"""``noisylabels plot``: paper-style figures from the event files of runs made here."""

from __future__ import annotations

from pathlib import Path

import pytest

from noisylabels.cli import run
from noisylabels.report.plot import load_run

from conftest import CONFIGS


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two short Forward runs on digits (alpha 0 and 0.1) with the SubsetStatistics callback."""
    roots = []
    for alpha in ("0", "0.1"):
        root = tmp_path_factory.mktemp(f"alpha{alpha}")
        run(
            [
                "fit",
                "--config",
                str(CONFIGS / "quickstart.yaml"),
                "--model.alpha",
                alpha,
                "--trainer.max_epochs",
                "2",
                "--trainer.default_root_dir",
                str(root),
                "--trainer.enable_progress_bar",
                "false",
                "--test_after_fit",
                "false",
                '--trainer.callbacks=[{"class_path": "noisylabels.callbacks.SubsetStatistics"}]',
            ]
        )
        roots.append(root)
    return roots


def test_plot_loss_png(runs: list[Path], tmp_path: Path) -> None:
    out = run(["plot", *map(str, runs), "--out", str(tmp_path / "fig.png"), "--title", "digits"])
    assert out == tmp_path / "fig.png"
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_plot_posteriors_pdf_with_labels(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "sub" / "fig.pdf"
    run(["plot", *map(str, runs), "--kind", "posteriors", "--out", str(out), "--labels", "a", "b"])
    assert out.read_bytes().startswith(b"%PDF") and out.stat().st_size > 5_000


def test_plot_reads_the_logged_epochs(runs: list[Path]) -> None:
    loaded = load_run(runs[1])
    assert loaded.label == "Forward, α = 0.1"
    assert loaded.path.name == "version_0"
    for quantity in ("loss_mean", "ce_clean_mean", "ce_noisy_std"):
        for subset in ("correct", "mislabeled"):
            epochs, values = loaded.get(quantity, subset)
            assert epochs == [1, 2] and all(v >= 0 for v in values)
    # the training loss of mislabeled samples stays above that of correctly labeled ones
    assert loaded.get("loss_mean", "mislabeled")[1][-1] > loaded.get("loss_mean", "correct")[1][-1]


def test_plot_errors(runs: list[Path], tmp_path: Path, capsys) -> None:
    cases = [
        ([str(tmp_path), "--out", str(tmp_path / "a.png")], "none with per-subset statistics"),
        ([str(tmp_path / "nope"), "--out", str(tmp_path / "a.png")], "does not exist"),
        ([str(runs[0]), "--out", str(tmp_path / "a.jpg")], "--out must end with"),
        ([str(runs[0]), "--out", str(tmp_path / "a.png"), "--labels", "x", "y"], "2 labels"),
        ([str(runs[0]), "--out", str(tmp_path / "a.png"), "--kind", "bars"], "invalid choice"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as exc:
            run(["plot", *args])
        assert exc.value.code == 2
        assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("a.*"))


def test_plot_help(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        run(["plot", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in ("--out", "--kind", "--labels", "--title", "RUN_DIR"):
        assert option in text
