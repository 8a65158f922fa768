"""Errors in what the user gave (options, files, checkpoints), as opposed to bugs.

The command line prints these as one paragraph without a traceback (``--debug`` or
``NOISYLABELS_DEBUG=1`` shows it); any other exception is a programming error and keeps its
traceback. Each class also derives from the built-in exception a caller would expect
(``ValueError``, ``FileNotFoundError``), so ``except ValueError`` keeps working.
"""

from __future__ import annotations


class NoisyLabelsError(Exception):
    """Base of the errors caused by the user's input; the message says what to do."""


class InputError(NoisyLabelsError, ValueError):
    """A bad option value or file content."""


class MissingFileError(NoisyLabelsError, FileNotFoundError):
    """A file or folder the run needs does not exist."""
