"""What a prefix holds: conda-meta/*.json records and pip dist-info, read from disk (no python run)."""

from __future__ import annotations

import os
import re
import stat
import time
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from envtool.adapters.files import file_digest, read_bytes
from envtool.adapters.host.env_probe import site_packages_dirs
from envtool.core.drift import PackageId, diff_packages
from envtool.errors import UsageError


def read_conda_meta(prefix: Path) -> list[dict[str, Any]]:
    """conda-meta/<name>-<version>-<build>.json, as conda, mamba and rattler write them (records
    that do not parse are left out here; `check_prefix_records` reports them)."""
    out = []
    for meta in sorted((Path(prefix) / "conda-meta").glob("*.json")):
        if meta.name.startswith("envtool-"):
            continue
        data = load_record(meta)
        if isinstance(data, dict) and _record_problem(data) is None:
            out.append(data)
    return out


def load_record(meta: Path) -> Any:
    """One record's JSON, or None when it cannot be read (truncated, not JSON, too large)."""
    from envtool.adapters.files import RECORD_LIMIT
    from envtool.core.safe_load import parse_json

    try:
        return parse_json(read_bytes(meta, RECORD_LIMIT, what="package record"), str(meta))
    except (UsageError, OSError):
        return None


_PATH_BYTES = re.compile(r"[\x00-\x1f]")  # NUL and control characters (a backslash is a name byte)


def unsafe_path(rel: Any) -> str | None:
    """Why a path from a package record or a package's paths.json could name something outside
    the prefix, or None: it must be relative, normalized, with no '..' and no control bytes."""
    if not isinstance(rel, str) or not rel:
        return "not a path"
    if rel.startswith("/"):
        return "an absolute path"
    if _PATH_BYTES.search(rel):
        return "control characters in the path"
    parts = rel.split("/")
    if "" in parts or "." in parts or ".." in parts:
        return "not a normalized relative path (.., . or //)"
    return None


def _record_problem(data: dict[str, Any]) -> str | None:
    """Why a parsed record is not a usable package record, or None."""
    if not all(isinstance(data.get(k), str) and data.get(k) for k in ("name", "version", "build")):
        return "no name, version or build"
    files = data.get("files", [])
    paths = (
        (data.get("paths_data") or {}).get("paths", [])
        if isinstance(data.get("paths_data"), dict)
        else []
    )
    if not isinstance(files, list) or not isinstance(paths, list):
        return "its files are not a list"
    if not all(isinstance(p, dict) for p in paths):
        return "its paths_data is not a list of entries"
    return None


def record_paths(data: dict[str, Any]) -> list[Any]:
    """Every path a record says its package owns (what an unlink would remove)."""
    paths = (data.get("paths_data") or {}).get("paths", [])
    return [*data.get("files", []), *(p.get("_path") for p in paths)]


def _lists_unsafe_path(data: dict[str, Any]) -> bool:
    """A record naming a path outside the prefix (or no path at all): verify reports the record
    as damaged and reads none of its files (install refuses it: check_prefix_records)."""
    return any(unsafe_path(rel) for rel in record_paths(data))


def check_prefix_records(prefix: Path) -> list[Path]:
    """Check every conda-meta/*.json of an existing prefix before anything is linked or
    unlinked: rattler removes the files a record lists for any package not in the lock, so a
    record listing `../../x` (or a path through a symlinked folder that leaves the prefix) would
    delete files outside the env. Such a record is refused with one line naming it. Records
    that do not parse (truncated, not JSON) are returned: the caller sets them aside and their
    package is linked again, so one bad file cannot block every later install."""

    prefix = Path(prefix)
    meta_dir = prefix / "conda-meta"
    if not meta_dir.is_dir():
        return []
    root = os.path.realpath(prefix)
    damaged: list[Path] = []
    parents: dict[str, Path] = {}  # each folder resolved once (~50k files, a few k folders)
    for meta in sorted(meta_dir.glob("*.json")):
        if meta.is_symlink() or not meta.is_file():
            damaged.append(meta)
            continue
        data = load_record(meta)
        if not isinstance(data, dict) or _record_problem(data) is not None:
            damaged.append(meta)
            continue
        for rel in dict.fromkeys(record_paths(data)):  # files and paths_data repeat
            why = unsafe_path(rel)
            if why is None:
                parent = rel.rpartition("/")[0]
                if parent not in parents:
                    parents[parent] = meta
                    real = os.path.realpath(prefix / parent) if parent else root
                    if real != root and not real.startswith(root + os.sep):
                        why = f"its folder {parent!r} leads out of the environment (a symlink)"
            if why:
                raise UsageError(
                    f"{meta}: package record lists {rel!r} ({why}); nothing was changed",
                    f"a package put this record there: move {meta.name} out of conda-meta/ "
                    "(its files are then left alone), or remove the environment and install again",
                )
    return damaged


def set_aside_records(prefix: Path, records: list[Path], say: Any = None) -> list[Path]:
    """Move damaged records into conda-meta/envtool/damaged/ (kept for a look, out of the
    readers' way); their packages then count as not installed and are linked again."""
    if not records:
        return []
    aside = Path(prefix) / "conda-meta" / "envtool" / "damaged"
    aside.mkdir(parents=True, exist_ok=True)
    moved = []
    for meta in records:
        dest = aside / f"{meta.name}.{os.getpid()}.{int(time.time())}"
        os.replace(meta, dest)
        moved.append(dest)
        if say is not None:
            say(f"  {meta.name}: damaged package record set aside ({dest}); relinking its package")
    return moved


METADATA_LIMIT = 8 << 20  # a dist-info METADATA with its long description; far above any real one


def _read_small(path: Path, limit: int) -> str:
    """A pip dist-info file's text, bounded, no link followed ("" when it cannot be read so:
    the dist is still listed, by its folder's name)."""
    try:
        return read_bytes(path, limit, follow_symlinks=False).decode("utf-8", errors="replace")
    except UsageError:
        return ""


def read_pip_dists(
    prefix: Path, conda_records: list[dict[str, Any]] | None = None
) -> list[dict[str, str]]:
    """dist-info dirs in the prefix's site-packages not owned by a conda package
    (conda-built python packages ship dist-info too; those are conda's, not pip's)."""
    prefix = Path(prefix)
    records = read_conda_meta(prefix) if conda_records is None else conda_records
    owned = {f for r in records for f in r.get("files", [])}
    out = []
    for site in site_packages_dirs(prefix):
        for dist in sorted(site.glob("*.dist-info")):
            metadata = dist / "METADATA"
            if not metadata.is_file():
                continue
            if str(metadata.relative_to(prefix)) in owned:
                continue
            headers = HeaderParser().parsestr(_read_small(metadata, METADATA_LIMIT))
            installer = (
                _read_small(dist / "INSTALLER", 1024).strip()
                if (dist / "INSTALLER").is_file()
                else ""
            )
            if installer == "conda":
                continue
            out.append(
                {
                    "name": headers.get("Name", dist.name.split("-")[0]),
                    "version": headers.get("Version", ""),
                    "installer": installer,
                    "location": str(site),
                }
            )
    return out


def read_installed_ids(
    prefix: Path, conda_records: list[dict[str, Any]] | None = None
) -> list[PackageId]:
    conda = read_conda_meta(prefix) if conda_records is None else conda_records
    ids = [PackageId(r["name"], str(r.get("version", "")), "conda", r.get("build")) for r in conda]
    ids += [PackageId(d["name"], d["version"], "pip") for d in read_pip_dists(prefix, conda)]
    return ids


def compute_drift(
    prefix: Path | str,
    lock_path: Path | str,
    platform: str | None = None,
    check_files: bool = False,
    full: bool = False,
) -> dict[str, Any]:
    """Installed vs locked: {clean, missing, extra, changed} (doctor and `envtool verify`);
    with check_files also `damaged`: installed packages whose files are gone from disk or of
    another size than their records say (`full`: or another sha256), and `damaged_records`:
    conda-meta/*.json that do not parse."""
    from envtool.adapters.locate import current_platform
    from envtool.adapters.lockfile.lock_io import read_lock

    lock = read_lock(Path(lock_path))
    plat = platform or current_platform()
    locked = [
        PackageId(p.name, p.version, p.manager, p.build or None)  # None: not compared
        for p in lock.for_platform(plat)
    ]
    records = read_conda_meta(Path(prefix))
    drift = diff_packages(read_installed_ids(Path(prefix), records), locked)
    if check_files:
        drift["damaged"] = damaged_packages(Path(prefix), records, full=full)
        drift["damaged_records"] = [
            str(m)
            for m in sorted((Path(prefix) / "conda-meta").glob("*.json"))
            if not isinstance(d := load_record(m), dict)
            or _record_problem(d) is not None
            or _lists_unsafe_path(d)
        ]
        drift["clean"] = drift["clean"] and not drift["damaged"] and not drift["damaged_records"]
    drift["platform"] = plat
    drift["lock_path"] = str(lock.path)
    return drift


def damaged_packages(
    prefix: Path, records: list[dict[str, Any]], full: bool = False
) -> list[dict[str, Any]]:
    """Conda packages some of whose recorded files are gone from disk or changed: a deleted file,
    a half-removed package, a file of another size than its record says, or one modified after
    the package was linked (mtime newer than its record) whose sha256 differs from the record's,
    a softlink pointing elsewhere (_softlink_changed, always: one readlink); `full` hashes every
    file. One lstat per file (~50k in a CUDA torch env); the hashes are the
    cost of `full` (measured: 314 MB / 21k files, 0.21 s by size, 0.88 s full)."""
    out = []
    for r in records:
        if _lists_unsafe_path(r):  # reported as a damaged record, never followed
            continue
        gone: list[str] = []
        changed: list[str] = []
        entries = {e.get("_path"): e for e in (r.get("paths_data") or {}).get("paths", [])}
        try:  # linked files keep the archive's mtimes; the record is written after them
            linked_at: float | None = os.stat(
                prefix / "conda-meta" / f"{r['name']}-{r['version']}-{r['build']}.json"
            ).st_mtime
        except OSError:
            linked_at = None
        for f in r.get("files", []):
            try:
                st = os.lstat(prefix / f)
            except OSError:
                gone.append(f)
                continue
            e = entries.get(f)
            if e is not None and e.get("path_type") == "softlink":
                if _softlink_changed(prefix / f, st, e):
                    changed.append(f)
                continue
            if e is None or e.get("path_type", "hardlink") not in ("hardlink", "copy"):
                continue
            if not stat.S_ISREG(st.st_mode):
                changed.append(f)
                continue
            # a file rewritten for the prefix has other bytes than the package's (conda and
            # rattler record sha256_in_prefix then); its size is only known by that hash
            rewritten = e.get("prefix_placeholder") or e.get("file_mode")
            size = e.get("size_in_bytes")
            if not rewritten and isinstance(size, int) and st.st_size != size:
                changed.append(f)
                continue
            sha = e.get("sha256_in_prefix") or (None if rewritten else e.get("sha256"))
            suspect = full or (linked_at is not None and st.st_mtime > linked_at)
            if suspect and isinstance(sha, str) and not _digest_is(prefix / f, sha):
                changed.append(f)
        if gone or changed:
            out.append(
                {
                    "name": r["name"],
                    "missing_files": len(gone),
                    "changed_files": len(changed),
                    "first": (gone + changed)[0],
                }
            )
    return sorted(out, key=lambda row: row["name"])


def _digest_is(path: Path, sha: str) -> bool:
    """Does the file hash to `sha`? A file swapped for a FIFO or a link since its lstat does not."""
    try:
        return file_digest(path, "sha256") == sha.lower()
    except OSError:
        return False


def _softlink_changed(path: Path, st: os.stat_result, entry: dict[str, Any]) -> bool:
    """A recorded softlink that is no longer a link, or points elsewhere than when it was linked:
    rattler records the sha256 of the link's target text as its sha256_in_prefix (a record
    without one is only checked to be a link). One readlink, no file read."""
    if not stat.S_ISLNK(st.st_mode):
        return True
    want = entry.get("sha256_in_prefix")
    if not isinstance(want, str):
        return False
    import hashlib

    try:
        target = os.readlink(path)
    except OSError:
        return True
    return hashlib.sha256(os.fsencode(target)).hexdigest() != want.lower()


def describe_env(prefix: Path) -> dict[str, Any]:
    """One row of `envtool list` / the head of `envtool info`: from files only, no python run."""
    from envtool.adapters.install.install_state import (
        read_incomplete_marker,
        read_install_state,
        read_state_record,
    )

    prefix = Path(prefix)
    state = read_install_state(prefix)
    record = read_state_record(prefix) or {}
    marker = read_incomplete_marker(prefix) or {}
    plan = record.get("plan") or {}
    conda = read_conda_meta(prefix)
    torch = next((r for r in conda if r["name"] in ("pytorch", "torch")), None)
    cuda_pkg = next(
        (r for r in conda if r["name"] in ("cuda-version", "pytorch-cuda", "cudatoolkit")), None
    )
    torch_label = f"{torch['version']} {torch.get('build', '')}".strip() if torch else None
    if torch_label is None:
        pip_torch = next(
            (d for d in read_pip_dists(prefix, conda) if d["name"].lower() == "torch"), None
        )
        torch_label = pip_torch["version"] + " (pip)" if pip_torch else None
    flavor = plan.get("envtool_flavor")
    cuda = plan.get("envtool_cuda") or (cuda_pkg["version"] if cuda_pkg else None)
    return {
        "name": prefix.name,
        "prefix": str(prefix),
        "state": state or "unknown",
        "flavor": flavor,
        "cuda": cuda,
        "torch": torch_label,
        "lock_sha256": record.get("lock_sha256")
        if state == "complete"
        else marker.get("lock_sha256"),
        "lock_path": record.get("lock_path") or marker.get("lock_path"),
        "installed_at": record.get("installed_at"),
        "conda_packages": len(conda),
    }


def finish_command(row: dict[str, Any]) -> str:
    """The command that finishes the unfinished install of a `describe_env` row (info, list):
    core.hints' answer, from the lock the interrupted install recorded, by NAME when the env is
    the envs dir's NAME, else by its prefix."""
    from envtool.adapters.install.install_state import read_incomplete_marker
    from envtool.adapters.locate import env_prefix
    from envtool.core.hints import finish_install_command
    from envtool.errors import UsageError

    prefix = str(row["prefix"])
    lock = (read_incomplete_marker(prefix) or {}).get("lock_path") or row.get("lock_path")
    name = row.get("name")
    try:
        by_name = bool(name) and env_prefix(name) == Path(prefix)
    except UsageError:  # a folder name that is not an env name: only its prefix names it
        by_name = False
    return finish_install_command(name if by_name else None, prefix, lock)
