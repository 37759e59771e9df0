"""Reading outside files with bounds, and writing envtool's own files atomically.

Reads: regular files only, opened non-blocking (a FIFO or /dev/zero must not hang or fill
memory), size-capped, optionally without following a symlink (recordings and bundles).
Writes: a temp file created exclusively with a random name (mkstemp: O_EXCL, so a planted link
cannot aim the write at another file) in the target's directory, fsync'd, then os.replace —
readers see the old file or the new one, never half of one; a device node or a directory at the
target is refused, never replaced.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from envtool.errors import UsageError, cannot_write, not_utf8

KIB = 1024
MIB = 1024 * KIB
# Limits on what envtool reads from outside. Real env files are a few KB; the largest real locks
# in fixtures are ~4 MB (885 packages, 5 platforms); nvidia-smi -q -x for 8 GPUs is ~200 KB.
ENV_FILE_LIMIT = 4 * MIB
LOCK_FILE_LIMIT = 64 * MIB
RECORDING_LIMIT = 16 * MIB
RECORD_LIMIT = 64 * MIB  # one conda-meta/*.json (big packages list many files)


def read_bytes(
    path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True, what: str = "file"
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, or a one-line UsageError naming it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        # the type first: opening a device node can act (as root, /dev/watchdog arms a watchdog);
        # fstat below checks again what was opened
        st = os.stat(path, follow_symlinks=follow_symlinks)
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise UsageError(f"{path}: {kind}", f"pass the path of the {what}")
        fd = os.open(path, flags)
    except OSError as exc:
        raise _read_error(path, exc, what, follow_symlinks) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise UsageError(f"{path}: {kind}", f"pass the path of the {what}")
        if st.st_size > limit:
            raise _too_large(path, st.st_size, limit, what)
        chunks: list[bytes] = []
        size = 0
        while True:  # st_size can lie (procfs, a file still growing): read to the cap
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise _too_large(path, size, limit, what)
        return b"".join(chunks)
    except OSError as exc:
        raise _read_error(path, exc, what, follow_symlinks) from None
    finally:
        os.close(fd)


def read_text(
    path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True, what: str = "file"
) -> str:
    """read_bytes decoded as UTF-8 (a BOM is dropped), or a one-line error."""
    data = read_bytes(path, limit, follow_symlinks=follow_symlinks, what=what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc) from None


def _too_large(path: object, size: int, limit: int, what: str) -> UsageError:
    return UsageError(
        f"{path}: too large for {_a(what)} ({size} bytes; the limit is {limit})",
        f"pass the {what} itself",
    )


def _a(what: str) -> str:
    return f"an {what}" if what[:1].lower() in "aeiou" else f"a {what}"


def _read_error(path: object, exc: OSError, what: str, follow_symlinks: bool) -> UsageError:
    if exc.errno == errno.ELOOP and not follow_symlinks:
        return UsageError(f"{path}: is a symbolic link", f"pass the {what} itself, not a link")
    if exc.errno == errno.ENOENT:
        return UsageError(f"{path}: no such file", f"pass the path of the {what}")
    if exc.errno == errno.EISDIR:
        return UsageError(f"{path}: a directory", f"pass the path of the {what}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return UsageError(f"cannot read {path} (permission denied)", "check the file's permissions")
    return UsageError(f"cannot read {path} ({exc.strerror or exc})", f"check the {what}'s path")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int | None = None) -> None:
    """Write `data` to `path` whole or not at all. `mode` None: 0666 less the user's umask, as a
    plain open() would. Refuses to replace anything but a regular file or a symlink."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise cannot_write(path, exc) from None
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UsageError(f"cannot write {path}: it is {kind}", "pick a path for a new file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise cannot_write(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), (0o666 & ~_umask()) if mode is None else mode)
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # replaces a symlink itself, never writes through it
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise cannot_write(path, exc) from None
        raise


def read_text_or_none(path: Path, limit: int | None = None) -> str | None:
    """A project file's text; None when it is missing or unreadable as text (a FIFO or a device
    there must not hang or fill memory: it is treated as absent, and the atomic writer refuses to
    replace it)."""
    try:
        return read_text(path, limit or ENV_FILE_LIMIT)
    except UsageError:
        return None


def head_keys(path: Path, limit: int = 4096) -> list[str]:
    """The top-level lines of a YAML file's first `limit` bytes (no comments, nothing
    indented, no list items): how a lock is told apart (conda-lock: `version:` then
    `metadata:`; pixi: `version:` then `environments:`) before it is read, bounded, in full."""
    try:  # regular files only, never waited on (a FIFO there is no lock)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return []
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        head = f.read(limit).decode("utf-8", "replace")
    return [x for x in head.splitlines() if x.strip() and not x.startswith(("#", " ", "-"))]


def file_digest(path: Path | str, algo: str) -> str:
    """The hex digest of a file envtool hashes in place (an archive in its cache, a file in a
    prefix), read in chunks of at most 1 MiB — a small file in one read of its size (thousands
    of small files are hashed per install: no buffer larger than the file). Callers lstat
    first; the file is opened without following a link or blocking, and must still be a regular
    file: one swapped for a FIFO or a link to /dev/zero in between (a shared cache) is an
    OSError, never a hang."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    with open(fd, "rb", buffering=0) as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return stream_digest(fh, algo)


def stream_digest(fh: BinaryIO, algo: str) -> str:
    """The hex digest of what is left in an open file (see file_digest)."""
    import hashlib

    h = hashlib.new(algo)
    chunk_size = min(os.fstat(fh.fileno()).st_size + 1, 1 << 20)
    while chunk := fh.read(chunk_size):
        h.update(chunk)
    return h.hexdigest()
