"""Benchmark: solving against a channel that publishes sharded repodata (CEP-16) vs one that
publishes only repodata.json — what `envtool create --no-install` downloads and how long it takes.

The channel: channel_builder's CUDA graph (python stub, pytorch, libtorch, cuda-version, …) plus
N synthetic packages, indexed by rattler's indexer twice — once with `write_shards=True` and the
repodata.json files removed (shards only), once without shards — and served over HTTP by
tests/mirror_server.py, which counts the bytes it sends. The request is `python`, `pytorch 2.7.*`
and one synthetic package; every run starts from a cold repodata cache (RATTLER_CACHE_DIR).

    .venv/bin/python bench/bench_shards.py [--packages 3000] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import channel_builder as cb  # noqa: E402
from mirror_server import MirrorServer  # noqa: E402


def build(work: Path, n: int) -> tuple[Path, Path]:
    plain = cb.build_channel(
        work / "plain", [*cb.cuda_graph(), *cb.synthetic_graph(n, files_per_pkg=1)]
    )
    sharded = work / "sharded"
    shutil.copytree(plain, sharded)
    from rattler.index import index_fs

    async def index() -> None:
        await index_fs(sharded, write_zst=False, write_shards=True, force=True)
        await asyncio.sleep(0.05)

    asyncio.run(index())
    for sub in sharded.iterdir():
        for name in ("repodata.json", "repodata.json.zst", "repodata.json.bz2"):
            (sub / name).unlink(missing_ok=True)
    return plain, sharded


def create(url: str, work: Path, rep: int, label: str) -> float:
    project = work / f"project-{label}-{rep}"
    project.mkdir()
    (project / "environment.yml").write_text(
        "name: s\ndependencies:\n  - python 3.11.*\n  - pytorch 2.7.*\n  - synthetic-0001\n"
    )
    env = dict(os.environ)
    env.update(
        RATTLER_CACHE_DIR=str(work / f"rc-{label}-{rep}"),
        XDG_CACHE_HOME=str(work / f"xdg-{label}-{rep}"),  # rattler's shard cache lives here
        ENVTOOL_CACHE_DIR=str(work / f"ec-{label}-{rep}"),
        ENVTOOL_DRIVER_VERSION="570.86.10",
    )
    argv = [sys.executable, "-m", "envtool", "create", "s", "-f", "environment.yml", "--channel", url,
            "--cuda", "12.6", "--driver", "570.86.10", "--no-install"]  # fmt: skip
    t = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=project, capture_output=True, text=True)
    spent = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{label}: {done.stderr[-1500:]}")
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    t = time.perf_counter()
    plain, sharded = build(work, args.packages)
    print(
        f"channel: {args.packages} synthetic + the CUDA graph, built in {time.perf_counter() - t:.0f} s"
    )
    load = os.getloadavg()
    rows = {}
    for label, root in (("repodata.json", plain), ("shards", sharded)):
        times, sent, requests = [], 0, 0
        for rep in range(args.reps):
            with MirrorServer(root) as server:
                times.append(create(server.url, work, rep, label.replace(".", "")))
            sent = sum(server.bytes_sent.values())
            requests = sum(server.requests.values())
        rows[label] = (statistics.median(times), sent, requests)
        print(f"{label:14s} create --no-install {statistics.median(times):.2f} s (median of {args.reps}), "
              f"{sent / 1e3:.0f} KB in {requests} requests")  # fmt: skip
    print(f"load average before/after: {[round(x, 2) for x in load]} / "
          f"{[round(x, 2) for x in os.getloadavg()]} on {os.cpu_count()} CPUs")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
