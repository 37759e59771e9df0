"""`envtool create` flags for solves over the real repodata harvested from pixi locks.

The fixture channels (fixtures/repodata/harvested-from-pixi-locks) are solve-only: no package
files. tests/lock/test_solve_lock.py checks these scenarios and bench/bench_lock.py times the same
ones.
"""

from __future__ import annotations

from pathlib import Path

HARVESTED = Path("repodata") / "harvested-from-pixi-locks"  # under the fixtures folder
# Plan for a GPU machine explicitly so the result does not depend on this host's driver.
H200 = ["--driver", "580.65.06", "--gpu", "9.0"]
LEGACY_CHANNELS = ("pytorch", "nvidia", "conda-forge")


def channel_flags(repo: Path, names: tuple[str, ...] = ("conda-forge",)) -> list[str]:
    """--channel flags for harvested channels, in priority order."""
    return [a for c in names for a in ("--channel", str(repo / c))]


def scenarios(repo: Path) -> dict[str, list[str]]:
    """Flags after `envtool create NAME --no-install`, by scenario name."""
    return {
        "conda-forge-cuda12.6": ["--cuda", "12.6", *channel_flags(repo), "--profile", "ddp", *H200],
        "conda-forge-cpu": ["--cuda", "cpu", *channel_flags(repo), "--profile", "ddp"],
        "legacy-pytorch-cuda12.1": [
            "--flavor",
            "pytorch",
            "--cuda",
            "12.1",
            *channel_flags(repo, LEGACY_CHANNELS),
            "--profile",
            "ddp",
            *H200,
        ],
    }
