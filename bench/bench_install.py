"""Benchmark: `envtool install` (hash-verified, markers, file lock) vs a raw `rattler.install`.

Both install the same locked records from a warm cache into a fresh prefix, alternating, REPS
times; we report medians and the ratio (target: envtool <= 1.3x raw rattler).

    .venv/bin/python bench/bench_install.py [--reps 7] [--sizes 5,10,100] [--cli]

Sizes: 5 = the CUDA-shaped test graph (python stub, cuda-version, libtorch, pytorch, python_abi);
N = N synthetic noarch packages (+1 meta package) with 5 files each. --cli also times the
`envtool install` subprocess (interpreter start + imports included).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# A user's install has compiled bytecode (pip and pipx compile it); a shell with
# PYTHONDONTWRITEBYTECODE=1 recompiles every module in every subprocess (~0.4 s a command here)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.path.insert(0, str(REPO / "tests"))

import channel_builder as cb  # noqa: E402


def raw_rattler_install(records: list, prefix: Path, cache: Path) -> None:
    from rattler import install

    async def run() -> None:
        await install(records, target_prefix=prefix, cache_dir=cache, show_progress=False)
        await asyncio.sleep(0.05)

    asyncio.run(run())


def setup_case(work: Path, size: int, channel: Path | None = None) -> tuple[Path, list]:
    """Lock for size 5 (the CUDA graph) or `synthetic-all` + size synthetic packages; channel:
    an already built channel holding those packages (default: build one under work)."""
    if size == 5:
        pkgs, specs = cb.cuda_graph(), ["pytorch * cuda*", "cuda-version 12.6.*"]
    else:
        pkgs, specs = cb.synthetic_graph(size), ["synthetic-all"]
    if channel is None:
        channel = cb.build_channel(work / f"ch{size}", pkgs)
    records = cb.solve_records(channel, specs)
    lock = cb.write_lock(work / f"lock{size}" / "conda-lock.yml", records, channel.as_uri(), {})
    return lock, records


def time_case(
    lock: Path, records: list, work: Path, size: int, reps: int, cli: bool = False
) -> dict[str, list[float]]:
    """Warm the caches, then alternate envtool install / raw rattler.install (/ the CLI) into
    fresh prefixes, reps times; returns the samples (seconds) per side."""
    from envtool.adapters.install.installer import install_from_lock
    from envtool.adapters.lockfile import lock_io

    cache = work / f"cache{size}"
    # warm both caches once (not timed)
    install_from_lock(lock, work / f"warm-e{size}", "linux-64", cache_dir=cache, progress=False)
    raw_rattler_install(records, work / f"warm-r{size}", cache / "raw")
    times: dict[str, list[float]] = {"envtool": [], "rattler": [], "cli": []}
    for i in range(reps):
        lock_io._LOCK_CACHE.clear()  # a user's `envtool install` parses the lock every time
        t = time.perf_counter()
        install_from_lock(lock, work / f"e{size}-{i}", "linux-64", cache_dir=cache, progress=False)
        times["envtool"].append(time.perf_counter() - t)
        t = time.perf_counter()
        raw_rattler_install(records, work / f"r{size}-{i}", cache / "raw")
        times["rattler"].append(time.perf_counter() - t)
        if cli:
            env = dict(os.environ, ENVTOOL_CACHE_DIR=str(cache), ENVTOOL_ENVS_DIR=str(work / "cli"))
            argv = [sys.executable, "-m", "envtool", "install", f"c{size}-{i}", "--lock", str(lock)]
            t = time.perf_counter()
            subprocess.run([*argv, "--force", "--json"], env=env, check=True, capture_output=True)
            times["cli"].append(time.perf_counter() - t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sizes", default="5,10,100")
    ap.add_argument("--cli", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="envtool-bench-"))
    rows = []
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            lock, records = setup_case(work, size)
            times = time_case(lock, records, work, size, args.reps, args.cli)
            med = {k: statistics.median(v) for k, v in times.items() if v}
            rows.append((size, med, times))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    from importlib.metadata import version

    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    print(
        f"python {platform.python_version()}, py-rattler {version('py-rattler')}, reps {args.reps}"
    )
    print()
    head = "| packages | envtool install (median s) | raw rattler.install (median s) | ratio |"
    if args.cli:
        head += " `envtool install` CLI (median s) |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for size, med, _ in rows:
        line = f"| {size} | {med['envtool']:.3f} | {med['rattler']:.3f} | {med['envtool'] / med['rattler']:.2f}x |"
        if args.cli:
            line += f" {med['cli']:.3f} |"
        print(line)


if __name__ == "__main__":
    main()
