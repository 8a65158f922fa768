"""Errors in what the user gave (options, files, checkpoints), as opposed to bugs.

The command line prints these as one paragraph without a traceback (``--debug`` or
``NOISYLABELS_DEBUG=1`` shows it); any other exception is a programming error and keeps its
traceback. Each class also derives from the built-in exception a caller would expect
(``ValueError``, ``FileNotFoundError``, ``ArithmeticError``), so ``except ValueError`` keeps
working. ``exit_code`` is the status the command line exits with.
"""

from __future__ import annotations


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


def load_error_summary(err: BaseException) -> str:
    """The informative line of an error that reading a file raised (``torch.load`` and friends
    explain at length; this keeps the line that says what was found, or the first sentence)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    for line in lines:
        if "GLOBAL" in line or "Unsupported" in line:
            return line
    return lines[0].split(". ")[0] if lines else type(err).__name__
