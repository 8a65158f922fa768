"""Remembered option searches of the command line's parsers.

jsonargparse finds the action of a key (``model.init_args.optim``) by a linear search of a
parser's actions (its ``find_action_and_subcommand``), for each key of each value it parses or
validates: thousands of searches per command, a quarter of its parse. For the parser classes
given to :func:`remember_searches` (the CLI's, whose class the parsers jsonargparse makes for the
classes of its options share), each parser remembers what each search found for as long as it
holds the same actions, compared one by one at each search: an action added, removed or replaced
starts afresh. A parser with subcommands, whose search goes on into a subcommand's parser, and
every other parser search as jsonargparse does. A jsonargparse whose modules do not have the
search where this expects it is left as it is.
"""

from __future__ import annotations

import importlib
from typing import Any

from jsonargparse import ActionSubCommands

FOUND_LIMIT = 4096  # searches remembered per parser; more start afresh
_KINDS: tuple[type, ...] = ()  # the parser classes whose searches are remembered


def _search_modules() -> list[Any]:
    """The jsonargparse modules that call the search, or none where one lacks it."""
    modules = []
    for name in ("jsonargparse._subcommands", "jsonargparse._core"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            return []
        if not callable(getattr(module, "find_action_and_subcommand", None)):
            return []
        modules.append(module)
    return modules


_MODULES = _search_modules()
#: jsonargparse's own search (``None`` where its modules do not have it)
SEARCH: Any = (
    getattr(_MODULES[0].find_action_and_subcommand, "__wrapped__", None)
    or _MODULES[0].find_action_and_subcommand
    if _MODULES
    else None
)


def find_action_and_subcommand(parser: Any, dest: Any, exclude: Any = None) -> Any:
    """jsonargparse's ``find_action_and_subcommand``, remembered per parser of the classes
    :func:`remember_searches` was given."""
    if (
        not isinstance(parser, _KINDS)
        or type(dest) is not str
        or not (exclude is None or isinstance(exclude, (type, tuple)))
    ):
        return SEARCH(parser, dest, exclude=exclude)
    actions = parser._actions
    found = parser.__dict__.get("_found_actions")
    if found is None or found[0] != actions or len(found[2]) > FOUND_LIMIT:
        plain = not any(isinstance(action, ActionSubCommands) for action in actions)
        found = parser.__dict__["_found_actions"] = (list(actions), plain, {})
    if not found[1]:
        return SEARCH(parser, dest, exclude=exclude)
    key = (dest, exclude)
    if key not in found[2]:
        found[2][key] = SEARCH(parser, dest, exclude=exclude)
    return found[2][key]


find_action_and_subcommand.__wrapped__ = SEARCH  # type: ignore[attr-defined]


def remember_searches(parser_class: type) -> bool:
    """Let the parsers of ``parser_class`` remember their searches; ``False`` (nothing changed)
    where this jsonargparse has no search to wrap."""
    global _KINDS
    if not _MODULES:
        return False
    if parser_class not in _KINDS:
        _KINDS = (*_KINDS, parser_class)
    for module in _MODULES:
        if getattr(module.find_action_and_subcommand, "__wrapped__", None) in (None, SEARCH):
            module.find_action_and_subcommand = find_action_and_subcommand
    return True
