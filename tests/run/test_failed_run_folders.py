"""A run that fails before training leaves no folder it created: neither its run folder nor the
folders above it (``runs/<preset>/lightning_logs``) that it made for it; folders that existed
before stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CONFIGS, config_args

QUICKSTART = str(CONFIGS / "quickstart.yaml")


def fails(args: list[str], capsys: pytest.CaptureFixture) -> str:
    from noisylabels.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["fit", *args, "--trainer.enable_progress_bar", "false"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err[-3000:]
    return err


def test_a_run_refused_at_setup_removes_the_folders_it_made(tmp_path: Path, capsys) -> None:
    """The T file is checked at setup, after the run wrote its config and noise record."""
    t_file = tmp_path / "T_2x2.csv"
    t_file.write_text("0.9,0.1\n0.1,0.9\n")
    kept = tmp_path / "existing"
    kept.mkdir()
    root = kept / "runs" / "quickstart"
    err = fails(["--config", QUICKSTART, "--model.transition", str(t_file),
                 "--trainer.default_root_dir", str(root)], capsys)  # fmt: skip
    assert "expected 10 x 10" in err
    assert kept.is_dir() and list(kept.iterdir()) == []  # what existed stays, nothing more


def test_a_run_without_its_data_leaves_no_folder(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    err = fails([*config_args("mnist_ce"), "--data.data_dir",
                 str(tmp_path / "nonexistent")], capsys)  # fmt: skip
    assert "MNIST not found" in err
    assert list(tmp_path.iterdir()) == []  # no runs/mnist_ce


def test_only_empty_folders_the_run_made_are_removed(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from noisylabels.run.fit import missing_folders, remove_empty

    logger = SimpleNamespace(root_dir=str(tmp_path / "a" / "b" / "lightning_logs"))
    trainer = SimpleNamespace(default_root_dir=str(tmp_path / "a" / "b"), loggers=[logger])
    made = missing_folders(trainer)  # type: ignore[arg-type]
    assert made == [tmp_path / "a" / "b" / "lightning_logs", tmp_path / "a" / "b", tmp_path / "a"]
    (tmp_path / "a" / "b" / "lightning_logs").mkdir(parents=True)
    (tmp_path / "a" / "other.txt").write_text("another file")
    remove_empty(made)
    assert not (tmp_path / "a" / "b").exists() and (tmp_path / "a" / "other.txt").is_file()
