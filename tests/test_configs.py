"""Shipped configs: presets compose a data and a method group, and resolve as they did before
the configs were split into groups."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import CONFIGS, REPO

PRESETS = sorted(CONFIGS.glob("*.yaml"))
GROUPS = sorted(p for group in ("data", "method", "trainer") for p in (CONFIGS / group).glob("*"))
# every preset as `noisylabels fit --config PRESET --print_config` resolved it when each preset
# was one flat file
SNAPSHOT = json.loads(
    (REPO / "tests" / "data" / "resolved_configs_before_composition.json").read_text()
)


def resolve(capsys: pytest.CaptureFixture, *configs: Path | str, args: tuple = ()) -> dict:
    """The config ``noisylabels fit --config ... --print_config`` prints."""
    from noisylabels.cli import run

    argv = ["fit"]
    for config in configs:
        argv += ["--config", str(config)]
    with pytest.raises(SystemExit) as exc:
        run([*argv, *args, "--print_config"])
    assert exc.value.code == 0
    return yaml.safe_load(capsys.readouterr().out)


def as_resolved_today(before: dict[str, Any]) -> dict[str, Any]:
    """A snapshot entry with the changes made on purpose since: options added with their
    defaults (``milestones_from``, ``warmup_epochs`` of every method, ``network`` of
    SubsetStatistics, Clothing1M's ``max_skipped_fraction``, the speed options ``compile``,
    ``compile_backend`` and, for in-memory data, ``on_device``), LR milestones of a warm-up run
    counted from the first epoch after the warm-up instead of from epoch 0 (the same schedule),
    and ``channels_last: auto`` instead of ``false`` (the same on the CPU, channels-last on
    CUDA)."""
    expected = copy.deepcopy(before)
    args = expected["model"]["init_args"]
    args.setdefault("milestones_from", "main")
    args.setdefault("warmup_epochs", 0)
    args.update(compile="auto", compile_backend="inductor")
    if args.get("channels_last") is False:
        args["channels_last"] = "auto"
    if args.get("transition") == "estimate":
        args["milestones"] = [m - args["warmup_epochs"] for m in args["milestones"]]
    for callback in expected["trainer"]["callbacks"]:
        callback["init_args"].setdefault("network", 0)
    if expected["data"]["class_path"].endswith("Clothing1MDataModule"):
        expected["data"]["init_args"].setdefault("max_skipped_fraction", 0.01)
    else:  # in-memory data (Clothing1M reads files, always on the host)
        expected["data"]["init_args"].setdefault("on_device", "auto")
    return expected


def test_every_preset_resolves_as_before(capsys) -> None:
    assert {p.stem for p in PRESETS} == set(SNAPSHOT), "a preset was added or removed"
    for preset in PRESETS:
        resolved = resolve(capsys, preset)
        assert resolved == as_resolved_today(SNAPSHOT[preset.stem]), preset.name


def test_presets_hold_only_overrides() -> None:
    """A preset composes one data and one method group and sets few keys of its own."""
    for preset in PRESETS:
        content = yaml.safe_load(preset.read_text())
        data, method = content["compose"]
        assert (CONFIGS / data).is_file() and data.startswith("data/"), preset.name
        assert (CONFIGS / method).is_file() and method.startswith("method/"), preset.name
        own = sum(len(v) if isinstance(v, dict) else 1 for k, v in content.items())
        assert own <= 8, f"{preset.name} repeats what its groups say"


def test_groups_compose_on_the_command_line(capsys) -> None:
    """data + method groups given as repeated --config resolve like the preset of the pair."""
    preset = resolve(capsys, CONFIGS / "mnist_forward_vrnl.yaml")
    composed = resolve(
        capsys,
        CONFIGS / "data" / "mnist.yaml",
        CONFIGS / "method" / "forward_vrnl.yaml",
        args=("--trainer.default_root_dir", "runs/mnist_forward_vrnl"),
    )
    assert composed == preset
    # order does not matter for disjoint groups: the data file may set the backbone first
    swapped = resolve(
        capsys,
        CONFIGS / "method" / "forward_vrnl.yaml",
        CONFIGS / "data" / "mnist.yaml",
        args=("--trainer.default_root_dir", "runs/mnist_forward_vrnl"),
    )
    assert swapped == preset


def test_every_group_file_parses(capsys) -> None:
    for group in GROUPS:
        other = "method/ce.yaml" if "/data/" in str(group) else "data/digits.yaml"
        resolve(capsys, CONFIGS / other, group)


def test_compose_errors_name_the_files(tmp_path: Path) -> None:
    from noisylabels.cli import run
    from noisylabels.errors import InputError, MissingFileError

    (tmp_path / "a.yaml").write_text("compose: [b.yaml]\n")
    (tmp_path / "b.yaml").write_text("compose: [a.yaml]\n")
    with pytest.raises(InputError, match="cycle"):
        run(["fit", "--config", str(tmp_path / "a.yaml"), "--print_config"])
    (tmp_path / "c.yaml").write_text("compose: [missing.yaml]\n")
    with pytest.raises(MissingFileError, match="missing.yaml"):
        run(["fit", "--config", str(tmp_path / "c.yaml"), "--print_config"])
