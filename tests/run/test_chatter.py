"""A run prints no advertising: Lightning's "💡 Tip: ... litlogger" (and litmodels) lines are
dropped by the command line's logging filter; Lightning's other messages still show."""

from __future__ import annotations

import logging
from pathlib import Path

from noisylabels.run.chatter import RANK_ZERO_LOGGERS, TIP, DropTips, drop_tips

from conftest import CONFIGS


def test_a_run_prints_no_tip(tmp_path: Path, capfd) -> None:
    from noisylabels.cli import run

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    loggers = [logging.getLogger(name) for name in RANK_ZERO_LOGGERS]
    for logger in loggers:  # what passes the loggers' filters, whatever prints it
        logger.addHandler(handler)
    try:
        quickstart = str(CONFIGS / "quickstart.yaml")
        run(["fit", "--config", quickstart, "--trainer.fast_dev_run", "1",
             "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar",
             "false"])  # fmt: skip
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    messages = [record.getMessage() for record in records]
    assert not [m for m in messages if TIP in m or "litlogger" in m]
    assert any(m.startswith("GPU available:") for m in messages)  # Lightning's other lines stay
    assert "litlogger" not in "".join(capfd.readouterr())


def test_the_filter_drops_tips_only_and_is_installed_once() -> None:
    keep = logging.LogRecord("x", logging.INFO, __file__, 1, "GPU available: False", None, None)
    tip = logging.LogRecord("x", logging.INFO, __file__, 1, f"{TIP} try litlogger", None, None)
    assert DropTips().filter(keep) and not DropTips().filter(tip)
    drop_tips()
    drop_tips()
    for name in RANK_ZERO_LOGGERS:
        filters = logging.getLogger(name).filters
        assert sum(isinstance(f, DropTips) for f in filters) == 1
