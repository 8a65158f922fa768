"""Step time of VRNL's global variance vs the per-process (local) variance under DDP.

Two CPU processes over gloo train the same Forward-VRNL model on the same batches, alternating
blocks of steps with ``variance_scope`` global and local; a step is forward, objective, backward
(with DDP's gradient all-reduce) and the SGD update, timed as the slower of the two processes.
The global scope adds one all-reduce of ``(sum l, sum l^2, n)`` in the forward pass and one in the
backward pass. Prints the median step time of each scope and the overhead in percent.

    python benchmarks/ddp_variance_overhead.py                     # LeNet-5, 28x28, batch 128
    python benchmarks/ddp_variance_overhead.py --backbone mlp --input-size 8
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

SCOPES = ("global", "local")


class _TrainingStep(nn.Module):
    """Routes DDP's forward to the module's ``training_step``, as Lightning's DDP does."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.module.training_step(batch, 0)["loss"]


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, out: dict) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(minutes=5),
    )
    from noisylabels.methods import Forward
    from noisylabels.noise import symmetric_transition

    shape = (1, args.input_size, args.input_size)
    steps, optimizers = {}, {}
    for scope in SCOPES:
        torch.manual_seed(0)
        model = Forward(
            network={"backbone": args.backbone}, input_shape=shape, alpha=0.1, variance_scope=scope
        )
        model.T.copy_(symmetric_transition(10, 0.4))
        model.on_train_epoch_start()  # fresh epoch sums
        steps[scope] = nn.parallel.DistributedDataParallel(_TrainingStep(model))
        optimizers[scope] = model.configure_optimizers()["optimizer"]
    gen = torch.Generator().manual_seed(rank)
    batch = {
        "image": torch.randn(args.batch_size, *shape, generator=gen),
        "label": torch.randint(0, 10, (args.batch_size,), generator=gen),
        "clean_label": torch.randint(0, 10, (args.batch_size,), generator=gen),
        "index": torch.arange(args.batch_size),
    }
    times: dict[str, list[float]] = {scope: [] for scope in SCOPES}
    for block in range(args.warmup_blocks + args.blocks):
        for scope in SCOPES if block % 2 == 0 else SCOPES[::-1]:
            step, opt = steps[scope], optimizers[scope]
            for _ in range(args.block_steps):
                dist.barrier()
                start = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                step(batch).backward()
                opt.step()
                elapsed = torch.tensor([time.perf_counter() - start])
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                if block >= args.warmup_blocks:
                    times[scope].append(float(elapsed))
    # the global scope's extra communication alone: an all-reduce of 3 numbers
    sums = torch.zeros(3)
    latencies = []
    for _ in range(args.blocks * args.block_steps):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(sums)
        latencies.append(time.perf_counter() - start)
    if rank == 0:
        out.update({scope: statistics.median(t) for scope, t in times.items()})
        out["n"] = len(times["global"])
        out["all_reduce"] = statistics.median(latencies)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print the median step times and the overhead; return them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="lenet5", help="lenet5 or mlp (CPU-sized)")
    parser.add_argument("--input-size", type=int, default=28, help="image side (28: MNIST)")
    parser.add_argument("--batch-size", type=int, default=128, help="per process")
    parser.add_argument("--blocks", type=int, default=10, help="timed blocks per scope")
    parser.add_argument("--block-steps", type=int, default=20, help="steps per block")
    parser.add_argument("--warmup-blocks", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = parser.parse_args(argv)
    world = 2
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(world, _free_port(), args, out), nprocs=world, join=True)
        result = dict(out)
    overhead = 100.0 * (result["global"] / result["local"] - 1.0)
    print(
        f"{args.backbone}, batch {args.batch_size} per process x {world} CPU processes (gloo), "
        f"median of {result['n']} steps per scope"
    )
    print(f"  global variance: {1e3 * result['global']:.3f} ms/step")
    print(f"  local variance:  {1e3 * result['local']:.3f} ms/step")
    print(f"  overhead of global: {overhead:+.1f} %")
    print(
        f"  one all-reduce of (sum l, sum l^2, n): {1e6 * result['all_reduce']:.0f} us "
        f"(global adds one per step: {100 * result['all_reduce'] / result['local']:.1f} % of a "
        "local step)"
    )
    result["overhead_pct"] = overhead
    return result


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
