"""Install markers and removal: nothing half-done (the one-writer-at-a-time mutex is adapters/mutex.py).

An install writes `<prefix>/conda-meta/envtool/incomplete.json` (the lock hash) before it
touches the prefix, writes `<prefix>/conda-meta/envtool/state.json` after the last step
succeeded, and only then removes the marker. They live in a subdirectory because conda, mamba
and rattler parse every `conda-meta/*.json` as a package record (rattler refuses to install
into a prefix with a stray `conda-meta/envtool-state.json`). A killed install therefore leaves
the marker behind, and every reader (list, info, doctor) reports `incomplete` until an install converges.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from envtool.errors import UsageError

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


def foreign_packages(prefix: Path | str) -> int:
    """How many packages an environment holds that envtool did not install (conda's, pixi's,
    mamba's: package records, no envtool state or marker); 0 for envtool's own, an empty or a
    missing folder. Installing a lock there removes what the lock does not hold."""
    if read_install_state(prefix) is not None:
        return 0
    try:
        return sum(1 for _ in (Path(prefix) / "conda-meta").glob("*.json"))
    except OSError:
        return 0


def refuse_foreign_env(prefix: Path | str, n: int | None = None) -> None:
    """The one refusal of an install over an env envtool did not install (create and install
    ask before the solve or the mutex, apply_install again before it touches the prefix).
    `n`: foreign_packages(prefix), when the caller counted already."""
    n = foreign_packages(prefix) if n is None else n
    if n:
        raise UsageError(
            f"{prefix} is an environment envtool did not install ({n} packages, made by conda, "
            "mamba or pixi); installing the lock would remove what the lock does not hold",
            "pick another name or --prefix, or replace it: `envtool install` or `create` with "
            "--yes",
        )


def read_state_record(prefix: Path | str) -> dict[str, Any] | None:
    """conda-meta/envtool/state.json of a finished install (lock hash, lock path, plan, time)."""
    return _read_marker(envtool_meta_dir(prefix) / STATE)


def read_incomplete_marker(prefix: Path | str) -> dict[str, Any] | None:
    return _read_marker(envtool_meta_dir(prefix) / INCOMPLETE)


MARKER_LIMIT = 1024 * 1024  # a few hundred bytes when envtool wrote it


def _read_marker(path: Path) -> dict[str, Any] | None:
    """A marker as a mapping, or None: bounded, regular files only, strict JSON (an env is
    another user's directory or a package's output; a FIFO or a huge file there must not hang
    or fill memory)."""
    from envtool.adapters.files import read_bytes
    from envtool.core.safe_load import parse_json

    try:
        data = parse_json(read_bytes(path, MARKER_LIMIT, what="install marker"), str(path))
    except (UsageError, OSError):
        return None
    return data if isinstance(data, dict) else None


# --- removal: rename aside, then delete (a kill leaves a folder `list` shows and `remove` ends)

# `#` cannot occur in an env NAME (check_env_name refuses it): no env can be taken for a leftover
REMOVING = "#removing-"
_LEFTOVER = re.compile(r"^\.(?P<stem>.+)#removing-[0-9a-f]{8}$", re.S)


def move_aside(prefix: Path) -> Path:
    """Rename the prefix to a fresh sibling `.NAME#removing-<random>` in one atomic step: from
    then on NAME is gone (no half-removed env under its name), whatever happens to the delete."""
    import secrets

    prefix = Path(prefix)
    while True:
        aside = prefix.parent / sibling_name(prefix, f"{REMOVING}{secrets.token_hex(4)}")
        if not aside.exists() and not aside.is_symlink():
            break
    os.rename(prefix, aside)
    return aside


def removal_leftovers(prefix: Path) -> list[Path]:
    """Folders a `remove` of this prefix renamed aside and did not finish deleting."""
    prefix = Path(prefix)
    suffix = REMOVING + "0" * 8  # as long as move_aside's, so a long NAME is cut the same way
    stem = sibling_name(prefix, suffix)[: -len(suffix)]  # `.NAME` (or its cut form)
    try:
        entries = list(prefix.parent.iterdir())
    except OSError:
        return []
    return sorted(
        e
        for e in entries
        if (m := _LEFTOVER.match(e.name)) and f".{m['stem']}" == stem and _is_real_dir(e)
    )


def leftover_name(path: Path) -> str | None:
    """NAME of a `.NAME#removing-<random>` folder (None: not one)."""
    m = _LEFTOVER.match(Path(path).name)
    return m["stem"] if m and _is_real_dir(Path(path)) else None


def _is_real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def delete_tree(path: Path) -> None:
    """Delete a renamed-aside prefix; OSError (a permission error) names the first path that
    could not go."""
    import shutil

    def fail(_func: object, failed: str, info: Any) -> None:
        exc = info[1] if isinstance(info, tuple) else info
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror, failed) from None
        raise exc

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=fail)
    else:
        shutil.rmtree(path, onerror=fail)


def _write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    from envtool.adapters.files import write_atomic
    from envtool.core.credentials import redact_credentials

    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    write_atomic(path, redact_credentials(text, strip=True))  # never a URL's credentials


def sibling_name(prefix: Path, suffix: str) -> str:
    """`.NAME<suffix>` beside the prefix, cut (with a hash of the whole name) to fit one path
    component: a valid 255-byte env name must still get its lock and its removal folder."""
    import hashlib

    name = Path(prefix).name
    full = f".{name}{suffix}"
    if len(full.encode("utf-8", "surrogateescape")) <= 255:
        return full
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    room = 255 - len(f".~{digest}{suffix}".encode())
    head = name.encode("utf-8", "surrogateescape")[:room].decode("utf-8", "ignore")
    return f".{head}~{digest}{suffix}"
