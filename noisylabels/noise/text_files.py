"""Reading the text files a user hands in (label CSVs, transition-matrix CSVs) as UTF-8, with a
message naming the file when they are not.

A byte-order mark of UTF-8 (as spreadsheet programs write "CSV UTF-8") is dropped; a file in
UTF-16 ("Unicode text") or any other encoding that is not UTF-8 is refused with the advice to
save it as UTF-8.
"""

from __future__ import annotations

from pathlib import Path

from noisylabels.disk.reading import LIMITS, read_bytes
from noisylabels.errors import InputError

__all__ = ["read_text"]

_UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")


def read_text(path: Path, what: str) -> str:
    """The text of ``path`` (``what`` names it in messages, e.g. "label file"), decoded as
    UTF-8 (a leading byte-order mark dropped). Raises
    :class:`~noisylabels.errors.InputError` naming the file for UTF-16 or other non-UTF-8
    content, and for a file that cannot be read."""
    data = read_bytes(path, what, LIMITS["text"])  # a regular file, within its limit
    if data.startswith(_UTF16_MARKS) or (len(data) > 1 and b"\x00" in data[:64]):
        raise InputError(
            f"{what} {path} is UTF-16 text (as some programs save 'Unicode text'); save it as "
            "UTF-8 or plain ASCII text, e.g. as 'CSV UTF-8'"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{what} {path} is not UTF-8 text (byte {err.start} cannot be decoded); it must be "
            "a text file of numbers saved as UTF-8 or plain ASCII"
        ) from None
