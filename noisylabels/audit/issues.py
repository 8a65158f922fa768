"""Which training labels are wrong: rank a finished run's labels, write ``label_issues.csv`` and
the grid of the most suspect ones (``label_issues.png``) in its folder.

From Python::

    from noisylabels.audit import audit
    issues = audit("runs/quickstart/lightning_logs/version_0", top=16)
    issues.rows[0]   # the most suspect label: rank, index, given/predicted label, score, ...

:func:`fit_and_audit` trains a run first (the arguments of ``noisylabels fit``). The scores are
:mod:`noisylabels.audit.scores`'; ``posterior`` trains ``folds`` models
(:mod:`noisylabels.audit.crossval`) once and keeps their posteriors in the run folder
(``out_of_sample_k{folds}.pt``) for the next audit.
"""

from __future__ import annotations

import csv
import errno
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from noisylabels.audit.choices import (
    CSV_FILE,
    DEFAULT_FOLDS,
    DEFAULT_SCORE,
    DEFAULT_TOP,
    DYNAMICS_SCORES,
    GRID_FILE,
    SCORES,
    issue_files,
)
from noisylabels.audit.crossval import OutOfSample, check_folds, cross_validate
from noisylabels.audit.gallery import draw_grid
from noisylabels.audit.run_folder import RunFolder, data_class, data_module, load_pt, read_run
from noisylabels.audit.scores import (
    Scored,
    dynamics_scores,
    flag_top,
    posterior_scores,
    quality,
    ranking,
)
from noisylabels.data import ImageFileDataModule, NoisyDataModule
from noisylabels.data.files import load_image
from noisylabels.disk.lock import hold
from noisylabels.disk.storage import STORAGE_ERRNOS, free_space, replacing, save_torch
from noisylabels.errors import InputError, StorageError
from noisylabels.run.artifacts import run_dir
from noisylabels.run.cli import lightning_command
from noisylabels.verdicts import OK, results_health


@dataclass
class LabelIssues:
    """An audit's outcome: the ranked ``rows`` (dicts with the CSV's columns), the files
    written, and, where the true labels are known, the ``quality`` of the ranking against the
    flipped labels (``precision``/``recall`` of the flagged set, ``auroc`` of the score)."""

    run: Path
    score: str
    rows: list[dict[str, Any]]
    csv_path: Path
    grid_path: Path | None
    quality: dict[str, Any] | None
    flagged: int
    classes: list[str] | None = None


def check_top(top: Any) -> int:
    """``--top``: a positive whole number."""
    try:
        value = int(str(top))
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(
            f"--top must be a positive whole number (how many suspect labels to show), got {top!r}"
        )
    return value


def parse_classes(classes: str | Sequence[str] | None, names: Sequence[str]) -> list[int] | None:
    """``--classes``: class names or numbers (comma-separated, or a list) → class numbers."""
    if classes is None:
        return None
    items = classes.split(",") if isinstance(classes, str) else list(classes)
    items = [str(item).strip() for item in items if str(item).strip()]
    if not items:
        raise InputError("--classes needs at least one class name or number")
    chosen: list[int] = []
    for item in items:
        if item in names:
            chosen.append(list(names).index(item))
        elif item.isdigit() and int(item) < len(names):
            chosen.append(int(item))
        else:
            raise InputError(
                f"--classes: unknown class {item!r}; the classes are {', '.join(names)} (names "
                f"or numbers 0..{len(names) - 1})"
            )
    return sorted(set(chosen))


def audit(
    run: str | Path,
    *,
    score: str = DEFAULT_SCORE,
    top: int = DEFAULT_TOP,
    classes: str | Sequence[str] | None = None,
    folds: int = DEFAULT_FOLDS,
    data_dir: str | None = None,
    grid: bool = True,
    unhealthy: bool = False,
    log: Callable[[str], None] | None = None,
) -> LabelIssues:
    """Rank the training labels of the finished run ``run`` by ``score`` (see
    :mod:`noisylabels.audit.scores`), most suspect first, and write ``label_issues.csv`` (every
    audited label) and, with ``grid``, ``label_issues.png`` (the ``top`` most suspect) in the run
    folder.

    Args:
        classes: audit only the labels given these classes (names or numbers); the files are
            then ``label_issues_<classes>.csv``/``.png`` (e.g. ``label_issues_cat+emu.csv``),
            and the ranking of every class, ``label_issues.csv``, is left as it is.
        folds: K of the cross-validation behind ``score="posterior"``: from 2 to the number
            of training labels of the smallest class (every fold holds each class).
        unhealthy: audit a run whose health is not ``"ok"`` (it stopped learning: its ranking
            is of a model at chance), with a warning; refused otherwise.
        data_dir: where the run's dataset is now (default: its config's ``data_dir``); the
            images of the grid and the files of an image folder are read from there.
    """
    top = check_top(top)
    if score not in SCORES:
        raise InputError(f"--score must be one of {', '.join(SCORES)}, got {score!r}")
    if score == "posterior":
        check_folds(folds)  # before anything is read
    folder = read_run(run)
    check_health(folder, unhealthy, log)
    if score == "posterior":
        check_folds_fit(folder, folds)
    check_writable(folder.path)  # before any image is read or any fold trained
    dm: NoisyDataModule | None = None
    if grid or issubclass(data_class(folder), ImageFileDataModule):
        dm = data_module(folder, data_dir)  # the images, or the files of the rows
    names = _class_names(dm, folder.num_classes)
    chosen = parse_classes(classes, names)  # before any cross-validation is trained
    scored = _scored(folder, score, folds, data_dir, log)
    flagged = flag_top(scored)
    keep = torch.ones(len(scored.index), dtype=torch.bool)
    if chosen is not None:
        keep = torch.isin(scored.given, torch.tensor(chosen))
    order = ranking(scored.score, scored.index)
    order = order[keep[order]]
    true = folder.clean_labels[scored.index] if folder.true_labels_known else None
    rows = _rows(scored, flagged, order, true, names if _named(dm) else None, _files(dm))
    result_quality = None
    if true is not None:
        known = keep & (true >= 0)
        result_quality = quality(scored.score[known], flagged[known], (true != scored.given)[known])
    kept = None if chosen is None else [names[k] for k in chosen]
    csv_name, grid_name = issue_files(kept)
    csv_path = folder.path / csv_name
    with writing_into(folder.path):
        write_csv(rows, csv_path)
    grid_path = None
    if grid and dm is not None and rows:
        shown = rows[:top]
        images = [_image(dm, int(row["index"])) for row in shown]
        captions = [_caption(row) for row in shown]
        title = f"{folder.path}: the {len(shown)} most suspect labels ({score})"
        with writing_into(folder.path):
            grid_path = draw_grid(images, captions, folder.path / grid_name, title)
    return LabelIssues(
        run=folder.path,
        score=score,
        rows=rows,
        csv_path=csv_path,
        grid_path=grid_path,
        quality=result_quality,
        flagged=int(flagged[keep].sum()),
        classes=kept,
    )


def fit_and_audit(fit_args: Sequence[str], **options: Any) -> LabelIssues:
    """Train a run with ``noisylabels fit`` and ``fit_args`` (e.g. ``["--config",
    "configs/quickstart.yaml"]``), then :func:`audit` it with ``options``."""
    cli = lightning_command(["fit", *fit_args])
    results = getattr(cli, "results", None)
    if results is None or cli.trainer.fast_dev_run:
        raise InputError(
            "the fit wrote no finished run to audit (a fast_dev_run, or not process 0 of a "
            "multi-process run); audit the run folder once the fit has finished"
        )
    return audit(run_dir(cli.trainer), **options)


# ---------------------------------------------------------------------- the parts
def _cannot_write(folder: Path, code: int) -> StorageError:
    """The error of an audit that cannot write into the run folder ``folder`` (``code``: one
    of :data:`~noisylabels.disk.storage.STORAGE_ERRNOS`)."""
    full = code in (errno.ENOSPC, errno.EDQUOT)
    space = f"; it has {free_space(folder)}" if full else ""
    found = StorageError(
        f"cannot write the audit ({CSV_FILE}, {GRID_FILE}) into the run folder {folder}: "
        f"{STORAGE_ERRNOS[code]} ({os.strerror(code)}){space}. "
        f"{'Free space there' if full else 'Make the folder writable'}, or copy the run folder "
        "to a writable place and audit the copy"
    )
    found.errno = code
    return found


def check_writable(folder: Path) -> None:
    """Refuse a run folder the audit cannot write its files into (a read-only file system, or
    a folder this user may not write), naming it, before any work is done."""
    if os.access(folder, os.W_OK):
        return
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    raise _cannot_write(folder, errno.EROFS if read_only else errno.EACCES)


def check_health(folder: RunFolder, unhealthy: bool, log: Callable[[str], None] | None) -> None:
    """Refuse a run whose health is not ``"ok"`` (as ``results.json`` records it, or as the
    rule judges a run that recorded none) unless ``unhealthy``; then say so."""
    health = folder.results.get("health")
    verdict = results_health(folder.results) if health is None else str(health)
    if verdict == OK:
        return
    if not unhealthy:
        raise InputError(
            f"{folder.path} is a run that did not learn ({verdict}): the scores of its labels "
            "are those of a model at chance, and would rank them as noise. Audit a healthy run, "
            "or pass --include-unhealthy to audit it anyway"
        )
    if log is not None:
        log(f"warning: auditing {folder.path}, a run that did not learn ({verdict})")


def check_folds_fit(folder: RunFolder, folds: int) -> None:
    """Refuse more folds than the smallest class of the run's training labels has samples (a
    fold would hold none of it, and more folds than samples never end)."""
    labels = folder.noisy_labels[folder.train_indices]
    counts = torch.bincount(labels, minlength=folder.num_classes)
    present = counts[counts > 0]
    smallest = int(present.min()) if len(present) else 0
    if folds > smallest:
        label = int(torch.nonzero(counts == smallest)[0])
        raise InputError(
            f"--folds {folds}: the run's training split has {smallest} label(s) of its smallest "
            f"class ({label}), so a fold would hold none of that class; give --folds {smallest} "
            "or fewer (5 is usual)"
        )


@contextmanager
def writing_into(folder: Path) -> Iterator[None]:
    """Writes of the audit's files into the run folder ``folder``, holding its lock (one
    writer of a run folder at a time): a full disk or a folder that cannot be written is a
    :class:`StorageError` naming the folder."""
    try:
        with hold(folder, "noisylabels audit", doing="this audit"):
            yield
    except OSError as err:
        if err.errno not in STORAGE_ERRNOS:
            raise
        raise _cannot_write(folder, err.errno) from err


def _scored(
    folder: RunFolder,
    score: str,
    folds: int,
    data_dir: str | None,
    log: Callable[[str], None] | None,
) -> Scored:
    if score in DYNAMICS_SCORES:
        record = folder.dynamics()
        recorded, trained = int(record["epochs"]), int(record.get("trained_epochs", 0))
        if log is not None and recorded < trained:
            log(
                f"note: the per-sample record covers the last {recorded} of the run's {trained} "
                "epochs (it was resumed from a checkpoint made before runs kept the record)"
            )
        return dynamics_scores(record, score)
    oos = out_of_sample(folder, folds, data_dir, log)
    labels = folder.noisy_labels[oos.index]
    return posterior_scores(oos.index, labels, oos.probs, oos.noisy_probs)


def out_of_sample(
    folder: RunFolder,
    folds: int,
    data_dir: str | None = None,
    log: Callable[[str], None] | None = None,
) -> OutOfSample:
    """The run's K-fold out-of-sample posteriors: read from ``out_of_sample_k{folds}.pt`` in
    the run folder where an earlier audit left them, else trained (:func:`cross_validate`
    refuses fewer than 2 folds, and a data folder that gives another training split, before
    training) and saved there."""
    path = folder.path / f"out_of_sample_k{folds}.pt"
    if path.is_file():
        state = load_pt(path)
        if isinstance(state, dict) and torch.equal(
            state.get("index", torch.zeros(0)).long(), folder.train_indices
        ):
            return OutOfSample(
                state["index"].long(),
                state["probs"].float(),
                state["noisy_probs"].float(),
                int(state["folds"]),
                int(state["seed"]),
                float(state["seconds"]),
            )
    oos = cross_validate(folder, folds, folder.seed, data_dir, log)
    with writing_into(folder.path):
        save_torch(oos.state(), path)
    return oos


def _class_names(dm: NoisyDataModule | None, num_classes: int) -> list[str]:
    names = None
    if dm is not None and dm.data is not None:
        names = dm.data.extra.get("class_names")
    if names and len(names) == num_classes:
        return [str(name) for name in names]
    return [str(k) for k in range(num_classes)]


def _named(dm: NoisyDataModule | None) -> bool:
    return dm is not None and dm.data is not None and bool(dm.data.extra.get("class_names"))


def _files(dm: NoisyDataModule | None) -> Callable[[int], str] | None:
    """The file of a training sample, for file-backed datasets."""
    if not isinstance(dm, ImageFileDataModule) or dm.data is None:
        return None
    keys, root = dm.data.train_images, dm.data_dir
    return lambda i: str(root / keys[i].decode("utf-8"))


def _rows(
    scored: Scored,
    flagged: Tensor,
    order: Tensor,
    true: Tensor | None,
    names: list[str] | None,
    files: Callable[[int], str] | None,
) -> list[dict[str, Any]]:
    rows = []
    for rank, k in enumerate(order.tolist(), start=1):
        i = int(scored.index[k])
        row: dict[str, Any] = {"rank": rank, "index": i}
        if files is not None:
            row["file"] = files(i)
        row["given_label"] = int(scored.given[k])
        row["predicted_label"] = int(scored.predicted[k])
        if names is not None:
            row["given_class"] = names[row["given_label"]]
            row["predicted_class"] = names[row["predicted_label"]]
        row["score"] = round(float(scored.score[k]), 6)
        row["flagged"] = int(flagged[k])
        if true is not None:
            row["true_label"] = int(true[k]) if int(true[k]) >= 0 else ""
        rows.append(row)
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    """The ranked rows as CSV (a header line even for no rows), written atomically."""
    columns = list(rows[0]) if rows else ["rank", "index", "given_label", "predicted_label"]
    with replacing(path) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _caption(row: dict[str, Any]) -> str:
    """A grid image's caption: its rank, file name (or dataset index), given and predicted."""
    what = Path(row["file"]).name if "file" in row else f"idx {row['index']}"
    return f"#{row['rank']} {what}\ngiven {_name(row, 'given')} · pred {_name(row, 'predicted')}"


def _name(row: dict[str, Any], which: str) -> str:
    return str(row.get(f"{which}_class", row[f"{which}_label"]))


def _image(dm: NoisyDataModule, index: int) -> Tensor | None:
    """Training image ``index`` as uint8 ``(C, H, W)`` (a file: as the network sees it);
    ``None`` where the file cannot be read."""
    assert dm.data is not None
    images = dm.data.train_images
    if isinstance(dm, ImageFileDataModule):
        path = dm.data_dir / images[index].decode("utf-8")
        try:
            return load_image(path, dm.image_size, dm.resize_size, train=False)
        except Exception:  # an unreadable file is shown as such, as training skips it
            return None
    return torch.as_tensor(images[index])
