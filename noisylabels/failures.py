"""How the command line reports a failed run: user errors as one paragraph, bugs as tracebacks.

A user error is a :class:`~noisylabels.errors.NoisyLabelsError` anywhere in an exception's
chain (jsonargparse wraps the errors of constructors into its own), or a command-line parse error
of jsonargparse, which :func:`option_error` turns into an :class:`OptionError` naming the option.
``--debug`` or ``NOISYLABELS_DEBUG=1`` keeps the traceback of user errors too.
"""

from __future__ import annotations

import os
import re
from argparse import ArgumentError

from noisylabels.errors import InputError, NoisyLabelsError

DEBUG_FLAG = "--debug"
DEBUG_ENV = "NOISYLABELS_DEBUG"
SIGTERM_EXIT = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended


class OptionError(InputError):
    """A command-line option or config value that does not parse."""


def debug_requested(argv: list[str]) -> bool:
    """Whether ``argv`` or the environment asks for tracebacks of user errors."""
    return DEBUG_FLAG in argv or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def user_error(exc: BaseException) -> NoisyLabelsError | None:
    """The user error behind ``exc``: itself, or an exception it was raised *from* (as
    jsonargparse raises its own from a constructor's), however deep; ``None`` for a programming
    error. An error merely raised while handling a user error is a programming error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, NoisyLabelsError):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


_SKIPPED = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Errors:",
    "Given value type:",
)


def condense_parse_error(message: str) -> str:
    """One line from jsonargparse's nested parse-error report: the option as ``--a.b.c``, what
    is wrong with it, and for which class; the alternatives it also tried (``None``) and the
    dumps of the given values are dropped."""
    keys: list[str] = []
    details: list[str] = []
    classes: list[str] = []
    given = None
    for raw in message.splitlines():
        line = raw.strip().removeprefix("- ").strip()
        if not line or line.startswith(_SKIPPED) or "<class 'NoneType'>" in line:
            continue
        if match := re.match(r'Parser key "([^"]+)":?\s*(.*)', line):
            keys.append(match.group(1))
            if match.group(2):
                details.append(match.group(2))
        elif match := re.match(r"Problem with given class_path '([^']+)':?", line):
            classes.append(match.group(1))
        elif line.startswith("Given value:"):
            given = line.removeprefix("Given value:").strip()
        else:
            details.append(line)
    text = "; ".join(details) or message.strip()
    text = re.sub(r"Expected a <class '([\w.]+)'>", r"expected a value of type \1", text)
    text = re.sub(r"<class '([\w.]+)'>", r"\1", text)
    if (
        given
        and "got value" not in text.lower()
        and not given.startswith(("Namespace(", "NestedArg("))
    ):
        text += f" (given: {given})"
    if classes:
        text += f" (in {classes[-1]})"
    return f"--{'.'.join(keys)}: {text}" if keys else text


def option_error(err: ArgumentError) -> OptionError:
    """An :class:`OptionError` for a jsonargparse parse error, saying where the options are."""
    return OptionError(
        f"{condense_parse_error(str(err.message))}. Run `noisylabels fit --help` for the options "
        "(`--model.help CLASS` / `--data.help CLASS` for those of a method or dataset)."
    )


def paragraph(err: BaseException) -> str:
    """``err``'s message as one paragraph (its lines joined), with the debug hint."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return (
        f"noisylabels: error: {text} (Run with {DEBUG_FLAG} or {DEBUG_ENV}=1 to see the traceback.)"
    )
