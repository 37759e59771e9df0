"""Each rank writes <out>/rank-<RANK> when it finishes; one rank can be made to fail or die.

usage: rank_file.py OUT [--steps N] [--sleep S] [--fail-rank R] [--kill-rank R] [--at-step K]
                        [--exit-rank R] [--ready-dir D] [--ignore-signals]
Stdlib only (no torch import), so a 2-rank run costs little more than torchrun itself.
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
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--exit-rank", type=int, default=-1, help="exit 3 with a message, no traceback")
    p.add_argument("--at-step", type=int, default=1)
    p.add_argument("--ready-dir", default=None, help="write rank-<RANK> (a timestamp) at step 1")
    p.add_argument(
        "--first-attempt-only", action="store_true", help="fail/kill only before a restart"
    )
    p.add_argument("--env-var", default="WORLD_SIZE", help="what each rank writes to its file")
    p.add_argument("--ignore-signals", action="store_true", help="a rank deaf to SIGINT/SIGTERM")
    a = p.parse_args()
    if a.ignore_signals:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rank = int(os.environ["RANK"])
    if a.first_attempt_only and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0:
        a.fail_rank = a.kill_rank = -1
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for step in range(1, a.steps + 1):
        if step == 1 and a.ready_dir:
            Path(a.ready_dir).mkdir(parents=True, exist_ok=True)
            Path(a.ready_dir, f"rank-{rank}").write_text(repr(time.time()))
        print(f"rank {rank} step {step}", flush=True)
        if rank == a.fail_rank and step == a.at_step:
            raise ValueError(f"planted failure on rank {rank} at step {step}")
        if rank == a.kill_rank and step == a.at_step:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == a.exit_rank and step == a.at_step:
            print(f"fatal: bad config on rank {rank}", file=sys.stderr, flush=True)
            sys.exit(3)
        time.sleep(a.sleep)
    (out / f"rank-{rank}").write_text(os.environ.get(a.env_var, "?"))
    print(f"rank {rank} done", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
