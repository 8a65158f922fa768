"""benchmarks/cores_sieve_probe.py, the callback docs/results.md reads CORES²'s sieve with: one
line per epoch, the sieve off then on at ``sieve_epoch``, shares between 0 and 1, and a run with
the probe trains the same networks as one without it (it draws no random numbers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import CONFIGS, REPO, read_results

sys.path.insert(0, str(REPO / "benchmarks"))

ARGS = [
    "fit", "--config", str(CONFIGS / "data" / "digits.yaml"),
    "--config", str(CONFIGS / "method" / "cores.yaml"),
    "--data.noise_rate", "0.5", "--model.beta_start", "1", "--model.beta_ramp_epochs", "2",
    "--model.sieve_epoch", "2", "--model.schedule.main_epochs", "4",
    "--model.schedule.milestones", "[3]", "--trainer.limit_train_batches", "4",
]  # fmt: skip


@pytest.mark.slow  # two short runs; a diagnostic of docs/results.md, not of the package
def test_the_probe_writes_an_epoch_a_line_and_leaves_the_run_alone(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = tmp_path / "probe.jsonl"
    monkeypatch.setenv("NOISYLABELS_SIEVE_PROBE", str(probe))
    run_cli(*ARGS, "--trainer.callbacks+=cores_sieve_probe.CoresProbe",
            "--trainer.default_root_dir", str(tmp_path / "probed"))  # fmt: skip
    run_cli(*ARGS, "--trainer.default_root_dir", str(tmp_path / "plain"))
    lines = [json.loads(line) for line in probe.read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [0, 1, 2, 3]
    assert [r["sieving"] for r in lines] == [False, False, True, True]
    assert [r["beta"] for r in lines] == [0.0, 0.0, 2.0, 2.0]
    for r in lines:
        for key in ("kept_frac_rule", "kept_precision", "clean_recall", "pred_share_max"):
            assert 0.0 <= r[key] <= 1.0
        assert sum(r["pred_hist"]) == 4 * 64  # 4 batches of the preset's 64
    probed, plain = read_results(tmp_path / "probed"), read_results(tmp_path / "plain")
    assert probed["test_acc_last"] == plain["test_acc_last"]
