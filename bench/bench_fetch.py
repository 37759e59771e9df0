"""Benchmark: a real-size fetch from a local HTTP mirror — `envtool install` vs raw `rattler.install`.

The stand-in mirror has the names, versions, builds, subdirs and archive sizes (× --scale) of the
90 packages a `pytorch * cuda*` + `cuda-version 12.6.*` solve over the harvested conda-forge
repodata gives (2.85 GB at scale 1: libtorch 558 MB, libcudnn 440 MB, …). Each is a real .conda
(py-rattler-build's assemble_package) holding one incompressible (random) payload file. The
mirror runs in its own process (tests/mirror_server.py: a ThreadingHTTPServer) and can inject
faults. Measured, side by side in one run, each from a cold cache into a fresh prefix:

  envtool   `envtool install --lock L --prefix P` (CLI subprocess: imports, hash checks, markers)
  rattler   `rattler.install(records, client=Client.default_client())` in a subprocess

then, with faults (a 503 on the first request of a third of the archives, a body cut at half on
another third, 50 ms latency), how many `envtool install` runs it takes; and a `kill -9` in the
middle of the fetch followed by a rerun: how many archives completed before the kill are
fetched again (target 0).

    .venv/bin/python bench/bench_fetch.py [--scale 0.1] [--reps 1] [--work DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import channel_builder as cb  # noqa: E402

HARVESTED = (
    REPO.parent / "shared" / "fixtures" / "repodata" / "harvested-from-pixi-locks" / "conda-forge"
)
SPECS = ["pytorch * cuda*", "cuda-version 12.6.*"]
PY = sys.executable


def real_solve() -> list:
    return cb.solve_records(HARVESTED.resolve(), SPECS)


def build_mirror(root: Path, scale: float) -> tuple[int, int]:
    """The stand-in channel under root: (archives, bytes of archives)."""
    from rattler_build import ArchiveType, assemble_package

    records = real_solve()
    stage_root = root.parent / ".stage"
    for r in records:
        name, sub = r.name.normalized, r.subdir
        stage = stage_root / f"{name}-{r.version}-{r.build}"
        payload = stage / "share" / "envtool-bench" / name / "payload.bin"
        payload.parent.mkdir(parents=True, exist_ok=True)
        size = max(int((r.size or 0) * scale), 1024)
        with open(payload, "wb") as fh:  # incompressible: zstd keeps it the same size
            left = size
            while left:
                n = min(left, 1 << 24)
                fh.write(os.urandom(n))
                left -= n
        (root / sub).mkdir(parents=True, exist_ok=True)
        assemble_package(
            name=name,
            version=str(r.version),
            target_platform=sub,
            build_string=str(r.build),
            output_dir=root / sub,
            files_dir=stage,
            build_number=r.build_number,
            noarch="generic" if sub == "noarch" else None,
            compression_level=1,
            timestamp=cb.STAMP,
            detect_prefix=False,
            archive_type=ArchiveType.Conda,
        )
        shutil.rmtree(stage)
    (root / "linux-64").mkdir(exist_ok=True)
    (root / "noarch").mkdir(exist_ok=True)
    cb.index_channel(root)
    archives = [p for p in root.glob("*/*.conda")]
    return len(archives), sum(p.stat().st_size for p in archives)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mirror:
    """tests/mirror_server.py in its own process."""

    def __init__(self, root: Path, port: int, faults: dict | None = None) -> None:
        self.proc = subprocess.Popen(
            [
                PY,
                str(REPO / "tests" / "mirror_server.py"),
                str(root),
                str(port),
                json.dumps(faults or {}),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = (self.proc.stdout.readline() if self.proc.stdout else "").strip()

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def lock_over(url: str, work: Path) -> tuple[Path, list]:
    """Solve the stand-in channel over HTTP (pins of the real solve) and write the lock."""
    records = real_solve()
    pins = [f"{r.name.normalized} =={r.version} {r.build}" for r in records]
    solved = cb.solve_records([url], pins)
    lock = cb.write_lock(work / "lock" / "conda-lock.yml", solved, url, {})
    return lock, solved


RAW = """
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[4])
import channel_builder as cb
from rattler import install
from rattler.networking import Client
pins = json.loads(open(sys.argv[1]).read())
records = cb.solve_records([sys.argv[5]], pins)  # before the clock: the lock's records
async def main():
    t = time.perf_counter()
    await install(records, target_prefix=sys.argv[2], cache_dir=sys.argv[3], show_progress=False,
                  client=Client.default_client())
    print(time.perf_counter() - t)
    await asyncio.sleep(0.05)
asyncio.run(main())
"""


def envtool_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ENVTOOL_CACHE_DIR=str(cache), ENVTOOL_DRIVER_VERSION="570.86.10")
    env.pop("CONDA_PREFIX", None)
    return env


def run_envtool_install(
    lock: Path, prefix: Path, cache: Path, *more: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            PY,
            "-m",
            "envtool",
            "install",
            "--lock",
            str(lock),
            "--prefix",
            str(prefix),
            "--force",
            *more,
        ],
        env=envtool_env(cache),
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def time_pair(lock: Path, records: list, url: str, work: Path, rep: int) -> dict[str, float]:
    """One cold envtool install (CLI wall time, interpreter start included) and one cold raw
    rattler.install (the call alone, timed inside its process), alternating who goes first."""
    recs = work / "pins.json"
    recs.write_text(json.dumps([f"{r.name.normalized} =={r.version} {r.build}" for r in records]))
    out: dict[str, float] = {}
    order = ["envtool", "rattler"] if rep % 2 == 0 else ["rattler", "envtool"]
    for who in order:
        prefix, cache = work / f"p-{who}-{rep}", work / f"c-{who}-{rep}"
        t = time.perf_counter()
        if who == "envtool":
            done = run_envtool_install(lock, prefix, cache)
        else:
            done = subprocess.run(
                [PY, "-c", RAW, str(recs), str(prefix), str(cache), str(REPO / "tests"), url],
                capture_output=True,
                text=True,
            )
        out[who] = time.perf_counter() - t
        if who == "rattler" and done.returncode == 0:
            out[who] = float(done.stdout.strip().splitlines()[-1])
        if done.returncode != 0:
            raise SystemExit(f"{who} failed: {done.stderr[-2000:]}")
        if who == "envtool":
            out["summary"] = done.stderr.strip().splitlines()[-1]  # type: ignore[assignment]
        shutil.rmtree(prefix, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    return out


def with_faults(mirror_root: Path, lock: Path, port: int, work: Path, names: list[str]) -> dict:
    """503 on the first request of every third archive, a cut body on the next third, latency."""
    faults = {
        "busy_first": names[0::3],
        "cut": names[1::3],
        "latency": 0.05,
    }
    cache, prefix = work / "c-faults", work / "p-faults"
    runs = 0
    with Mirror(mirror_root, port, faults):
        while runs < 6:
            runs += 1
            t = time.perf_counter()
            done = run_envtool_install(lock, prefix, cache)
            spent = time.perf_counter() - t
            if done.returncode == 0:
                break
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(prefix, ignore_errors=True)
    return {
        "runs": runs,
        "seconds_last_run": round(spent, 2),
        "ok": done.returncode == 0,
        "busy_first": len(faults["busy_first"]),
        "cut": len(faults["cut"]),
    }


def kill_and_rerun(mirror_root: Path, lock: Path, port: int, work: Path, total_bytes: int) -> dict:
    """kill -9 once about half the bytes are in the cache; rerun; count re-fetched archives."""
    cache, prefix = work / "c-kill", work / "p-kill"
    archives = cache / "archives"
    with Mirror(mirror_root, port):
        proc = subprocess.Popen(
            [PY, "-m", "envtool", "install", "--lock", str(lock), "--prefix", str(prefix), "--force"],
            env=envtool_env(cache), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        while proc.poll() is None:
            done = (
                sum(p.stat().st_size for p in archives.glob("*.conda")) if archives.is_dir() else 0
            )
            if done >= total_bytes // 2:
                proc.kill()
                break
            time.sleep(0.02)
        proc.wait()
        kept = {p.name for p in archives.glob("*.conda")}
        partial = len(list(archives.glob(".*.part")))
        rerun = run_envtool_install(lock, prefix, cache, "--json")
    report = json.loads(rerun.stdout) if rerun.returncode == 0 else {}
    refetched = sorted(set(report.get("fetched", [])) & kept)
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(prefix, ignore_errors=True)
    return {
        "killed_rc": proc.returncode,
        "complete_before_kill": len(kept),
        "partial_temps_left": partial,
        "rerun_ok": rerun.returncode == 0,
        "rerun_fetched": len(report.get("fetched", [])),
        "completed_fetched_again": len(refetched),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-fetch-"))
    work.mkdir(parents=True, exist_ok=True)
    mirror_root = work / "mirror"
    t = time.perf_counter()
    if not (mirror_root / "linux-64" / "repodata.json").is_file():
        shutil.rmtree(mirror_root, ignore_errors=True)
        n, size = build_mirror(mirror_root, args.scale)
    else:
        n = len(list(mirror_root.glob("*/*.conda")))
        size = sum(p.stat().st_size for p in mirror_root.glob("*/*.conda"))
    print(
        f"mirror: {n} archives, {size / 1e9:.3f} GB (scale {args.scale}), built in {time.perf_counter() - t:.0f} s"
    )
    load_before = os.getloadavg()
    port = free_port()
    with Mirror(mirror_root, port) as mirror:
        lock, records = lock_over(mirror.url, work)
        pairs = [time_pair(lock, records, mirror.url, work, rep) for rep in range(args.reps)]
    env_t = statistics.median(p["envtool"] for p in pairs)
    raw_t = statistics.median(p["rattler"] for p in pairs)
    print(
        f"cold install: envtool {env_t:.2f} s, raw rattler.install {raw_t:.2f} s, ratio {env_t / raw_t:.2f}x"
    )
    print(f"  envtool's summary: {pairs[-1]['summary']}")
    names = sorted(p.name for p in mirror_root.glob("*/*.conda"))
    faults = with_faults(mirror_root, lock, port, work, names)
    print(f"with faults: {faults}")
    kill = kill_and_rerun(mirror_root, lock, port, work, size)
    print(f"kill -9 mid-fetch, rerun: {kill}")
    result = {
        "scale": args.scale,
        "archives": n,
        "bytes": size,
        "reps": args.reps,
        "envtool_s": [round(p["envtool"], 3) for p in pairs],
        "rattler_s": [round(p["rattler"], 3) for p in pairs],
        "ratio": round(env_t / raw_t, 3),
        "faults": faults,
        "kill": kill,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "python": platform.python_version(),
    }
    print(
        f"load average before/after: {result['load_before']} / {result['load_after']} on {result['cpus']} CPUs"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
