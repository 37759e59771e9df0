"""Install markers and the per-environment file lock: nothing half-done, one writer at a time.

An install writes `<prefix>/conda-meta/envtool/incomplete.json` (the lock hash) before it
touches the prefix, writes `<prefix>/conda-meta/envtool/state.json` after the last step
succeeded, and only then removes the marker. They live in a subdirectory because conda, mamba
and rattler parse every `conda-meta/*.json` as a package record (rattler refuses to install
into a prefix with a stray `conda-meta/envtool-state.json`). A killed install therefore leaves
the marker behind, and every reader (list, info, doctor) reports `incomplete` until an install converges.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

META_DIR = "envtool"  # under conda-meta/
INCOMPLETE = "incomplete.json"
STATE = "state.json"


def envtool_meta_dir(prefix: Path | str) -> Path:
    return Path(prefix) / "conda-meta" / META_DIR


def write_incomplete_marker(prefix: Path, lock_hash: str, lock_path: Path) -> None:
    payload = {
        "lock_sha256": lock_hash,
        "lock_path": str(Path(lock_path).absolute()),  # the fix names it from any folder
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pid": os.getpid(),
    }
    _write_json_atomic(envtool_meta_dir(prefix) / INCOMPLETE, payload)


def write_complete_state(prefix: Path, state: dict[str, Any]) -> None:
    """Record the finished install, then drop the marker (in that order: a crash between the
    two still reads as incomplete)."""
    meta = envtool_meta_dir(prefix)
    _write_json_atomic(meta / STATE, state)
    (meta / INCOMPLETE).unlink(missing_ok=True)


def read_install_state(prefix: Path | str) -> str | None:
    """'complete' | 'incomplete' | None (not an envtool-installed prefix)."""
    meta = envtool_meta_dir(prefix)
    if (meta / INCOMPLETE).exists():
        return "incomplete"
    if (meta / STATE).exists():
        return "complete"
    return None


def read_state_record(prefix: Path | str) -> dict[str, Any] | None:
    """conda-meta/envtool/state.json of a finished install (lock hash, lock path, plan, time)."""
    path = envtool_meta_dir(prefix) / STATE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_incomplete_marker(prefix: Path | str) -> dict[str, Any] | None:
    path = envtool_meta_dir(prefix) / INCOMPLETE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def env_lock_path(prefix: Path) -> Path:
    """The file lock lives beside the prefix (`<envs_dir>/.NAME.lock`) so `remove` can hold it
    while the prefix itself disappears."""
    prefix = Path(prefix)
    return prefix.parent / f".{prefix.name}.lock"


@contextlib.contextmanager
def hold_env_lock(
    prefix: Path, label: str, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Serialize envtool processes on one environment; say so when we have to wait."""
    from filelock import FileLock, Timeout

    path = env_lock_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if on_wait is not None:
            on_wait(f"waiting for another envtool on {label}…")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    from envtool.adapters.lock_io import write_text_atomic

    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")
