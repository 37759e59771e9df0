"""Air-gapped installs: the lock plus a local channel holding exactly the locked packages.

Layout of a bundle DIR:
  DIR/conda-lock.yml            the lock, byte for byte (its hash still identifies the env)
  DIR/channel/<subdir>/*.conda  the locked archives, hash-verified, indexed with rattler
  DIR/channel/pypi/*.whl        the lock's pip wheels
  DIR/bundle.json               what was bundled, and the environment's name (written last)
`envtool install --from DIR` remaps every URL to DIR/channel by file name and verifies hashes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from envtool.adapters.files import write_atomic
from envtool.adapters.install.fetch import InstallReport, fetch_verified
from envtool.adapters.locate import default_cache_dir, valid_env_name
from envtool.adapters.lockfile.lock_io import read_lock
from envtool.core.lockfile import Lock, LockedPackage
from envtool.output import note

LOCK_NAME = "conda-lock.yml"
CHANNEL_NAME = "channel"
MANIFEST_NAME = "bundle.json"
MANIFEST_LIMIT = 16 * 1024 * 1024  # a list of file names


def read_bundle_name(bundle: Path) -> str | None:
    """The environment name `envtool bundle NAME` recorded, if any (older bundles: none)."""
    from envtool.adapters.files import read_bytes
    from envtool.core.safe_load import parse_json

    path = bundle / MANIFEST_NAME
    if not (path.exists() or path.is_symlink()):
        return None
    # a bundle comes from elsewhere: bounded, no symlink followed, strict JSON
    data = parse_json(
        read_bytes(path, MANIFEST_LIMIT, follow_symlinks=False, what="bundle manifest"),
        str(path),
        "write the bundle again with `envtool bundle NAME -o DIR`",
    )
    name = data.get("name") if isinstance(data, dict) else None
    # a name that cannot name an env here (`../evil`) is not taken: DIR's name is used
    return name if isinstance(name, str) and valid_env_name(name) else None


def bundle_platforms(lock: Lock, platforms: list[str] | None) -> list[str]:
    """The platforms asked for (default: all the lock holds), each one the lock has solved."""
    plats = platforms or lock.platforms
    for plat in plats:
        lock.require_platform(plat, "pick --platform from the lock's platforms, or re-lock")
    return plats


def plan_bundle(
    lock_path: Path, out_dir: Path, platforms: list[str] | None
) -> tuple[Lock, list[str], dict[str, list[LockedPackage]]]:
    """Every check a bundle makes before it writes (the lock read strictly, the platforms it
    holds, a hash on every entry, no planted link in DIR): `bundle --dry-run` and write_bundle
    both call it, so a dry run that says OK is a bundle that starts. Raises UsageError."""
    lock = read_lock(lock_path)
    plats = bundle_platforms(lock, platforms)
    per_platform = {plat: lock.hashed_for_platform(plat) for plat in plats}
    _refuse_planted_links(Path(out_dir), plats)
    return lock, plats, per_platform


def plan_bundle_files(per_platform: dict[str, list[LockedPackage]]) -> list[str]:
    """The archive names a planned bundle carries, each once."""
    return sorted({p.file_name for pkgs in per_platform.values() for p in pkgs})


def write_bundle(
    lock_path: Path,
    out_dir: Path,
    platforms: list[str] | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
    name: str | None = None,
) -> dict[str, Any]:
    """Fetch (or reuse from the cache) every locked file for the platforms, verify, copy, index.
    `name` (the environment's) is recorded in DIR/bundle.json for `install --from DIR`."""
    lock, plats, per_platform = plan_bundle(lock_path, out_dir, platforms)  # before writing
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    try:
        data = _fill_bundle(lock, plats, per_platform, cache, out_dir, progress)
        data["name"] = name
        write_atomic(out_dir / MANIFEST_NAME, json.dumps(data, indent=1) + "\n")
        return data
    except BaseException:
        # a failed fetch or a Ctrl-C must not leave a half bundle behind: `bundle` refuses a
        # non-empty DIR without conda-lock.yml, so the retry would be refused
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _refuse_planted_links(out_dir: Path, plats: list[str]) -> None:
    """Bundling again into an existing DIR writes DIR/channel/<subdir>/…: a folder there that is
    a symbolic link would carry the writes elsewhere. Refused, naming it."""
    from envtool.errors import UsageError

    channel = out_dir / CHANNEL_NAME
    for folder in (channel, *(channel / sub for sub in {*plats, "noarch", "pypi", ".tmp"})):
        if folder.is_symlink():
            raise UsageError(
                f"{folder} is a symbolic link; nothing was written",
                "bundle into a new directory",
            )


def _fill_bundle(
    lock: Lock,
    plats: list[str],
    per_platform: dict[str, list[LockedPackage]],
    cache: Path,
    out_dir: Path,
    progress: bool,
) -> dict[str, Any]:
    import asyncio

    from rattler.index import index_fs

    channel = out_dir / CHANNEL_NAME
    (channel / "noarch").mkdir(parents=True, exist_ok=True)  # indexers require noarch/
    report = InstallReport("", str(lock.path), lock.sha256, ",".join(plats))
    files = []
    seen: set[str] = set()
    for plat in plats:
        for pkg in per_platform[plat]:
            if pkg.file_name in seen:
                continue
            seen.add(pkg.file_name)
            verified = fetch_verified(pkg, pkg.url, cache / "archives", report)
            sub = "pypi" if pkg.manager == "pip" else pkg.subdir
            dest = channel / sub / pkg.file_name
            dest.parent.mkdir(parents=True, exist_ok=True)
            _copy_atomic(verified, dest)
            files.append(f"{CHANNEL_NAME}/{sub}/{pkg.file_name}")
            if progress:
                note(f"  bundled {sub}/{pkg.file_name}")

    async def index() -> None:
        await index_fs(channel, write_zst=False, write_shards=False, force=True)
        await asyncio.sleep(0.05)

    asyncio.run(index())
    leftover = channel / ".tmp"  # rattler's indexer scratch dir; not part of a channel
    if leftover.is_dir() and not any(leftover.iterdir()):
        leftover.rmdir()
    _write_lock_copy(lock, out_dir / LOCK_NAME)
    return {
        "bundle": str(out_dir),
        "lock": str(out_dir / LOCK_NAME),
        "channel": str(channel),
        "lock_sha256": lock.sha256,
        "platforms": plats,
        "files": sorted(files),
    }


def _write_lock_copy(lock: Lock, dest: Path) -> None:
    """The bundle's lock is the very file that was read, planned and hashed (bundle.json names
    its sha256): read once more, bounded, and refused if it changed since."""
    import hashlib

    from envtool.adapters.files import LOCK_FILE_LIMIT, read_bytes
    from envtool.errors import DiagnosedFailure

    data = read_bytes(lock.path, LOCK_FILE_LIMIT, what="lock file")
    if hashlib.sha256(data).hexdigest() != lock.sha256:
        raise DiagnosedFailure(
            f"{lock.path} changed while it was being bundled; the bundle was not finished",
            "run the same bundle command again",
        )
    write_atomic(dest, data)


def _copy_atomic(src: Path, dest: Path) -> None:
    """Copy through an exclusive random temp beside dest, then rename: a link planted at dest
    (an existing bundle DIR is written again) is replaced, never written through."""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as fh:
            shutil.copyfileobj(fh, out, 1 << 20)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
