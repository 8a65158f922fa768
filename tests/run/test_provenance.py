"""results.json's provenance: versions, the project commit, hashes of the config and labels."""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import lightning
import pytest
import torch

import noisylabels
from noisylabels.data import DigitsDataModule
from noisylabels.methods import CE
from noisylabels.run.execution import execution
from noisylabels.run.provenance import config_sha256, git_state, labels_sha256, provenance

from conftest import CONFIGS, REPO, read_results


def test_a_run_records_where_it_came_from(run_cli, tmp_path: Path) -> None:
    run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "1",
            "--trainer.limit_train_batches", "2")  # fmt: skip
    record = read_results(tmp_path)["provenance"]
    assert record["noisylabels"] == noisylabels.__version__
    assert record["torch"] == torch.__version__ and record["lightning"] == lightning.__version__
    noise = torch.load(next(tmp_path.rglob("noise.pt")), weights_only=True)
    labels = noise["noisy_labels"].to(torch.int64).numpy().tobytes()
    assert record["noisy_labels_sha256"] == hashlib.sha256(labels).hexdigest()
    assert len(record["config_sha256"]) == 64
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True)  # fmt: skip
    if head.returncode == 0:  # a git checkout: the commit it runs from
        assert record["git_commit"] == head.stdout.strip()
        assert isinstance(record["git_dirty"], bool)


def test_config_hash_ignores_where_a_run_is_written_and_how_it_started() -> None:
    config = {"model": {"init_args": {"alpha": 0.1}}, "trainer": {"max_epochs": 3}}
    moved = {**config, "trainer": {"max_epochs": 3, "default_root_dir": "elsewhere"}}
    resumed = {**config, "ckpt_path": "runs/x/checkpoints/last.ckpt", "config": ["a.yaml"]}
    assert config_sha256(config) == config_sha256(moved) == config_sha256(resumed)
    changed = {**config, "model": {"init_args": {"alpha": 0.3}}}
    assert config_sha256(changed) != config_sha256(config)


def test_outside_git_there_is_no_commit(tmp_path: Path) -> None:
    assert git_state(tmp_path) == (None, None)


def test_the_commit_and_whether_a_tracked_file_differs_from_it(tmp_path: Path) -> None:
    """The checkout's commit; dirty exactly when a tracked file differs from it (staged or not,
    untracked files aside); no commit for a folder inside a checkout or before a first commit."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    git("init", "-q")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text("x = 1\n")
    assert git_state(tmp_path) == (None, None)  # no commit yet
    git("add", "-A")
    git("commit", "-qm", "first")
    head = git("rev-parse", "HEAD")
    assert git_state(tmp_path) == (head, False)
    assert git_state(tmp_path / "sub") == (None, None)
    (tmp_path / "new.py").write_text("")
    assert git_state(tmp_path) == (head, False)  # untracked
    (tmp_path / "sub" / "a.py").write_text("x = 2\n")
    assert git_state(tmp_path) == (head, True)
    git("add", "-A")
    assert git_state(tmp_path) == (head, True)  # staged
    git("commit", "-qm", "second")
    assert git_state(tmp_path) == (git("rev-parse", "HEAD"), False)


def test_labels_hash_follows_the_noise() -> None:
    a, b = DigitsDataModule(noise_seed=0), DigitsDataModule(noise_seed=1)
    a.setup("fit"), b.setup("fit")
    assert labels_sha256(a) != labels_sha256(b)
    assert labels_sha256(object()) is None
    from_python = provenance(None, a)  # without a CLI config: the hyperparameters' hash
    assert from_python["noisy_labels_sha256"] == labels_sha256(a)
    assert from_python["config_sha256"] == provenance(None, DigitsDataModule())["config_sha256"]


def test_a_run_records_how_its_arithmetic_was_executed(run_cli, tmp_path: Path) -> None:
    """``execution`` says what the machine-dependent (``auto``) settings resolved to: a CPU run of
    the quickstart is eager float32 in one process; a run whose compiling was given up mid-run
    says so and why (its mode is then eager)."""
    run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "1",
            "--trainer.limit_train_batches", "2")  # fmt: skip
    record = read_results(tmp_path)["execution"]
    assert record == {
        "device": "cpu",
        "device_name": platform.machine() or "unknown",
        "world_size": 1,
        "precision": "32-true",
        "compile_mode": None,
        "cuda_graphs": False,
        "compile_fallback": None,
        "channels_last": False,
    }
    model = CE(network={"backbone": "mlp"}, input_shape=(1, 8, 8),
               speed={"compile": True, "compile_backend": "aot_eager"})  # fmt: skip
    model.resolve_acceleration(torch.device("cpu"))
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device("cpu")), world_size=1, precision="32-true"
    )
    assert execution(trainer, model)["compile_mode"] == "default"
    with pytest.warns(UserWarning, match="continues eagerly"):
        model.speed.fall_back("a capture error")
    after = execution(trainer, model)
    assert after["compile_mode"] is None and after["compile_fallback"] == "a capture error"


def test_every_part_of_a_continued_run_is_recorded(run_cli, tmp_path: Path) -> None:
    """A run continued twice, its middle part compiled: each ``resumed`` entry records the part
    before it (its seconds until the checkpoint continued from, and how it executed), the last
    part is ``execution``, ``wall_time_total_s`` adds the parts, and ``report --kind runs``
    names each way it ran; each part records the code it ran (versions and commit)."""
    from noisylabels.report.render import executed

    quick = ["--config", str(CONFIGS / "quickstart.yaml"), "--trainer.limit_train_batches", "2"]
    compiled = ["--model.speed.compile", "true", "--model.speed.compile_backend", "aot_eager"]
    roots = [tmp_path / name for name in ("first", "second", "third")]
    run_cli("fit", *quick, "--trainer.max_epochs", "1", root=roots[0])
    for before, root, epochs, extra in ((roots[0], roots[1], "2", compiled),
                                         (roots[1], roots[2], "3", [])):  # fmt: skip
        last = next(before.rglob("last.ckpt"))
        run_cli("fit", *quick, *extra, "--trainer.max_epochs", epochs, "--ckpt_path", str(last),
                root=root)  # fmt: skip
    runs = [read_results(root) for root in roots]
    parts = [entry["part"] for entry in runs[2]["resumed"]]
    assert [p["execution"]["compile_mode"] for p in parts] == [None, "default"]
    assert runs[2]["execution"]["compile_mode"] is None
    assert runs[1]["resumed"][0]["part"] == parts[0]  # a part's record travels with the run
    for part, run in zip(parts, runs, strict=False):
        # until the part's last checkpoint, which its test and results came after
        assert 0 < part["seconds"] < run["wall_time_s"]
    assert runs[0]["wall_time_total_s"] == runs[0]["wall_time_s"]
    total = runs[2]["wall_time_s"] + sum(p["seconds"] for p in parts)
    assert runs[2]["wall_time_total_s"] == pytest.approx(total)
    assert executed(runs[2]) == "cpu 32-true then cpu 32-true compiled then cpu 32-true"
    for part, run in zip(parts, runs, strict=False):  # the code each part ran
        assert part["code"] == {k: run["provenance"][k] for k in part["code"]}
    assert set(parts[0]["code"]) == {"noisylabels", "torch", "lightning", "python",
                                     "git_commit", "git_dirty"}  # fmt: skip


def test_the_total_time_is_unknown_where_a_part_did_not_record_its_own() -> None:
    """A resume from a checkpoint written before parts were recorded (``part`` null): the
    total is unknown (null), not the parts that did record their time."""
    from noisylabels.run.results import total_wall_time

    assert total_wall_time(10.0, []) == 10.0
    assert total_wall_time(10.0, [{"part": {"seconds": 5.0}}, {"part": {"seconds": 2}}]) == 17.0
    assert total_wall_time(10.0, [{"part": None}, {"part": {"seconds": 2.0}}]) is None
    assert total_wall_time(10.0, [{"part": {"seconds": None}}]) is None
