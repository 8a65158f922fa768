"""Config files are parsed once per distinct text: a sweep reads the same few files for each of
its hundreds of runs. What a reader gets is its own copy, and always the file's current text.
The one YAML reader reads every record and shipped config as YAML's safe loader does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from noisylabels import compose
from noisylabels.disk import reading


def test_a_text_is_parsed_once_and_each_read_is_a_copy(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("trainer:\n  max_epochs: 3\n  devices: 1\n")
    calls = []
    parse = compose.parse_yaml
    monkeypatch.setattr(compose, "parse_yaml", lambda *a, **k: calls.append(1) or parse(*a, **k))
    compose._parse_yaml.cache_clear()
    first = compose.read_yaml(path)
    first["trainer"]["max_epochs"] = 99  # a reader's change stays its own
    second = compose.read_yaml(path)
    assert second == {"trainer": {"max_epochs": 3, "devices": 1}}
    assert len(calls) == 1
    path.write_text("trainer:\n  max_epochs: 4\n  devices: 1\n")  # same size, new text
    assert compose.read_yaml(path)["trainer"]["max_epochs"] == 4
    assert len(calls) == 2


def test_the_reader_reads_every_record_as_the_safe_loader_does() -> None:
    """:func:`noisylabels.disk.reading.parse_yaml` (libyaml where PyYAML has it) reads a committed
    run's ``config.yaml`` of each results folder and every shipped config to the values
    ``yaml.safe_load`` gives, and refuses what it refuses."""
    repo = Path(__file__).resolve().parents[2]
    records = [next(folder.rglob("config.yaml")) for folder in sorted((repo / "results").iterdir())
               if folder.is_dir()]  # fmt: skip
    files = records + sorted((repo / "configs").rglob("*.yaml"))
    assert len(records) >= 5 and len(files) > 50
    for file in files:
        text = file.read_text()
        assert reading.parse_yaml(text, unique_keys=True) == yaml.safe_load(text), file
    for damaged in ("a: [1, 2\n", "a: b: c\n", "\t- x\n", "a: 1\nb: *x\n"):
        with pytest.raises(yaml.YAMLError):
            yaml.safe_load(damaged)
        with pytest.raises(reading.UnreadableFile, match="not valid YAML"):
            reading.parse_yaml(damaged)
