"""``noisylabels report`` reads only regular files: a named pipe where a run's file should be is
named as damaged, never opened."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from noisylabels.report.cli import main

SYM = {"type": "symmetric", "rate_nominal": 0.2}
MISSING = object()  # the metric's key is absent from results.json


def write_run(folder: Path, method: str, seed: int, **fields: Any) -> Path:
    """A results.json in ``folder``: a run of ``method`` on MNIST Sym-20 % with ``fields``
    (``MISSING``: leave the key out); written as Python's json writes NaN and Infinity."""
    folder.mkdir(parents=True, exist_ok=True)
    results = {
        "method": method,
        "alpha": 0.1 if method.endswith("-VRNL") else 0.0,
        "backbone": "lenet5",
        "dataset": "mnist",
        "noise": SYM,
        "seed": seed,
        "test_acc": 0.9,
        "test_acc_last": 0.9,
    }
    results.update(fields)
    results = {k: v for k, v in results.items() if v is not MISSING}
    file = folder / "results.json"
    file.write_text(json.dumps(results))
    return file


def test_a_named_pipe_is_named_as_damaged_not_opened(tmp_path: Path, capsys) -> None:
    """A FIFO named results.json, config.yaml or sweep_run.json (nothing writes to it: a reader
    would wait for ever) is skipped with a warning, and named by --strict."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    root = tmp_path / "runs"
    write_run(root / "good", "CE", 0)
    pipes = [root / "pipe" / "results.json", root / "config" / "config.yaml"]
    pipes.append(root / "point" / "sweep_run.json")
    write_run(root / "config", "CE", 1)
    write_run(root / "point" / "version_0", "CE", 2)
    (root / "pipe").mkdir()
    for pipe in pipes:
        os.mkfifo(pipe)

    def run(argv: list[str]) -> dict[str, Any]:
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["text"] = main(argv)
            except SystemExit as exc:
                outcome["exit"] = exc.code

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(timeout=30)
        if thread.is_alive():
            for pipe in pipes:  # a writer that closes at once ends the blocked read
                try:
                    os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
            thread.join(timeout=5)
            pytest.fail("the report blocked on a named pipe")
        return outcome

    capsys.readouterr()
    outcome = run([str(root)])
    err = capsys.readouterr().err
    assert "| CE | **90.00 (1)** |" in outcome["text"]
    assert "noisylabels report: warning: 3 run(s) skipped" in err
    for pipe in pipes:
        assert f"{pipe} is a named pipe (FIFO), not a regular file" in err
    assert run([str(root), "--strict"]) == {"exit": 2}
    assert "is a named pipe (FIFO), not a regular file" in capsys.readouterr().err
