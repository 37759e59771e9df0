"""Is environments/NAME's lock fresh? Decided with no YAML parser, no solver and no click: the
lock records the hash of its inputs (environment.yml, the plan options, the local channels'
identity, envtool's version) and a digest of its own bytes. `envtool lock` asks here for every
re-lock and `--check`; cli.main asks here first for a plain `envtool lock NAME`, so the no-op
answers before click is imported (docs/benchmarks-scaling.md: click was a third of it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtool import __version__

if TYPE_CHECKING:
    from envtool.output import Result


def current_input_hash(yml_text: str, stored: dict[str, Any], base: Path | None = None) -> str:
    """The hash the previous lock recorded, recomputed for today's inputs — no YAML, no solve.

    The lock stores the options it was solved with; an unchanged environment.yml re-plans to the
    same options, so hashing (file text, stored options, channel identity) decides freshness."""
    from envtool.adapters.solve.rattler_solve import read_channel_identity
    from envtool.core.lockfile import compute_input_hash

    identity = read_channel_identity(
        list(stored.get("channels") or []), list(stored.get("platforms") or []), base
    )
    return compute_input_hash(yml_text, stored, identity, __version__)


def lock_edited(lock_path: Path) -> str | None:
    """None when the lock's bytes are what envtool wrote (its recorded content digest matches);
    else 'edited' or 'no digest'. Bounded read: the lock may come from anyone."""
    from envtool.adapters.files import LOCK_FILE_LIMIT, read_bytes
    from envtool.core.lockfile import content_digest_state

    return content_digest_state(read_bytes(lock_path, LOCK_FILE_LIMIT, what="lock file"))


@dataclass(frozen=True)
class Freshness:
    stamp: str | None  # the input hash the lock records (None: not envtool's, or no lock)
    stored: dict[str, Any] | None  # the plan options it was solved with
    edited: str | None  # lock_edited's answer, asked only when the inputs match
    fresh: bool  # inputs unchanged and the lock's bytes envtool's own


def lock_freshness(yml_text: str, lock_path: Path, env_dir: Path) -> Freshness:
    """**The** freshness test of a single (non-variant) lock."""
    from envtool.adapters.locate import project_root
    from envtool.adapters.lockfile.lock_io import stored_lock_options

    stamp, stored = stored_lock_options(lock_path)
    same = False
    if stamp is not None and stored is not None:
        same = current_input_hash(yml_text, stored, project_root(env_dir)) == stamp
    edited = lock_edited(lock_path) if same else None
    return Freshness(stamp, stored, edited, same and edited is None)


def noop_lock_result(name: str) -> Result | None:
    """`envtool lock NAME`'s answer when nothing changed (the Result the lock command returns),
    or None for everything else — stale, missing, variants-only, bad input — which the lock
    command then handles and reports in full."""
    from envtool.adapters.files import ENV_FILE_LIMIT, read_text
    from envtool.adapters.locate import project_env_paths

    env_dir, yml_path, lock_path = project_env_paths(name, None)
    if not yml_path.is_file() or not lock_path.is_file():
        return None
    yml_text = read_text(yml_path, ENV_FILE_LIMIT, what="environment file")
    state = lock_freshness(yml_text, lock_path, env_dir)
    if not state.fresh:
        return None
    return fresh_result(env_dir, state.stamp, name, dry_run=False)


def fresh_result(env_dir: Path, stamp: str | None, name: str, dry_run: bool) -> Result:
    """The lock command's Result for a lock that is up to date (one answer for the click path
    and the fast path above)."""
    from envtool.workflows.lock_outcome import LockOutcome, summarize_lock

    outcome = LockOutcome(env_dir, None, stamp or "", False, False, {}, {})
    return summarize_lock(outcome, name, "lock", dry_run)
