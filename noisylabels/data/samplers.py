"""Samplers: sharding over DDP processes, and per-epoch class-balanced subsampling.

Lightning's default ``DistributedSampler`` pads every shard to the same length by repeating
samples, so with ``N`` not divisible by the number of processes a few samples are trained on (and
evaluated) twice per epoch. :class:`ShardSampler` splits without repeats instead: every process
draws the same seeded order and takes every ``W``-th position from its rank.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DistributedSampler, Sampler

from noisylabels.errors import warn


def usable_length(n: int, num_replicas: int, batch_size: int | None) -> int:
    """How many of ``n`` samples one epoch uses: all of them, except when the last step of
    ``num_replicas`` batches of ``batch_size`` would have fewer than ``num_replicas`` samples
    (some process would then have no batch and DDP would stall); that remainder is skipped."""
    if batch_size is None or num_replicas == 1:
        return n
    tail = n % (num_replicas * batch_size)
    return n - tail if 0 < tail < num_replicas else n


class ShardSampler(DistributedSampler):
    """This process's share of a per-epoch order of ``dataset``, without repeated samples.

    Every process draws the same order (a permutation seeded by ``seed + epoch`` when
    ``shuffle``, else ``0..N-1``) and takes positions ``rank, rank + W, rank + 2W, ...``
    (``W = num_replicas``), so the shards partition the dataset. With ``batch_size`` (training),
    the ``k``-th batches of all processes together are positions ``[kWB, (k+1)WB)`` of the order,
    the batch one process with batch size ``WB`` would draw, and every process gets the same
    number of batches (see :func:`usable_length` for the rare remainder that is skipped). Without
    ``batch_size`` (evaluation) nothing is skipped and shards differ in length by at most one.

    It subclasses ``DistributedSampler`` so that Lightning keeps it (and calls ``set_epoch``)
    instead of injecting its own padded sampler.
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int,
        rank: int,
        shuffle: bool = True,
        seed: int = 0,
        batch_size: int | None = None,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.batch_size = batch_size
        n = len(dataset)
        self.total_size = usable_length(n, num_replicas, batch_size)
        self.num_samples = len(range(rank, self.total_size, num_replicas))
        if rank == 0 and self.total_size < n:
            nearest = min(
                (b for b in range(1, 2 * batch_size + 2) if usable_length(n, num_replicas, b) == n),
                key=lambda b: (abs(b - batch_size), b),
                default=None,
            )
            fix = (
                f"Batch size {nearest} would train on every sample"
                if nearest is not None
                else f"Use at most {n} processes"
            )
            warn(
                f"{n} training samples in batches of {batch_size} on {num_replicas} processes "
                f"leave {n - self.total_size} (fewer than {num_replicas}) for a last step, too "
                f"few for every process: they are skipped each epoch (different ones each "
                f"epoch). {fix}",
                every_process=True,
            )

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=gen)
        else:
            order = torch.arange(n)
        return iter(order[self.rank : self.total_size : self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples


def shard_sampler(
    dataset: Sized, shards: dict[str, Any] | None, shuffle: bool, batch_size: int
) -> ShardSampler | None:
    """This process's :class:`ShardSampler` under DDP (``shards``: Lightning's
    ``distributed_sampler_kwargs``), seeded like Lightning's own sampler; with one process the
    whole shuffled order for a training loader (so the data order depends on the training seed
    and the epoch only, never on the global random state, and a resumed run draws the same
    order), ``None`` (in order) for the others. Training loaders (``shuffle``) get equal batch
    counts on every process."""
    single = not shards or shards.get("num_replicas", 1) <= 1
    if single and not shuffle:
        return None
    return ShardSampler(
        dataset,
        1 if single else shards["num_replicas"],
        0 if single else shards["rank"],
        shuffle=shuffle,
        seed=int(os.environ.get("PL_GLOBAL_SEED", 0)),  # Lightning's sampler seed
        batch_size=batch_size if shuffle else None,
    )


class ClassBalancedSampler(Sampler[int]):
    """Per-epoch class-balanced subsample of a training set.

    Every epoch draws up to ``samples_per_class`` positions of each (noisy) class without
    replacement and shuffles them, seeded by ``seed + epoch`` (``set_epoch`` is called by
    Lightning before each epoch, also through its DDP sampler wrapper, so every process draws
    the same subsample and each gets its own shard).
    """

    def __init__(self, labels: Tensor, samples_per_class: int, seed: int = 0) -> None:
        if samples_per_class < 1:
            raise ValueError(f"samples_per_class must be positive, got {samples_per_class}")
        labels = torch.as_tensor(labels).long()
        self.by_class = [
            torch.nonzero(labels == c).flatten() for c in labels.unique(sorted=True).tolist()
        ]
        self.samples_per_class = samples_per_class
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the subsample of ``epoch``."""
        self.epoch = epoch

    def __len__(self) -> int:
        return sum(min(len(pos), self.samples_per_class) for pos in self.by_class)

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        chosen = [
            pos[torch.randperm(len(pos), generator=gen)[: self.samples_per_class]]
            for pos in self.by_class
        ]
        picked = torch.cat(chosen) if chosen else torch.zeros(0, dtype=torch.long)
        return iter(picked[torch.randperm(len(picked), generator=gen)].tolist())
