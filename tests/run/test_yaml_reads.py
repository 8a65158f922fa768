"""Config files are parsed once per distinct text: a sweep reads the same few files for each of
its hundreds of runs. What a reader gets is its own copy, and always the file's current text."""

from __future__ import annotations

from pathlib import Path

import yaml

from noisylabels.run import compose


def test_a_text_is_parsed_once_and_each_read_is_a_copy(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("trainer:\n  max_epochs: 3\n  devices: 1\n")
    calls = []
    load = yaml.load
    monkeypatch.setattr(yaml, "load", lambda *a, **k: calls.append(1) or load(*a, **k))
    compose._parse_yaml.cache_clear()
    first = compose.read_yaml(path)
    first["trainer"]["max_epochs"] = 99  # a reader's change stays its own
    second = compose.read_yaml(path)
    assert second == {"trainer": {"max_epochs": 3, "devices": 1}}
    assert len(calls) == 1
    path.write_text("trainer:\n  max_epochs: 4\n  devices: 1\n")  # same size, new text
    assert compose.read_yaml(path)["trainer"]["max_epochs"] == 4
    assert len(calls) == 2
