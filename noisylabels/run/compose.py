"""Composed configuration files: ``--config`` files that build on others.

A config file may begin with ``compose:``, a list of other config files (paths relative to the
file); those are applied first, in order, then the file's own keys on top. Groups under
``configs/`` (``data/``, ``method/``, ``trainer/``) hold one concern each, and the presets
(e.g. ``configs/cifar100_volmin_vrnl.yaml``) compose a data and a method file and hold only the
settings particular to that pair::

    compose: [data/cifar100.yaml, method/volmin_vrnl.yaml]
    model:
      init_args:
        kappa: 4.5

Files compose exactly as repeated ``--config`` options do: later values win, subclass
``init_args`` merge, lists are replaced.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ActionConfigFile
from jsonargparse import Path as ConfigPath

from noisylabels.errors import InputError, MissingFileError

COMPOSE_KEY = "compose"


def _as_file(value: Any) -> Path | None:
    """``value`` as an existing file path, or ``None`` when it is config text or no file."""
    if not isinstance(value, (str, os.PathLike)) or "\n" in str(value):
        return None
    path = Path(os.fspath(value)).expanduser()
    return path if path.is_file() else None


def read_yaml(path: Path, what: str = "config file") -> Any:
    """The content of the YAML file ``path``; :class:`InputError` naming it (as ``what``) and
    the line where it is not valid YAML."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InputError(f"{what} {path} is not valid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} {path} is not a text (YAML) file") from None


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
    if content is not None and not isinstance(content, dict):
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


class ComposedConfigFile(ActionConfigFile):
    """``--config`` that understands ``compose:`` (see the module docstring)."""

    @staticmethod
    def apply_config(parser: Any, cfg: Any, dest: str, value: Any) -> None:
        path = _as_file(value)
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
