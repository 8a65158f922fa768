"""Composed configuration files: ``--config`` files that build on others.

A config file may begin with ``compose:``, a list of other config files (paths relative to the
file); those are applied first, in order, then the file's own keys on top. Groups under
``configs/`` (``data/``, ``method/``, ``protocol/``, ``trainer/``) hold one concern each; a run
composes a data and a method group (repeated ``--config``), and a pair with settings of its own
has a preset (e.g. ``configs/cifar100_volmin_vrnl.yaml``) that composes the two and holds only
those settings::

    compose: [data/cifar100.yaml, method/volmin_vrnl.yaml]
    model:
      init_args:
        kappa: 4.5

Files compose exactly as repeated ``--config`` options do: later values win, subclass
``init_args`` merge, lists are replaced.

A run whose config sets no ``trainer.default_root_dir`` (no shipped preset sets one) goes to
``runs/<dataset>_<method>`` (:func:`default_root_dir`), named by the stems of its data and method
groups, e.g. ``--config configs/data/mnist.yaml --config configs/method/reweight_vrnl.yaml`` to
``runs/mnist_reweight_vrnl``, ``configs/cifar100_volmin_vrnl.yaml`` to
``runs/cifar100_volmin_vrnl``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import inspect
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from jsonargparse import ActionConfigFile
from jsonargparse import Path as ConfigPath

from noisylabels.disk.reading import parse_yaml, read_text, regular_file
from noisylabels.errors import InputError, MissingFileError

if TYPE_CHECKING:  # the methods import torch: only a run's epochs need them
    from noisylabels.methods.core.stages import StageSchedule

COMPOSE_KEY = "compose"
RUNS = Path("runs")  # where runs go when the config names no folder


def _as_file(value: Any) -> Path | None:
    """``value`` as an existing file path, or ``None`` when it is config text or no file."""
    if not isinstance(value, (str, os.PathLike)) or "\n" in str(value):
        return None
    path = Path(os.fspath(value)).expanduser()
    return path if path.is_file() else None


@functools.lru_cache(maxsize=512)
def _parse_yaml(text: str, what: str) -> Any:
    return parse_yaml(text, what, unique_keys=True)


def read_yaml(path: Path, what: str = "config file") -> Any:
    """The content of the YAML file ``path`` (:func:`noisylabels.disk.reading.read_text` and
    :func:`~noisylabels.disk.reading.parse_yaml`: a regular file within its size limit, no alias
    bomb, no key twice in one mapping); :class:`~noisylabels.disk.reading.UnreadableFile` naming it
    (as ``what``) and what is wrong. The file is read each time; a text already parsed in this
    process is not parsed again (a sweep reads the same few config files for each of its
    hundreds of runs)."""
    text = read_text(path, what)
    return copy.deepcopy(_parse_yaml(text, f"{what} {path}"))


def _yaml_kind(content: Any) -> str:
    """What a YAML document that is not a mapping holds, in words (``plain text``, ...)."""
    if isinstance(content, str):
        return "plain text"
    if isinstance(content, list):
        return "a list"
    if isinstance(content, (bool, int, float)):
        return "a single value"
    return f"a {type(content).__name__}"


def listed_files(path: Path, names: Any, where: str) -> list[Path]:
    """The files that the file ``path`` lists (one path or a list; ``where`` says under which
    key), each relative to ``path``'s folder; raises naming a missing one."""
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError(f"{path}: {where} must be a file path or a list of file paths")
    files = []
    for name in names:
        file = (path.parent / name).expanduser()
        if not file.is_file():
            raise MissingFileError(
                f"{path}: {where} lists {name}, but {file} does not exist (paths are relative "
                "to the file that lists them)"
            )
        files.append(file)
    return files


def read_composed(path: Path, _stack: tuple[Path, ...] = ()) -> list[tuple[Path, Any, bool]]:
    """The config files ``path`` composes, depth first, ending with ``path`` itself: each as
    ``(path, its own keys without compose, whether it composes others)``. Raises for a missing
    file or a cycle."""
    path = path.resolve()
    if path in _stack:
        chain = " -> ".join(str(p) for p in (*_stack, path))
        raise InputError(f"config files compose each other in a cycle: {chain}")
    content = read_yaml(path)
    if content is None:
        raise InputError(
            f"config file {path} is empty (or holds only comments): a config is a mapping of "
            "sections (trainer:, model:, data:, compose:, ...); check the --config path or the "
            "compose: list"
        )
    if not isinstance(content, dict):
        # never echo the file: it may be anything (a key file, a log) given by mistake
        raise InputError(
            f"config file {path} is not a config: YAML reads it as {_yaml_kind(content)}, "
            "where a config is a mapping of sections (trainer:, model:, "
            "data:, compose:, ...); check the --config path or the compose: list"
        )
    if not isinstance(content, dict) or COMPOSE_KEY not in content:
        return [(path, content, False)]
    content = dict(content)
    parts: list[tuple[Path, Any, bool]] = []
    for base_path in listed_files(path, content.pop(COMPOSE_KEY), f"'{COMPOSE_KEY}'"):
        parts += read_composed(base_path, (*_stack, path))
    return [*parts, (path, content, True)]


def check_config_text(value: Any) -> None:
    """Refuse a ``--config`` value that names something other than a regular file (a folder, a
    named pipe), or config text that is no config YAML reads within its limits (an alias bomb):
    jsonargparse would read either itself, and hang or fail with its own traceback."""
    if not isinstance(value, (str, os.PathLike)):
        return
    text = os.fspath(value)
    if "\n" not in text and os.path.lexists(os.path.expanduser(text)):
        regular_file(os.path.expanduser(text), "config file")
        return
    parse_yaml(text, "--config text")


def config_files(value: Any) -> list[Path]:
    """The files a ``--config`` value reads, in the order they apply (the files it composes,
    then itself); empty for config text."""
    path = _as_file(value)
    return [] if path is None else [part for part, _, _ in read_composed(path)]


CONFIG_OPTIONS = ("--config", "-c")  # the option ComposedConfigFile reads (run.cli adds it)
HELP_OPTIONS = ("-h", "--help")


def check_config_files(args: list[str]) -> None:
    """Read the ``--config`` files of a Lightning stage's arguments ``args`` (and the files
    they compose) as the parse will, so that a file that is not valid YAML, not a mapping, or
    composes a missing file or a cycle fails with the parse's own error before the training
    stack is loaded (seconds); such a file is reported before the errors of other options, as
    is a value naming a folder or named pipe, or config text that expands beyond the YAML
    reader's limits. A missing file (the parser names it) and a command asking for help are left
    to the parser."""
    if any(a in HELP_OPTIONS or a.endswith(".help") for a in args):
        return
    for i, arg in enumerate(args):
        option, equals, value = arg.partition("=")
        if option not in CONFIG_OPTIONS:
            continue
        if not equals:
            if i + 1 >= len(args):
                return
            value = args[i + 1]
        path = _as_file(value)
        if path is not None:
            read_composed(path)
        else:
            check_config_text(value)


class ComposedConfigFile(ActionConfigFile):
    """``--config`` that understands ``compose:`` (see the module docstring)."""

    @staticmethod
    def apply_config(parser: Any, cfg: Any, dest: str, value: Any) -> None:
        path = _as_file(value)
        if path is None:
            check_config_text(value)
        parts = [] if path is None else read_composed(path)
        if len(parts) <= 1:  # config text, or a file that composes nothing
            ActionConfigFile.apply_config(parser, cfg, dest, value)
            return
        for part_path, content, composes in parts:
            if not composes:
                ActionConfigFile.apply_config(parser, cfg, dest, str(part_path))
            elif content:  # a composing file's own keys, without the compose list
                ActionConfigFile.apply_config(parser, cfg, dest, yaml.safe_dump(content))
                cfg[dest][-1] = ConfigPath(str(part_path), mode="fr")  # the file, not its text


def planned_epochs(values: Any, defaults: Mapping[str, Any]) -> int | None:
    """The epochs that the ``--config`` files ``values`` plan (the last file that sets
    ``trainer.max_epochs``, composed files first; else the total of the stage schedule they give
    the method, :func:`schedule_epochs`), before any command-line option: the epochs of the
    run's protocol (its preset); ``defaults['max_epochs']`` where it is set and no file sets
    one, ``None`` where a value is config text rather than a file."""
    epochs = defaults.get("max_epochs")
    model: dict[str, Any] = {"init_args": {"schedule": {}}}
    for value in values or []:
        path = _as_file(str(value))
        if path is None:
            return None
        for _, content, _ in read_composed(path):
            content = content if isinstance(content, dict) else {}
            trainer, group = content.get("trainer"), content.get("model")
            if isinstance(trainer, dict) and "max_epochs" in trainer:
                epochs = trainer["max_epochs"]
            if isinstance(group, dict):
                model["class_path"] = group.get("class_path", model.get("class_path"))
                args = group.get("init_args")
                schedule = args.get("schedule") if isinstance(args, dict) else None
                if isinstance(schedule, dict):
                    model["init_args"]["schedule"].update(schedule)
    if epochs is None:
        try:
            epochs = schedule_epochs(model)
        except (TypeError, ValueError):  # not a schedule: the run refuses it, naming it
            return None
    return epochs if isinstance(epochs, int) and not isinstance(epochs, bool) else None


def default_schedule(class_path: str | None) -> StageSchedule:
    """The stage schedule of a method class (a ``class_path``, or a name in
    :mod:`noisylabels.methods`) whose config gives none: the default of the ``schedule`` of its
    constructor (the base method's where the class is unknown)."""
    from noisylabels.methods.core.stages import StageSchedule

    cls = import_class(class_path, "noisylabels.methods") if class_path else None
    for klass in getattr(cls, "__mro__", ()):
        init = vars(klass).get("__init__")
        parameter = inspect.signature(init).parameters.get("schedule") if init else None
        if parameter is not None and isinstance(parameter.default, StageSchedule):
            return parameter.default
    return StageSchedule()


def schedule_epochs(model: Any) -> int:
    """The epochs of a run of the method config group ``model`` (``class_path`` and
    ``init_args``, whose ``schedule`` may give some of the stage options): warm-up, the method's
    own stage and revision (:attr:`StageSchedule.total_epochs`), what ``noisylabels fit``
    trains unless ``--trainer.max_epochs`` is given. Bad stage options raise
    :class:`~noisylabels.errors.InputError` naming them."""
    class_path, args = _part(model)
    schedule = args.get("schedule")
    default = default_schedule(class_path)
    if not isinstance(schedule, Mapping):
        return default.total_epochs
    return dataclasses.replace(default, **schedule).total_epochs


def import_class(class_path: str, package: str = "") -> Any:
    """What ``class_path`` names (``module.Name``; a bare ``Name``: in ``package``); ``None``
    where its module cannot be imported or has no such name."""
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module or package), name, None)
    except ImportError:
        return None


def _part(group: Any) -> tuple[str | None, dict[str, Any]]:
    """The class name and ``init_args`` of a config group (``model`` or ``data``)."""
    if group is None:
        return None, {}
    get = group.get if hasattr(group, "get") else lambda key, default=None: default
    class_path = str(get("class_path", "") or "")
    init = get("init_args", None)
    args = init.as_dict() if hasattr(init, "as_dict") else dict(init or {})
    return class_path or None, args


def default_root_dir(config: Any) -> Path:
    """``runs/<dataset>_<method>`` for a resolved config (``data`` and ``model`` groups): the
    data module's ``name`` (``mnist``), the method's config group name (its class's own
    ``config_name``, ``volmin``; else the class in lower case) with ``_dualt`` for the Dual-T
    estimator and ``_vrnl`` for a non-zero α (``forward_vrnl``): the stems of the data and
    method group files the run composes; ``runs`` where either class is unknown."""
    data_path, _ = _part(config.get("data"))
    model_path, args = _part(config.get("model"))
    if data_path is None or model_path is None:
        return RUNS
    data_class = import_class(data_path)
    dataset = getattr(data_class, "name", None) or data_path.rsplit(".", 1)[-1].lower()
    own = vars(import_class(model_path, "noisylabels.methods") or object).get("config_name")
    method = own or model_path.rsplit(".", 1)[-1].lower()
    if args.get("transition") == "estimate" and args.get("estimator") == "dual_t":
        method += "_dualt"
    if float(args.get("alpha") or 0.0) != 0.0:
        method += "_vrnl"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{dataset}_{method}")
    return RUNS / name
