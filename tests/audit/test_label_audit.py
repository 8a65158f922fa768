"""``noisylabels audit``: planted label flips rank at the top, the files it writes, its options
and its one-paragraph errors; the scores and their quality measures."""

from __future__ import annotations

import csv
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from noisylabels.audit import (
    CSV_FILE,
    GRID_FILE,
    Scored,
    audit,
    auroc,
    flag_top,
    quality,
    ranking,
    stratified_folds,
)
from noisylabels.errors import InputError

from conftest import CONFIGS, SORTED, make_image_folder

QUICKSTART = str(CONFIGS / "quickstart.yaml")
# (file moved, from its class folder to another): labels a person got wrong
PLANTED = [("cat", 3, "dog"), ("cat", 8, "emu"), ("dog", 5, "emu"), ("dog", 12, "cat"),
           ("emu", 7, "cat"), ("emu", 10, "dog")]  # fmt: skip


def _fit(root: Path, *args: str) -> Path:
    from noisylabels.cli import run

    cli = run(["fit", *args, "--trainer.default_root_dir", str(root),
               "--trainer.enable_progress_bar", "false", "--test_after_fit", "false"])  # fmt: skip
    return Path(cli.trainer.log_dir)


def planted_folder(root: Path) -> tuple[Path, list[str]]:
    """An image folder (3 classes, 30 training images each) in which 6 images were put in the
    wrong class folder; returns it and the planted files' paths."""
    make_image_folder(root, {"train": 30, "val": 4, "test": 4})
    planted = []
    for name, i, wrong in PLANTED:
        (source,) = (root / "train" / name).glob(f"{i:03d}.*")
        target = root / "train" / wrong / f"planted_{name}{source.name}"
        source.rename(target)
        planted.append(str(target))
    return root, planted


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A CE run (alpha 0) on the planted folder, its labels as the folders say."""
    root, planted = planted_folder(tmp_path_factory.mktemp("planted"))
    run = _fit(
        tmp_path_factory.mktemp("folder_run"), "--config", QUICKSTART,
        "--model", "CE", "--model.schedule.warmup_epochs", "0", "--model.alpha", "0",
        "--data", "noisylabels.data.ImageFolderDataModule", "--data.data_dir", str(root),
        "--data.image_size", "16", "--data.resize_size", "16", "--data.num_workers", "0",
        "--data.noise_type", "none", "--trainer.max_epochs", "15",
    )  # fmt: skip
    return run, planted


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart (Forward-VRNL, alpha 0.1) on the digits with 20 % symmetric noise."""
    return _fit(
        tmp_path_factory.mktemp("digits_run"), "--config", QUICKSTART,
        "--data.noise_rate", "0.2", "--trainer.max_epochs", "6",
    )  # fmt: skip


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------- the command
def test_planted_flips_rank_at_the_top(folder_run, capsys) -> None:
    from noisylabels.cli import main

    run, planted = folder_run
    main(["audit", str(run), "--top", "6"])
    out = capsys.readouterr().out
    rows = _csv(run / CSV_FILE)
    assert len(rows) == 90  # every training image, ranked
    assert list(rows[0]) == ["rank", "index", "file", "given_label", "predicted_label",
                             "given_class", "predicted_class", "score", "flagged"]  # fmt: skip
    top = [row["file"] for row in rows[: len(planted)]]
    assert len(set(top) & set(planted)) >= 5, top  # most planted flips rank at the top
    by_file = {row["file"]: row for row in rows}
    for (_, _, wrong), path in zip(PLANTED, planted, strict=True):
        assert by_file[path]["given_class"] == wrong  # the folder it was put in
    assert [int(row["rank"]) for row in rows] == list(range(1, 91))
    scores = [float(row["score"]) for row in rows]
    assert scores == sorted(scores, reverse=True)
    png = run / GRID_FILE
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {run / CSV_FILE}" in out and f"wrote {png}" in out
    assert "planted_" in out.split("wrote")[0]  # the printed top names the files
    assert "known flipped" not in out  # noise_type none: no true labels to measure against


def test_classes_restrict_the_audit(folder_run) -> None:
    run, planted = folder_run
    issues = audit(run, classes="cat,2", grid=False)
    assert issues.classes == ["cat", "emu"]
    assert {row["given_class"] for row in issues.rows} == {"cat", "emu"}
    assert len(issues.rows) == 60
    only = audit(run, classes=["dog"], top=3)
    assert {row["given_class"] for row in only.rows} == {"dog"}
    assert only.grid_path is not None and only.grid_path.is_file()


def test_synthetic_noise_is_measured_against_the_true_labels(digits_run) -> None:
    noise = torch.load(digits_run / "noise.pt", weights_only=True)
    train = noise["train_indices"]
    flipped = int((noise["noisy_labels"] != noise["clean_labels"])[train].sum())
    for score in ("margin", "loss", "weight"):
        issues = audit(digits_run, score=score, grid=False)
        assert len(issues.rows) == len(train)
        assert issues.quality["flipped"] == flipped
        assert issues.quality["auroc"] > 0.9, (score, issues.quality)
        top = issues.rows[:flipped]
        hits = sum(row["true_label"] != row["given_label"] for row in top)
        assert hits / flipped > 0.8, (score, hits, flipped)
    rows = _csv(digits_run / CSV_FILE)
    assert "true_label" in rows[0] and "file" not in rows[0]
    assert sum(int(r["flagged"]) for r in rows) == issues.flagged


def test_a_record_of_fewer_epochs_than_the_run_is_noted(digits_run, tmp_path: Path) -> None:
    """A run resumed from a checkpoint made before runs kept the record has a shorter one."""
    run = tmp_path / "resumed"
    shutil.copytree(digits_run, run)
    record = torch.load(run / "sample_dynamics.pt", weights_only=True)
    record["epochs"] = 2
    torch.save(record, run / "sample_dynamics.pt")
    said: list[str] = []
    audit(run, grid=False, log=said.append)
    assert said == [
        "note: the per-sample record covers the last 2 of the run's 6 epochs (it was resumed "
        "from a checkpoint made before runs kept the record)"
    ]
    said.clear()
    audit(digits_run, grid=False, log=said.append)
    assert said == []


def test_posterior_cross_validates_once(digits_run, monkeypatch: pytest.MonkeyPatch) -> None:
    from noisylabels.audit import issues as module

    first = audit(digits_run, score="posterior", folds=2, grid=False)
    noise = torch.load(digits_run / "noise.pt", weights_only=True)
    assert sorted(row["index"] for row in first.rows) == noise["train_indices"].tolist()
    assert first.quality["auroc"] > 0.85
    assert (digits_run / "out_of_sample_k2.pt").is_file()

    def no_training(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the kept posteriors were not reused")

    monkeypatch.setattr(module, "cross_validate", no_training)
    again = audit(digits_run, score="posterior", folds=2, grid=False)
    assert again.rows == first.rows


def test_another_training_split_is_refused_before_any_fold_trains(
    digits_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config that now gives another training split than the run's (e.g. other data under
    its data_dir) is refused before the K models are built or trained."""
    from noisylabels.audit import crossval
    from noisylabels.audit.run_folder import read_run

    folder = read_run(digits_run)
    folder.noise["train_indices"] = folder.noise["train_indices"][1:]  # the run's split differs

    def no_folds(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("folds were built before the training split was checked")

    monkeypatch.setattr(crossval, "stratified_folds", no_folds)
    said: list[str] = []
    with pytest.raises(InputError, match="now gives another training split than the run's"):
        crossval.cross_validate(folder, 2, folder.seed, log=said.append)
    assert said == []
    with pytest.raises(InputError, match="--folds must be at least 2"):
        crossval.cross_validate(folder, 1, folder.seed)


def test_a_label_file_run(tmp_path: Path) -> None:
    """Labels from a file: the dataset's own labels are the true ones."""
    from noisylabels.data import DigitsDataModule

    dm = DigitsDataModule()
    dm.setup("fit")
    labels = dm.clean_labels.clone()
    flips = torch.arange(0, len(labels), 9)
    labels[flips] = (labels[flips] + 1) % 10
    path = tmp_path / "labels.csv"
    path.write_text("\n".join(str(int(v)) for v in labels) + "\n")
    run = _fit(
        tmp_path / "runs", "--config", QUICKSTART, "--model.transition", "estimate",
        "--model.schedule.warmup_epochs", "1", "--data.noise_type", "file", "--data.noise_file",
        str(path), "--trainer.max_epochs", "3",
    )  # fmt: skip
    issues = audit(run, grid=False)
    by_index = {row["index"]: row for row in issues.rows}
    flipped = [i for i in flips.tolist() if i in by_index]
    assert flipped and all(by_index[i]["true_label"] != by_index[i]["given_label"] for i in flipped)
    assert issues.quality["flipped"] == len(flipped)


def test_config_trains_first(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """--config trains the run, then audits it; without LightningCLI's warning against being
    given arguments beside a command line (sys.argv here as the shell sets it): the command
    line is the command's own."""
    from noisylabels.cli import main

    argv = ["audit", "--config", QUICKSTART, "--top", "3", "--", "--trainer.max_epochs", "2",
            "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar",
            "false"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["noisylabels", *argv])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", message=".*args parameter is intended")
        main(argv)
    assert not [w for w in caught if "args parameter" in str(w.message)]
    (written,) = tmp_path.rglob(CSV_FILE)
    assert (written.parent / "results.json").is_file() and (written.parent / GRID_FILE).is_file()
    captured = capsys.readouterr()
    assert "AUROC" in captured.out
    assert "args parameter" not in captured.err


def test_a_folder_of_several_runs_audits_the_newest_and_says_so(
    digits_run: Path, tmp_path: Path, capsys
) -> None:
    """The run whose results.json was written last, whatever the folders' names (version_1
    sorts after version_0); an audit's files written into an older run since do not make it
    the newest."""
    from noisylabels.cli import main

    root = tmp_path / "runs"
    newer = shutil.copytree(digits_run, root / "lightning_logs" / "version_0")
    older = shutil.copytree(digits_run, root / "lightning_logs" / "version_1")
    now = time.time()
    os.utime(older / "results.json", (now - 60, now - 60))
    os.utime(newer / "results.json", (now, now))
    (older / CSV_FILE).write_text("an earlier audit\n")
    main(["audit", str(root), "--top", "2"])
    captured = capsys.readouterr()
    assert (
        f"noisylabels audit: {root} holds 2 finished runs; using the newest, {newer}"
        in captured.err
    ), captured.err
    assert captured.out.startswith(f"{newer}: ")
    assert (newer / CSV_FILE).is_file() and (newer / GRID_FILE).is_file()
    assert (older / CSV_FILE).read_text() == "an earlier audit\n"


# ---------------------------------------------------------------------- user errors
def _cases(folder_run, digits_run, tmp_path: Path) -> list[tuple[list[str], str]]:
    run, _ = folder_run
    no_record = tmp_path / "no_record"
    shutil.copytree(digits_run, no_record)
    (no_record / "sample_dynamics.pt").unlink()
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "unfinished.txt").write_text("stopped")
    empty = tmp_path / "empty"
    empty.mkdir()
    return [
        ([str(tmp_path / "nope")], "no run folder"),
        ([str(empty)], "holds no results.json"),
        ([str(unfinished)], "did not finish"),
        ([str(no_record)], "no per-sample record (sample_dynamics.pt)"),
        ([str(run), "--top", "0"], "--top must be a whole number >= 1, got '0'"),
        ([str(run), "--top", "many"], "--top"),
        ([str(run), "--folds", "1", "--score", "posterior"], "--folds"),
        ([str(run), "--classes", "cow"], "--classes: unknown class 'cow'"),
        ([str(run), "--classes", "cow", "--score", "posterior"], "--classes"),  # before training
        ([str(run), "--score", "weight"], "alpha 0"),
        ([str(run), "--score", "best"], "--score"),
        ([str(run), "--data.data_dir", str(tmp_path / "moved")], "no image folder dataset"),
        ([], "needs RUN_DIR"),
        ([str(run), "--config", QUICKSTART], "either RUN_DIR"),
        ([str(run), "--", "--trainer.max_epochs", "1"], "go with --config"),
    ]


def test_bad_input_ends_with_one_paragraph(folder_run, digits_run, tmp_path, capsys) -> None:
    from noisylabels.cli import main

    for args, named in _cases(folder_run, digits_run, tmp_path):
        with pytest.raises(SystemExit) as exit_info:
            main(["audit", *args])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2, (args, err)
        assert "Traceback" not in err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("noisylabels: error:"), (args, err)
        assert named in lines[0], (args, lines[0])
    assert not list(folder_run[0].glob("out_of_sample_k*.pt"))  # no case trained a model


# ---------------------------------------------------------------------- the scores
def test_auroc_equals_the_pairwise_count_with_ties() -> None:
    gen = torch.Generator().manual_seed(0)
    score = torch.randint(0, 6, (200,), generator=gen).float()  # many ties
    positive = torch.rand(200, generator=gen) < 0.3
    pos, neg = score[positive], score[~positive]
    pairs = (pos[:, None] > neg[None]).double() + 0.5 * (pos[:, None] == neg[None]).double()
    assert auroc(score, positive) == pytest.approx(float(pairs.mean()))
    assert auroc(score, torch.zeros(200, dtype=torch.bool)) is None


def test_ranking_flags_and_quality() -> None:
    scored = Scored(
        index=torch.tensor([7, 3, 5, 1]),
        given=torch.tensor([0, 1, 1, 0]),
        predicted=torch.tensor([1, 1, 0, 0]),  # two disagree: two are flagged
        score=torch.tensor([0.5, 0.9, 0.5, 0.1]),
    )
    # descending score; the tie of 0.5 broken by the smaller dataset index (5 before 7)
    assert ranking(scored.score, scored.index).tolist() == [1, 2, 0, 3]
    assert flag_top(scored).tolist() == [False, True, True, False]
    measured = quality(scored.score, flag_top(scored), torch.tensor([True, True, False, False]))
    assert measured["precision"] == 0.5 and measured["recall"] == 0.5
    assert measured["auroc"] == pytest.approx(0.875)  # pairs: 0.9>0.5, 0.9>0.1, 0.5=0.5, 0.5>0.1


def test_stratified_folds() -> None:
    labels = torch.tensor([0] * 10 + [1] * 6 + [2] * 3)
    fold = stratified_folds(labels, 3, seed=1)
    assert torch.equal(fold, stratified_folds(labels, 3, seed=1))
    for label in range(3):
        counts = torch.bincount(fold[labels == label], minlength=3)
        assert int(counts.max() - counts.min()) <= 1
    assert sorted(torch.bincount(fold).tolist()) == [6, 6, 7]


def test_classes_are_names_or_numbers() -> None:
    from noisylabels.audit.issues import check_top, parse_classes

    assert parse_classes("dog, 0", SORTED) == [0, 1]
    assert parse_classes(None, SORTED) is None
    with pytest.raises(InputError, match="the classes are cat, dog, emu"):
        parse_classes("3", SORTED)
    assert check_top("5") == 5
    with pytest.raises(InputError, match="--top"):
        check_top(-1)


def test_an_unhealthy_run_is_audited_only_when_asked_and_then_with_a_warning(
    digits_run, tmp_path: Path, capsys
) -> None:
    """A run that did not learn ranks its labels by a model at chance: refused, unless
    --include-unhealthy, which audits it and says so; a run that records no health is judged by
    the rule a run applies to itself."""
    import json

    from noisylabels.audit.cli import main

    run = Path(shutil.copytree(digits_run, tmp_path / "run"))
    for earlier in run.glob("label_issues*"):  # of the other tests' audits
        earlier.unlink()
    results = json.loads((run / "results.json").read_text())
    reason = "collapsed: noisy-validation accuracy 0.098 at chance (0.112) for 5 epochs"
    (run / "results.json").write_text(json.dumps({**results, "health": reason}))
    with pytest.raises(InputError, match=r"is a run that did not learn \(collapsed: noisy-val"):
        main([str(run)])
    assert not (run / "label_issues.csv").exists()
    assert main([str(run), "--include-unhealthy"]) == 0
    out = capsys.readouterr().out
    assert f"warning: auditing {run}, a run that did not learn ({reason})" in out
    assert (run / "label_issues.csv").is_file()
    unrecorded = {k: v for k, v in results.items() if k != "health"}
    (run / "results.json").write_text(json.dumps({**unrecorded, "val_acc": 0.05}))
    with pytest.raises(InputError, match="judged|collapsed: validation accuracy"):
        main([str(run)])
