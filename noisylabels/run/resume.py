"""``--ckpt_path``: finding, reading and checking the checkpoint a run resumes from.

``noisylabels fit --config X --ckpt_path last`` continues the newest run under the config's
logger folder (the run folder whose ``checkpoints/last.ckpt`` was written last) *in that run
folder*; ``--ckpt_path RUN_FOLDER`` continues that run, and a checkpoint file inside a run
folder's ``checkpoints/`` continues that run folder too (a checkpoint from elsewhere starts a new
run folder from it).

Unlike Lightning's CLI, the checkpoint's hyperparameters are never applied over the config: the
config (files and command line) says what runs. What makes a checkpoint another experiment
(method, backbone and its options, dataset, number of classes, input shape) must agree with the
config, or the run is refused with the differences named; other differences (e.g.
``--model.alpha``, ``--model.lr``, and any trainer option such as ``--trainer.max_epochs``,
which the checkpoint keeps as :data:`TRAINER_OPTIONS` of its ``last.ckpt`` state) are printed,
used from the resume on, and recorded in ``results.json`` (``resumed[].changed``). The noisy
labels must be those the checkpoint was trained on (checked by
:class:`~noisylabels.callbacks.LastCheckpoint`).
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from noisylabels.errors import InputError, MissingFileError, load_error_summary
from noisylabels.run.compose import import_class

LAST = "last"
CHECKPOINT_FILE = "last.ckpt"
# hyperparameters that make a checkpoint another experiment: they must match the config
IDENTITY = ("backbone", "backbone_kwargs", "num_classes", "input_shape")
DEFAULT_LOGGER_NAME = "lightning_logs"
TRAINER_OPTIONS = "trainer_options"
"""Key of the run's trainer options in the checkpointed state of ``last.ckpt``'s callback."""


@dataclass
class Checkpoint:
    """A checkpoint the user pointed at: its file, the run folder it continues (``None``: it
    starts a new one) and the hyperparameters it was trained with."""

    path: Path
    run_folder: Path | None
    model_hparams: dict[str, Any] = field(default_factory=dict)
    data_hparams: dict[str, Any] = field(default_factory=dict)
    trainer_options: dict[str, Any] | None = None


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


def locate(value: str, root: Path, logger: Any) -> tuple[Path, Path | None]:
    """``(checkpoint file, run folder to continue or None)`` for a ``--ckpt_path`` value:
    ``last``, a run folder, or a checkpoint file. Raises :class:`MissingFileError` naming what
    was searched."""
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
        return max(found, key=lambda pair: pair[0].stat().st_mtime)
    path = Path(value).expanduser()
    if path.is_dir():
        last = _last_of(path)
        if last is None:
            raise MissingFileError(
                f"--ckpt_path {value}: the folder has no checkpoints/{CHECKPOINT_FILE}; pass a "
                "run folder or a checkpoint file"
            )
        return last, path
    if not path.is_file():
        raise MissingFileError(
            f"--ckpt_path {value}: no such file or folder; pass a checkpoint file, a run "
            "folder, or `last` for the newest run under --trainer.default_root_dir"
        )
    folder = path.parent.parent
    in_run = path.parent.name == "checkpoints" and (folder / "config.yaml").is_file()
    return path, folder if in_run else None


def read(path: Path) -> dict[str, Any]:
    """A checkpoint's content, loaded weights-only; damaged, truncated or foreign files raise
    :class:`InputError` naming the file."""
    advice = (
        "Pass a complete checkpoint written by noisylabels (a run's checkpoints/last.ckpt or "
        "best-*.ckpt), or start a new run without --ckpt_path."
    )
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


def load(value: str, root: Path, logger: Any) -> Checkpoint:
    """Locate and read the checkpoint of ``--ckpt_path value``."""
    path, folder = locate(value, root, logger)
    content = read(path)
    states = content.get("callbacks") or {}
    saved = [state[TRAINER_OPTIONS] for state in states.values() if TRAINER_OPTIONS in state]
    return Checkpoint(
        path=path,
        run_folder=folder,
        model_hparams=dict(content.get("hyper_parameters") or {}),
        data_hparams=dict(content.get("datamodule_hyper_parameters") or {}),
        trainer_options=saved[0] if saved else None,
    )


def plain_options(options: Any) -> dict[str, Any]:
    """Options (a mapping or a jsonargparse namespace, e.g. a config's ``trainer`` section)
    as plain JSON values: what a checkpoint can hold and a resume compares."""
    if options is None:
        return {}
    if hasattr(options, "as_dict"):
        options = options.as_dict()
    return json.loads(json.dumps(dict(options), default=str))


def changed_options(
    old: dict[str, Any] | None, new: dict[str, Any] | None, prefix: str
) -> dict[str, list[Any]]:
    """``{"prefix.name": [checkpoint value, current value]}`` for the options both sides know
    that differ (an option only one side records is not a change: e.g. a checkpoint written
    before trainer options were kept)."""
    if not old or not new:
        return {}
    return _changes(old, new, set(old) & set(new), prefix)


def _class_name(class_path: str | None) -> str | None:
    return None if not class_path else str(class_path).rsplit(".", 1)[-1]


def _same_class(class_path: str | None, obj: Any) -> bool:
    """Whether ``obj`` is an instance of the class at ``class_path`` (``True`` when unknown)."""
    if not class_path:
        return True
    cls = import_class(str(class_path))
    if cls is None:  # not importable here: compare the names
        return type(obj).__name__ == str(class_path).rpartition(".")[2]
    return type(obj) is cls


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def changed_hparams(old: dict[str, Any] | None, new: Any, prefix: str) -> dict[str, list[Any]]:
    """``{"prefix.name": [checkpoint value, current value]}`` for the hyperparameters that
    differ (internal ``_...`` keys left out)."""
    if not old:
        return {}
    new = dict(new or {})
    names = {name for name in set(old) | set(new) if not name.startswith("_")}
    return _changes(old, new, names, prefix)


def _changes(
    old: dict[str, Any], new: dict[str, Any], names: set[str], prefix: str
) -> dict[str, list[Any]]:
    """``{"prefix.name": [old value, new value]}`` for the ``names`` whose values differ (a
    name one side lacks: ``None`` there)."""
    out = {}
    for name in sorted(names):
        before, after = _plain(old.get(name)), _plain(new.get(name))
        if before != after:
            out[f"{prefix}.{name}"] = [before, after]
    return out


def check(ckpt: Checkpoint, model: Any, datamodule: Any) -> dict[str, list[Any]]:
    """Refuse a checkpoint of another experiment than the config's (method, backbone,
    dataset, classes, input shape), naming every difference; return the other hyperparameters
    that differ (the config's values win)."""
    problems = []
    model_path = ckpt.model_hparams.get("_class_path")
    if not _same_class(model_path, model):
        problems.append(f"method {_class_name(model_path)} (config: {type(model).__name__})")
    data_path = ckpt.data_hparams.get("_class_path")
    if datamodule is not None and not _same_class(data_path, datamodule):
        problems.append(f"dataset {_class_name(data_path)} (config: {type(datamodule).__name__})")
    hparams = dict(getattr(model, "hparams", {}))
    for name in IDENTITY:
        if name in ckpt.model_hparams:
            before, after = _plain(ckpt.model_hparams[name]), _plain(hparams.get(name))
            if before != after:
                problems.append(f"{name} {before!r} (config: {after!r})")
    if problems:
        raise InputError(
            f"--ckpt_path {ckpt.path} was trained as another experiment than this config: it "
            f"has {'; '.join(problems)}. Resume with the config of the checkpoint's run (its "
            "config.yaml), or start a new run without --ckpt_path."
        )
    changed = changed_hparams(ckpt.model_hparams, hparams, "model")
    if datamodule is not None:
        changed.update(
            changed_hparams(ckpt.data_hparams, getattr(datamodule, "hparams", None), "data")
        )
    return changed


def describe_changes(path: Path, changed: dict[str, list[Any]]) -> str:
    """The notice printed when resuming with hyperparameters that differ from the checkpoint's."""
    items = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
    return (
        f"noisylabels: resuming from {path} with settings that differ from the checkpoint's "
        f"(the config's values are used from here on and recorded in results.json): {items}"
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
    args.update(save_dir=str(folder.parent.parent), name=folder.parent.name, version=folder.name)
    return cls(**args)
