"""Shipped configs: presets compose a data and a method group, groups parse and compose on the
command line, and compose errors name their files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import CONFIGS

PRESETS = sorted(CONFIGS.glob("*.yaml"))
GROUPS = sorted(p for group in ("data", "method", "trainer") for p in (CONFIGS / group).glob("*"))
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
