"""Multi-process training on CPU: 2 processes over gloo.

The core checks fork the processes once (``torch.multiprocessing`` with the fork start method,
so that they inherit this process's imports) and compare what every
rank computed with a single-process run of the same global batch: the VRNL statistics and one
optimizer step (a), the noisy labels, split and T (b), and the epoch's shard of the training set
(c). The end-to-end check (d) runs the ``noisylabels`` console script with
``configs/trainer/ddp_cpu.yaml``.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml
from torch import nn
from torch.utils.data import DistributedSampler

from noisylabels.data import ImageFolderDataModule, MNISTDataModule
from noisylabels.data.samplers import ShardSampler, usable_length
from noisylabels.methods import CoTeaching, Forward, vrnl_objective
from noisylabels.methods.core.distributed import gather_batch
from noisylabels.methods.selection import small_loss_mask
from noisylabels.noise import symmetric_transition

from conftest import CONFIGS, REPO, config_args, make_image_folder, make_mnist, read_results

HERE = Path(__file__).resolve().parent
WORLD = 2
ALPHA = 0.3
BOUNDED_ALPHA = 1.0  # large enough that some weights 1 + 2 alpha (mean - l_i) are floored
SIZES = (7, 5)  # uneven per-process batches of one global batch of 12
NOISE = {"noise_type": "instance", "noise_rate": 0.4, "noise_seed": 3}
TRAIN_BATCH, EVAL_BATCH = 20, 16


# ---------------------------------------------------------------- shared by ranks and reference
def make_model(scope: str) -> Forward:
    """Forward-VRNL on a small MLP, identical on every process (seeded)."""
    torch.manual_seed(0)
    model = Forward(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [32]}},
        input_shape=(1, 8, 8),
        alpha=ALPHA,
        variance_scope=scope,
        optim={"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3},
    )
    model.T.copy_(symmetric_transition(10, 0.4))
    return model


def global_batch(step: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    n = sum(SIZES)
    return {
        "image": torch.randn(n, 1, 8, 8, generator=gen),
        "label": torch.randint(0, 10, (n,), generator=gen),
        "clean_label": torch.randint(0, 10, (n,), generator=gen),
        "index": torch.arange(n),
    }


def rank_slice(batch: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    start = sum(SIZES[:rank])
    return {k: v[start : start + SIZES[rank]] for k, v in batch.items()}


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()


class _TrainingStep(nn.Module):
    """Routes DDP's forward to the module's ``training_step``, as Lightning's DDP does."""

    def __init__(self, module: L.LightningModule) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.module.training_step(batch, 0)["loss"]


def train_two_steps(model: Forward, rank: int | None) -> list[torch.Tensor]:
    """Two SGD steps (momentum matters in the second); ``rank`` None = the whole batch."""
    opt = model.configure_optimizers()["optimizer"]
    step_fn: nn.Module = _TrainingStep(model)
    if rank is not None:
        step_fn = nn.parallel.DistributedDataParallel(step_fn)
    params = []
    for step in range(2):
        batch = global_batch(step)
        if rank is not None:
            batch = rank_slice(batch, rank)
        opt.zero_grad()
        step_fn(batch).backward()
        opt.step()
        params.append(flat_params(model))
    return params


# ---------------------------------------------------------------- what each rank does
def _check_objective(rank: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(7)
    all_losses = torch.rand(sum(SIZES), generator=gen, dtype=torch.float64) * 3
    start = sum(SIZES[:rank])
    losses = all_losses[start : start + SIZES[rank]].clone().requires_grad_(True)
    out = vrnl_objective(losses, ALPHA, "global")
    out.objective.backward()
    bounded_losses = losses.detach().clone().requires_grad_(True)
    bounded = vrnl_objective(bounded_losses, BOUNDED_ALPHA, "global", form="bounded")
    bounded.objective.backward()
    return {
        "losses": losses.detach(),
        "objective": out.objective.detach(),
        "mean": out.mean,
        "variance": out.variance,
        "weights": out.weights,
        "grad": losses.grad,
        "bounded_objective": bounded.objective.detach(),
        "bounded_grad": bounded_losses.grad,
    }


def _check_steps(rank: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for scope in ("global", "local"):
        model = make_model(scope)
        results[scope] = train_two_steps(model, rank)
        results[f"{scope}_epoch_count"] = float(model.epoch_stats.sums[0][4])  # samples used
    return results


def _check_data(rank: int, data_dir: str) -> dict[str, Any]:
    # rank-dependent global RNG state: the noise must not depend on it
    torch.manual_seed(1000 + rank)
    np.random.seed(1000 + rank)
    random.seed(1000 + rank)
    dm = MNISTDataModule(
        data_dir=data_dir, batch_size=TRAIN_BATCH, eval_batch_size=EVAL_BATCH, **NOISE
    )
    dm.setup("fit")
    dm.trainer = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": WORLD, "rank": rank})
    train = dm.train_dataloader()
    epochs = []
    for epoch in range(2):
        train.sampler.set_epoch(epoch)
        epochs.append([b["index"].tolist() for b in train])
    return {
        "noisy_labels": dm.noisy_labels,
        "train_indices": dm.train_indices,
        "val_indices": dm.val_indices,
        "transition": dm.transition,
        "train_sampler_distributed": isinstance(train.sampler, DistributedSampler),
        "epochs": epochs,
        "val": [b["index"].tolist() for b in dm.val_dataloader()],
        "test": [b["index"].tolist() for b in dm.test_dataloader()],
        "train_eval": [b["index"].tolist() for b in dm.train_eval_dataloader()],
    }


def _check_skips(rank: int, image_dir: str) -> dict[str, Any]:
    """Each rank reads its shard of a test set with unreadable images; merging the masks gives
    every rank the global count."""
    dm = ImageFolderDataModule(
        data_dir=image_dir, num_workers=0, eval_batch_size=2, image_size=8, resize_size=8
    )
    dm.setup("test")
    dm.trainer = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": WORLD, "rank": rank})
    seen = [i for b in dm.test_dataloader() for i in b["index"].tolist()]
    local = dm.data_info()["skipped_images"]["test"]

    def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t)
        return t

    dm.skipped.sync(all_reduce_sum)
    return {"seen": seen, "local": local, "merged": dm.data_info()["skipped_images"]["test"]}


SELECTION_LOSSES = [0.5, 0.1, 0.7, 0.1, 0.3, 0.9, 0.2]  # a global batch of 7, with a tie
FORGET_RATE = 0.4  # keep int(0.6 * 7) = 4 of the global batch (not 2 + 1 of the halves)
SELECTION_CANDIDATES = [True, False, True, True, True, False, True]  # Co-teaching+'s disagreement
"""5 candidates of the global batch: keep int(0.6 * 5) = 3 of them (not 1 + 1 of the halves)."""


def _check_selection(rank: int) -> dict[str, Any]:
    """Co-teaching's small-loss masks of this process's share (positions rank, rank + 2, ... of
    the global batch, as ShardSampler gives them), with the per-process batch size known (no
    host synchronization) and asked for."""
    losses = torch.tensor(SELECTION_LOSSES)[rank::WORLD]
    model = CoTeaching(network={"backbone": "mlp"}, input_shape=(1, 8, 8), forget_rate=FORGET_RATE)
    model.current_forget_rate = FORGET_RATE
    masks = model.small_loss_masks([losses, -losses])  # facts unknown: the size is asked for
    among = torch.tensor(SELECTION_CANDIDATES)[rank::WORLD]
    among_masks = model.small_loss_masks([losses, -losses], among=among)
    values, valid = gather_batch(torch.stack([losses]), capacity=5)
    return {"masks": masks, "among": among_masks, "values": values, "valid": valid}


def _worker(rank: int, port: int, out_dir: str, data_dir: str, image_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=120),
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = {
                "objective": _check_objective(rank),
                "steps": _check_steps(rank),
                "data": _check_data(rank, data_dir),
                "skips": _check_skips(rank, image_dir),
                "selection": _check_selection(rank),
            }
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def odd_mnist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MNIST whose training split (289) and test set (65) are odd: no even split exists."""
    return make_mnist(tmp_path_factory.mktemp("mnist_odd"), n_train=321, n_test=65)


BAD_TEST_IMAGES = ("test/cat/000.jpg", "test/cat/002.jpg", "test/emu/003.png")


@pytest.fixture(scope="module")
def bad_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image folder with 3 unreadable test images of 12."""
    root = make_image_folder(tmp_path_factory.mktemp("imgs"), {"train": 2, "test": 4})
    for key in BAD_TEST_IMAGES:
        (root / key).write_bytes(b"not an image")
    return root


@pytest.fixture(scope="module")
def ranks(
    tmp_path_factory: pytest.TempPathFactory, odd_mnist: Path, bad_images: Path
) -> list[dict[str, Any]]:
    """Run every rank's checks once, in 2 forked processes, and return what each computed."""
    out = tmp_path_factory.mktemp("ddp_ranks")
    args = (_free_port(), str(out), str(odd_mnist), str(bad_images))
    mp.start_processes(_worker, args=args, nprocs=WORLD, join=True, start_method="fork")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


# ---------------------------------------------------------------- (a) objective and step
def test_global_variance_is_variance_of_concatenated_losses(ranks) -> None:
    losses = torch.cat([r["objective"]["losses"] for r in ranks])
    assert len(losses) == sum(SIZES)
    mean, var = losses.mean(), ((losses - losses.mean()) ** 2).mean()
    reference = losses.clone().requires_grad_(True)
    ref = vrnl_objective(reference, ALPHA, "local")
    ref.objective.backward()
    for r, res in enumerate(ranks):
        got = res["objective"]
        torch.testing.assert_close(got["mean"], mean)
        torch.testing.assert_close(got["variance"], var)
        torch.testing.assert_close(got["objective"], mean - ALPHA * var)
        start = sum(SIZES[:r])
        part = slice(start, start + SIZES[r])
        torch.testing.assert_close(got["weights"], 1 + 2 * ALPHA * (mean - losses[part]))
        # the all-reduce's backward sums over ranks: WORLD x the full-batch gradient, which DDP's
        # averaging over ranks turns back into the full-batch gradient
        torch.testing.assert_close(got["grad"], WORLD * reference.grad[part])


def test_bounded_global_gradient_is_that_of_the_concatenated_batch(ranks) -> None:
    """The bounded form under DDP: the value of the paper's objective on the global batch, and
    per process WORLD x the one-process gradient on the concatenated losses (DDP's mean over the
    processes gives the global batch's), some of whose weights are floored at 0."""
    losses = torch.cat([r["objective"]["losses"] for r in ranks])
    reference = losses.clone().requires_grad_(True)
    ref = vrnl_objective(reference, BOUNDED_ALPHA, "local", form="bounded")
    ref.objective.backward()
    assert (ref.weights == 0).any() and (ref.weights > 0).any()
    for r, res in enumerate(ranks):
        got = res["objective"]
        torch.testing.assert_close(got["bounded_objective"], ref.objective.detach())
        start = sum(SIZES[:r])
        part = slice(start, start + SIZES[r])
        torch.testing.assert_close(got["bounded_grad"], WORLD * reference.grad[part])


def test_two_process_step_equals_one_process_step_on_the_global_batch(ranks) -> None:
    reference = train_two_steps(make_model("local"), rank=None)  # no process group: one process
    for res in ranks:
        for step in range(2):
            torch.testing.assert_close(res["steps"]["global"][step], reference[step])
    # the check can fail: per-process variance (and means of 7 vs 5 samples) give another step
    local = ranks[0]["steps"]["local"][0]
    assert (local - reference[0]).abs().max() > 1e-4
    torch.testing.assert_close(local, ranks[1]["steps"]["local"][0])  # DDP kept ranks in sync


def test_epoch_statistics_stay_per_process_under_ddp(ranks) -> None:
    """DDP broadcasts rank 0's buffers before every forward; the epoch sums must not be one."""
    for r, res in enumerate(ranks):
        assert res["steps"]["global_epoch_count"] == 2 * SIZES[r]


def test_small_loss_selection_is_over_the_global_batch(ranks) -> None:
    """Co-teaching under DDP keeps the samples one process with the global batch keeps (the
    global batch's int((1 - τ) B) smallest losses, ties to the earlier sample), each process
    its own part of that mask; Co-teaching+ the int((1 - τ) n) smallest of the global batch's
    n candidates."""
    global_losses = torch.tensor(SELECTION_LOSSES)
    keep = int((1.0 - FORGET_RATE) * len(global_losses))
    for network, losses in enumerate((global_losses, -global_losses)):
        expected = small_loss_mask(losses, keep)
        got = torch.zeros_like(expected)
        for rank, res in enumerate(ranks):
            got[rank::WORLD] = res["selection"]["masks"][network]
        assert torch.equal(got, expected), network
    assert small_loss_mask(global_losses, keep).tolist() == [0, 1, 0, 1, 1, 0, 1]
    # among candidates (Co-teaching+): the smallest of the global batch's candidates only
    among = torch.tensor(SELECTION_CANDIDATES)
    keep = int((1.0 - FORGET_RATE) * int(among.sum()))
    for network, losses in enumerate((global_losses, -global_losses)):
        expected = small_loss_mask(torch.where(among, losses, torch.inf), keep)
        got = torch.zeros_like(expected)
        for rank, res in enumerate(ranks):
            got[rank::WORLD] = res["selection"]["among"][network]
        assert torch.equal(got, expected) and not (got & ~among).any(), network
    assert got.tolist() == [1, 0, 1, 0, 1, 0, 0]  # network 1: the largest losses first
    # the gathered batch: the global order, padding (to 2 x 5) last
    values, valid = ranks[0]["selection"]["values"], ranks[0]["selection"]["valid"]
    assert valid.tolist() == [True] * 7 + [False] * 3
    assert values[0, :7].tolist() == pytest.approx(SELECTION_LOSSES)
    assert torch.equal(ranks[1]["selection"]["values"], values)


# ---------------------------------------------------------------- (b) noise on every rank
def test_every_rank_holds_the_same_noise_and_split(ranks, odd_mnist: Path) -> None:
    torch.manual_seed(12345)  # yet another global RNG state in this process
    dm = MNISTDataModule(data_dir=str(odd_mnist), **NOISE)
    dm.setup("fit")
    expected = {
        "noisy_labels": dm.noisy_labels,
        "train_indices": dm.train_indices,
        "val_indices": dm.val_indices,
    }
    assert (dm.noisy_labels != dm.clean_labels).any()
    for res in ranks:
        for key, value in expected.items():
            assert torch.equal(res["data"][key], value), key
        assert (res["data"]["transition"] is None) == (dm.transition is None)
        if dm.transition is not None:
            assert torch.equal(res["data"]["transition"], dm.transition)


# ---------------------------------------------------------------- (c) one epoch, each sample once
def test_epoch_covers_every_training_index_exactly_once(ranks) -> None:
    data = [r["data"] for r in ranks]
    train = data[0]["train_indices"].tolist()
    assert len(train) % WORLD == 1  # odd: a padded split would repeat a sample
    assert all(d["train_sampler_distributed"] for d in data)  # Lightning keeps it
    orders = []
    for epoch in range(2):
        batches = [d["epochs"][epoch] for d in data]
        assert len({len(b) for b in batches}) == 1, "ranks must run the same number of steps"
        seen = [i for b in batches for batch in b for i in batch]
        assert sorted(seen) == sorted(train)
        assert all(len(batch) <= TRAIN_BATCH for b in batches for batch in b)
        orders.append([i for step in zip(*batches, strict=True) for b in step for i in b])
    assert orders[0] != orders[1]  # reshuffled per epoch


def test_evaluation_shards_and_method_loaders(ranks) -> None:
    data = [r["data"] for r in ranks]
    val = sorted(i for d in data for b in d["val"] for i in b)
    assert val == data[0]["val_indices"].tolist()
    test = sorted(i for d in data for b in d["test"] for i in b)
    assert test == list(range(65))
    for d in data:  # a method's own pass over the training split sees all of it, in order
        assert [i for b in d["train_eval"] for i in b] == data[0]["train_indices"].tolist()


def test_skipped_images_are_counted_over_all_ranks(ranks) -> None:
    """Each rank marks the unreadable images of its own shard; after the merge (what the
    skipped-image callback does at each epoch end) every rank reports all of them."""
    skips = [r["skips"] for r in ranks]
    seen = sorted(i for s in skips for i in s["seen"])
    assert len(seen) == len(set(seen)) == 12 - len(BAD_TEST_IMAGES)  # shards, bad ones left out
    assert sum(s["local"] for s in skips) == len(BAD_TEST_IMAGES)
    assert all(0 < s["local"] < len(BAD_TEST_IMAGES) for s in skips)  # split over the ranks
    assert [s["merged"] for s in skips] == [len(BAD_TEST_IMAGES)] * WORLD


def test_shard_sampler_global_batches_and_remainder() -> None:
    """Step k of all ranks = positions [kWB, (k+1)WB) of one order; a remainder < W is skipped."""
    n, batch = 33, 4  # 33 mod 8 = 1 < 2 processes: one sample cannot be given to both
    assert usable_length(n, WORLD, batch) == 32 and usable_length(34, WORLD, batch) == 34
    with pytest.warns(UserWarning, match="skipped"):
        samplers = [ShardSampler(range(n), WORLD, r, seed=5, batch_size=batch) for r in (0, 1)]
    streams = [list(s) for s in samplers]
    assert [len(s) for s in streams] == [16, 16]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(5)).tolist()
    for k in range(4):
        step = streams[0][k * batch : (k + 1) * batch] + streams[1][k * batch : (k + 1) * batch]
        assert sorted(step) == sorted(order[k * WORLD * batch : (k + 1) * WORLD * batch])
    evaluation = [list(ShardSampler(range(n), WORLD, r, shuffle=False)) for r in (0, 1)]
    assert sorted(evaluation[0] + evaluation[1]) == list(range(n))


# ---------------------------------------------------------------- trainer configs
@pytest.mark.parametrize(
    ("piece", "expected"),
    [
        ("ddp.yaml", {"accelerator": "gpu", "devices": -1, "strategy": "ddp"}),
        ("ddp_cpu.yaml", {"accelerator": "cpu", "devices": 2}),
    ],
)
def test_trainer_configs_compose_after_a_dataset_config(run_cli, capsys, piece, expected) -> None:
    with pytest.raises(SystemExit) as exc:
        run_cli(
            "fit",
            *config_args("cifar10_forward_vrnl"),
            "--config",
            str(CONFIGS / "trainer" / piece),
            "--model.variance_scope",
            "local",
            "--print_config",
        )
    assert exc.value.code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    for key, value in expected.items():
        assert config["trainer"][key] == value, key
    # the preset's settings survive (its epochs: the schedule's, derived when the fit starts)
    assert config["model"]["init_args"]["schedule"]["warmup_epochs"] == 20
    assert config["model"]["init_args"]["network"]["backbone"] == "resnet18"
    assert config["model"]["init_args"]["variance_scope"] == "local"
    if piece == "ddp_cpu.yaml":
        strategy = config["trainer"]["strategy"]
        assert strategy["init_args"]["process_group_backend"] == "gloo"


# ---------------------------------------------------------------- (d) the CLI end to end
class EpochProbe(L.Callback):
    """Writes, per rank and epoch, the training indices it saw and its noise and T."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.seen: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen += batch["index"].tolist()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        record = {
            "seen": self.seen,
            "noisy_labels": dm.noisy_labels.tolist(),
            "T": pl_module.T.tolist(),
            "world": trainer.world_size,
        }
        out = Path(trainer.default_root_dir) / "probe"
        out.mkdir(exist_ok=True)
        name = f"rank{trainer.global_rank}_epoch{trainer.current_epoch}.json"
        (out / name).write_text(json.dumps(record))


@pytest.mark.slow
def test_cli_fit_with_two_cpu_processes(tmp_path: Path) -> None:
    """``noisylabels fit ... --config configs/trainer/ddp_cpu.yaml``: T estimated after a
    warm-up epoch, test set split unevenly (359 = 180 + 179 in batches of 179)."""
    cli = Path(sys.executable).parent / "noisylabels"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO), str(REPO / "tests"), str(HERE), os.environ.get("PYTHONPATH", "")]
        ),  # this checkout's package, whatever the installed command points at; test_ddp
    }
    args = [
        str(cli),
        "fit",
        "--config",
        str(CONFIGS / "quickstart.yaml"),
        "--config",
        str(CONFIGS / "trainer" / "ddp_cpu.yaml"),
        "--trainer.max_epochs",
        "3",
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.callbacks+=test_ddp.EpochProbe",
        "--trainer.callbacks+=noisylabels.callbacks.SubsetStatistics",
        "--model.transition",
        "estimate",
        "--model.schedule.warmup_epochs",
        "1",
        "--data.eval_batch_size",
        "179",
    ]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "GLOBAL_RANK: 1" in proc.stderr + proc.stdout  # really two processes

    results = read_results(tmp_path)  # exactly one results.json
    assert len(list(tmp_path.rglob("noise.pt"))) == 1
    assert [p.name for p in (tmp_path / "lightning_logs").iterdir()] == ["version_0"]
    ckpts = list(tmp_path.rglob("best-*.ckpt"))
    assert len(ckpts) == 1 and results["checkpoint"] == str(ckpts[0])
    # last.ckpt, written by process 0 while both processes dumped it, holds the final state
    last = torch.load(next(tmp_path.rglob("last.ckpt")), weights_only=True)
    assert last["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 3
    assert results["resumed"] == []

    noise = torch.load(next(tmp_path.rglob("noise.pt")), weights_only=False)
    train = sorted(noise["train_indices"].tolist())
    probes = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "probe").glob("*.json")}
    assert len(probes) == WORLD * 3
    for epoch in range(3):
        per_rank = [probes[f"rank{r}_epoch{epoch}"] for r in range(WORLD)]
        assert all(p["world"] == WORLD for p in per_rank)
        assert sorted(per_rank[0]["seen"] + per_rank[1]["seen"]) == train
        for p in per_rank:
            assert p["noisy_labels"] == noise["noisy_labels"].tolist()
        assert per_rank[0]["T"] == per_rank[1]["T"]  # estimated after epoch 0, same everywhere
    assert probes["rank0_epoch2"]["T"] != probes["rank0_epoch0"]["T"]

    # the reduced metrics equal a one-process evaluation of the best checkpoint
    model = Forward.load_from_checkpoint(results["checkpoint"], map_location="cpu")
    from noisylabels.data import DigitsDataModule

    dm = DigitsDataModule(batch_size=64, noise_type="symmetric", noise_rate=0.4, noise_seed=0)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    (val,) = trainer.validate(model, datamodule=dm, verbose=False)
    (test,) = trainer.test(model, datamodule=dm, verbose=False)
    assert results["test_acc"] == pytest.approx(test["test/acc"], abs=1e-6)
    assert results["val_acc"] == pytest.approx(val["val/acc"], abs=1e-6)
