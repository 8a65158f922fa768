"""Errors in what the user gave (options, files, checkpoints), as opposed to bugs.

The command line prints these as one paragraph without a traceback (``--debug`` or
``NOISYLABELS_DEBUG=1`` shows it); any other exception is a programming error and keeps its
traceback. Each class also derives from the built-in exception a caller would expect
(``ValueError``, ``FileNotFoundError``, ``ArithmeticError``, ``OSError``), so ``except
ValueError`` keeps working. ``exit_code`` is the status the command line exits with.

A user error is a :class:`NoisyLabelsError` anywhere in an exception's chain (jsonargparse wraps
the errors of constructors into its own: :func:`user_error`), or a command-line parse error of
jsonargparse, which :func:`option_error` turns into an :class:`OptionError` naming the option.

What the package warns of goes through :func:`warn`, as a :class:`NoisyLabelsWarning`, printed as
``noisylabels warning: <message>`` (the message says what to do; the line of the package's
source that raised it says nothing to a user, and Lightning's formatter would name the Lightning
file that called the package's hook). This module imports nothing of the package.
"""

from __future__ import annotations

import re
import warnings
from argparse import ArgumentError
from typing import Any


class NoisyLabelsWarning(UserWarning):
    """A warning of the package: something the user may want to change, said with how."""


WARNING_PREFIX = "noisylabels warning: "


def _process_rank() -> int:
    """This process's global rank, as Lightning's rank-zero helpers know it (0 before a
    strategy sets it)."""
    from lightning_utilities.core.rank_zero import rank_zero_only

    return int(getattr(rank_zero_only, "rank", 0) or 0)


def warn(message: str, *, every_process: bool = False) -> None:
    """Warn of ``message`` as a :class:`NoisyLabelsWarning`: from process 0 only (one line for
    a DDP run), or from each process that calls it with ``every_process`` (what each process
    saw for itself, such as the images its data loader skipped)."""
    if every_process or _process_rank() == 0:
        warnings.warn(message, NoisyLabelsWarning, stacklevel=2)


_format_before = warnings.formatwarning


def _format_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: Any = None
) -> str:
    if isinstance(category, type) and issubclass(category, NoisyLabelsWarning):
        return f"{WARNING_PREFIX}{message}\n"
    return _format_before(message, category, filename, lineno, line)


warnings.formatwarning = _format_warning


class NoisyLabelsError(Exception):
    """Base of the errors caused by the user's input; the message says what to do."""

    exit_code = 2


class InputError(NoisyLabelsError, ValueError):
    """A bad option value or file content."""


class MissingFileError(NoisyLabelsError, FileNotFoundError):
    """A file or folder the run needs does not exist."""


class DivergenceError(NoisyLabelsError, ArithmeticError):
    """The training loss became NaN or infinite; the run is stopped."""

    exit_code = 3


class StorageError(NoisyLabelsError, OSError):
    """A file could not be written: the disk is full, or the folder is read-only; the message
    names the folder and its free space."""


def load_error_summary(err: BaseException) -> str:
    """The informative line of an error that reading a file raised (``torch.load`` and friends
    explain at length; this keeps the line that says what was found, or the first sentence)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    for line in lines:
        if "GLOBAL" in line or "Unsupported" in line:
            return line
    return lines[0].split(". ")[0] if lines else type(err).__name__


class OptionError(InputError):
    """A command-line option or config value that does not parse."""


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


NON_FINITE = ("nan", "inf", "infinity")

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
    got = re.search(r"Got value: (\S+)", text)
    value = got.group(1).rstrip(".") if got else given
    if value is not None and value.strip().lower().lstrip("+-") in NON_FINITE and "float" in text:
        # jsonargparse refuses NaN and infinity for a float, then says it expected a float
        text = f"{value.strip()} is not a finite number: give a finite value"
        given = None
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


def option_error(err: ArgumentError, stage: str = "fit") -> OptionError:
    """An :class:`OptionError` for a jsonargparse parse error of the ``stage`` command (``fit``,
    ``validate``, ``test``, ``predict``), saying where its options are."""
    return OptionError(
        f"{condense_parse_error(str(err.message))}. Run `noisylabels {stage} --help` for the "
        "options (`--model.help CLASS` / `--data.help CLASS` for those of a method or dataset)."
    )
