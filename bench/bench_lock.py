"""Benchmark: `envtool lock NAME --force` vs a raw py-rattler solve of the same specs, plus the
no-op `envtool lock NAME`. Not a test; prints a markdown table (paste into docs/benchmarks-lock.md).

Both sides run as fresh subprocesses (what a user waits for: interpreter start, imports, solve;
envtool also discovers builds, verifies and writes the lock), alternating, N repetitions each.

    .venv/bin/python bench/bench_lock.py            # default: 7 repetitions
    .venv/bin/python bench/bench_lock.py --reps 5 --fixtures ../shared/fixtures
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# A user's install has compiled bytecode (pip and pipx compile it); a shell with
# PYTHONDONTWRITEBYTECODE=1 recompiles every module in every subprocess (~0.4 s a command here)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.path.insert(0, str(REPO / "tests"))

from solve_scenarios import HARVESTED, scenarios  # noqa: E402  (the scenarios the tests check)

ENVTOOL = [sys.executable, "-m", "envtool"]

RAW_SOLVE = """
import asyncio, json, sys
import rattler
plan = json.loads(sys.argv[1])
async def main():
    try:
        vps = [rattler.GenericVirtualPackage(rattler.PackageName(n), rattler.Version(v), rattler.BuildString(b))
               for n, v, b in plan["virtual"]]
        recs = await rattler.solve([rattler.Channel(c) for c in plan["channels"]],
                                   [rattler.MatchSpec(s, strict=False) for s in plan["specs"]],
                                   platforms=[plan["platform"], "noarch"], virtual_packages=vps,
                                   constraints=[rattler.MatchSpec(s, strict=False) for s in plan["constraints"]])
        print(len(recs))
    finally:
        await asyncio.sleep(0.05)
asyncio.run(main())
"""


def timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stderr}")
    return elapsed


def scenario(name: str, create_args: list[str], work: Path, reps: int) -> dict[str, float | str]:
    subprocess.run(
        [*ENVTOOL, "create", name, "--no-install", *create_args],
        cwd=work,
        check=True,
        capture_output=True,
    )
    dry = subprocess.run(
        [*ENVTOOL, "create", name, "--no-install", "--dry-run", "--json", *create_args],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    )
    plan = json.loads(dry.stdout)["plan"]
    from envtool.adapters.solve.rattler_solve import resolve_channel

    pp = plan["platforms"][0]
    raw_plan = {
        "channels": [resolve_channel(c) for c in plan["channels"]],
        "specs": pp["specs"],
        "constraints": pp["constraints"],
        "platform": pp["platform"],
        "virtual": [_split_vp(v) for v in pp["virtual_packages"]],
    }
    lock_times, raw_times, noop_times = [], [], []
    for _ in range(reps):  # alternate so load changes hit both sides alike
        lock_times.append(timed([*ENVTOOL, "lock", name, "--force"], work))
        raw_times.append(timed([sys.executable, "-c", RAW_SOLVE, json.dumps(raw_plan)], work))
        noop_times.append(timed([*ENVTOOL, "lock", name], work))
    lock_med, raw_med, noop_med = (
        statistics.median(x) for x in (lock_times, raw_times, noop_times)
    )
    return {
        "scenario": name,
        "lock": lock_med,
        "raw": raw_med,
        "ratio": lock_med / raw_med,
        "target": 1.5 * raw_med + 0.3,
        "noop": noop_med,
    }


def _split_vp(text: str) -> list[str]:
    name, _, rest = text.partition("=")
    version, _, build = rest.partition("=")
    return [name, version, build or "0"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument(
        "--fixtures",
        default=os.environ.get("ENVTOOL_FIXTURES", str(REPO.parent / "shared" / "fixtures")),
    )
    args = ap.parse_args()
    repo = Path(args.fixtures) / HARVESTED
    with tempfile.TemporaryDirectory() as tmp:
        rows = [scenario(n, a, Path(tmp), args.reps) for n, a in scenarios(repo).items()]
    from importlib.metadata import version

    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {platform.machine()}, "
        f"{os.cpu_count()} cores; python {platform.python_version()}; py-rattler {version('py-rattler')}; "
        f"conda-lock {version('conda-lock')}; reps: {args.reps} (medians, subprocess wall time)\n"
    )
    print(
        "| scenario | envtool lock --force | raw rattler solve | ratio | target (1.5×raw+0.3 s) | met | no-op lock | no-op ≤ 0.15 s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['scenario']} | {r['lock']:.3f} s | {r['raw']:.3f} s | {r['ratio']:.2f}× | {r['target']:.3f} s | "
            f"{'yes' if r['lock'] <= r['target'] else 'NO'} | {r['noop']:.3f} s | {'yes' if r['noop'] <= 0.15 else 'NO'} |"
        )


if __name__ == "__main__":
    main()
