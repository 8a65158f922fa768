"""What every command says of an option it does not know: the closest real ones (``did you
mean --trainer.max_epochs?``), and the parser of the project's own subcommands (``plot``,
``sweep``, ``report``, ``audit``), which abbreviates no option, as the Lightning stages' does
not (:mod:`noisylabels.run.parsing` gives those the same hint). This module imports nothing of
the package.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

CUTOFF = 0.75
"""How alike (:class:`difflib.SequenceMatcher`'s ratio) a real option must be to a misspelt one
to be named: ``--kin`` for ``--kind`` is 0.89, ``--foo`` for ``--out`` 0.6."""
UNRECOGNIZED = "unrecognized arguments: "
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def option_name(token: str) -> str:
    """The option of a command-line token: ``--a.b`` of ``--a.b=3``."""
    return token.split("=", 1)[0]


def is_option(token: str) -> bool:
    """Whether a command-line token is an option (not a value such as ``-0.1``)."""
    return token.startswith("-") and len(token) > 1 and not NEGATIVE_NUMBER.match(token)


def closest_options(given: str, options: Iterable[str]) -> list[str]:
    """The real ``options`` closest to the unknown option ``given`` (its name, without a
    value): every one as close as the closest, none where no option is close
    (:data:`CUTOFF`)."""
    names = sorted({o for o in options if o.startswith("-") and not o.endswith("+")})
    found = difflib.get_close_matches(given, names, n=5, cutoff=CUTOFF)
    if not found:
        return []
    ratio = lambda o: difflib.SequenceMatcher(None, given, o).ratio()  # noqa: E731
    best = ratio(found[0])
    return [o for o in found if ratio(o) == best]


def suggestion(unknown: Sequence[str], options: Iterable[str]) -> str:
    """``did you mean --x?`` for the unknown options ``unknown`` (names, without values) that
    some real option is close to (for several: ``--a: did you mean --x?; --b: ...``); empty
    where none is."""
    options = list(options)
    hints = []
    for given in dict.fromkeys(unknown):
        found = closest_options(given, options)
        if found:
            hints.append((given, f"did you mean {' or '.join(found)}?"))
    if len(hints) == 1 and len(set(unknown)) == 1:
        return hints[0][1]
    return "; ".join(f"{given}: {hint}" for given, hint in hints)


def unrecognized(message: str) -> list[str]:
    """The unknown options an ``unrecognized arguments: ...`` parse error names (their values
    left out); empty for any other message."""
    if not message.startswith(UNRECOGNIZED):
        return []
    tokens = message[len(UNRECOGNIZED) :].split()
    return [option_name(t) for t in tokens if is_option(t)]


def with_suggestion(message: str, options: Iterable[str]) -> str:
    """A parse error's ``message`` with :func:`suggestion` for the unknown options it names:
    ``unrecognized arguments: --trainer.max_epoch 3 (did you mean --trainer.max_epochs?)``."""
    hint = suggestion(unrecognized(message), options)
    return f"{message} ({hint})" if hint else message


REPEATABLE = (argparse._AppendAction, argparse._ExtendAction, argparse._CountAction)
"""Option actions that take a value more than once by design."""


class CommandParser(argparse.ArgumentParser):
    """argparse as the project's own subcommands use it: no option is abbreviated, and an
    unknown option is refused first (before a required argument it may have been meant as is
    missed) and with the closest real options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        given = [str(a) for a in (sys.argv[1:] if args is None else args)]
        given = given[: given.index("--")] if "--" in given else given
        known = self._option_string_actions
        unknown = [
            t for t in given if t.startswith("--") and t != "--" and option_name(t) not in known
        ]
        if unknown:
            self.error(UNRECOGNIZED + " ".join(unknown))
        self._refuse_repeated(given)
        return super().parse_known_args(args, namespace)

    def _refuse_repeated(self, given: list[str]) -> None:
        """An option of one value given twice is refused (the last would win and the first
        be dropped without a word); repeatable options (``--where``) and flags are not."""
        seen: dict[argparse.Action, list[str]] = {}
        for i, token in enumerate(given):
            action = self._option_string_actions.get(option_name(token))
            if action is None or action.nargs == 0 or isinstance(action, REPEATABLE):
                continue
            value = token.partition("=")[2] if "=" in token else " ".join(given[i + 1 : i + 2])
            seen.setdefault(action, []).append(value)
        for action, values in seen.items():
            if len(values) > 1:
                self.error(
                    f"{action.option_strings[0]} is given {len(values)} times "
                    f"({', '.join(map(repr, values))}); it takes one value: give it once"
                )

    def with_hint(self, message: str) -> str:
        """``message`` with :func:`with_suggestion` over this parser's options."""
        return with_suggestion(message, self._option_string_actions)

    def error(self, message: str) -> NoReturn:
        super().error(self.with_hint(message))
