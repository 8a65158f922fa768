"""``--ckpt_path``: finding and reading the checkpoint a run continues from.

``noisylabels fit --config X --ckpt_path last`` continues the newest run *of the same experiment*
under the config's logger folder (the run folders whose ``checkpoints/last.ckpt`` was written
last come first; one of another experiment is passed over); ``--ckpt_path RUN_FOLDER`` continues
that run, and a checkpoint file inside a run folder's ``checkpoints/`` continues that run folder
too (a checkpoint from elsewhere starts a new run folder from it). ``--ckpt_path hpc`` is
Lightning's newest SLURM checkpoint (``hpc_ckpt_N.ckpt``) under ``--trainer.default_root_dir``,
read as every checkpoint is.

Every checkpoint is read weights-only before anything else (tensors, numbers and containers:
nothing in the file is executed), and so format-checked before Lightning loads it.

A run continues only as the same experiment (:mod:`noisylabels.run.identity`): the checkpoint
records the run's identity, which must equal this run's, or the resume is refused before a file
is touched. A finished run (one with ``results.json``) is never rewritten: continuing it (to
train longer) starts a new run folder from its ``last.ckpt``. Where the checkpoints are written
and what they hold is :mod:`noisylabels.run.record`.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from noisylabels.disk.lock import read_object
from noisylabels.disk.reading import UnreadableFile, regular_file
from noisylabels.errors import InputError, MissingFileError, load_error_summary
from noisylabels.run import identity

LAST = "last"
HPC = "hpc"
CHECKPOINT_FILE = "last.ckpt"
RESULTS_FILE = "results.json"
CONFIG_FILE = "config.yaml"
HPC_CHECKPOINTS = "hpc_ckpt_*.ckpt"
DEFAULT_LOGGER_NAME = "lightning_logs"
STATE_KEY = "RunRecorder"
"""Key of the run record's state in a checkpoint's ``callbacks`` (older checkpoints:
``LastCheckpoint``)."""
OLD_STATE_KEYS = ("LastCheckpoint",)


@dataclass
class Checkpoint:
    """A checkpoint the user pointed at: its file, the run folder it belongs to (``origin``,
    ``None`` for a file outside a run folder), the run folder it continues in place
    (``run_folder``; ``None``: it starts a new one, as a finished run's does), the identity
    its run recorded, the :data:`~noisylabels.run.identity.RESUMABLE` options it ran with
    (flat) and the epochs it completed."""

    path: Path
    origin: Path | None
    identity: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    epochs_done: int | None = None
    resumes: list[dict[str, Any]] = field(default_factory=list)
    #: the epochs of the protocol the run was started under (its first part's), where recorded
    protocol_epochs: int | None = None
    #: the names of the checkpoint files its checkpoint callbacks refer to (the best one)
    kept: frozenset[str] = frozenset()
    #: the file as it was read: inode, size, modification time
    signature: tuple[int, int, int] | None = None

    def changed(self) -> bool:
        """Whether the file is another than the one read (a run wrote its newest state since)."""
        return self.signature is not None and _signature(self.path) != self.signature

    @property
    def finished(self) -> bool:
        """Whether the checkpoint's run folder holds a finished run (``results.json``)."""
        return self.origin is not None and (self.origin / RESULTS_FILE).is_file()

    @property
    def run_folder(self) -> Path | None:
        """The folder the run continues in: its own, unless finished (never rewritten) or the
        checkpoint is not its last state (continuing from an earlier one starts a new run)."""
        if self.origin is None or self.finished:
            return None
        return self.origin if self.path.name == CHECKPOINT_FILE else None


def logger_base(logger: Any, root: Path) -> Path | None:
    """The folder holding a logger's run folders (``root/lightning_logs`` for the default
    TensorBoard logger), ``root`` itself without a logger, ``None`` for loggers it cannot tell."""
    if logger in (None, True):
        return root / DEFAULT_LOGGER_NAME
    if logger is False:
        return root
    class_path = str(getattr(logger, "class_path", "") or "")
    if class_path.rsplit(".", 1)[-1] not in ("TensorBoardLogger", "CSVLogger"):
        return None
    args = _init_args(logger)
    save_dir = Path(args.get("save_dir") or root)
    name = args.get("name", DEFAULT_LOGGER_NAME)
    return save_dir / name if name else save_dir


def _init_args(logger: Any) -> dict[str, Any]:
    init = getattr(logger, "init_args", None)
    return init.as_dict() if hasattr(init, "as_dict") else dict(init or {})


def _last_of(folder: Path) -> Path | None:
    for candidate in (folder / "checkpoints" / CHECKPOINT_FILE, folder / CHECKPOINT_FILE):
        if candidate.is_file():
            return candidate
    return None


def _hpc_number(path: Path) -> int:
    digits = path.stem.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else -1


def candidates(value: str, root: Path, logger: Any) -> list[tuple[Path, Path | None]]:
    """``(checkpoint file, its run folder or None)`` for a ``--ckpt_path`` value: for ``last``
    every run under the logger's folder with a ``last.ckpt``, newest first; for ``hpc`` the
    newest ``hpc_ckpt_N.ckpt`` in ``root``; else the one run folder or file. Raises
    :class:`MissingFileError` naming what was searched."""
    if value == LAST:
        base = logger_base(logger, root)
        if base is None:
            raise InputError(
                "--ckpt_path last finds runs of the TensorBoard or CSV logger only; pass the run "
                "folder or its checkpoints/last.ckpt instead"
            )
        folders = [base] if logger is False else sorted(p for p in base.glob("*") if p.is_dir())
        found = [(last, folder) for folder in folders if (last := _last_of(folder))]
        if not found:
            raise MissingFileError(
                f"--ckpt_path last: no run under {base} has a checkpoints/{CHECKPOINT_FILE} to "
                "resume from; start a new run without --ckpt_path, or pass a run folder or "
                "checkpoint file (and the --trainer.default_root_dir it was written under)"
            )
        return sorted(found, key=lambda pair: pair[0].stat().st_mtime, reverse=True)
    if value == HPC:
        found_hpc = sorted(root.glob(HPC_CHECKPOINTS), key=_hpc_number)
        if not found_hpc:
            raise MissingFileError(
                f"--ckpt_path hpc: {root} holds no Lightning SLURM checkpoint "
                f"({HPC_CHECKPOINTS}); runs here continue from their checkpoints/"
                f"{CHECKPOINT_FILE}: pass --ckpt_path last or a run folder"
            )
        return [(found_hpc[-1], None)]
    path = Path(value).expanduser()
    if path.is_dir():
        last = _last_of(path)
        if last is None:
            raise MissingFileError(
                f"--ckpt_path {value}: the folder has no checkpoints/{CHECKPOINT_FILE}; pass a "
                "run folder or a checkpoint file"
            )
        return [(last, path)]
    if not path.is_file():
        raise MissingFileError(
            f"--ckpt_path {value}: no such file or folder; pass a checkpoint file, a run "
            "folder, or `last` for the newest run under --trainer.default_root_dir"
        )
    folder = path.parent.parent
    in_run = path.parent.name == "checkpoints" and (folder / CONFIG_FILE).is_file()
    return [(path, folder if in_run else None)]


def read(path: Path) -> dict[str, Any]:
    """A checkpoint's content, loaded weights-only; damaged, truncated or foreign files raise
    :class:`InputError` naming the file."""
    advice = (
        "Pass a complete checkpoint written by noisylabels (a run's checkpoints/last.ckpt or "
        "best-*.ckpt), or start a new run without --ckpt_path."
    )
    import torch  # start-up time: a sweep reads the names above without loading torch

    try:
        regular_file(path, "--ckpt_path")  # torch.load of a named pipe would wait for ever
    except UnreadableFile as err:
        raise InputError(f"{err}. {advice}") from None
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise InputError(
            f"--ckpt_path {path} is not a checkpoint this program can read: it is damaged, not "
            "a torch file, or holds Python objects that loading would execute "
            f"({load_error_summary(err)}). {advice}"
        ) from None
    except Exception as err:  # torch.load on arbitrary bytes raises about anything
        raise InputError(
            f"--ckpt_path {path} cannot be read: it is truncated or damaged "
            f"({load_error_summary(err)}). {advice}"
        ) from None
    if not isinstance(content, dict) or "state_dict" not in content:
        raise InputError(
            f"--ckpt_path {path} is a torch file but not a Lightning checkpoint (it has no "
            f"state_dict). {advice}"
        )
    return content


def reported(path: Path, origin: Path | None) -> Path:
    """The checkpoint a finished run's fit reported (``results.json``'s ``checkpoint``, the
    selected one), where ``path`` is that run's ``last.ckpt``: the file of that name in the
    run's own ``checkpoints/`` (a folder copied or moved keeps its own, never the original's,
    which may have changed since), else the path recorded; else ``path``."""
    if origin is None or path.name != CHECKPOINT_FILE:
        return path
    results = read_object(origin / RESULTS_FILE)
    selected = results.get("checkpoint") if results is not None else None
    if not isinstance(selected, str) or not selected:
        return path
    for candidate in (origin / "checkpoints" / Path(selected).name, Path(selected)):
        if candidate.is_file():
            return candidate
    return path


def run_state(content: Mapping[str, Any]) -> dict[str, Any]:
    """The run record's state in a checkpoint's content (empty where it has none)."""
    states = content.get("callbacks") or {}
    for key in (STATE_KEY, *OLD_STATE_KEYS):
        if isinstance(states.get(key), Mapping):
            return dict(states[key])
    return {}


def epochs_done(content: Mapping[str, Any]) -> int | None:
    """The epochs a checkpoint's run had completed."""
    loops = content.get("loops") or {}
    progress = (loops.get("fit_loop") or {}).get("epoch_progress") or {}
    done = (progress.get("current") or {}).get("completed")
    return int(done) if isinstance(done, int) else None


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def referenced_files(content: Mapping[str, Any]) -> frozenset[str]:
    """The names of the checkpoint files that the checkpoint callbacks of a checkpoint's run
    refer to (their best and top-k files)."""
    names: set[str] = set()
    for state in (content.get("callbacks") or {}).values():
        if not isinstance(state, Mapping) or "best_model_path" not in state:
            continue
        paths = [state.get(k) for k in ("best_model_path", "kth_best_model_path")]
        paths += list(state.get("best_k_models") or {})
        names.update(Path(str(p)).name for p in paths if p)
    return frozenset(names)


def load(path: Path, origin: Path | None) -> Checkpoint:
    """Read the checkpoint ``path`` (of the run folder ``origin``, or ``None``)."""
    signature = _signature(path)
    content = read(path)
    state = run_state(content)
    options = state.get("options")
    if options is None:  # an older checkpoint: its trainer options, flat
        trainer = state.get("trainer_options") or {}
        options = identity.resumable_options({f"trainer.{k}": v for k, v in trainer.items()})
    return Checkpoint(
        path=path,
        origin=origin,
        identity=identity.of_checkpoint(content, state),
        options=dict(options),
        epochs_done=epochs_done(content),
        resumes=list(state.get("resumes") or []),
        protocol_epochs=_int_or_none(state.get("protocol_epochs")),
        kept=referenced_files(content),
        signature=signature,
    )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def plain_options(options: Any) -> dict[str, Any]:
    """Options (a mapping or a jsonargparse namespace, e.g. a config's ``trainer`` section)
    as plain JSON values: what a checkpoint can hold and a resume compares."""
    if options is None:
        return {}
    if hasattr(options, "as_dict"):
        options = options.as_dict()
    return json.loads(json.dumps(dict(options), default=str))


def refusal(path: Path, changes: dict[str, list[Any]]) -> str:
    """The one paragraph of a resume refused because the run would be another experiment."""
    allowed = ", ".join(identity.RESUMABLE)
    return (
        f"--ckpt_path {path} was trained as another experiment than this one: it differs in "
        f"{identity.describe(changes)}. A resume continues the same experiment: it refuses "
        "another method, hyperparameter, seed, data or noise (the optimizer and schedule would "
        "keep the checkpoint's), and may change only "
        f"{allowed} (docs/runs.md). Resume with the options of the checkpoint's run (its "
        "config.yaml), or start a new run without --ckpt_path."
    )


def continue_logger(folder: Path, logger: Any) -> Any:
    """A logger writing into the existing run ``folder`` (the config's TensorBoard or CSV
    logger class and options, with its folder pinned); ``None`` without a logger or for other
    loggers (which then choose their folder themselves)."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    if logger in (None, True):
        cls: Any = TensorBoardLogger
        args: dict[str, Any] = {}
    elif logger_base(logger, folder) is None or logger is False:
        return None
    else:
        cls = CSVLogger if str(logger.class_path).endswith("CSVLogger") else TensorBoardLogger
        args = _init_args(logger)
    # version_N as the number N, as a new run's logger has it (the progress bar shows a string
    # version by its last four characters: "on_0"); any other folder name as it is
    number = folder.name.removeprefix("version_")
    numbered = number.isdigit() and f"version_{int(number)}" == folder.name
    version: int | str = int(number) if numbered else folder.name
    args.update(save_dir=str(folder.parent.parent), name=folder.parent.name, version=version)
    return cls(**args)
