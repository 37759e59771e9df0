"""Is an archive (or rattler's extracted copy of it) the package the lock names, and safe to link?

A file with the lock's hash can still be no package at all, another package than the lock says
(a relabelled archive), or one shipping paths that leave the prefix: read_archive_contents
refuses those before rattler sees them. A package already extracted in rattler's shared package
cache is used without its archive only when it checks out file by file against the lock
(read_extracted_contents); an extracted copy rattler is about to link from is checked against
the verified archive (verify_extracted). Every decompression here is bounded.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envtool.adapters.files import file_digest, read_bytes, stream_digest
from envtool.core.lockfile import LockedPackage
from envtool.errors import UsageError, first_line


@dataclass
class ArchiveContents:
    """What a verified archive says about itself: info/index.json and info/paths.json."""

    index: dict[str, Any]
    paths: list[dict[str, Any]] | None  # None: an old package without info/paths.json
    index_bytes: bytes = b""
    paths_bytes: bytes | None = None


_INFO_LIMIT = 64 * 1024 * 1024  # info/paths.json of the largest CUDA packages is a few MB


ONE_READ = 32 << 20  # an archive up to this size is read once: hashed, then parsed from memory


def archive_matches(path: Path, pkg: LockedPackage) -> bool:
    """sha256 when the lock has it (the authority), else md5."""
    return read_if_matches(path, pkg)[0]


def read_if_matches(path: Path, pkg: LockedPackage) -> tuple[bool, bytes | None]:
    """(does the file have the lock's hash — sha256 when the lock has it, else md5 —, its bytes
    when it has and is at most ONE_READ): one read of a small archive serves both the hash and
    read_archive_contents (`data`), which then parses it from memory instead of opening it
    again. A larger one is hashed as a stream (its info/ is a small part read later)."""
    import hashlib

    algo, want = ("sha256", pkg.sha256) if pkg.sha256 else ("md5", pkg.md5)
    if not want:
        return False, None  # a lock entry without a hash cannot be verified: refuse
    # Opened as what it is at this instant: no link followed, no device or pipe read (it may
    # have been swapped since the cache was listed); anything else is "not here", refetched.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False, None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False, None
        if st.st_size > ONE_READ:
            return stream_digest(fh, algo) == want.lower(), None
        data = fh.read(ONE_READ + 1)
    if hashlib.new(algo, data).hexdigest() != want.lower():
        return False, None
    return True, data if len(data) <= ONE_READ else None


def read_archive_contents(
    path: Path, pkg: LockedPackage, data: bytes | None = None
) -> ArchiveContents:
    """Validate a hash-verified archive in Python before rattler sees it, and read its own
    index.json and paths.json. A file with the right hash can still be no package at all (rattler's
    reader then crashed the interpreter in about a third of runs), or another package than the
    lock says (a relabelled archive), or one shipping paths that leave the prefix: refused here,
    with one line naming the lock entry, before anything is linked. `data`: the archive's bytes,
    already hashed against the lock (read_if_matches), parsed instead of the file."""
    import io
    import tarfile
    import zipfile

    source: Any = io.BytesIO(data) if data is not None else path

    def refuse(reason: str) -> UsageError:
        return UsageError(
            f"{pkg.name} {pkg.version} ({pkg.file_name}): {reason}; nothing was linked",
            "the lock names a file that is not this package: regenerate the lock from a channel "
            "you trust (`envtool lock NAME --force`)",
        )

    members: dict[str, bytes] = {}
    try:
        if pkg.file_name.endswith(".conda"):
            with zipfile.ZipFile(source) as zf:
                names = zf.namelist()
                info = [n for n in names if n.startswith("info-") and n.endswith(".tar.zst")]
                body = [n for n in names if n.startswith("pkg-") and n.endswith(".tar.zst")]
                if len(info) != 1 or len(body) != 1:
                    raise refuse("not a conda package (no info-*.tar.zst and pkg-*.tar.zst)")
                with zf.open(body[0]) as fh:  # a zstd frame, not decompressed here (size)
                    if fh.read(4) != b"\x28\xb5\x2f\xfd":
                        raise refuse("not a conda package (its pkg part is not zstd data)")
                import zstandard

                with zf.open(info[0]) as fh:
                    reader = _Capped(zstandard.ZstdDecompressor().stream_reader(fh))
                    members = _info_members(tarfile.open(fileobj=reader, mode="r|"))
        else:  # .tar.bz2: conda writes info/ first, so the scan stops early
            import bz2

            with bz2.open(source, "rb") as fh:
                members = _info_members(tarfile.open(fileobj=_Capped(fh), mode="r|"))
    except UsageError:
        raise
    except ImportError:  # no zstandard: rattler reads the info part alone
        return ArchiveContents({}, None)
    except Exception as exc:  # zipfile, tarfile, zstd, EOF, a member too large
        raise refuse(f"not a valid conda package ({first_line(exc)})") from None
    return _checked_contents(members, pkg, refuse)


def _checked_contents(
    members: dict[str, bytes], pkg: LockedPackage, refuse: Callable[[str], UsageError]
) -> ArchiveContents:
    """index.json names the locked package; paths.json stays inside the prefix."""
    if "info/index.json" not in members:
        raise refuse("not a conda package (no info/index.json)")
    from envtool.core.safe_load import parse_json

    index = parse_json(members["info/index.json"], f"{pkg.file_name}: info/index.json")
    if not isinstance(index, dict):
        raise refuse("info/index.json is not a mapping")
    own = (index.get("name"), str(index.get("version")), index.get("build"))
    locked = (pkg.name, pkg.version, pkg.build or own[2])
    if own != locked:
        raise refuse(f"the archive is {' '.join(map(str, own))}, the lock says {' '.join(locked)}")
    paths = None
    if "info/paths.json" in members:
        data = parse_json(members["info/paths.json"], f"{pkg.file_name}: info/paths.json")
        paths = data.get("paths") if isinstance(data, dict) else None
        if not isinstance(paths, list) or not all(isinstance(e, dict) for e in paths):
            raise refuse("info/paths.json has no list of paths")
        from envtool.adapters.install.installed import unsafe_path

        for entry in paths:
            why = unsafe_path(entry.get("_path"))
            if why is None and (
                entry["_path"] == "conda-meta" or str(entry["_path"]).startswith("conda-meta/")
            ):  # conda-meta itself too: a link or file there breaks every later install
                why = "a file in conda-meta/, where package records live"
            if why:
                raise refuse(f"it ships {entry.get('_path')!r} ({why})")
    return ArchiveContents(index, paths, members["info/index.json"], members.get("info/paths.json"))


_SCAN_LIMIT = 1 << 30  # decompressed bytes read looking for info/: a bomb stops here


class _Capped:
    """A read-only stream that refuses to yield more than _SCAN_LIMIT bytes (a decompression
    bomb in an archive with the right hash costs a bounded time, not the disk or an hour)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.seen = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size if size is not None and size >= 0 else 1 << 20)
        self.seen += len(data)
        if self.seen > _SCAN_LIMIT:
            raise ValueError(f"no info/index.json in the first {_SCAN_LIMIT >> 20} MiB")
        return data


def _info_members(tf: Any) -> dict[str, bytes]:
    """info/index.json and info/paths.json from a tar stream (bounded), stopping once both are
    read or the info/ part is over."""
    out: dict[str, bytes] = {}
    for member in tf:
        name = member.name.removeprefix("./")
        if name in ("info/index.json", "info/paths.json"):
            if not member.isfile() or member.size > _INFO_LIMIT:
                raise ValueError(f"{name} is not a small regular file")
            fh = tf.extractfile(member)
            out[name] = fh.read() if fh is not None else b""
            if len(out) == 2:
                break
        elif out and not name.startswith("info/"):
            break
    return out


class _Bounded:
    """A read-only stream that refuses to yield more than `limit` bytes."""

    def __init__(self, raw: Any, limit: int) -> None:
        self.raw = raw
        self.limit = limit
        self.seen = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size if size is not None and size >= 0 else 1 << 20)
        self.seen += len(data)
        if self.seen > self.limit:
            raise ValueError(f"more than {self.limit} bytes decompressed")
        return data


def archive_softlinks(path: Path, pkg: LockedPackage, contents: ArchiveContents) -> dict[str, str]:
    """{path: target} of the softlinks paths.json lists, as the verified archive's own tar
    members name them ({} when it cannot be read: then no extracted copy matches, and rattler
    extracts the archive again). Read as a stream, stopping at the last softlink; bounded by the
    sizes paths.json gives (a decompression bomb stops there).

    Cheaper than extracting every entry with softlinks again: this only decompresses (no file
    is written), only for packages rattler is about to link from an existing entry, and only as
    far as their last softlink."""
    import tarfile
    import zipfile

    entries = contents.paths or []
    want = {e["_path"] for e in entries if e.get("path_type") == "softlink"}
    if not want:
        return {}
    sizes = sum(e["size_in_bytes"] for e in entries if isinstance(e.get("size_in_bytes"), int))
    limit = sizes + 4096 * (len(entries) + 16) + 2 * _INFO_LIMIT  # headers, padding, info/
    found: dict[str, str] = {}

    def scan(raw: Any) -> None:
        for member in tarfile.open(fileobj=_Bounded(raw, limit), mode="r|"):
            name = member.name.removeprefix("./")
            if name in want and member.issym():
                found[name] = member.linkname
                if len(found) == len(want):
                    return

    try:
        if pkg.file_name.endswith(".conda"):
            import zstandard

            with zipfile.ZipFile(path) as zf:
                body = [n for n in zf.namelist() if n.startswith("pkg-") and n.endswith(".tar.zst")]
                with zf.open(body[0]) as fh:
                    scan(zstandard.ZstdDecompressor().stream_reader(fh))
        else:
            import bz2

            with bz2.open(path, "rb") as fh:
                scan(fh)
    except Exception:  # unreadable, or past the bound: nothing is confirmed
        return {}
    return found


def _link_leaves_prefix(rel: str, link: str) -> str | None:
    """Why a softlink at `rel` (in a prefix) with target `link` may lead out of the prefix."""
    if link.startswith("/"):
        return "an absolute link"
    parts = os.path.normpath(os.path.join(os.path.dirname(rel), link)).split("/")
    if not link or parts[0] == "..":
        return "a link out of the environment"
    return None


def verify_extracted(
    entry: Path,
    contents: ArchiveContents,
    softlinks: Callable[[], dict[str, str]] | None = None,
) -> str | None:
    """Is rattler's extracted copy of a package (which it hardlinks into prefixes) still what the
    verified archive holds? Its info/index.json and info/paths.json must be the archive's own,
    every file the size and sha256 paths.json gives, every folder a folder, and every softlink a
    link to the target the archive's own member names — `softlinks` reads them from the archive
    (archive_softlinks), once and only when the entry has a softlink. Without an archive
    (`softlinks` None: the entry is used as it is) a softlink must be relative and stay in the
    prefix: paths.json does not record targets, so one retargeted at /etc/… cannot be told from
    the package's own. Returns the first difference, or None."""
    if contents.paths is None:
        return None  # nothing to compare with (an old package); rattler's own check stands
    links: dict[str, str] | None = None
    for rel, want in (
        ("info/index.json", contents.index_bytes),
        ("info/paths.json", contents.paths_bytes),
    ):
        try:  # no link followed, no FIFO waited on, no more read than the archive's copy
            if read_bytes(entry / rel, len(want), follow_symlinks=False) != want:
                return f"{rel} differs from the archive's"
        except UsageError:
            return f"{rel} is missing, not a regular file or not the archive's"
    base = os.fspath(entry)  # str paths: pathlib's parsing cost more than the hashing here
    for item in contents.paths:
        rel = item["_path"]
        target = os.path.join(base, rel)
        kind = item.get("path_type", "hardlink")
        if kind == "directory":
            if not os.path.lexists(target):
                return f"{rel} is missing"
            if not stat.S_ISDIR(os.lstat(target).st_mode):
                return f"{rel} is not a folder"
            continue
        if kind == "softlink":
            try:
                link = os.readlink(target)
            except FileNotFoundError:
                return f"{rel} is missing"
            except OSError:
                return f"{rel} is not a symbolic link"
            if softlinks is None:
                why = _link_leaves_prefix(rel, link)
                if why:
                    return f"{rel} points to {link!r} ({why})"
                continue
            if links is None:
                links = softlinks()
            if links.get(rel) != link:
                return f"{rel} points to {link!r}, the package's link to {links.get(rel)!r}"
            continue
        try:
            st = os.lstat(target)
        except OSError:
            return f"{rel} is missing"
        if not stat.S_ISREG(st.st_mode):
            return f"{rel} is not a regular file"
        size = item.get("size_in_bytes")
        if isinstance(size, int) and st.st_size != size:
            return f"{rel} has {st.st_size} bytes, the package {size}"
        sha = item.get("sha256")
        try:
            if isinstance(sha, str) and file_digest(target, "sha256") != sha.lower():
                return f"{rel} does not match its sha256"
        except OSError:  # swapped since the lstat (a FIFO, a link)
            return f"{rel} is not a regular file"
    return None


def extracted_entry(extracted: Path, pkg: LockedPackage) -> Path:
    return extracted / f"{pkg.name}-{pkg.version}-{pkg.build}"


def read_extracted_contents(entry: Path, pkg: LockedPackage) -> ArchiveContents | None:
    """A package already extracted in rattler's package cache (pixi, rattler-build or an earlier
    envtool install put it there) used without its archive — or None, and it is downloaded.

    It counts as verified against the lock when: rattler's `<entry>.lock` records that it was
    extracted from an archive with the lock's sha256 (rattler hashes every archive it extracts);
    its own info/index.json names the locked package and info/paths.json stays in the prefix
    (the checks an archive gets); and every file has the size and sha256 paths.json gives
    (verify_extracted); and the entry, its rattler lock, its info files and every file it lists
    are the user's own — owned by this user, no file writable by group or others
    (_written_by_others).

    What stays trusted (a choice: the archive is not on the machine, and not downloading it is
    the point of using this cache): the user's own cache entries. An entry whose files and
    paths.json were changed together, by this user (or root), passes — the archive itself is not
    re-hashed; anyone who can do that can also edit ~/.bashrc. Entries another user extracted or
    touched (a team's shared RATTLER_CACHE_DIR) are not used: their archives are downloaded."""
    root = entry.parent
    if not pkg.sha256 or pkg.manager != "conda" or entry.resolve().parent != root.resolve():
        return None
    try:
        if not entry.is_dir() or entry.is_symlink():
            return None
        # rattler's cache lock file: an 8-byte revision, then the archive's sha256 (32 bytes)
        head = read_bytes(root / f"{entry.name}.lock", 1 << 10, follow_symlinks=False)
        if len(head) < 40 or head[8:40].hex() != pkg.sha256.lower():
            return None
        members = {
            rel: read_bytes(entry / rel, _INFO_LIMIT, follow_symlinks=False)
            for rel in ("info/index.json", "info/paths.json")
        }
        contents = _checked_contents(members, pkg, lambda why: UsageError(why))
    except (UsageError, OSError):
        return None
    if contents.paths is None or _written_by_others(entry, contents) is not None:
        return None
    if verify_extracted(entry, contents) is not None:
        return None
    return contents


def _written_by_others(entry: Path, contents: ArchiveContents) -> str | None:
    """Why a cache entry used without its archive may hold bytes another user wrote, or None:
    the entry, its `.lock`, its info files and every path it lists must be owned by this user,
    and no file (links aside) writable by group or others. Folders may be group-writable
    (umask 002): a file replaced in one belongs to whoever replaced it, and is refused."""
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None:  # no owners to compare (Windows)
        return None
    uid = geteuid()
    paths = [entry, entry.parent / f"{entry.name}.lock", entry / "info" / "index.json"]
    paths += [entry / "info" / "paths.json", *(entry / e["_path"] for e in contents.paths or [])]
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            return f"{path} is missing"
        if st.st_uid != uid:
            return f"{path} belongs to another user"
        if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} is writable by other users"
    return None


def misplaced_entry(entry: Path, root: Path) -> str | None:
    """Why rattler's cache entry must not be linked from as it is (never following a link),
    or None (a folder inside the cache, or no entry)."""
    try:
        st = os.lstat(entry)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if entry.parent == root and entry.name not in ("", ".", ".."):
        return None  # a real folder (lstat) named directly in the cache: nothing to resolve
    if entry.resolve().parent != root.resolve():
        return "a folder outside the cache"
    return None


def remove_entry(entry: Path) -> None:
    """Remove a cache entry without following it: a link (or a file) is unlinked, a folder
    (only ever a real one inside the cache) removed with what it holds."""
    if stat.S_ISDIR(os.lstat(entry).st_mode):
        shutil.rmtree(entry)
    else:
        os.unlink(entry)
