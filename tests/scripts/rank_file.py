"""Each rank writes <dir>/rank-<RANK>, prints a line, and (optionally) fails or dies on one rank.

usage: rank_file.py DIR [--fail-rank R] [--kill-rank R] [--steps N] [--sleep S] [--stamp-dir D]
Imports torch.distributed only when asked to all-reduce, so a run costs ~1 s per rank.
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--stamp-dir", default=None)
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for step in range(1, a.steps + 1):
        if step == 1 and a.stamp_dir:  # benchmark: when did this rank reach its first step
            Path(a.stamp_dir, f"rank-{rank}").write_text(repr(time.time()))
        print(f"rank {rank} step {step}", flush=True)
        if rank == a.fail_rank and step == a.steps:
            raise ValueError(f"planted failure on rank {rank} at step {step}")
        if rank == a.kill_rank and step == a.steps:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(a.sleep)
    (out / f"rank-{rank}").write_text(os.environ.get("WORLD_SIZE", "?"))
    print(f"rank {rank} stderr line", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
