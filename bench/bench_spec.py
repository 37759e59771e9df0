"""Benchmark + agreement check: core/spec's MatchSpec split against rattler.MatchSpec, over every
conda spec of the real environment.yml files in ../shared/fixtures/envs. Not a test; prints
markdown (docs/benchmarks-spec.md). It answers two questions for "parse specs with rattler":

1. Do the two give the same (name, version, build, channel)? Per field, with rattler's version
   string compared both raw and after undoing conda's `=X` → `X.*` / `X` → `==X` spelling.
2. What does it cost a command that does not solve (`inspect`, `export`)? The import of
   `envtool.core.spec` alone vs with `from rattler import MatchSpec`, each a fresh interpreter,
   alternating, medians; and the per-spec parse time of both in one process.

    .venv/bin/python bench/bench_spec.py [--reps 9]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENVS = REPO.parent / "shared" / "fixtures" / "envs"
PY = sys.executable


def real_specs() -> list[str]:
    import yaml

    specs: list[str] = []
    for path in sorted(ENVS.glob("*.y*ml")):
        data = yaml.safe_load(path.read_text()) or {}
        specs += [d for d in data.get("dependencies") or [] if isinstance(d, str)]
    return specs


def agreement(specs: list[str]) -> tuple[dict[str, int], list[str]]:
    from rattler import MatchSpec

    from envtool.core.spec import parse_conda_spec

    same = {"name": 0, "build": 0, "version (as written)": 0, "version (normalised)": 0}
    differ: list[str] = []
    for s in specs:
        mine = parse_conda_spec(s)
        theirs = MatchSpec(s, strict=False)
        version = str(theirs.version) if theirs.version is not None else None
        same["name"] += theirs.name.as_package_name().source == mine.name
        same["build"] += (theirs.build or None) == mine.build
        same["version (as written)"] += version == mine.version
        undone = version
        if version and mine.version and version in (f"{mine.version}.*", f"=={mine.version}"):
            undone = mine.version
        ok = undone == mine.version
        same["version (normalised)"] += ok
        if not ok:
            differ.append(f"`{s}`: envtool {mine.version!r}, rattler {version!r}")
    return same, differ


def import_ms(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([PY, "-c", code], check=True, cwd=REPO)
    return (time.perf_counter() - t) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    reps = ap.parse_args().reps
    specs = real_specs()
    same, differ = agreement(specs)
    print(
        f"## {len(specs)} conda specs from {len(list(ENVS.glob('*.y*ml')))} real environment files\n"
    )
    print("| field | same answer |\n|---|---|")
    for k, v in same.items():
        print(f"| {k} | {v}/{len(specs)} |")
    if differ:
        print("\nversions that differ even after undoing the `=X` spelling:\n")
        print("\n".join(f"- {d}" for d in differ[:20]))

    base = "import envtool.core.spec"
    with_rattler = "import envtool.core.spec; from rattler import MatchSpec"
    import_ms(base), import_ms(with_rattler)  # warm the disk cache
    a, b = [], []
    for i in range(reps):
        for code, out in (
            ((base, a), (with_rattler, b)) if i % 2 == 0 else ((with_rattler, b), (base, a))
        ):
            out.append(import_ms(code))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"\n## import cost, fresh interpreter, median of {reps}\n")
    print("| | ms | ratio |\n|---|---|---|")
    print(f"| `import envtool.core.spec` (baseline) | {ma:.0f} | 1.00 |")
    print(f"| + `from rattler import MatchSpec` | {mb:.0f} | {mb / ma:.2f} |")

    from rattler import MatchSpec

    from envtool.core.spec import parse_conda_spec

    def per_spec(fn) -> float:
        t = time.perf_counter()
        for _ in range(20):
            for s in specs:
                fn(s)
        return (time.perf_counter() - t) / (20 * len(specs)) * 1e6

    hand = per_spec(parse_conda_spec)
    ratt = per_spec(lambda s: MatchSpec(s, strict=False))
    print("\n## parse time per spec (warm, in process)\n")
    print("| parser | µs | ratio |\n|---|---|---|")
    print(f"| core/spec.parse_conda_spec (baseline) | {hand:.1f} | 1.00 |")
    print(f"| rattler.MatchSpec(strict=False) | {ratt:.1f} | {ratt / hand:.2f} |")


if __name__ == "__main__":
    main()
