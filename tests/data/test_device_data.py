"""In-memory data drawn on the training device: every index once per epoch, exact DDP shards,
the host loader's batches, and the ``on_device`` option."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor
from torch.utils.data import Dataset

from noisylabels.data import DigitsDataModule
from noisylabels.data.memory import DeviceBatches, TensorDictDataset, batch_device
from noisylabels.data.samplers import ShardSampler
from noisylabels.errors import InputError

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def _dataset(n: int = 103) -> TensorDictDataset:
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 1, 2, 2).clone()
    labels = torch.arange(n) % 10
    indices = torch.arange(0, 2 * n, 2) % n  # positions != dataset indices
    return TensorDictDataset(images, labels, labels, indices.unique())


def test_device_batches_visit_every_index_once_per_epoch() -> None:
    dataset = _dataset()
    loader = DeviceBatches(dataset, torch.utils.data.RandomSampler(dataset), 16, CPU)
    assert len(loader) == 7
    orders = []
    for _ in range(2):
        batches = list(loader)
        assert [len(b["index"]) for b in batches] == [16] * 6 + [7]
        index = torch.cat([b["index"] for b in batches])
        assert sorted(index.tolist()) == sorted(dataset.indices.tolist())
        for b in batches:
            assert b["image"].dtype == torch.uint8
            assert torch.equal(b["image"][:, 0, 0, 0].long(), b["index"])
            assert torch.equal(b["label"], b["index"] % 10)
        orders.append(index)
    assert not torch.equal(orders[0], orders[1]), "each epoch draws a new order"


def test_device_batches_shard_exactly_like_shard_sampler() -> None:
    """Under DDP each process gets its ShardSampler share, in its order, and the shares
    partition the training split every epoch."""
    dataset, world, batch = _dataset(), 3, 8
    for epoch in (0, 1):
        seen = []
        for rank in range(world):
            sampler = ShardSampler(dataset, world, rank, seed=3, batch_size=batch)
            sampler.set_epoch(epoch)
            expected = dataset.indices[torch.tensor(list(sampler))]
            loader = DeviceBatches(
                dataset, ShardSampler(dataset, world, rank, seed=3, batch_size=batch), batch, CPU
            )
            loader.sampler.set_epoch(epoch)  # what Lightning does through ``sampler``
            got = torch.cat([b["index"] for b in loader])
            assert torch.equal(got, expected)
            seen.append(got)
        assert sorted(torch.cat(seen).tolist()) == sorted(dataset.indices.tolist())


class _Strategy:
    def __init__(self, device: torch.device) -> None:
        self.root_device = device


class _Trainer:
    def __init__(self, device: torch.device, shards: dict | None = None) -> None:
        self.strategy = _Strategy(device)
        self.distributed_sampler_kwargs = shards
        self.training = True


def test_data_module_draws_on_the_device_when_asked() -> None:
    dm = DigitsDataModule(batch_size=64, on_device=True)
    dm.setup("fit")
    dm.trainer = _Trainer(CPU, {"num_replicas": 2, "rank": 1})
    loader = dm.train_dataloader()
    assert isinstance(loader, DeviceBatches) and isinstance(loader.sampler, ShardSampler)
    assert loader.tensors["images"] is dm.val_dataloader().tensors["images"]  # copied once
    dm.on_device = "auto"
    assert not isinstance(dm.train_dataloader(), DeviceBatches)  # auto: not on the CPU
    assert batch_device("auto", dm.train_dataloader().dataset, _Trainer(CUDA), "X") == CUDA
    with pytest.raises(InputError, match="on_device"):
        batch_device(True, Dataset(), _Trainer(CPU), "FileModule")
    with pytest.raises(InputError, match="on_device"):
        DigitsDataModule(on_device="yes")


def _epoch_indices(dm: DigitsDataModule, epoch: int, global_seed: int) -> list[Tensor]:
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(epoch)  # what Lightning does before each epoch
    torch.manual_seed(global_seed)
    return [b["index"] for b in loader]


@pytest.mark.parametrize("shards", [None, {"num_replicas": 2, "rank": 1}], ids=["one", "ddp"])
def test_device_batches_give_the_host_loaders_batches(shards: dict | None) -> None:
    """On the device and through the host DataLoader a run draws the same batches: the
    ShardSampler's order, set by the training seed and the epoch (this process's share under
    DDP), never by the global random state, so a resumed run draws them again."""
    dm = DigitsDataModule(batch_size=50, on_device=False)
    dm.setup("fit")
    dm.trainer = _Trainer(CPU, shards)
    device_dm = copy.copy(dm)
    device_dm.on_device, device_dm._device_copies = True, {}
    assert isinstance(device_dm.train_dataloader(), DeviceBatches)
    assert not isinstance(dm.train_dataloader(), DeviceBatches)
    for epoch in (0, 1):
        host = _epoch_indices(dm, epoch, global_seed=7)
        device = _epoch_indices(device_dm, epoch, global_seed=8)
        assert len(host) == len(device) > 1
        for h, d in zip(host, device, strict=True):
            assert torch.equal(h, d)
        assert torch.equal(torch.cat(device), torch.cat(_epoch_indices(device_dm, epoch, 9)))
    assert not torch.equal(torch.cat(host), torch.cat(_epoch_indices(dm, 0, 7)))
