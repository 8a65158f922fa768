"""``--trainer.logger`` given by class name: where a logger without a ``save_dir`` writes.

Lightning's default logger (TensorBoard) writes under ``--trainer.default_root_dir``; a logger
named on the command line (``--trainer.logger CSVLogger``, or a list such as
``--trainer.logger '[CSVLogger, TensorBoardLogger]'``) whose class requires a ``save_dir`` and
is given none writes there too, so every logger of a run shares the run's root. A logger whose
``save_dir`` has a default of its own (W&B, MLflow, Comet) keeps it.

The parser accepts such a logger with ``save_dir`` unset (``null``, as ``--print_config``
prints it, like ``default_root_dir`` itself); the CLI sets it to the resolved root before the
classes are built, so ``config.yaml`` records the folder the logger wrote to.
"""

from __future__ import annotations

import inspect
from typing import Any

from noisylabels.compose import import_class

SAVE_DIR = "save_dir"
LOGGER_KEY = "trainer.logger"


def requires_save_dir(class_path: str) -> bool:
    """Whether the logger class ``class_path`` has a ``save_dir`` parameter without a
    default (TensorBoardLogger, CSVLogger)."""
    cls = import_class(class_path)
    if cls is None:
        return False
    try:
        parameter = inspect.signature(cls).parameters.get(SAVE_DIR)
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


def fill_save_dirs(value: Any, root: str) -> bool:
    """Set ``save_dir`` to ``root`` (in place) in every logger of a parsed ``trainer.logger``
    value (a ``class_path``/``init_args`` namespace, a list of them, or ``true``, ``false``,
    ``null``) whose class requires one and that has none; whether any was set."""
    from jsonargparse import Namespace

    filled = False
    for spec in value if isinstance(value, list) else [value]:
        class_path = getattr(spec, "class_path", None)
        if not isinstance(class_path, str) or not requires_save_dir(class_path):
            continue
        if not isinstance(spec.get("init_args"), Namespace):
            spec.init_args = Namespace()
        if spec.init_args.get(SAVE_DIR) is None:
            spec.init_args[SAVE_DIR] = root
            filled = True
    return filled


def logger_keys(config: Any) -> list[str]:
    """Where a parsed config holds ``trainer.logger``: at the top, or under the subcommand it
    runs (``fit.trainer.logger``)."""
    subcommand = config.get("subcommand")
    keys = [LOGGER_KEY] + ([f"{subcommand}.{LOGGER_KEY}"] if subcommand else [])
    return [key for key in keys if config.get(key) is not None]


def share_run_folder(loggers: list[Any]) -> None:
    """Let the TensorBoard and CSV loggers of a run that write under the first logger's root
    (the same ``save_dir`` and ``name``) and were given no ``version`` write into the first
    one's version folder, the run folder, instead of taking the next free one each
    (``--trainer.logger '[CSVLogger, TensorBoardLogger]'``: both in ``version_N``)."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    kinds = (TensorBoardLogger, CSVLogger)
    if len(loggers) < 2 or not isinstance(loggers[0], kinds):
        return
    first = loggers[0]
    for logger in loggers[1:]:
        # Lightning's loggers take their version lazily from ``_version`` (None: the next
        # free folder); they have no public way to set it after construction
        if isinstance(logger, kinds) and logger._version is None:
            if logger.root_dir == first.root_dir:
                logger._version = first.version
