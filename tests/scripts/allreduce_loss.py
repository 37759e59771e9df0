"""Deterministic data-parallel least squares over gloo: the loss depends only on world size,
ranks and seed, never on where the ranks run. Prints `step N loss X` and `RESULT loss=X`.

usage: allreduce_loss.py [--steps N] [--seed S]
"""

import argparse

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        gen = torch.Generator().manual_seed(a.seed * 1000 + rank)  # each rank: its own shard
        x = torch.randn(64, 8, generator=gen, dtype=torch.float64)
        y = x @ torch.arange(1.0, 9.0, dtype=torch.float64) + 0.1 * torch.randn(
            64, generator=gen, dtype=torch.float64
        )
        w = torch.zeros(8, dtype=torch.float64)
        for step in range(1, a.steps + 1):
            err = x @ w - y
            loss = (err * err).mean()
            grad = 2 * x.T @ err / len(y)
            packed = torch.cat([grad, loss.reshape(1)])
            dist.all_reduce(packed)  # sum over ranks, then average: what DDP does
            packed /= world
            w -= 0.05 * packed[:-1]
            if rank == 0:
                print(f"step {step} loss {packed[-1].item()!r}", flush=True)
        if rank == 0:
            print(f"RESULT world={world} loss={packed[-1].item()!r}", flush=True)
        print(f"rank {rank} of {world} done", flush=True)  # every rank: the merged log's test
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
