"""Benchmark: `envtool launch` vs the equivalent raw torchrun, time until every rank runs step 1.

Each rank of tests/scripts/rank_file.py writes a wall-clock timestamp at its first step; a
sample is (latest rank stamp) - (time just before the process was started). The two commands
alternate so drifting machine load hits both alike; the report gives medians and the delta.

    .venv/bin/python bench/bench_launch.py --reps 7 --nproc 2 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "scripts" / "rank_file.py"


def commands(nproc: int, ready: Path, out: Path, runs: Path) -> dict[str, list[str]]:
    script_args = [str(out), "--ready-dir", str(ready)]
    return {
        "torchrun": [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), str(SCRIPT), *script_args,
        ],
        "envtool": [
            sys.executable, "-m", "envtool", "launch", str(SCRIPT), "--cpu",
            "--nproc", str(nproc), "--run-dir", str(runs), "--", *script_args,
        ],
    }  # fmt: skip


def sample(argv: list[str], ready: Path, nproc: int, env: dict[str, str]) -> tuple[float, float]:
    """(until every rank ran step 1, until the command exited), seconds from its start."""
    for f in ready.glob("rank-*"):
        f.unlink()
    t0 = time.time()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ended = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv)}")
    stamps = [float(f.read_text()) for f in ready.glob("rank-*")]
    if len(stamps) != nproc:
        raise SystemExit(f"expected {nproc} rank stamps, got {len(stamps)}")
    return max(stamps) - t0, ended


def startup(argv: list[str], env: dict[str, str], reps: int) -> float:
    """Median wall time of a short command (envtool's own work before torchrun starts)."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the raw samples here")
    a = p.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    with tempfile.TemporaryDirectory() as tmp:
        ready, out, runs = Path(tmp, "ready"), Path(tmp, "out"), Path(tmp, "runs")
        ready.mkdir()
        cmds = commands(a.nproc, ready, out, runs)
        for argv in cmds.values():  # warm the page cache for both
            sample(argv, ready, a.nproc, env)
        samples: dict[str, list[float]] = {name: [] for name in cmds}
        whole: dict[str, list[float]] = {name: [] for name in cmds}  # start to exit
        for _ in range(a.reps):
            for name, argv in cmds.items():
                first_step, ended = sample(argv, ready, a.nproc, env)
                samples[name].append(first_step)
                whole[name].append(ended)
        # envtool's own cost before torchrun starts: the same launch with --dry-run, minus a
        # bare interpreter start (deterministic enough to read through machine-load noise)
        dry = [*cmds["envtool"][:-4], "--dry-run"]  # drop "-- OUT --ready-dir DIR"
        pre_launch = startup(dry, env, 3 * a.reps) - startup(
            [sys.executable, "-c", "pass"], env, 3 * a.reps
        )
    med = {name: statistics.median(v) for name, v in samples.items()}
    delta = med["envtool"] - med["torchrun"]
    # each envtool sample ran right after its torchrun twin: the paired median resists load drift
    paired = statistics.median(
        e - t for e, t in zip(samples["envtool"], samples["torchrun"], strict=True)
    )
    paired_whole = statistics.median(
        e - t for e, t in zip(whole["envtool"], whole["torchrun"], strict=True)
    )
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}",
        "python": platform.python_version(),
        "nproc": a.nproc,
        "reps": a.reps,
        "samples_s": samples,
        "median_s": med,
        "whole_run_s": whole,
        "whole_run_median_s": {name: statistics.median(v) for name, v in whole.items()},
        "whole_run_paired_delta_median_s": paired_whole,
        "delta_s": delta,
        "paired_delta_median_s": paired,
        "envtool_pre_launch_s": pre_launch,
        "commands": {k: " ".join(v) for k, v in cmds.items()},
    }
    print("| command | median s | min s | max s |")
    print("|---|---|---|---|")
    for name, v in samples.items():
        print(f"| {name} | {med[name]:.3f} | {min(v):.3f} | {max(v):.3f} |")
    print("\n| whole run, start to exit | median s | min s | max s |")
    print("|---|---|---|---|")
    for name, v in whole.items():
        print(f"| {name} | {statistics.median(v):.3f} | {min(v):.3f} | {max(v):.3f} |")
    print(f"median of paired deltas, start to exit: {paired_whole:+.3f} s")
    for name in cmds:  # from the last rank's first step to the exit, sample by sample
        tail = [w - f for w, f in zip(whole[name], samples[name], strict=True)]
        print(f"first step to exit, {name}: median {statistics.median(tail):.3f} s")
    print(f"\ndelta of medians (envtool - torchrun): {delta:+.3f} s  (target <= +0.5 s)")
    print(f"median of paired deltas: {paired:+.3f} s")
    print(f"envtool's own work before torchrun starts (dry-run - bare python): {pre_launch:.3f} s")
    print(f"{report['date']}  {report['machine']}  reps={a.reps} nproc={a.nproc}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
