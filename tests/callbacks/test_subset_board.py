"""TensorBoard's first screen tells the story: the mislabeled and the correctly labeled samples'
statistics are the first group, each subset a named run of its own (so a line per subset,
coloured and named by it), with the figure of ``noisylabels plot``; the Custom Scalars charts
are those lines; ``hp_metric`` is the clean test accuracy alone, declared in the HParams tab."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from noisylabels.callbacks.subset_board import (
    CHARTS,
    FIGURE,
    FOLDER,
    GROUP,
    RUN_NAMES,
    board_tag,
    custom_scalars_layout,
)

from conftest import CONFIGS, read_results


def _tensorboard_order(a: str, b: str) -> int:
    """TensorBoard's tag order (its Time Series dashboard sorts cards with this rule before
    grouping them by the prefix before '/'): digits and '/' first, other characters by code."""
    special = lambda c: c == "/" or c.isdigit()  # noqa: E731
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        if special(x) != special(y):
            return -1 if special(x) else 1
        return -1 if x < y else 1
    return (len(a) > len(b)) - (len(a) < len(b))


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from noisylabels.cli import run

    root = tmp_path_factory.mktemp("board")
    run(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "5",
         "--trainer.default_root_dir", str(root),
         "--trainer.enable_progress_bar", "false"])  # fmt: skip
    return root


def test_the_subsets_are_the_first_group_a_named_run_each(quickstart_run: Path) -> None:
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem

    folder = next(quickstart_run.rglob("results.json")).parent
    board = pem.EventMultiplexer()
    board.AddRunsFromDirectory(str(folder))
    board.Reload()
    subsets = {f"{FOLDER}/{name}" for name in RUN_NAMES.values()}
    assert set(board.Runs()) == {".", *subsets}
    tags = {
        run: set(board.GetAccumulator(run).PluginTagToContent("scalars")) for run in board.Runs()
    }
    for run in subsets:
        assert tags[run] == {board_tag(q) for q in CHARTS}  # the same charts, a line each
        steps = [e.step for e in board.GetAccumulator(run).Tensors(board_tag("loss_mean"))]
        assert len(steps) == 5 and steps == sorted(steps)
    every = set().union(*tags.values())
    first = sorted(every, key=functools.cmp_to_key(_tensorboard_order))
    groups = list(dict.fromkeys(t.split("/", 1)[0] for t in first))
    assert groups[0] == GROUP, groups
    # the figure, in the plot's colours with the subsets named, in the same group
    images = board.GetAccumulator(".").PluginTagToContent("images")
    assert FIGURE in images and FIGURE.startswith(f"{GROUP}/")
    (shown,) = board.GetAccumulator(".").Tensors(FIGURE)  # 5 epochs: at the 5th
    assert shown.step == 4


def test_custom_scalars_chart_the_subset_runs() -> None:
    (charts,) = custom_scalars_layout().values()
    assert set(charts) == set(CHARTS.values())
    for quantity, name in CHARTS.items():
        kind, (pattern,) = charts[name]
        assert kind == "Multiline" and re.fullmatch(pattern, board_tag(quantity))
        others = [board_tag(q) for q in CHARTS if q != quantity]
        assert not any(re.fullmatch(pattern, t) for t in others)


def test_hp_metric_is_the_test_accuracy_alone(quickstart_run: Path) -> None:
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.plugins.hparams import metadata

    folder = next(quickstart_run.rglob("results.json")).parent
    events = pea.EventAccumulator(str(folder))
    events.Reload()
    values = [float(e.tensor_proto.float_val[0]) for e in events.Tensors("hp_metric")]
    assert values == [pytest.approx(read_results(quickstart_run)["test_acc"])]
    content = events.PluginTagToContent("hparams")
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    assert [m.name.tag for m in experiment.metric_infos] == ["hp_metric"]
    assert len(experiment.hparam_infos) > 10  # the run's options, beside it
