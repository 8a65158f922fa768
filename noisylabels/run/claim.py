"""The claim of a run folder: the one folder a fit writes, made atomically and locked for as long
as the fit writes it (:mod:`noisylabels.disk.lock`).

:func:`claim` runs on process 0 before anything of the run is read back or written. A new run
whose logger picks its version itself (Lightning's TensorBoard and CSV loggers) gets the next
``version_N`` made by ``mkdir`` (two fits started together into one root get two folders), and
its loggers are pinned to it; any other run folder (a resume's own, a version or folder the user
named) is made where missing. The folder's lock is then taken, or the fit refused naming the
process that holds it. Holding it, the claim removes the temporary files that a killed write
left (:func:`~noisylabels.disk.lock.remove_temporary`), and reads the checkpoint a resume
continues again where it changed since it was chosen (another process wrote it meanwhile).
"""

from __future__ import annotations

import csv
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from noisylabels.disk.lock import LOCK_FILE, RunLock, claim_version, hold, remove_temporary
from noisylabels.run import resume
from noisylabels.run.artifacts import run_dir
from noisylabels.run.rules import same_folder

CSV_METRICS = "metrics.csv"  # Lightning's CSV logger's file


@dataclass
class Claim:
    """A run folder held by this process: the folder, its lock, whether the claim made it, and
    the checkpoint the run continues from (as it is now, once the folder is held)."""

    folder: Path
    lock: RunLock
    created: bool
    checkpoint: resume.Checkpoint | None = None
    removed: list[Path] = field(default_factory=list)

    def release(self, *, failed: bool = False) -> None:
        """Release the lock; with ``failed``, also remove the folder where the claim made it and
        it holds nothing else (a run refused or failed before it wrote anything)."""
        self.lock.release()
        if failed and self.created:
            try:
                leftover = [p for p in self.folder.iterdir() if p.name != LOCK_FILE]
                if not leftover:
                    (self.folder / LOCK_FILE).unlink(missing_ok=True)
                    self.folder.rmdir()
            except OSError:
                pass  # gone already, or holding something: kept


def _pins_its_version(logger: object) -> bool:
    # Lightning's TensorBoard and CSV loggers take the next free version lazily, from
    # ``_version`` (None: not chosen yet); they offer no public way to set it once built
    return isinstance(logger, (TensorBoardLogger, CSVLogger)) and logger._version is None


def claim(trainer: L.Trainer, checkpoint: resume.Checkpoint | None, by: str) -> Claim:
    """Make (where new) and lock the run folder of ``trainer``'s fit (process 0; see the module
    docstring); :class:`~noisylabels.disk.lock.FolderBusy` where another process writes it."""
    loggers = trainer.loggers
    created = False
    if loggers and _pins_its_version(loggers[0]):
        first = loggers[0]
        folder = claim_version(Path(first.root_dir))
        version = int(folder.name.removeprefix("version_"))
        for logger in loggers:
            if _pins_its_version(logger) and Path(logger.root_dir) == Path(first.root_dir):
                logger._version = version
        created = True
    else:
        folder = run_dir(trainer)
        created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
    try:
        lock = hold(folder, by, doing="this fit")
    except BaseException:
        if created:
            try:
                folder.rmdir()
            except OSError:
                pass
        raise
    held = Claim(folder, lock, created, checkpoint)
    held.removed = remove_temporary(folder)
    if held.removed:
        names = ", ".join(p.name for p in held.removed[:4])
        more = f" and {len(held.removed) - 4} more" if len(held.removed) > 4 else ""
        print(
            f"noisylabels: removed {len(held.removed)} temporary file(s) that a write cut short "
            f"left in {folder} ({names}{more})",
            file=sys.stderr,
            flush=True,
        )
    if checkpoint is not None and checkpoint.origin is not None:
        if same_folder(folder, checkpoint.origin) and checkpoint.changed():
            held.checkpoint = resume.load(checkpoint.path, checkpoint.origin)
    keep_csv_metrics(trainer, folder)
    return held


def keep_csv_metrics(trainer: L.Trainer, folder: Path) -> None:
    """Start the CSV loggers writing into ``folder`` so that they keep what is there: Lightning's
    CSV writer deletes a ``metrics.csv`` it finds when it starts (a resumed run would lose its
    earlier epochs' metrics) and warns of any file in its folder (this run's lock). The earlier
    rows are kept, and the writer appends to them (widening the header where new metrics come)."""
    for logger in trainer.loggers:
        if not isinstance(logger, CSVLogger) or Path(logger.log_dir) != folder:
            continue
        metrics = folder / CSV_METRICS
        aside = folder / f".{CSV_METRICS}.{os.getpid()}.kept"
        kept = metrics.is_file()
        if kept:
            os.replace(metrics, aside)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists")
                writer = logger.experiment  # made now, with nothing to delete
        finally:
            if kept:
                os.replace(aside, metrics)
        if kept:
            with open(metrics, newline="") as fh:
                header = next(csv.reader(fh), [])
            writer.metrics_keys = sorted(set(writer.metrics_keys) | set(header))
