"""A DDP-like loop over gloo where one rank stops: every rank all-reduces and prints each step;
at --at-step, --stall-rank stops itself (SIGSTOP, as `kill -STOP` or a debugger would), so the
other ranks wait for it in the next all-reduce. --quiet-start S: every rank is silent for S
seconds first (imports, data loading), then runs normally.

usage: stall.py [--steps N] [--stall-rank R] [--at-step K] [--quiet-start S]
Needs torch (gloo, CPU)."""

import argparse
import os
import signal
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--stall-rank", type=int, default=-1)
    p.add_argument("--at-step", type=int, default=3)
    p.add_argument("--quiet-start", type=float, default=0.0)
    a = p.parse_args()
    time.sleep(a.quiet_start)  # start-up: nothing printed yet
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        for step in range(a.steps):
            if rank == a.stall_rank and step == a.at_step:
                os.kill(os.getpid(), signal.SIGSTOP)
            t = torch.ones(1) * (rank + 1)
            dist.all_reduce(t)
            print(f"rank {rank} step {step} sum {t.item():g}", flush=True)
            time.sleep(0.1)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
