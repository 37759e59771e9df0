"""The mutexes: one process at a time on an environment, and on a project's environments/NAME/.

A mutex is a file lock (filelock) held while envtool works: `hold_env_mutex` per environment
prefix (create, install, a bundle's install and remove), `hold_project_mutex` per project folder
(lock and create while they write the lock files, every install while it reads them). The project
mutex is always taken before the env mutex, never after, so the two cannot deadlock. Not to be
confused with a *lockfile* (conda-lock.yml: core/lockfile.py, adapters/lockfile/lock_io.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from envtool.adapters.install.install_state import sibling_name
from envtool.adapters.locate import default_cache_dir
from envtool.core.shell_quote import printable
from envtool.errors import UsageError


def env_mutex_path(prefix: Path) -> Path:
    """The env mutex's file lives beside the prefix (`<envs_dir>/.NAME.lock`), a place that exists
    before the env is created and after it is removed, so `remove` can hold it while the prefix
    itself disappears and an `install` waiting on it finds whatever is there afterwards."""
    prefix = Path(prefix)
    return prefix.parent / sibling_name(prefix, ".lock")


@contextlib.contextmanager
def hold_mutex(
    path: Path, label: str, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold the lock file `path`; say so when another process holds it and we wait.

    Re-entrant within a process (one FileLock object per path): `create` holds the env mutex
    across lock-write + install, and the installer takes it again inside."""
    from filelock import FileLock, Timeout

    # one key per lock file however the caller spelled it (a relative envs dir, a symlinked
    # parent): two FileLock objects on one file in one process would wait for each other
    path = Path(os.path.realpath(Path(path).parent)) / Path(path).name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path), is_singleton=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if on_wait is not None:
                on_wait(f"waiting for another envtool on {label}…")
            lock.acquire()
    except OSError as exc:  # an envs dir or cache that is not ours to write: nothing was done
        raise UsageError(
            f"cannot lock {printable(label)}: {exc.filename or path}: {exc.strerror or exc}",
            f"nothing was changed; make {path.parent} writable (or ask its owner)",
        ) from None
    try:
        yield
    finally:
        lock.release()


def hold_env_mutex(
    prefix: Path, label: str, on_wait: Callable[[str], None] | None = None
) -> contextlib.AbstractContextManager[None]:
    """The one lock per environment prefix: create (lock-write + install), install, a bundle's
    install and remove all take it, so none of them sees another's half-done work."""
    return hold_mutex(env_mutex_path(Path(prefix)), label, on_wait)


def env_mutex_busy(prefix: Path) -> bool:
    """Does another process hold the env mutex right now (e.g. a removal under way)?"""
    from filelock import FileLock, Timeout

    path = env_mutex_path(Path(prefix))
    if not path.is_file():
        return False
    lock = FileLock(str(path), is_singleton=True)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    except OSError:
        return False
    lock.release()
    return False


def project_mutex_path(env_dir: Path) -> Path:
    """The project mutex's file: outside the project (so users never commit it), one per
    environment folder, in the user's cache (not a shared /tmp another user could pre-create)."""
    import hashlib

    key = hashlib.sha256(str(env_dir.resolve()).encode()).hexdigest()[:16]
    return default_cache_dir() / "locks" / f"project-{key}.lock"


def hold_project_mutex(env_dir: Path, label: str) -> contextlib.AbstractContextManager[None]:
    """environments/NAME/ of a project, held: `lock` holds it while writing, `create` and
    `install NAME` across lock-write/read + install. Always taken before the env mutex, never
    after, so the two cannot deadlock."""
    from envtool.output import note

    return hold_mutex(project_mutex_path(env_dir), label, on_wait=note)
