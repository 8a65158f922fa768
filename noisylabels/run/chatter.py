"""What Lightning prints that says nothing about a run: its tips advertising its cloud
services ("💡 Tip: ... try installing litlogger", "... litmodels"), printed at every trainer's
construction with no option to turn them off. :func:`drop_tips` installs a logging filter that
drops them (the supported way to select Lightning's log records); every other message of
Lightning's is kept.
"""

from __future__ import annotations

import logging
import warnings

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


def quiet_lightning() -> None:
    """Drop what Lightning says that does not apply to the project's runs: :func:`drop_tips`,
    and three warnings."""
    # the project's epoch values are already reduced over DDP processes (torchmetrics' compute,
    # strategy.reduce) when they are logged: Lightning's advice to add sync_dist does not apply
    warnings.filterwarnings(
        "ignore", message=r"It is recommended to use `self\.log\('(train|val|test|subsets)/"
    )
    # last.ckpt's writer is a second checkpoint callback; "best" is the first one's, as meant
    warnings.filterwarnings("ignore", message=r".*configured with multiple `ModelCheckpoint`")
    # `test` / `predict --ckpt_path`: the fit callbacks Lightning asks for again (the run's
    # recorder, its health monitor) keep what only a fit continues; evaluation needs the weights
    warnings.filterwarnings("ignore", message=r".*callbacks used to create the checkpoint need")
    drop_tips()
