"""Benchmark: one long log line (a rank's `\\r` progress bar, no newline) split into lines the
way `envtool logs` and all.log read it — core/runs.LineSplitter (a line cut at 64 KiB, each byte
looked at once) against the splitter it replaced (the unfinished line joined to every 1 MiB
chunk, then split), side by side on the same bytes. Not a test; prints a markdown table (paste
into docs/long-runs.md). Time: median wall of --reps runs, the two alternating; memory: the
peak Python allocation (tracemalloc) of one run each.

    .venv/bin/python bench/bench_long_lines.py              # 64 MB, 5 repetitions
    .venv/bin/python bench/bench_long_lines.py --mb 16 --reps 3
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable

from envtool.core.runs import LineSplitter

CHUNK = 1 << 20  # adapters/launch/runs.LOG_CHUNK: what `envtool logs` reads at a time


def replaced(data: bytes) -> int:
    """The splitter before: rest + data, split, keep the tail (quadratic in a line's length)."""
    rest, count = b"", 0
    for i in range(0, len(data), CHUNK):
        lines = (rest + data[i : i + CHUNK]).split(b"\n")
        rest = lines.pop()
        count += len(lines)
    return count + bool(rest)


def line_splitter(data: bytes) -> int:
    lines, count = LineSplitter(), 0
    for i in range(0, len(data), CHUNK):
        count += len(lines.feed(data[i : i + CHUNK]))
    return count + len(lines.flush())


def measure(fn: Callable[[bytes], int], data: bytes) -> float:
    start = time.perf_counter()
    fn(data)
    return time.perf_counter() - start


def peak(fn: Callable[[bytes], int], data: bytes) -> int:
    tracemalloc.start()
    fn(data)
    _, top = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return top


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    data = b"[node 0 rank 0] " + b"\rstep 1234567 [##########]" * (a.mb * (1 << 20) // 26) + b"\n"
    times: dict[str, list[float]] = {"replaced": [], "LineSplitter": []}
    for rep in range(a.reps):
        order = [("replaced", replaced), ("LineSplitter", line_splitter)]
        for name, fn in order if rep % 2 == 0 else order[::-1]:
            times[name].append(measure(fn, data))
    base = statistics.median(times["replaced"])
    print(f"one {a.mb} MB line, {a.reps} repetitions (median wall, peak Python allocation)\n")
    print("| splitter | time | ratio | peak memory |")
    print("|---|---|---|---|")
    for name, fn in (("replaced", replaced), ("LineSplitter", line_splitter)):
        t = statistics.median(times[name])
        print(f"| {name} | {t:.3f} s | {t / base:.3f}× | {peak(fn, data) / (1 << 20):.1f} MB |")


if __name__ == "__main__":
    main()
