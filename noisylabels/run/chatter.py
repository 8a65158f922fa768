"""What Lightning prints that says nothing about a run: its tips advertising its cloud
services ("💡 Tip: ... try installing litlogger", "... litmodels"), printed at every trainer's
construction with no option to turn them off, and warnings that do not apply to the project's
runs or that no user can act on (:data:`NOT_FOR_USERS`). :func:`drop_tips` installs a logging
filter that drops the tips (the supported way to select Lightning's log records);
:func:`quiet_lightning` adds the warning filters. Every other message of Lightning's is kept.
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


# (message pattern, category, why it does not reach a user)
NOT_FOR_USERS: tuple[tuple[str, type[Warning], str], ...] = (
    (
        r"It is recommended to use `self\.log\('(train|val|test|subsets)/",
        Warning,
        "the project's epoch values are already reduced over DDP processes (torchmetrics' "
        "compute, strategy.reduce) when they are logged: the advice to add sync_dist does not "
        "apply",
    ),
    (
        r".*configured with multiple `ModelCheckpoint`",
        Warning,
        "last.ckpt's writer is a second checkpoint callback; 'best' is the first one's, as meant",
    ),
    (
        r".*callbacks used to create the checkpoint need",
        Warning,
        "test / predict --ckpt_path: the fit callbacks asked for again (the run's recorder, its "
        "health monitor) keep what only a fit continues; evaluation needs the weights",
    ),
    (
        r".*treespec, LeafSpec.* is deprecated",
        FutureWarning,
        "Lightning's own pytree helper calls an API this torch deprecates, on every fit and "
        "test: nothing in a run or its options changes it",
    ),
    (
        r"The dirpath has changed from",
        Warning,
        "a finished run continued with --ckpt_path goes on in a new run folder, which the run "
        "says itself; its checkpoints' best-k record starts anew there, as meant",
    ),
    (
        r"Checkpoint directory .* exists and is not empty",
        Warning,
        "a resumed run writes on in its own checkpoints folder, which its lock keeps for it alone "
        "(a new run always gets an empty folder of its own)",
    ),
)


def quiet_lightning() -> None:
    """Drop what Lightning says that does not apply to the project's runs: :func:`drop_tips`,
    and the warnings of :data:`NOT_FOR_USERS` (each filter first in the list, once: Python
    moves a filter added again to the front)."""
    for message, category, _ in NOT_FOR_USERS:
        warnings.filterwarnings("ignore", message=message, category=category)
    drop_tips()
