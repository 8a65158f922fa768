"""The one reader of the files that one command writes and another reads back: a run's
``config.yaml``, ``results.json``, ``run.lock`` and ``sweep_run.json``, config and sweep files,
label and T files.

Every such file is read through :func:`read_bytes`, which opens a regular file only (a named
pipe without a writer would block a reader for ever, a folder or device is not a file: each is
looked at with ``stat`` and checked again once opened) and refuses one larger than its limit
(:data:`LIMITS`) before reading it. YAML goes through :func:`parse_yaml`, YAML's safe loader
(libyaml's where PyYAML was built with it) that also refuses a document whose aliases expand
to more than :data:`MAX_YAML_NODES` values or refer to themselves (a "billion laughs" file
reads as a few lines and expands to gigabytes), and, for the files a user writes, a mapping
that holds a key twice. JSON goes through :func:`read_json`.

Each refusal is an :class:`UnreadableFile` naming the file and what is wrong with it, in one
line: a command that reads many runs (``report``, ``plot``, a sweep's states) skips such a run
with that line, one that needs the file (``fit --config``, ``audit``) stops with it. This
module imports nothing of the package but its errors.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from noisylabels.errors import InputError, load_error_summary

MiB = 1 << 20
LIMITS = {
    "yaml": 16 * MiB,  # a config, sweep or run config file: a few KB
    "json": 256 * MiB,  # results.json holds per-epoch lists: MBs at most
    "small": 1 * MiB,  # a lock file, a sweep's run file
    "text": 2048 * MiB,  # a user's label or T file (a label per sample: Clothing1M's 1M lines)
}
"""The largest file, in bytes, of each kind that is read."""
MAX_YAML_NODES = 1_000_000
"""The most values a YAML document may expand to (aliases counted at every use)."""

SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UnreadableFile(InputError):
    """A file that cannot be read as what it should be (not a regular file, too large, empty,
    damaged, an alias bomb); the message names it. ``path`` is the file."""

    def __init__(self, message: str, path: str | os.PathLike | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)


def _named(what: str, path: Any) -> str:
    """``config file a.yaml``; the path alone where ``what`` is empty."""
    return f"{what} {path}" if what else str(path)


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a file"


def regular_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path``, checked to be a regular file (a symbolic link is followed) without opening it;
    :class:`UnreadableFile` naming it otherwise (a missing file included). For the files read by
    other libraries (``torch.load`` of a checkpoint blocks on a named pipe as any reader does)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise UnreadableFile(
            f"{_named(what, path)} cannot be read: {err.strerror or err}", path
        ) from None
    if not stat.S_ISREG(mode):
        raise UnreadableFile(f"{_named(what, path)} is {_kind(mode)}, not a regular file", path)
    return path


def read_bytes(path: str | os.PathLike, what: str = "file", limit: int = LIMITS["yaml"]) -> bytes:
    """The content of the regular file ``path`` (``what`` names it in messages), at most
    ``limit`` bytes; :class:`UnreadableFile` for anything else."""
    path = regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise UnreadableFile(
            f"{_named(what, path)} cannot be read: {err.strerror or err}", path
        ) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):  # replaced since it was looked at
            raise UnreadableFile(
                f"{_named(what, path)} is {_kind(info.st_mode)}, not a regular file"
            )
        if info.st_size > limit:
            raise UnreadableFile(
                f"{_named(what, path)} is {info.st_size:,} bytes, more than the {limit:,} such "
                "a file may have: it is not one this program wrote (or was given by mistake)",
                path,
            )
        try:
            data = handle.read(limit + 1)
        except OSError as err:
            raise UnreadableFile(
                f"{_named(what, path)} cannot be read: {err.strerror or err}", path
            ) from None
    if len(data) > limit:  # grew while it was read
        raise UnreadableFile(
            f"{_named(what, path)} is more than the {limit:,} bytes it may have", path
        )
    return data


def read_text(path: str | os.PathLike, what: str = "file", limit: int = LIMITS["yaml"]) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a leading byte-order mark dropped)."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UnreadableFile(
            f"{_named(what, path)} is not UTF-8 text (byte {err.start} cannot be decoded)", path
        ) from None


def read_json(path: str | os.PathLike, what: str = "file", limit: int = LIMITS["json"]) -> Any:
    """The JSON value in ``path``; :class:`UnreadableFile` for an empty, damaged or too deeply
    nested file, or one that is not a regular file."""
    text = read_text(path, what, limit)
    if not text.strip():
        raise UnreadableFile(f"{_named(what, path)} is empty", path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UnreadableFile(
            f"{_named(what, path)} is not valid JSON (line {err.lineno}, column {err.colno}: "
            f"{err.msg})",
            path,
        ) from None
    except (ValueError, RecursionError) as err:  # a number of >4300 digits, nesting too deep
        raise UnreadableFile(
            f"{_named(what, path)} cannot be read as JSON: {str(err).split(':')[0]}", path
        ) from None


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, lines: tuple[int, int]) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.lines = key, lines


def _lines(lines: tuple[int, int]) -> str:
    a, b = lines
    return f"both on line {a}" if a == b else f"lines {a} and {b}"


def _check_keys(node: yaml.Node) -> None:
    """Raise :class:`_DuplicateKey` where a mapping below ``node`` holds a scalar key twice
    (keys merged in with ``<<`` may be overridden, as YAML intends)."""
    seen_nodes: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            keys: dict[tuple[str, str], int] = {}
            for key_node, value_node in current.value:
                stack.append(value_node)
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                if isinstance(key_node, yaml.ScalarNode):
                    line = key_node.start_mark.line + 1
                    name = (key_node.tag, key_node.value)
                    if name in keys:
                        raise _DuplicateKey(key_node.value, (keys[name], line))
                    keys[name] = line
                else:
                    stack.append(key_node)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)


def expanded_size(node: yaml.Node, limit: int = MAX_YAML_NODES) -> int:
    """The number of values ``node`` stands for once its aliases are expanded (a node used
    twice counts twice), counted up to just past ``limit``; raises ``ValueError`` for a node
    that contains itself."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        key = id(current)
        children: list[yaml.Node] = []
        if isinstance(current, yaml.MappingNode):
            children = [part for pair in current.value for part in pair]
        elif isinstance(current, yaml.SequenceNode):
            children = list(current.value)
        if done:
            active.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if key in sizes:
            continue
        if key in active:
            raise ValueError("an alias refers to a value that contains it")
        active.add(key)
        stack.append((current, True))
        for child in children:
            if id(child) in active:
                raise ValueError("an alias refers to a value that contains it")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(node)]


def parse_yaml(
    text: str | bytes, what: str = "YAML", *, unique_keys: bool = False, path: Any = None
) -> Any:
    """The value of the YAML document ``text`` (``what`` names it in messages: ``config file
    a.yaml``), read with YAML's safe loader; :class:`UnreadableFile` where it is not valid YAML,
    expands to more than :data:`MAX_YAML_NODES` values or refers to itself, or, with
    ``unique_keys``, where a mapping holds a key twice (YAML readers otherwise keep the last
    value silently)."""
    loader = SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            try:
                size = expanded_size(node)
            except ValueError as err:
                raise UnreadableFile(f"{what} cannot be read: {err}", path) from None
            if size > MAX_YAML_NODES:
                raise UnreadableFile(
                    f"{what} cannot be read: its aliases (*name) expand it to more than "
                    f"{MAX_YAML_NODES:,} values, which no config has",
                    path,
                )
            if unique_keys:
                _check_keys(node)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except _DuplicateKey as err:
        raise UnreadableFile(
            f"{what} sets {err.key!r} twice in one mapping ({_lines(err.lines)}); YAML would "
            "keep the last and drop the other silently: remove or rename one",
            path,
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UnreadableFile(f"{what} is not valid YAML{where}: {problem}", path) from None
    except RecursionError:
        raise UnreadableFile(f"{what} cannot be read: it is nested too deeply", path) from None


def read_yaml(
    path: str | os.PathLike,
    what: str = "config file",
    *,
    unique_keys: bool = False,
    limit: int = LIMITS["yaml"],
) -> Any:
    """The value of the YAML file ``path`` (:func:`read_text`, then :func:`parse_yaml`); an
    empty file reads as ``None``."""
    text = read_text(path, what, limit)
    return parse_yaml(text, f"{_named(what, path)}", unique_keys=unique_keys, path=path)


def load_torch(path: str | os.PathLike, what: str = "file") -> Any:
    """The content of the torch file ``path`` (``noise.pt``, ``sample_dynamics.pt``, a label
    file), loaded weights-only (tensors, numbers, strings and containers: nothing in the file
    is executed) from a regular file; :class:`UnreadableFile` naming it for a damaged, hostile,
    truncated or missing file."""
    path = regular_file(path, what)
    import torch  # start-up time: the readers of text files need no torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for a damaged or hostile file
        raise UnreadableFile(
            f"{_named(what, path)} cannot be read ({load_error_summary(err)}): it is damaged, "
            "truncated, or not a file noisylabels wrote",
            path,
        ) from None
