"""SubsetStatistics: per-subset loss statistics of mislabeled vs correctly labeled samples."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from noisylabels.callbacks import SubsetStatistics
from noisylabels.callbacks.subset_stats import csv_columns, write_csv_row
from noisylabels.callbacks.subsets import tag
from noisylabels.data import DigitsDataModule
from noisylabels.data.loaded import LoadedData
from noisylabels.methods import CE, StepOutput

from conftest import CONFIGS, REPO, synthetic_facts, tiny_trainer

CALLBACK = "noisylabels.callbacks.SubsetStatistics"
# the callback list on the command line, whatever the config lists
ONLY_CALLBACK = f'--trainer.callbacks=[{{"class_path": "{CALLBACK}"}}]'
LN2 = math.log(2.0)

# ------------------------------------------------------------------ hand computation
# 8 samples, 3 classes; labels 1, 4 and 6 are flipped.
CLEAN = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
NOISY = torch.tensor([0, 2, 2, 0, 0, 2, 1, 1])
# probability the model gives each sample's noisy label; the rest is spread evenly
P_NOISY = [0.5, 0.5, 0.25, 0.125, 0.25, 0.5, 0.125, 0.25]
# probability of the clean label where it differs from the noisy one (mislabeled samples)
P_CLEAN_MIS = {1: 0.25, 4: 0.5, 6: 0.125}
WEIGHTS = [1.2, 0.9, 1.1, -0.1, 1.0, 0.8, -0.3, 1.3]


def _logits(i: int) -> list[float]:
    probs = [0.0, 0.0, 0.0]
    probs[int(NOISY[i])] = P_NOISY[i]
    if i in P_CLEAN_MIS:
        probs[int(CLEAN[i])] = P_CLEAN_MIS[i]
    rest = [k for k in range(3) if probs[k] == 0.0]
    share = (1.0 - sum(probs)) / len(rest)
    for k in rest:
        probs[k] = share
    return [math.log(p) for p in probs]


def _step(
    indices: list[int], scale: float = 1.0, used: list[bool] | None = None, network: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A training step's outputs and batch for ``indices``; ``scale`` distorts the values,
    ``used`` marks the samples the objective used (weights only for those)."""
    idx = torch.tensor(indices)
    logits = torch.tensor([_logits(i) for i in indices]) * scale
    losses = F.cross_entropy(logits, NOISY[idx], reduction="none")
    weights = torch.tensor([WEIGHTS[i] for i in indices]) * scale
    mask = None if used is None else torch.tensor(used)
    if mask is not None:
        weights = weights * mask
    step = StepOutput(
        index=idx,
        labels=NOISY[idx],
        logits=logits,
        losses=losses,
        weights=weights,
        used=mask,
        objective=losses.mean(),
        mean=losses.mean(),
        variance=losses.var(unbiased=False),
        network=network,
    )
    batch = {"label": NOISY[idx], "clean_label": CLEAN[idx], "index": idx}
    return {"loss": losses.mean(), "steps": [step]}, batch


def _stub(epoch: int = 0, max_epochs: int = 5, rank: int = 0, reduce: Any = None) -> Any:
    facts = synthetic_facts(3, NOISY, CLEAN, torch.arange(8), 0.5)
    datamodule = SimpleNamespace(data_facts=lambda: facts)
    strategy = SimpleNamespace(reduce=reduce or (lambda t, reduce_op: t))
    return SimpleNamespace(
        datamodule=datamodule,
        strategy=strategy,
        current_epoch=epoch,
        max_epochs=max_epochs,
        is_global_zero=rank == 0,
        loggers=[],
        callbacks=[],
        fast_dev_run=False,
        default_root_dir=".",  # the run folder without a logger: the test's folder
    )


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs write subsets.csv to their folder: here, each test's own."""
    monkeypatch.chdir(tmp_path)


def _module() -> L.LightningModule:
    module = CE(network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 2, 2))
    module.log = lambda *args, **kwargs: None  # no trainer attached
    return module


def _train_epoch(cb: SubsetStatistics, trainer: Any, module: Any, steps: list[Any]) -> None:
    cb.on_train_epoch_start(trainer, module)
    for b, (outputs, batch) in enumerate(steps):
        cb.on_train_batch_end(trainer, module, outputs, batch, b)


def _expected() -> dict[str, float]:
    """The statistics worked out by hand: CE = -ln p, p in {1/2, 1/4, 1/8} = {1, 2, 3} ln 2."""
    return {
        # mislabeled 1, 4, 6: p(noisy) 1/2, 1/4, 1/8; p(clean) 1/4, 1/2, 1/8
        tag("ce_noisy_mean", "mislabeled"): 2 * LN2,
        tag("ce_noisy_std", "mislabeled"): LN2 * math.sqrt(2 / 3),
        tag("ce_clean_mean", "mislabeled"): 2 * LN2,
        tag("loss_mean", "mislabeled"): 2 * LN2,
        # correct 0, 2, 3, 5, 7: p 1/2, 1/4, 1/8, 1/2, 1/4 -> (1 + 2 + 3 + 1 + 2) / 5 ln 2
        tag("ce_noisy_mean", "correct"): 9 / 5 * LN2,
        tag("ce_noisy_std", "correct"): LN2 * math.sqrt((1 + 4 + 9 + 1 + 4) / 5 - (9 / 5) ** 2),
        tag("ce_clean_mean", "correct"): 9 / 5 * LN2,
        tag("weight_mean", "mislabeled"): (0.9 + 1.0 - 0.3) / 3,
        tag("weight_mean", "correct"): (1.2 + 1.1 - 0.1 + 0.8 + 1.3) / 5,
        tag("nonpositive_weight_frac", "mislabeled"): 1 / 3,
        tag("nonpositive_weight_frac", "correct"): 1 / 5,
        tag("nonpositive_weight_frac", "all"): 2 / 8,
        tag("count", "mislabeled"): 3,
        tag("count", "correct"): 5,
        tag("count", "unknown"): 0,
    }


def _assert_stats(last: dict[str, float], expected: dict[str, float]) -> None:
    for name, value in expected.items():
        assert last[name] == pytest.approx(value, abs=1e-5), name


def test_per_subset_means_equal_hand_computation() -> None:
    cb, module = SubsetStatistics(), _module()
    trainer = _stub(epoch=0)
    cb.on_fit_start(trainer, module)
    # an earlier epoch with other values must not leak into the next one
    _train_epoch(cb, trainer, module, [_step(list(range(8)), scale=3.0)])
    cb.on_train_epoch_end(trainer, module)
    trainer.current_epoch = 1
    # three steps; sample 0 comes twice (a sampler with replacement): it counts once
    steps = [_step([0, 1, 2]), _step([3, 4, 5, 0]), _step([6, 7])]
    _train_epoch(cb, trainer, module, steps)
    cb.on_train_epoch_end(trainer, module)
    _assert_stats(cb.last, _expected())
    # the run folder's subsets.csv: a row per epoch, the same numbers
    rows = _csv_rows(Path("subsets.csv"))
    assert [r["epoch"] for r in rows] == ["0", "1"]
    _assert_stats({k: float(v) for k, v in rows[1].items() if v}, _expected())


def _csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_csv_rows_of_a_redone_epoch_are_replaced(tmp_path: Path) -> None:
    """A resumed run redoes the interrupted epoch: its row, and any after it, are replaced;
    a statistic left out (an empty subset) is an empty cell."""
    path = tmp_path / "subsets.csv"
    loss = tag("loss_mean", "correct")
    for epoch, value in ((0, 1.0), (1, 2.0), (2, 3.0), (1, 5.0)):
        write_csv_row(path, epoch, {loss: value, tag("count", "correct"): 4.0})
    rows = _csv_rows(path)
    assert list(rows[0]) == csv_columns() and csv_columns()[0] == "epoch"
    assert [(r["epoch"], float(r[loss])) for r in rows] == [("0", 1.0), ("1", 5.0)]
    assert rows[0][tag("loss_mean", "mislabeled")] == ""


def test_no_double_counting_across_ranks() -> None:
    """Two processes, sample 7 on both (distributed sampler padding): it counts once."""
    module = _module()
    callbacks = [SubsetStatistics(), SubsetStatistics()]
    shards = [[[0, 2, 4], [6, 7]], [[1, 3, 5], [7]]]
    barrier, deposited = threading.Barrier(2), {}

    def all_reduce_sum(rank: int) -> Any:
        def reduce(tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
            assert reduce_op == "sum"
            deposited[rank] = tensor.clone()
            barrier.wait(timeout=30)
            return deposited[0] + deposited[1]

        return reduce

    trainers = [_stub(rank=r, reduce=all_reduce_sum(r)) for r in (0, 1)]
    for cb, trainer, shard in zip(callbacks, trainers, shards, strict=True):
        cb.on_fit_start(trainer, module)
        _train_epoch(cb, trainer, module, [_step(indices) for indices in shard])
    threads = [
        threading.Thread(target=cb.on_train_epoch_end, args=(trainer, module))
        for cb, trainer in zip(callbacks, trainers, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for cb in callbacks:
        _assert_stats(cb.last, _expected())


def test_empty_subset_and_unseen_samples() -> None:
    """Only correct samples seen: mislabeled statistics are absent, counts say 0."""
    cb, module = SubsetStatistics(), _module()
    trainer = _stub()
    cb.on_fit_start(trainer, module)
    _train_epoch(cb, trainer, module, [_step([0, 2, 3])])
    cb.on_train_epoch_end(trainer, module)
    assert cb.last[tag("count", "mislabeled")] == 0
    assert tag("ce_noisy_mean", "mislabeled") not in cb.last
    assert cb.last[tag("count", "correct")] == 3
    assert cb.last[tag("ce_noisy_mean", "correct")] == pytest.approx(2 * LN2)


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="source"):
        SubsetStatistics(source="eval")
    with pytest.raises(ValueError, match="every_n_epochs"):
        SubsetStatistics(every_n_epochs=0)


# ------------------------------------------------------------------ through the real CLI
def _fit_digits(run_cli, root: Path, *extra: str) -> Any:
    """One epoch of Forward on digits with a learning rate so small the model stays fixed."""
    return run_cli(
        "fit",
        "--config",
        str(CONFIGS / "quickstart.yaml"),
        "--trainer.max_epochs",
        "1",
        "--model.optim.lr",
        "1e-12",
        ONLY_CALLBACK,
        *extra,
        root=root,
    )


def _statistics_by_hand(cli: Any) -> dict[str, float]:
    """Mean of the Forward loss and clean-label CE per subset, from the model's outputs."""
    model, dm = cli.model, cli.datamodule
    idx = dm.train_indices
    with torch.no_grad():
        images = dm.transform(dm.data.train_images[idx], train=False)
        p = F.softmax(model(images), dim=1)
    noisy, clean = dm.noisy_labels[idx], dm.data.train_clean[idx]
    q = p @ model.T
    out: dict[str, float] = {}
    for subset, mask in (("mislabeled", noisy != clean), ("correct", noisy == clean)):
        rows = torch.nonzero(mask).flatten().tolist()
        forward = [-math.log(float(q[r, noisy[r]]) + 1e-12) for r in rows]
        ce_clean = [-math.log(float(p[r, clean[r]])) for r in rows]
        out[tag("loss_mean", subset)] = sum(forward) / len(rows)
        out[tag("ce_noisy_mean", subset)] = sum(forward) / len(rows)
        out[tag("ce_clean_mean", subset)] = sum(ce_clean) / len(rows)
        out[tag("count", subset)] = len(rows)
    return out


def _callback(cli: Any) -> SubsetStatistics:
    found = [cb for cb in cli.trainer.callbacks if isinstance(cb, SubsetStatistics)]
    assert len(found) == 1
    return found[0]


def _events(root: Path) -> EventAccumulator:
    folder = next(root.rglob("config.yaml")).parent
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


@pytest.mark.parametrize("source", ["train_step", "pass"])
def test_cli_run_matches_hand_computation(run_cli, tmp_path: Path, source: str) -> None:
    cli = _fit_digits(
        run_cli,
        tmp_path,
        "--trainer.callbacks.init_args.source",
        source,
        "--test_after_fit",
        "false",
    )
    cb = _callback(cli)
    assert cb.source == source
    _assert_stats(cb.last, _statistics_by_hand(cli))
    metrics = cli.trainer.callback_metrics
    assert float(metrics[tag("count", "mislabeled")]) == cb.last[tag("count", "mislabeled")]
    assert cb.last[tag("count", "unknown")] == 0
    # every batch's VRNL weights average to 1, so do those of all samples, each counted once
    n = {s: cb.last[tag("count", s)] for s in ("mislabeled", "correct")}
    w = {s: cb.last[tag("weight_mean", s)] for s in ("mislabeled", "correct")}
    assert sum(n[s] * w[s] for s in n) / sum(n.values()) == pytest.approx(1.0, abs=1e-5)
    # TensorBoard: scalars of both subsets at the step of the epoch's metrics (the `epoch`
    # tag says which epoch), layout, histograms, config text
    acc = _events(tmp_path)
    tags = acc.Tags()
    epoch_at = {e.step: e.value for e in acc.Scalars("epoch")}
    for subset in ("mislabeled", "correct"):
        for quantity in ("loss_mean", "ce_noisy_std", "ce_clean_mean", "weight_mean"):
            events = acc.Scalars(tag(quantity, subset))
            assert [epoch_at[e.step] for e in events] == [0]
            assert events[0].value == pytest.approx(cb.last[tag(quantity, subset)], rel=1e-5)
        assert tag("loss_hist", subset) in tags["histograms"]
    assert "custom_scalars__config__" in tags["tensors"]
    # subsets.csv beside the event files, the same numbers
    (row,) = _csv_rows(next(tmp_path.rglob("subsets.csv")))
    assert row["epoch"] == "0"
    _assert_stats({k: float(v) for k, v in row.items() if v}, cb.last)
    config_text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "noisylabels.callbacks.SubsetStatistics" in config_text
    assert "class_path: noisylabels.methods.Forward" in config_text


def test_every_n_epochs_without_logger(run_cli, tmp_path: Path) -> None:
    cli = run_cli(
        "fit",
        "--config",
        str(CONFIGS / "quickstart.yaml"),
        "--trainer.max_epochs",
        "2",
        "--trainer.logger",
        "false",
        "--test_after_fit",
        "false",
        ONLY_CALLBACK,
        "--trainer.callbacks.init_args.every_n_epochs",
        "2",
        "--trainer.callbacks.init_args.source",
        "pass",
    )
    cb = _callback(cli)
    assert (cb.source, cb.every_n_epochs) == ("pass", 2)
    assert cli.trainer.loggers == []
    metrics = cli.trainer.callback_metrics
    n_train = len(cli.datamodule.train_indices)
    counted = float(metrics[tag("count", "mislabeled")]) + float(metrics[tag("count", "correct")])
    assert counted == n_train
    # no logger: subsets.csv in the run folder all the same, a row for the recorded epoch only
    (row,) = _csv_rows(tmp_path / "subsets.csv")
    assert (
        row["epoch"] == "1"
        and float(row[tag("count", "correct")]) == cb.last[tag("count", "correct")]
    )


def test_every_n_epochs_steps(tmp_path: Path) -> None:
    """With every_n_epochs=2 and 3 epochs, statistics land at epochs 1 and 2 (the last)."""
    dm = DigitsDataModule(batch_size=256, noise_rate=0.3)
    model = CE(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [16]}}, input_shape=(1, 8, 8)
    )
    trainer = tiny_trainer(
        max_epochs=3,
        logger=TensorBoardLogger(tmp_path, name="", version=""),
        callbacks=[SubsetStatistics(every_n_epochs=2, histograms=False)],
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=dm)
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    epoch_at = {e.step: e.value for e in acc.Scalars("epoch")}
    assert [epoch_at[e.step] for e in acc.Scalars(tag("loss_mean", "correct"))] == [1, 2]
    assert tag("loss_hist", "correct") not in acc.Tags()["histograms"]


class PartlyCleanDigits(DigitsDataModule):
    """Digits with 'real' noisy labels whose clean label is known for every third sample."""

    ships_noisy_labels = True

    def load(self) -> LoadedData:
        data = super().load()
        clean = data.train_clean.clone()
        gen = torch.Generator().manual_seed(0)
        flip = torch.rand(len(clean), generator=gen) < 0.3
        noisy = torch.where(flip, (clean + 1) % 10, clean)
        known = torch.arange(len(clean)) % 3 == 0
        data.train_noisy = noisy
        data.train_clean = torch.where(known, clean, torch.full_like(clean, -1))
        return data


def test_real_noise_uses_known_clean_labels(tmp_path: Path, caplog) -> None:
    dm = PartlyCleanDigits(batch_size=128, noise_type="real")
    model = CE(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [16]}}, input_shape=(1, 8, 8)
    )
    cb = SubsetStatistics()
    trainer = tiny_trainer(
        max_epochs=1,
        default_root_dir=tmp_path,
        callbacks=[cb],
        limit_val_batches=0,
    )
    with caplog.at_level("INFO"):
        trainer.fit(model, datamodule=dm)
    idx = dm.train_indices
    clean, noisy = dm.data.train_clean[idx], dm.noisy_labels[idx]
    n_known = int((clean >= 0).sum())
    assert 0 < n_known < len(idx)
    assert cb.last[tag("count", "mislabeled")] == int(((clean >= 0) & (clean != noisy)).sum())
    assert cb.last[tag("count", "correct")] == int((clean == noisy).sum())
    assert cb.last[tag("count", "unknown")] == len(idx) - n_known
    assert f"clean label is known for {n_known} of them" in caplog.text


def test_no_data_module_labels_warns() -> None:
    cb = SubsetStatistics()
    trainer = SimpleNamespace(datamodule=None, is_global_zero=True, loggers=[], callbacks=[cb])
    with pytest.warns(UserWarning, match="needs a noisylabels data module"):
        cb.on_fit_start(trainer, _module())
    cb.on_train_epoch_start(SimpleNamespace(current_epoch=0, max_epochs=1), None)
    assert not cb._active


@pytest.mark.slow
def test_ddp_two_processes_count_each_sample_once(tmp_path: Path) -> None:
    """DDP on 2 CPU processes (the sampler pads the odd training split): every sample once."""
    cmd = [
        str(Path(sys.executable).parent / "noisylabels"),
        "fit",
        "--config",
        str(CONFIGS / "quickstart.yaml"),
        "--config",
        str(CONFIGS / "trainer" / "ddp_cpu.yaml"),
        "--trainer.max_epochs",
        "1",
        "--trainer.enable_progress_bar",
        "false",
        "--test_after_fit",
        "false",
        "--trainer.default_root_dir",
        str(tmp_path),
        ONLY_CALLBACK,
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    noise = torch.load(next(tmp_path.rglob("noise.pt")), weights_only=False)
    idx = noise["train_indices"]
    assert len(idx) % 2 == 1  # so the distributed sampler repeats a sample
    flipped = noise["noisy_labels"][idx] != noise["clean_labels"][idx]
    acc = _events(tmp_path)
    assert acc.Scalars(tag("count", "mislabeled"))[0].value == int(flipped.sum())
    assert acc.Scalars(tag("count", "correct"))[0].value == int((~flipped).sum())


def test_selected_samples_and_other_networks() -> None:
    """A step that used only some samples (as Co-teaching does) gives weights to those only,
    losses to all; another network's steps are not mixed in."""
    cb, module = SubsetStatistics(), _module()
    trainer = _stub()
    cb.on_fit_start(trainer, module)
    # samples 3 and 6 (the non-positive weights) are left out of the objective
    used = [i not in (3, 6) for i in range(8)]
    steps = [_step(list(range(8)), used=used), _step(list(range(8)), scale=3.0, network=1)]
    _train_epoch(cb, trainer, module, steps)
    cb.on_train_epoch_end(trainer, module)
    expected = {k: v for k, v in _expected().items() if "weight" not in k}
    expected[tag("weight_mean", "mislabeled")] = (0.9 + 1.0) / 2
    expected[tag("weight_mean", "correct")] = (1.2 + 1.1 + 0.8 + 1.3) / 4
    expected[tag("nonpositive_weight_frac", "all")] = 0.0
    _assert_stats(cb.last, expected)


def test_steps_without_step_outputs_warn() -> None:
    cb, module = SubsetStatistics(), _module()
    trainer = _stub()
    cb.on_fit_start(trainer, module)
    outputs, batch = _step([0, 1])
    with pytest.warns(UserWarning, match="no 'steps'"):
        _train_epoch(cb, trainer, module, [({"loss": outputs["loss"]}, batch)])


def test_duplicate_callbacks_record_once(run_cli, tmp_path: Path) -> None:
    """The config's callback plus one added on the command line: only the first records."""
    with pytest.warns(UserWarning, match="only the first one in trainer.callbacks records"):
        cli = run_cli(
            "fit",
            "--config",
            str(CONFIGS / "quickstart.yaml"),
            "--trainer.max_epochs",
            "1",
            "--test_after_fit",
            "false",
            ONLY_CALLBACK,
            "--trainer.callbacks+=" + CALLBACK,
            "--trainer.callbacks.init_args.source",
            "pass",
        )
    first, second = [cb for cb in cli.trainer.callbacks if isinstance(cb, SubsetStatistics)]
    assert second.source == "pass" and second.last == {}
    assert first.last[tag("count", "correct")] > 0
