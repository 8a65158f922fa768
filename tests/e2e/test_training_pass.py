"""The pass over the whole training set that a method may ask for at the start of a training
epoch: per-sample values of every network in eval mode for every training index exactly once,
the same full table on every DDP process and equal to one process's."""

from __future__ import annotations

import traceback
from pathlib import Path

import torch
import torch.multiprocessing as mp
from test_ddp_methods import WORLD, _free_port, join_group

from noisylabels.data import DigitsDataModule
from noisylabels.methods import CE, CoTeaching
from noisylabels.methods.core.evaluation import TrainingPass, training_pass
from noisylabels.methods.core.losses import cross_entropy

from conftest import tiny_trainer


def _method(dm: DigitsDataModule) -> CoTeaching:
    torch.manual_seed(0)
    method = CoTeaching(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [16], "dropout": 0.5}},
        input_shape=dm.input_shape,
        forget_rate=0.2,
    )
    method.trainer = tiny_trainer()
    return method


def _value(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    return cross_entropy(logits, batch["label"])


def _digits() -> DigitsDataModule:
    dm = DigitsDataModule(batch_size=32, eval_batch_size=50, noise_rate=0.3)
    dm.setup("fit")
    return dm


def test_the_pass_sees_every_training_index_once_in_eval_mode() -> None:
    dm = _digits()
    method = _method(dm)
    method.train()
    facts = dm.data_facts()
    result = training_pass(method, facts, _value)
    assert method.training  # the modes are restored
    n = facts.num_samples
    assert result.values.shape == (2, n)
    train = torch.zeros(n, dtype=torch.bool)
    train[facts.train_indices] = True
    assert torch.equal(result.counts, train.long())
    assert torch.isnan(result.values[:, ~train]).all()
    # eval mode (dropout off): the values are each network's plain CE of its own logits
    method.eval()
    with torch.no_grad():
        for k in range(2):
            for batch in facts.eval_batches("cpu"):
                expected = _value(method.network_logits(batch["image"], k), batch)
                assert torch.equal(result.values[k, batch["index"]], expected)
    assert torch.equal(result.of_training_split(), result.values[:, result.indices])
    assert torch.equal(result.indices, facts.train_indices.sort().values)


def _worker(rank: int, port: int, root: str) -> None:
    join_group(rank, port)
    try:
        dm = _digits()
        result = training_pass(_method(dm), dm.data_facts(), _value)
        torch.save({"values": result.values, "counts": result.counts}, f"{root}/rank{rank}.pt")
    except BaseException:  # noqa: BLE001 - recorded for the test
        Path(root, f"error-rank{rank}.txt").write_text(traceback.format_exc())


def test_the_pass_under_ddp_is_the_one_process_pass(tmp_path: Path) -> None:
    """Two processes each evaluate every other batch; both end with the full table, bit for
    bit the table one process computes."""
    mp.start_processes(
        _worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, start_method="fork"
    )
    errors = sorted(tmp_path.glob("error-rank*.txt"))
    assert not errors, "\n".join(p.read_text()[-3000:] for p in errors)
    dm = _digits()
    one = training_pass(_method(dm), dm.data_facts(), _value)
    for rank in range(WORLD):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert torch.equal(got["counts"], one.counts)
        assert torch.equal(got["values"].nan_to_num(-1.0), one.values.nan_to_num(-1.0))


class _Asks(CE):
    """CE that asks for the pass in its own stage from epoch 1 on (``from_epoch``) and records
    what it gets."""

    abstract = True  # not a method of the registry

    def __init__(self, from_epoch: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.from_epoch = from_epoch
        self.passes: list[tuple[int, bool, TrainingPass]] = []

    def wants_training_pass(self) -> bool:
        return not self.in_warmup and self.current_epoch >= self.from_epoch

    def on_training_pass(self, result: TrainingPass) -> None:
        self.passes.append((self.current_epoch, self.in_warmup, result))


def test_the_stage_machinery_runs_the_pass_at_the_epochs_a_method_asks() -> None:
    dm = DigitsDataModule(batch_size=64, noise_rate=0.3)
    torch.manual_seed(0)
    method = _Asks(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [16]}}, input_shape=dm.input_shape
    )
    tiny_trainer(limit_val_batches=1, max_epochs=3).fit(method, datamodule=dm)
    assert [(epoch, warm) for epoch, warm, _ in method.passes] == [(1, False), (2, False)]
    for _, _, result in method.passes:
        assert int(result.counts.sum()) == len(dm.train_indices)


def test_a_smoke_run_passes_where_its_own_stage_begins_mid_epoch() -> None:
    """``fast_dev_run`` runs the warm-up and the method's stage in one epoch: the pass comes
    when the method's stage begins, at the planned batch."""
    dm = DigitsDataModule(batch_size=64, noise_rate=0.3)
    torch.manual_seed(0)
    method = _Asks(
        from_epoch=0,
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [16]}},
        input_shape=dm.input_shape,
        schedule={"warmup_epochs": 1},
    )
    tiny_trainer(fast_dev_run=4).fit(method, datamodule=dm)
    assert [(epoch, warm) for epoch, warm, _ in method.passes] == [(0, False)]
