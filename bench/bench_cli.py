"""Benchmark: CLI latency of `envtool --help`, `envtool doctor` and `envtool doctor --fast`, each
against a baseline run side by side in the same loop. Not a test; prints markdown tables (paste
into docs/benchmarks-cli.md).

Every command is a fresh subprocess (what a user waits for: interpreter start, imports, work).
Within a group the commands alternate, and the order rotates each repetition so neither side
always runs first; one untimed warm-up of each command comes first. Medians of wall time.

    .venv/bin/python bench/bench_cli.py                 # default: 9 repetitions, all groups
    .venv/bin/python bench/bench_cli.py --reps 7 --groups help,fast

Groups (baseline first):
  help    `envtool --help`                      vs `python -c pass`           target ≤ 4× baseline
  doctor  `envtool doctor --json --python PY`   vs `PY -c "import torch"`     target ≤ 1.15× floor
          (and `PY -m torch.utils.collect_env`, for scale)
  fast    `envtool doctor --fast --json`        vs `python -c pass`           target ≤ 0.3 s
  host    `python -c "...probe_host()"`          vs `python -c pass`           (no target: the cost)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
ENVTOOL = str(Path(PY).with_name("envtool"))  # the console script a user runs


@dataclass
class Group:
    name: str
    commands: dict[str, list[str]]  # label -> argv; the first one is the baseline
    subject: str  # label of the command judged against the target
    ratio_target: float | None = None  # subject / baseline
    abs_target: float | None = None  # seconds
    ok_codes: tuple[int, ...] = (0,)
    times: dict[str, list[float]] = field(default_factory=dict)


def groups(python: str) -> dict[str, Group]:
    return {
        "help": Group(
            "help",
            {"python -c pass": [PY, "-c", "pass"], "envtool --help": [ENVTOOL, "--help"]},
            subject="envtool --help",
            ratio_target=4.0,
        ),
        "doctor": Group(
            "doctor",
            {
                'python -c "import torch"': [python, "-c", "import torch"],
                "envtool doctor --json --python PY": [
                    ENVTOOL,
                    "doctor",
                    "--json",
                    "--python",
                    python,
                ],
                "python -m torch.utils.collect_env": [python, "-m", "torch.utils.collect_env"],
            },  # fmt: skip
            subject="envtool doctor --json --python PY",
            ratio_target=1.15,
            ok_codes=(0, 1),  # exit 1 = a check failed; still a complete doctor run
        ),
        "fast": Group(
            "fast",
            {
                "python -c pass": [PY, "-c", "pass"],
                "envtool doctor --fast --json": [ENVTOOL, "doctor", "--fast", "--json"],
            },
            subject="envtool doctor --fast --json",
            abs_target=0.3,
            ok_codes=(0, 1),
        ),
        "host": Group(
            "host",
            {
                "python -c pass": [PY, "-c", "pass"],
                "python -c probe_host()": [
                    PY,
                    "-c",
                    "from envtool.adapters.host.host_probe import probe_host; probe_host()",
                ],
            },  # fmt: skip
            subject="python -c probe_host()",
        ),
    }


def timed(argv: list[str], ok_codes: tuple[int, ...]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok_codes:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr.decode()}")
    return elapsed


def run_group(g: Group, reps: int) -> None:
    labels = list(g.commands)
    for label in labels:  # warm-up: page cache, .pyc files
        timed(g.commands[label], g.ok_codes)
    g.times = {label: [] for label in labels}
    for i in range(reps):
        k = i % len(labels)
        for label in labels[k:] + labels[:k]:  # rotate who goes first
            g.times[label].append(timed(g.commands[label], g.ok_codes))


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def pytest_running() -> bool:
    if not shutil.which("pgrep"):
        return False
    return subprocess.run(["pgrep", "-f", "pytest"], capture_output=True).returncode == 0


def report(g: Group) -> None:
    labels = list(g.commands)
    base = statistics.median(g.times[labels[0]])
    print(f"\n#### {g.name}\n")
    print(
        "| command | median s | min s | max s | ratio of medians | median paired ratio | target | met |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label in labels:
        t = g.times[label]
        med = statistics.median(t)
        ratio = "baseline" if label == labels[0] else f"{med / base:.2f}×"
        # each repetition's own ratio: robust to load that drifts during the run
        paired = statistics.median(a / b for a, b in zip(t, g.times[labels[0]], strict=True))
        pratio = "" if label == labels[0] else f"{paired:.2f}×"
        target, met = "", ""
        if label == g.subject:
            if g.ratio_target is not None:
                target = f"≤ {g.ratio_target}× ({g.ratio_target * base:.3f} s)"
                met = "yes" if med <= g.ratio_target * base else "NO"
            elif g.abs_target is not None:
                target = f"≤ {g.abs_target} s"
                met = "yes" if med <= g.abs_target else "NO"
            else:
                target = f"cost {med - base:+.3f} s"
        print(
            f"| `{label}` | {med:.3f} | {min(t):.3f} | {max(t):.3f} | {ratio} | {pratio} | {target} "
            f"| {met} |"
        )
    for label in labels:
        print(f"\n<!-- {label}: {' '.join(f'{x:.3f}' for x in g.times[label])} -->", end="")
    print()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--groups", default="help,fast,host,doctor")
    ap.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"))
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="skip byte-compiling envtool first (this sandbox sets PYTHONDONTWRITEBYTECODE=1, so "
        "edited modules would be compiled from source on every run; pip compiles on install)",
    )
    args = ap.parse_args()
    if not args.no_compile:
        import compileall

        compileall.compile_dir(str(REPO / "envtool"), quiet=1)
    all_groups = groups(args.python)
    chosen = [all_groups[n] for n in args.groups.split(",")]

    from importlib.metadata import version

    start_load, start_pytest = loadavg(), pytest_running()
    for g in chosen:
        run_group(g, args.reps)
    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, {platform.platform()}; python {platform.python_version()}; "
        f"envtool {version('envtool')}; click {version('click')}; torch {version('torch')}; "
        f"reps: {args.reps} (medians, subprocess wall time); envtool byte-compiled first: "
        f"{'no' if args.no_compile else 'yes'}"
    )
    print(
        f"load average (1/5/15 min): start {start_load}, end {loadavg()}; "
        f"pytest running: start {'yes' if start_pytest else 'no'}, "
        f"end {'yes' if pytest_running() else 'no'}"
    )
    for g in chosen:
        report(g)


if __name__ == "__main__":
    main()
