"""Run folders on disk (runs/<id>/): their manifests and merged logs, read as untrusted files
(someone could have edited or replaced them): bounded, regular files only, strict JSON."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Any

from envtool.errors import UsageError

MANIFEST = "manifest.json"
MERGED_LOG = "all.log"
MANIFEST_LIMIT = 4 * 1024 * 1024  # a manifest is a few KB; the rank-log table keeps it small
LOG_CHUNK = 1 << 20


def read_manifest(run_dir: Path) -> Any:
    """The manifest's JSON, or None when the run has none (yet); a broken one is one line."""
    from envtool.adapters.files import read_text
    from envtool.core.safe_load import parse_json

    path = run_dir / MANIFEST
    if not path.exists():
        return None
    text = read_text(path, MANIFEST_LIMIT, follow_symlinks=False, what="run manifest")
    return parse_json(text, str(path), "the run's manifest.json is broken: delete the run folder")


def read_requeue_history(run_dir: Path) -> str | None:
    """A --requeue Slurm job's requeues.log (its batch script appends a line per event)."""
    from envtool.adapters.files import read_text

    path = run_dir / "requeues.log"
    if not path.exists():
        return None
    try:
        return read_text(path, MANIFEST_LIMIT, follow_symlinks=False, what="requeue history")
    except UsageError:
        return None  # unreadable: the row says what the manifest says


def list_run_dirs(root: Path) -> list[Path]:
    """Run folders under `root` (those holding a manifest or a merged log), oldest first: run ids
    start with a UTC timestamp, so their names sort by time."""
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise UsageError(f"--run-dir {root}: not a folder", "pass the folder runs are in") from None
    return [
        p
        for p in entries
        if p.is_dir()
        and not p.is_symlink()
        and ((p / MANIFEST).exists() or (p / MERGED_LOG).exists())
    ]


def find_run(root: Path, run: str | None) -> Path:
    """RUN as given (an id under `root`, or a run folder's path); the latest run by default."""
    if run is None:
        runs = list_run_dirs(root)
        if not runs:
            raise UsageError(f"no runs in {root}/", "launch one, or pass --run-dir DIR")
        return runs[-1]
    path = Path(run) if ("/" in run or run in (".", "..")) else root / run
    if not path.is_dir():
        raise UsageError(f"{run}: no such run in {root}/", "list them with `envtool runs`")
    return path


def writer_alive(manifest: Any) -> bool | None:
    """Whether the envtool that is writing this run is still running: None when it ran on
    another host (or the manifest does not say)."""
    if not isinstance(manifest, dict):
        return None
    pid, host = manifest.get("pid"), manifest.get("host")
    if (
        not isinstance(pid, int)
        or isinstance(pid, bool)
        or not 0 < pid < 1 << 31  # os.kill takes a C int (a larger one: OverflowError)
        or host != socket.gethostname()
    ):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_log_from(path: Path, offset: int) -> tuple[bytes, int]:
    """What a run's log holds from `offset` on (at most LOG_CHUNK bytes), and the next offset.
    Regular files only, opened without blocking and without following a link."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return b"", offset
    except OSError as exc:
        raise UsageError(f"cannot read {path} ({exc.strerror})", "check the run folder") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{path}: not a regular file", "check the run folder")
        os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, LOG_CHUNK)
    finally:
        os.close(fd)
    return data, offset + len(data)
