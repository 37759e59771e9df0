"""What a lock run did (workflows/lock.py), in a module of its own: the no-op `envtool lock`
builds one without importing the lock workflow (plan, request, solver modules)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envtool.core.lock_diff import LockDiff
    from envtool.core.plan import Plan


@dataclass
class LockOutcome:
    env_dir: Path
    plan: Plan | None
    input_hash: str
    changed: bool  # False: inputs unchanged, nothing solved or written
    written: bool
    packages: dict[str, int]  # platform -> conda package count
    pip: dict[str, int]
    diff: LockDiff | None = None  # what changed against the lock on disk (None: not solved)
