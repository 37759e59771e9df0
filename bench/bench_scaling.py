"""Benchmark: how `envtool lock` and `envtool install` grow with the number of packages (10, 100,
1000 synthetic packages), each against its raw py-rattler baseline in the same loop. Not a test;
prints a markdown table (paste into docs/benchmarks-scaling.md).

One real local channel per size (tests/channel_builder.py: py-rattler-build's assemble_package +
rattler.index.index_fs) holds the CUDA-shaped graph (python stub, pytorch/libtorch cuda126 and
cpu builds, cuda-version, python_abi) plus N synthetic noarch packages and `synthetic-all`, which
depends on all N. The measurements reuse bench_lock.py and bench_install.py unchanged:

- lock: bench_lock.scenario — `envtool lock NAME --force` vs a raw `rattler.solve` of the same
  specs (python, pytorch, synthetic-all; cuda 12.6), plus the no-op `envtool lock NAME`; fresh
  subprocesses, alternating;
- install: bench_install.time_case — in-process `install_from_lock` (warm cache, fresh prefix)
  vs `rattler.install` of the same records (synthetic-all + N), alternating; with --cli also
  the `envtool install` subprocess.

    .venv/bin/python bench/bench_scaling.py                       # 10,100,1000; 7 reps, 3 at 1000
    .venv/bin/python bench/bench_scaling.py --sizes 10,100 --reps 5 --cli
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_install  # noqa: E402  (puts tests/ on sys.path for channel_builder)
import bench_lock  # noqa: E402
import channel_builder as cb  # noqa: E402

GPU = ["--driver", "580.65.06", "--gpu", "9.0"]


def measure(size: int, work: Path, reps: int, cli: bool) -> dict:
    t = time.perf_counter()
    channel = cb.build_channel(work / f"ch{size}", cb.cuda_graph() + cb.synthetic_graph(size))
    build_s = time.perf_counter() - t

    env_yml = work / f"env{size}.yml"
    env_yml.write_text(
        f"name: s{size}\ndependencies:\n  - python\n  - pytorch\n  - synthetic-all\n"
    )
    create_args = ["--cuda", "12.6", "-f", str(env_yml), "--channel", str(channel), *GPU]
    lock_row = bench_lock.scenario(f"s{size}", create_args, work, reps)

    lock, records = bench_install.setup_case(work, size, channel=channel)
    times = bench_install.time_case(lock, records, work, size, reps, cli)
    install = {k: statistics.median(v) for k, v in times.items() if v}
    return {"size": size, "build_s": build_s, "lock": lock_row, "install": install}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--reps-large", type=int, default=3, help="repetitions at >= 1000 packages")
    ap.add_argument("--cli", action="store_true", help="also time the `envtool install` CLI")
    args = ap.parse_args()

    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix="envtool-scaling-"))
    rows = []
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            reps = args.reps_large if size >= 1000 else args.reps
            rows.append((reps, measure(size, work, reps, args.cli)))
            print(f"  done {size} ({reps} reps)", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_end = " ".join(f"{x:.2f}" for x in os.getloadavg())

    from importlib.metadata import version

    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {platform.machine()}, "
        f"{os.cpu_count()} cores; python {platform.python_version()}; py-rattler "
        f"{version('py-rattler')}; py-rattler-build {version('py-rattler-build')}; conda-lock "
        f"{version('conda-lock')}; load average start {load_start}, end {load_end}\n"
    )
    print(
        "| synthetic packages | reps | envtool lock --force | raw rattler solve | ratio | "
        "target (1.5×raw+0.3 s) | met | no-op lock | envtool install | raw rattler.install | "
        "ratio (≤ 1.3×) |" + (" install CLI |" if args.cli else "")
    )
    print("|" + "---|" * (12 if args.cli else 11))
    for reps, r in rows:
        lk, ins = r["lock"], r["install"]
        line = (
            f"| {r['size']} | {reps} | {lk['lock']:.3f} s | {lk['raw']:.3f} s | {lk['ratio']:.2f}× | "
            f"{lk['target']:.3f} s | {'yes' if lk['lock'] <= lk['target'] else 'NO'} | "
            f"{lk['noop']:.3f} s | {ins['envtool']:.3f} s | {ins['rattler']:.3f} s | "
            f"{ins['envtool'] / ins['rattler']:.2f}× |"
        )
        if args.cli:
            line += f" {ins['cli']:.3f} s |"
        print(line)
    print()
    for _, r in rows:
        print(f"channel build (not timed in the table), {r['size']}: {r['build_s']:.1f} s")


if __name__ == "__main__":
    main()
