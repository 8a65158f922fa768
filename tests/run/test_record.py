"""A run folder is a record: the run record is its only writer, from the command line and from
Python alike, and a run never writes into a folder that holds another run."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import lightning as L
import pytest

from noisylabels.run.rules import RUN_FILES

from conftest import CONFIGS

QUICK = [
    "fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "2",
    "--trainer.limit_train_batches", "3", "--trainer.enable_progress_bar", "false",
]  # fmt: skip
RECORD = str(Path("noisylabels") / "run" / "record.py")


class Writes:
    """Every file that becomes visible under a folder by a rename (how every atomic write of the
    project ends), with whether the run record's code was on the stack when it did."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.root = root.resolve()
        self.by_record: dict[Path, bool] = {}
        real = os.replace

        def replace(src, dst, *args, **kwargs):
            target = Path(dst).resolve()
            if self.root in target.parents:
                stack = "".join(traceback.format_stack())
                self.by_record[target] = self.by_record.get(target, True) and RECORD in stack
            return real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", replace)

    def check(self) -> list[Path]:
        """The run files under the folder; asserts each was written, every time, by the run
        record and nothing else."""
        files = [
            p.resolve()
            for p in self.root.rglob("*")
            if p.is_file() and (p.name in RUN_FILES or p.suffix == ".ckpt")
        ]
        assert files
        for path in files:
            assert path in self.by_record, f"{path.name} was written without the run record"
            assert self.by_record[path], f"{path.name} was written by another writer"
        return files


def quickstart_in_python(root: Path) -> None:
    from noisylabels.data import DigitsDataModule
    from noisylabels.methods import Forward
    from noisylabels.run import fit_and_test

    L.seed_everything(0, workers=True)
    data = DigitsDataModule(noise_rate=0.4)
    model = Forward(
        num_classes=10,
        input_shape=data.input_shape,
        network={"backbone": "mlp"},
        transition=True,
        alpha=0.1,
    )
    trainer = L.Trainer(
        max_epochs=2, limit_train_batches=3, default_root_dir=root, enable_progress_bar=False
    )
    fit_and_test(model, data, trainer)


@pytest.mark.parametrize("door", ["command line", "python"])
def test_the_run_record_is_the_only_writer_of_run_files(
    door: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run file (config.yaml, noise.pt, the T files, results.json, sample_dynamics.pt,
    the checkpoints) is written by the run record, atomically, whichever door started the run;
    and a resumed run's files too."""
    from noisylabels.cli import run

    writes = Writes(monkeypatch, tmp_path)
    if door == "python":
        quickstart_in_python(tmp_path)
    else:
        run([*QUICK, "--trainer.default_root_dir", str(tmp_path)])
    names = {p.name for p in writes.check()}
    assert {"config.yaml", "noise.pt", "results.json", "last.ckpt"} <= names
    assert any(n.startswith("best-epoch") for n in names)
    if door == "command line":
        next(tmp_path.rglob("results.json")).unlink()  # an unfinished run, continued
        run([*QUICK, "--trainer.default_root_dir", str(tmp_path), "--ckpt_path", "last"])
        writes.check()


def snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "logger",
    [
        ["--trainer.logger", "false"],  # the run folder is the root itself
        [
            "--trainer.logger",
            "TensorBoardLogger",
            "--trainer.logger.save_dir",
            "{root}",
            "--trainer.logger.version",
            "fixed",
        ],  # a pinned version
        [
            "--trainer.logger",
            "CSVLogger",
            "--trainer.logger.save_dir",
            "{root}",
            "--trainer.logger.name",
            "",
            "--trainer.logger.version",
            "",
        ],  # the root itself
    ],  # fmt: skip
    ids=["no-logger", "pinned-version", "csv-logger-in-the-root"],
)
def test_no_two_runs_in_one_folder(logger: list[str], tmp_path: Path) -> None:
    """However a second run is pointed at a folder that holds a run (no logger and the same
    root, a logger's pinned version, a logger writing into the root), it is refused before
    anything is written: the first run's files stay as they were."""
    from noisylabels.cli import run
    from noisylabels.errors import InputError

    args = [*QUICK, "--trainer.default_root_dir", str(tmp_path)]
    args += [a.replace("{root}", str(tmp_path)) for a in logger]
    run(args)
    before = snapshot(tmp_path)
    with pytest.raises(InputError, match="already holds a run"):
        run(args)
    assert snapshot(tmp_path) == before


def test_a_logger_in_the_config_files_folder_never_overwrites_them(tmp_path: Path) -> None:
    """A run whose folder is where the user keeps a config.yaml of their own is refused, and
    the user's file is left as it was."""
    from noisylabels.cli import run
    from noisylabels.errors import InputError

    mine = tmp_path / "config.yaml"
    text = "# my settings\ntrainer:\n  log_every_n_steps: 1\n"
    mine.write_text(text)
    with pytest.raises(InputError, match=r"already holds a run \(config.yaml\)"):
        run([*QUICK, "--config", str(mine), "--trainer.logger", "false",
             "--trainer.default_root_dir", str(tmp_path)])  # fmt: skip
    assert mine.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


@pytest.mark.parametrize(
    ("root", "message"),
    [
        ("a_file/runs", "is a file, not a folder"),
        ("x" * 300, "bytes long, more than the"),
    ],
    ids=["a-file-in-the-path", "a-name-too-long"],
)
def test_a_folder_that_cannot_be_made_is_refused_up_front(
    root: str, message: str, tmp_path: Path
) -> None:
    from noisylabels.cli import run
    from noisylabels.errors import InputError

    (tmp_path / "a_file").write_text("a file\n")
    with pytest.raises(InputError, match=message):
        run([*QUICK, "--trainer.default_root_dir", str(tmp_path / root)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
