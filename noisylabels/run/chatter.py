"""What Lightning prints that says nothing about a run: its tips advertising its cloud
services ("💡 Tip: ... try installing litlogger", "... litmodels"), printed at every trainer's
construction with no option to turn them off. :func:`drop_tips` installs a logging filter that
drops them (the supported way to select Lightning's log records); every other message of
Lightning's is kept.
"""

from __future__ import annotations

import logging

TIP = "💡 Tip:"
# the loggers Lightning's rank_zero_info writes through (fabric's, and pytorch's once imported)
RANK_ZERO_LOGGERS = (
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.utilities.rank_zero",
)


class DropTips(logging.Filter):
    """Drop the log records of Lightning's advertising tips."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TIP)


def drop_tips() -> None:
    """Install :class:`DropTips` on Lightning's rank-zero loggers (once)."""
    for name in RANK_ZERO_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropTips) for f in logger.filters):
            logger.addFilter(DropTips())
