"""A tiny DDP-style job with a checkpoint: all ranks all-reduce each step, rank 0 saves.

usage: resume.py CKPT_DIR [--steps N] [--die-rank R --die-at-step K]
Relaunched after a crash it resumes from the last checkpoint and prints
`resumed at step K`; the final `RESULT w=...` equals an uninterrupted run's.
"""

import argparse
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("ckpt_dir")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--die-rank", type=int, default=-1)
    p.add_argument("--die-at-step", type=int, default=-1)
    a = p.parse_args()
    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        ckpt = Path(a.ckpt_dir) / "ckpt.json"
        w, start = 1.0, 1
        if ckpt.exists():
            state = json.loads(ckpt.read_text())
            w, start = state["w"], state["step"] + 1
            print(f"resumed at step {start}", flush=True)
        for step in range(start, a.steps + 1):
            if rank == a.die_rank and step == a.die_at_step:
                os.kill(os.getpid(), signal.SIGKILL)
            grad = torch.tensor([w * (rank + 1)], dtype=torch.float64)
            dist.all_reduce(grad)  # a rank that died makes every other rank fail here
            w = w - 0.01 * grad.item() + step * 0.001
            print(f"step {step} w {w!r}", flush=True)
            if rank == 0:
                tmp = ckpt.with_suffix(".tmp")
                tmp.write_text(json.dumps({"step": step, "w": w}))
                tmp.replace(ckpt)
            dist.barrier()  # the checkpoint is on disk before anyone moves on
        if rank == 0:
            print(f"RESULT w={w!r}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
