"""Every method of the registry trains, with VRNL, through the command line, by one test.

Methods are discovered by ``noisylabels.methods.core.registry()``, so a new method is covered
without a new test.
"""

from __future__ import annotations

import gc
import math
import sys
from pathlib import Path

import pytest
import torch

from noisylabels.methods import NoisyLabelMethod, TransitionMethod, registry

from conftest import CONFIGS, read_results

METHODS = registry()


def logged_scalars(folder: Path) -> dict[str, list[float]]:
    """Every scalar of the TensorBoard event files in ``folder``, in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values: dict[str, list[float]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            values.setdefault(tag, []).extend(e.value for e in acc.Scalars(tag))
    return values


def test_registry_lists_the_methods_not_their_bases() -> None:
    assert set(METHODS) >= {
        "CE",
        "CoTeaching",
        "Decoupling",
        "Forward",
        "MentorNet",
        "PTD",
        "Reweight",
        "TRevision",
        "VolMinNet",
    }
    assert not {"NoisyLabelMethod", "TransitionMethod", "TwoNetworkMethod"} & set(METHODS)
    assert "SmallLossMethod" not in METHODS


def test_a_new_module_of_the_package_registers_its_method(tmp_path: Path) -> None:
    import noisylabels.methods as package

    name = "noisylabels.methods.extra_method_for_test"
    (tmp_path / "extra_method_for_test.py").write_text(
        "from noisylabels.methods.ce import CE\n\n\n"
        "class ExtraMethodForTest(CE):\n"
        '    """A method added by a new module."""\n'
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
        assert issubclass(registry()["ExtraMethodForTest"], NoisyLabelMethod)
    sys.modules.pop(name, None)
    vars(package).pop("extra_method_for_test", None)  # the import set it on the package
    gc.collect()  # the class goes with its module
    assert "ExtraMethodForTest" not in registry()
    # and from the class tree, where the command line's parser would still find it
    pending, found = [NoisyLabelMethod], []
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        found.append(cls.__name__)
    assert "ExtraMethodForTest" not in found


def test_model_help_lists_every_method_on_one_line(capsys) -> None:
    from noisylabels.cli import run

    with pytest.raises(SystemExit) as exc:
        run(["fit", "--model.help"])
    assert exc.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    listed = [line.split()[0] for line in lines[1:]]
    assert listed == list(METHODS)
    assert all(len(line.split()) > 3 for line in lines[1:]), "a method without a description"
    with pytest.raises(SystemExit):
        run(["fit", "--help"])
    out = capsys.readouterr().out
    assert all(f"  {name}  " in out for name in METHODS)


def test_model_help_of_a_method_shows_its_option_groups_with_their_docs(capsys) -> None:
    """``--model.help NAME``: the groups' options by their dotted names, each with its
    description and default (here Reweight's own 20 warm-up epochs)."""
    from noisylabels.cli import run

    with pytest.raises(SystemExit) as exc:
        run(["fit", "--model.help", "Reweight"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for option in ("schedule.main_epochs", "optim.lr", "speed.compile", "schedule.warmup_model"):
        assert f"--model.{option} " in out, option
    assert "epochs of plain cross-entropy on the noisy labels" in out
    assert "(type: int, default: 20)" in out and "learning rate (the paper: 0.01)" in out


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_trains_through_the_cli(
    name: str, compiled: bool, run_cli, tmp_path: Path, monkeypatch
) -> None:
    """Two epochs on digits with VRNL: one of warm-up (T estimated after it where a method
    corrects with one), one of its own; also compiled (``aot_eager``), through the stage change
    and its estimation point. The test of the last epoch (``--tail_test_epochs 1``) scores what
    the final test scores: its first figure is ``test_acc_last`` for every method."""
    started: list[dict[str, torch.Tensor]] = []
    on_train_start = NoisyLabelMethod.on_train_start

    def record_start(self: NoisyLabelMethod) -> None:
        on_train_start(self)
        started.append({k: v.detach().clone() for k, v in self.state_dict().items()})

    monkeypatch.setattr(NoisyLabelMethod, "on_train_start", record_start)
    cli = run_cli(
        "fit",
        "--config",
        str(CONFIGS / "data" / "digits.yaml"),
        "--model",
        f"noisylabels.methods.{name}",
        "--model.alpha",
        "0.05",
        "--model.schedule.warmup_epochs",
        "1",
        "--data.noise_rate",
        "0.3",
        "--trainer.max_epochs",
        "2",
        "--trainer.limit_train_batches",
        "6",
        "--trainer.limit_val_batches",
        "2",
        "--trainer.accelerator",
        "cpu",
        "--tail_test_epochs",
        "1",
        *(
            ("--model.transition", "estimate")
            if issubclass(METHODS[name], TransitionMethod)
            else ()
        ),
        *METHODS[name].data_options(),
        *(
            ("--model.speed.compile", "true", "--model.speed.compile_backend", "aot_eager")
            if compiled
            else ()
        ),
    )
    results = read_results(tmp_path)
    assert results["method"] == f"{name}-VRNL"
    assert cli.model.speed.mode == ("default" if compiled else None)
    assert results["epochs"] == 2 and results["best_epoch"] == 1
    assert 0.0 <= results["test_acc"] <= 1.0
    tail = results["test_acc_tail"]
    assert tail["epochs"] == [1] and len(tail["acc"][0]) == len(cli.model.networks)
    assert tail["acc"][0][0] == pytest.approx(results["test_acc_last"], abs=1e-6)
    model, metrics = cli.model, cli.trainer.callback_metrics  # after the test: test metrics
    assert not model.in_warmup
    scalars = logged_scalars(next(tmp_path.rglob("results.json")).parent)
    assert set(model.epoch_stats.sums) == set(range(len(model.networks)))
    for k in range(len(model.networks)):
        prefix = "" if k == 0 else f"net{k}/"
        losses = scalars[f"train/{prefix}loss"]
        assert len(losses) == 2 and all(math.isfinite(v) for v in losses)
        assert 0.0 <= scalars[f"train/{prefix}nonpositive_weight_frac"][-1] <= 1.0
        assert 0.0 <= scalars[f"val/{prefix}acc"][-1] <= 1.0
        assert 0.0 <= float(metrics[f"test/{prefix}acc"]) <= 1.0
    # every network trained: its parameters moved from where the fit started
    start = started[0]
    trained = model.state_dict()
    for prefix in ["net.", *(f"peers.{k}." for k in range(len(model.peers)))]:
        keys = [k for k in start if k.startswith(prefix) and start[k].is_floating_point()]
        assert keys and any(not torch.equal(start[k], trained[k]) for k in keys), prefix
