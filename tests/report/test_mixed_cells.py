"""``noisylabels report`` flags a cell whose runs differ in more than their seed (a trial
sweep's runs beside the real ones), naming the options and which seeds have which value."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from noisylabels.report.cli import main


def write_run(root: Path, seed: int, epochs: int, data_dir: str = "data") -> None:
    folder = root / "forward" / f"seed-{seed}" / "version_0"
    folder.mkdir(parents=True)
    results = {
        "method": "Forward",
        "alpha": 0.0,
        "backbone": "lenet5",
        "dataset": "mnist",
        "noise": {"type": "symmetric", "rate_nominal": 0.2},
        "seed": seed,
        "test_acc": 0.9 + seed / 100,
        "test_acc_last": 0.9,
    }
    (folder / "results.json").write_text(json.dumps(results))
    config = {
        "seed_everything": seed,
        "trainer": {"max_epochs": epochs, "default_root_dir": f"runs/seed-{seed}"},
        "data": {"init_args": {"noise_seed": seed, "data_dir": data_dir}},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))


def test_a_cell_mixing_a_trial_run_with_real_ones_is_flagged(tmp_path: Path, capsys) -> None:
    write_run(tmp_path, 0, epochs=80)
    write_run(tmp_path, 1, epochs=80, data_dir="/elsewhere")  # where data is: not an option
    write_run(tmp_path, 2, epochs=1)
    text = main([str(tmp_path)])
    assert "Warning: these cells average runs made with different options" in text
    line = next(line for line in text.splitlines() if line.startswith("- cell Forward"))
    assert "trainer.max_epochs = 80 (seed 0, 1), 1 (seed 2)" in line
    assert "seed_everything" not in line and "data_dir" not in line
    capsys.readouterr()
    main([str(tmp_path), "--format", "csv"])  # the CSV stays CSV: the warning goes to stderr
    captured = capsys.readouterr()
    assert "Warning" not in captured.out and "trainer.max_epochs = 80" in captured.err


def test_runs_that_differ_only_in_their_seed_are_not_flagged(tmp_path: Path) -> None:
    for seed in range(3):
        write_run(tmp_path, seed, epochs=80)
    assert "Warning" not in main([str(tmp_path)])
