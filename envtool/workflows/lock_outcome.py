"""What a lock run did (workflows/lock.py), in a module of its own: the no-op `envtool lock`
builds one without importing the lock workflow (plan, request, solver modules), and
summarize_lock turns one into `create`'s and `lock`'s Result without importing click."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envtool.core.lock_diff import LockDiff
    from envtool.core.plan import Plan
    from envtool.output import Result


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


def summarize_lock(outcome: LockOutcome, name: str, command: str, dry_run: bool) -> Result:
    """`create`'s and `lock`'s Result: the plan, then what was written (or that nothing was)."""
    from envtool.output import Result

    plan = outcome.plan
    data: dict[str, Any] = {
        "name": name,
        "env_dir": str(outcome.env_dir),
        "changed": outcome.changed,
        "written": outcome.written,
        "dry_run": dry_run,
        "input_hash": outcome.input_hash,
        "packages": outcome.packages,
        "pip_packages": outcome.pip,
        "plan": plan.to_dict() if plan else None,
        "lock_diff": outcome.diff.to_dict() if outcome.diff else None,
    }
    text: list[str] = []
    if plan:  # the no-op lock has none: core/plan is not imported for it
        from envtool.core.plan import render_plan

        text = render_plan(plan)
    if outcome.diff is not None:
        from envtool.core.lock_diff import render_lock_diff

        text += render_lock_diff(outcome.diff)
    if not outcome.changed:
        text.append(f"{name}: lock is up to date ({outcome.env_dir / 'conda-lock.yml'})")
    else:
        counts = ", ".join(f"{p}: {n} packages" for p, n in outcome.packages.items())
        solved = f" ({counts})" if counts else ""
        if not outcome.written:
            text.append(f"dry run: nothing written{solved}")
        elif command == "lock":  # lock re-solves the request; it never rewrites environment.yml
            text.append(f"wrote {outcome.env_dir / 'conda-lock.yml'}{solved}")
        else:
            text.append(f"wrote {outcome.env_dir / 'environment.yml'} and conda-lock.yml{solved}")
    return Result(command, data, text)
