"""Where an `install_from_lock` spends its time, stage by stage, beside a raw `rattler.install` of
the same records (issue 26: "where each 100 ms goes"). Not a test; prints a markdown table.

Warm caches and a fresh prefix each repetition, as bench_install.time_case: the lock of
`synthetic-all` + N synthetic packages (tests/channel_builder.py). The stages are envtool's own
functions, timed by wrapping them in this process (no timing code in envtool):

- read_lock — the strict read of the lock (lock_io.read_lock);
- fetch_all — every cached archive hashed against the lock and validated (its info/ read:
  archive_check.read_archive_contents), in fetch_all's worker threads;
- verify_extracted — rattler's extracted copies checked file by file against the archive's
  paths.json before rattler links from them;
- rattler.install — rattler linking (what the raw column does too);
- plan_install — what the caches hold (a stat per package);
- the rest of link_packages (records from the validated index.json, the package-cache index,
  the event loop) and the rest of install_from_lock (marker, mutex, state.json).

    .venv/bin/python bench/bench_install_stages.py --sizes 100,1000 --reps 3
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_install  # noqa: E402  (puts tests/ on sys.path)

STAGES = ("read_lock", "plan_install", "fetch_all", "verify_extracted", "rattler.install")


def _timed(samples: dict[str, float], name: str, fn: Any) -> Any:
    if name == "rattler.install":

        @functools.wraps(fn)
        async def wrapped_async(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return await fn(*a, **k)
            finally:
                samples[name] = samples.get(name, 0.0) + time.perf_counter() - t

        return wrapped_async

    @functools.wraps(fn)
    def wrapped(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            samples[name] = samples.get(name, 0.0) + time.perf_counter() - t

    return wrapped


def measure(size: int, work: Path, reps: int) -> dict[str, float]:
    import rattler

    from envtool.adapters.install import installer, link
    from envtool.adapters.lockfile import lock_io

    lock, records = bench_install.setup_case(work, size)
    cache = work / f"cache{size}"
    installer.install_from_lock(
        lock, work / f"warm-e{size}", "linux-64", cache_dir=cache, progress=False
    )
    bench_install.raw_rattler_install(records, work / f"warm-r{size}", cache / "raw")
    samples: dict[str, float] = {}
    patches = [
        (installer, "read_lock"),
        (installer, "plan_install"),
        (installer, "fetch_all"),
        (installer, "link_packages"),
        (link, "verify_extracted"),
    ]
    for mod, name in patches:
        setattr(mod, name, _timed(samples, name, getattr(mod, name)))
    rattler.install = _timed(samples, "rattler.install", rattler.install)
    rows: dict[str, list[float]] = {k: [] for k in (*STAGES, "link_rest", "rest", "total", "raw")}
    for i in range(reps):
        samples.clear()
        lock_io._LOCK_CACHE.clear()  # a user's install parses the lock every time
        t = time.perf_counter()
        installer.install_from_lock(
            lock, work / f"e{size}-{i}", "linux-64", cache_dir=cache, progress=False
        )
        rows["total"].append(time.perf_counter() - t)
        for k in STAGES:
            rows[k].append(samples.get(k, 0.0))
        # what is left, per repetition (medians of parts need not add up)
        got = {k: samples.get(k, 0.0) for k in (*STAGES, "link_packages")}
        link_rest = got["link_packages"] - got["verify_extracted"] - got["rattler.install"]
        rows["link_rest"].append(link_rest)
        rows["rest"].append(rows["total"][-1] - sum(got[k] for k in STAGES) - link_rest)
        t = time.perf_counter()
        bench_install.raw_rattler_install(records, work / f"r{size}-{i}", cache / "raw")
        rows["raw"].append(time.perf_counter() - t)  # as bench_install.time_case times it
        samples.clear()
    return {k: statistics.median(v) for k, v in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix="envtool-stages-"))
    results = []
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            results.append((size, measure(size, work, args.reps)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; reps {args.reps}; "
        f"load average start {load_start}, end {load_end}\n"
    )
    print(
        "| packages | read_lock | plan_install | fetch_all (hash + validate) | verify_extracted | "
        "rattler.install (in envtool) | rest of link_packages | rest | envtool total | "
        "raw rattler.install | ratio |"
    )
    print("|" + "---|" * 11)
    for size, m in results:
        link_rest, rest = m["link_rest"], m["rest"]
        print(
            f"| {size} | {m['read_lock']:.3f} s | {m['plan_install']:.3f} s | "
            f"{m['fetch_all']:.3f} s | {m['verify_extracted']:.3f} s | "
            f"{m['rattler.install']:.3f} s | {link_rest:.3f} s | {rest:.3f} s | "
            f"{m['total']:.3f} s | {m['raw']:.3f} s | {m['total'] / m['raw']:.2f}× |"
        )


if __name__ == "__main__":
    main()
