"""Fetch a lock's archives into envtool's archive cache, each checked against the lock while it
streams.

Every download goes through rattler's client (solve/network.py: retries, the user's credentials
and mirrors). A body cut short is fetched again from where it stopped, then reported as a
network failure — never as "changed"; the lock is the authority: a bad cached copy is replaced
only by a fetched copy that matches, a bad fetched copy is refused. A verified archive is renamed
into the cache at once, so a killed or failed install resumes without fetching it again. A
package with no archive here that is already extracted in rattler's shared package cache from the
lock's sha256, every file intact, is used as it is (archive_check.read_extracted_contents).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envtool.adapters.install.archive_check import (
    ArchiveContents,
    archive_matches,
    extracted_entry,
    read_extracted_contents,
    read_if_matches,
)
from envtool.adapters.install.progress import Progress
from envtool.core.lockfile import LockedPackage
from envtool.errors import DiagnosedFailure, UsageError, cannot_write, first_line
from envtool.output import note


@dataclass
class InstallReport:
    prefix: str
    lock_path: str
    lock_sha256: str
    platform: str
    conda_packages: int = 0
    pip_packages: int = 0
    fetched: list[str] = field(default_factory=list)  # archives downloaded/copied this time
    reused: list[str] = field(default_factory=list)  # archives already verified in the cache
    refetched: list[str] = field(default_factory=list)  # cached copies that failed the hash
    # linked from rattler's package cache without an archive (read_extracted_contents)
    from_package_cache: list[str] = field(default_factory=list)
    seconds: float = 0.0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def remap_to_channels(pkg: LockedPackage, channels: list[str], offline: bool = False) -> str:
    """The URL of the same file in a local channel (bundles, mirrors): matched by file name.
    `offline` (a bundle): a file not there is an error, never fetched from the lock's URL."""
    for ch in channels:
        root = _channel_dir(ch)
        if root is None:
            base = ch.rstrip("/")
            return f"{base}/{pkg.subdir}/{pkg.file_name}"
        for candidate in (
            root / pkg.subdir / pkg.file_name,
            root / "pypi" / pkg.file_name,
            root / pkg.file_name,
        ):
            if candidate.is_file():
                return candidate.resolve().as_uri()
    if pkg.manager == "pip" and not offline:  # a conda mirror need not hold wheels: keep the URL
        return pkg.url
    raise UsageError(
        f"{pkg.name} {pkg.version}: {pkg.file_name} is not in {', '.join(channels)}",
        "bundle the environment again (`envtool bundle NAME -o DIR`) or pass the channel that holds it",
    )


def _channel_dir(channel: str) -> Path | None:
    if channel.startswith("file://"):
        return Path(urllib.request.url2pathname(urllib.parse.urlparse(channel).path))
    if "://" in channel:
        return None
    return Path(channel).expanduser()


def cache_path(archive_dir: Path, file_name: str, resolved: bool = False) -> Path:
    """archive_dir/file_name, confined: the name is a plain file name (core/lockfile checked it when
    the lock was read) and the resolved path must still be directly under the resolved cache.
    `resolved`: archive_dir is already resolved (fetch_all resolves it once, not per archive)."""
    root = archive_dir if resolved else archive_dir.resolve()
    dest = root / file_name
    if dest.parent != root or dest.name != file_name or file_name in ("", ".", ".."):
        raise UsageError(
            f"{file_name!r}: not a plain archive file name", "fix or regenerate the lock"
        )
    return dest


def is_own_file(path: Path) -> bool:
    """A regular file of the cache itself (not a link someone planted, not a device)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _size(path: Path) -> int:
    """The size of a cached archive, 0 when there is none (or it is no regular file)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


THREAD_MIN = 1 << 20  # from here on a cached archive's check is mostly its hash (GIL-free)
FETCH_LIMIT = 16 << 30  # the largest conda packages (CUDA libraries) are ~3 GiB


ATTEMPTS = 4  # tries per archive: a 5xx, a refused connection, a cut body or a stall
STALL_BYTES = 1024  # fewer bytes than this in an idle time-out is a stall (1 byte/s drips)
_REMOTE = ("http", "https", "s3", "gcs", "oci")  # what rattler's client fetches


class _Sink:
    """The writer rattler streams a body into: a file object (never a bare fd, which a late
    write from a cancelled transfer could hit after reuse), the running digest, a size cap and
    the byte count for progress. `size` counts every byte in the file, across resumed tries.
    `moved_at`: when the body last made STALL_BYTES of progress (the idle watch reads it);
    `write_error`: the disk's refusal (ENOSPC, EFBIG), whatever rattler made of the exception."""

    def __init__(self, fh: Any, digest: Any, size: int, on_bytes: Callable[[int], None]) -> None:
        self.fh = fh
        self.digest = digest
        self.size = size
        self.on_bytes = on_bytes
        self.moved_at = time.monotonic()
        self.moved_size = size
        self.write_error: OSError | None = None

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > FETCH_LIMIT:  # a server that never stops must not fill the disk
            raise _TooLarge
        view = memoryview(data)
        try:
            while view:  # unbuffered: a full disk is seen at this write, not at close
                view = view[self.fh.write(view) :]
        except OSError as exc:
            self.write_error = exc
            raise
        self.digest.update(data)
        self.on_bytes(len(data))
        if self.size - self.moved_size >= STALL_BYTES:
            self.moved_at, self.moved_size = time.monotonic(), self.size
        return len(data)


class _TooLarge(Exception):
    pass


def lock_digest(pkg: LockedPackage) -> tuple[str, str]:
    """(algorithm, expected hex) — sha256 when the lock has it (the authority), else md5."""
    if pkg.sha256:
        return "sha256", pkg.sha256.lower()
    return "md5", (pkg.md5 or "").lower()


class NetworkFailure(DiagnosedFailure):
    """A download that did not complete (exit 1): retried, then reported; never "changed"."""


class ChangedFile(DiagnosedFailure):
    """A complete download whose hash is not the lock's (exit 1)."""


_STATUS = re.compile(r"(?:^|\()([1-5]\d\d) [A-Z]")


def http_status(text: str) -> int | None:
    """The HTTP status an error names ("(404 Not Found)", or "503 Service Unavailable" at the
    start of a reason) — never digits from a host or port: a mirror on port 40429 is no 404."""
    found = _STATUS.search(text)
    return int(found.group(1)) if found else None


def network_failure(url: str, why: str) -> NetworkFailure:
    """A download that did not complete: the network's fault or the mirror's, never the lock's."""
    hint = "check the network / mirror, then run the same command again (archives already fetched are kept)"
    status = http_status(why)
    if status in (401, 403):
        hint = (
            "the server wants credentials: add them to rattler's store (`pixi auth login HOST`, "
            "or a RATTLER_AUTH_FILE), then run the same command again"
        )
    elif status == 404:
        hint = "the mirror does not have this file: check the channel / mirror the lock points to"
    return NetworkFailure(f"could not fetch {url}: {why}; nothing was linked", hint)


def changed_file(pkg: LockedPackage, url: str, got: str) -> ChangedFile:
    """A complete file whose hash is not the lock's (a body cut short never gets here)."""
    algo, want = lock_digest(pkg)
    return ChangedFile(
        f"{pkg.name} {pkg.version} ({pkg.file_name}): hash mismatch — the file at {url} is not "
        f"the one the lock names (lock {algo} {want or '(none)'}, file {algo} {got}); "
        "nothing was linked",
        "if the lock is right, the mirror serves a different file — fix the mirror or use "
        "another; re-lock only if you trust the new file",
    )


async def _download(
    url: str,
    dest: Path,
    algo: str,
    on_bytes: Callable[[int], None],
    resume: bool = True,
    on_retry: Callable[[str], None] = lambda _m: None,
) -> tuple[Path, str, bool]:
    """Stream `url` into a fresh exclusive temp file beside `dest` (mkstemp: a random name,
    O_EXCL, so no planted link or other process can aim the write) and return (temp path, hex
    digest, resumed); the caller renames it over `dest` only once the digest is the lock's.

    Each try goes through rattler's client without its own retries, so every retry is seen
    here (and shown: `on_retry`): a 5xx/429, a refused connection, a body cut short or a stall
    (under STALL_BYTES in the idle time-out: the transfer is cancelled, which closes it) is
    tried again, ATTEMPTS times with a short back-off — from where it stopped, with
    `Range: bytes=N-` (a client with that default header: rattler's download calls take no
    per-request headers), unless `resume` is off — then reported as a network failure naming
    the host and what was tried, never as a changed file. Another 4xx is not retried. A full
    disk (ENOSPC, EFBIG) is not the network's: reported at once (disk_full). rattler does not
    expose the answer's status, so a server that ignores Range (200, the whole file again) is
    only seen in the digest: the caller then fetches the file once more without resuming."""
    import asyncio

    from envtool.adapters.solve import network

    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("file", *_REMOTE):
        raise UsageError(
            f"{url}: unsupported URL scheme", "use file://, http(s)://, s3://, gcs:// or oci://"
        )
    digest = hashlib.new(algo)
    adopted = _adopt_partial(dest, digest) if resume and parsed.scheme != "file" else None
    if adopted is not None:  # an interrupted run's bytes: ask for the rest
        fd, tmp, size = adopted
    else:
        try:
            fd, tmp_name = tempfile.mkstemp(
                dir=dest.parent, prefix=f".{dest.name}.", suffix=".part"
            )
        except OSError as exc:
            raise cannot_write(dest.parent, exc) from None
        tmp, size = Path(tmp_name), 0
        _claim(fd)
    resumed = False
    sink = None
    counted = [0]  # bytes of this file shown in the progress, taken back if it is dropped
    started = time.monotonic()

    def count(n: int) -> None:
        counted[0] += n
        on_bytes(n)

    try:
        with os.fdopen(fd, "ab" if size else "wb", buffering=0) as fh:
            for attempt in range(1, ATTEMPTS + 1):
                sink = _Sink(fh, digest, size, count)
                try:
                    if parsed.scheme == "file":
                        await asyncio.to_thread(_copy_local, url, sink)
                    else:
                        from rattler.package_streaming import download_to_writer

                        resumed = resumed or size > 0
                        client = network.download_client(size)
                        await _watched(download_to_writer(client, url, sink), sink)
                    return tmp, digest.hexdigest(), resumed
                except _TooLarge:
                    raise DiagnosedFailure(
                        f"{url}: larger than {FETCH_LIMIT >> 30} GiB, not a package; "
                        "nothing was linked",
                        "check the lock's URL",
                    ) from None
                except (UsageError, DiagnosedFailure):
                    raise
                except Exception as exc:
                    if sink.write_error is not None:  # the disk's, however rattler wrapped it
                        raise disk_full(dest.parent, sink.write_error, sink.size) from None
                    if parsed.scheme == "file":
                        why = exc.strerror if isinstance(exc, OSError) else None
                        raise network_failure(url, why or first_line(exc)) from None
                    why = _transient(exc, sink)
                    if why is None:  # a 4xx: asking again gets the same answer
                        raise network_failure(url, first_line(exc)) from None
                    size = sink.size
                    if not resume and size:  # start over: drop what this try wrote
                        count(-counted[0])
                        fh.seek(0)
                        fh.truncate()
                        digest, size = hashlib.new(algo), 0
                    if attempt == ATTEMPTS:
                        spent = time.monotonic() - started
                        tried = f"{ATTEMPTS} tries in {spent:.0f} s"
                        if sink.size == 0 and "stalled" not in why:
                            why = network.describe_unreachable(url) or why
                        elif sink.size:
                            why = f"{why}; the connection dropped after {sink.size} bytes"
                        raise network_failure(url, f"{why} ({tried})") from None
                    host = parsed.hostname or url
                    on_retry(f"retry {attempt + 1}/{ATTEMPTS} {host}: {why}")
                    await asyncio.sleep(0.25 * 2**attempt)
        raise AssertionError("unreachable")
    except BaseException as exc:
        interrupted = isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError))
        if not (interrupted and resume and sink is not None and sink.size):
            tmp.unlink(missing_ok=True)  # kept only for the rerun after Ctrl-C (_adopt_partial)
        on_bytes(-counted[0])
        raise


def _claim(fd: int) -> bool:
    """Hold an exclusive lock on a temp download while this process writes it, so another
    install sharing the cache never adopts it (released when the file is closed)."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except (ImportError, OSError):
        return False


def _adopt_partial(dest: Path, digest: Any) -> tuple[int, Path, int] | None:
    """The partial download of `dest` an interrupted install left (Ctrl-C keeps it), claimed by
    this process: (fd, path, size), its bytes fed to `digest`; or None. Only a regular file of
    this cache, not a link, and not one another process holds (its lock) is taken."""
    for path in sorted(dest.parent.glob(f".{dest.name}.*.part")):
        try:
            fd = os.open(
                path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            )
        except OSError:
            continue
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not st.st_size or not _claim(fd):
            os.close(fd)
            continue
        size = 0
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
            size += len(chunk)
        return fd, path, size
    return None


async def _watched(transfer: Any, sink: _Sink) -> None:
    """Run a rattler transfer, cancelled (which drops it and closes its connection) when it
    makes no progress — fewer than STALL_BYTES — for the idle time-out: a server that stops
    mid-body, or drips a byte a second, costs one time-out per try, not forever."""
    import asyncio

    from envtool.adapters.solve.network import idle_timeout

    limit = idle_timeout()
    task = asyncio.ensure_future(transfer)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=min(limit, 1.0))
            if done:
                return task.result()
            if time.monotonic() - sink.moved_at > limit:
                task.cancel()
                raise _Stalled(f"stalled: under {STALL_BYTES} bytes in {limit:g} s")
    finally:
        if not task.done():
            task.cancel()


class _Stalled(Exception):
    pass


def _transient(exc: BaseException, sink: _Sink) -> str | None:
    """Why a failed try is worth another (a short reason), or None for an answer that will not
    change (a 4xx other than 408/429)."""
    if isinstance(exc, _Stalled):
        return str(exc)
    if isinstance(exc, OSError):  # the body was cut short, or the connection dropped
        return first_line(exc)
    text = str(exc)
    code = http_status(text)
    if code is not None:
        if 400 <= code < 500 and code not in (408, 429):
            return None
        reason = re.search(rf"\({code} ([^)]*)\)", text)
        return f"{code} {reason.group(1)}" if reason else str(code)
    if "error sending request" in text or "connect" in text.lower() or "timed out" in text:
        return "no connection"
    return first_line(exc)


def disk_full(where: Path, exc: OSError, needed: int, at_least: bool = True) -> DiagnosedFailure:
    """A write the disk refused (ENOSPC, EDQUOT, EFBIG): named as such, with the room left —
    not retried, and never blamed on the network or the package. `needed`: bytes (`at_least`:
    what a download had written when it failed; the lock records no sizes)."""
    import errno
    import shutil

    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = 0
    mb = 1 << 20
    limit = " (a file-size limit: ulimit -f)" if exc.errno == errno.EFBIG else ""
    return DiagnosedFailure(
        f"disk full at {where}{limit} ({free // mb} MB free, {'at least' if at_least else 'about'} "
        f"{max(-(-needed // mb), 1)} MB needed); nothing was linked",
        "free space there (or set ENVTOOL_CACHE_DIR / the prefix on a larger disk), then run "
        "the same command again (archives already fetched are kept)",
    )


def _copy_local(url: str, sink: _Sink) -> None:
    """A file:// archive (a bundle, a local channel): copied through the same sink. Opened
    non-blocking (a FIFO or /dev/stdin must not hang the install) and only read when fstat
    shows a regular file no larger than FETCH_LIMIT (/dev/zero must not fill the disk); the
    sink caps the bytes read too (a file still growing). Symlinks are followed, as a local
    channel or a shared archive store may use them: fstat judges what they lead to, and the
    lock's hash judges the bytes."""
    src = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
    fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UsageError(
            f"{url}: {kind}, not a package archive; nothing was linked",
            "point the lock (or --channel) at the archive file itself",
        )
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > FETCH_LIMIT:
            raise _TooLarge
        while chunk := fh.read(1 << 20):
            sink.write(chunk)


async def _fetch_one(
    pkg: LockedPackage,
    url: str,
    dest: Path,
    on_bytes: Callable[[int], None],
    on_retry: Callable[[str], None] = lambda _m: None,
) -> None:
    """Download, check against the lock, rename into the cache: the cached copy (if any) is
    only ever replaced by a fetched file that matched the hash, so a lock (or a source) with
    the wrong hash cannot destroy a good cached archive."""
    algo, want = lock_digest(pkg)
    tmp, got, resumed = await _download(url, dest, algo, on_bytes, on_retry=on_retry)
    if resumed and got != want:  # the server may have ignored Range: once more, from byte 0
        tmp.unlink(missing_ok=True)
        tmp, got, _ = await _download(url, dest, algo, on_bytes, False, on_retry)
    try:
        if not want or got != want:  # a lock entry without a hash cannot be verified: refuse
            raise changed_file(pkg, url, got)
        os.replace(tmp, dest)  # replaces a planted link itself, never writes through it
    finally:
        tmp.unlink(missing_ok=True)


def fetch_verified(pkg: LockedPackage, url: str, archive_dir: Path, report: InstallReport) -> Path:
    """A local archive whose hash matches the lock, or a refusal naming the package (one
    archive; `bundle` uses it)."""
    import asyncio

    archive_dir.mkdir(parents=True, exist_ok=True)
    dest = cache_path(archive_dir, pkg.file_name)
    stale = is_own_file(dest)
    if stale and archive_matches(dest, pkg):
        report.reused.append(pkg.file_name)
        return dest

    async def run() -> None:
        try:
            await _fetch_one(pkg, url, dest, lambda _n: None)
        finally:
            await asyncio.sleep(0.05)  # let rattler's background tasks finish

    asyncio.run(run())
    if stale:
        note(f"  {pkg.file_name}: cached copy did not match the lock's hash; fetched again")
        report.refetched.append(pkg.file_name)
    report.fetched.append(pkg.file_name)
    return dest


def fetch_all(
    pkgs: list[LockedPackage],
    urls: dict[str, str],
    archive_dir: Path,
    report: InstallReport,
    progress: Progress,
    lock_name: str,
    extracted: Path | None = None,
    validate: Callable[[Path, LockedPackage, bytes | None], ArchiveContents] | None = None,
) -> tuple[dict[str, Path], dict[str, ArchiveContents]]:
    """Every archive verified in the cache, or a refusal. Cached copies are hashed first (a
    verified copy is never fetched again: an install killed or failed half-way resumes with the
    archives it completed); the rest stream through rattler's client, several at once, each
    renamed into the cache the moment its hash matches. A failure lets the other transfers
    finish (they are kept for the rerun), then the worst is raised: a bad URL, a changed file,
    a network failure.

    With `extracted` (rattler's package cache), a package whose archive is not in envtool's cache
    but which is extracted there and checks out (read_extracted_contents) is not downloaded: it
    is returned in the second mapping, by file name, with its contents; its path is the entry.

    With `validate` (archive_check.read_archive_contents, or a wrapper of it), every archive is
    also validated here, in the same worker that checked its hash — a cached one in the same
    read (read_if_matches), a fetched one right after its download, while the others still
    stream — and its contents returned in the second mapping too; a refusal is raised (before
    anything is linked) like a changed file."""
    import asyncio

    archive_dir.mkdir(parents=True, exist_ok=True)
    sweep_stale_temps(archive_dir)
    root = archive_dir.resolve()
    dests = {p.file_name: cache_path(root, p.file_name, resolved=True) for p in pkgs}

    shared: dict[str, ArchiveContents] = {}
    checked: dict[str, ArchiveContents] = {}

    # One lstat per archive answers both "is it here, a regular file of ours?" (size > 0; an
    # empty file can match no package) and "big enough for a worker thread?".
    sizes = {p.file_name: _size(dests[p.file_name]) for p in pkgs}

    def cached(p: LockedPackage) -> tuple[str, bool | None]:
        dest = dests[p.file_name]
        ok: bool | None = None
        if sizes[p.file_name] and validate is None:
            ok = archive_matches(dest, p)
        elif sizes[p.file_name]:  # one read: the hash, then info/ from the same bytes
            ok, data = read_if_matches(dest, p)
            if ok:
                checked[p.file_name] = validate(dest, p, data)
        if ok is None and extracted is not None:  # no archive here (a bad one is refetched)
            entry = extracted_entry(extracted, p)
            contents = read_extracted_contents(entry, p)
            if contents is not None:
                shared[p.file_name] = contents
                return p.file_name, True
        return p.file_name, ok

    # Large archives go to worker threads: hashing them is most of their check, and hashlib
    # leaves the GIL. Small ones are checked here, one after another: their check is Python
    # (zip, zstd, tar, JSON) that holds the GIL, and threads contending for it made 1,001 small
    # archives 0.77-1.03 s where one thread took 0.63 s (docs/benchmarks-scaling.md, run 8).
    big = [p for p in pkgs if sizes[p.file_name] >= THREAD_MIN]
    pool = ThreadPoolExecutor(max_workers=4)
    try:
        in_pool = pool.map(cached, big)
        big_names = {p.file_name for p in big}
        state = dict(cached(p) for p in pkgs if p.file_name not in big_names)
        state.update(in_pool)
    finally:  # Ctrl-C: drop the hashes not started (a `with` waited for all, GBs of them)
        pool.shutdown(wait=False, cancel_futures=True)
    for name in shared:
        dests[name] = extracted_entry(extracted, next(p for p in pkgs if p.file_name == name))  # type: ignore[arg-type]
    todo = [p for p in pkgs if state[p.file_name] is not True]
    report.reused += [
        p.file_name for p in pkgs if state[p.file_name] is True and p.file_name not in shared
    ]
    report.from_package_cache += sorted(shared)
    progress.start_fetch(len(pkgs), len(pkgs) - len(todo), lock_name)
    results: list[Any] = []
    if todo:
        from envtool.adapters.solve.network import download_concurrency

        async def run() -> list[Any]:
            gate = asyncio.Semaphore(download_concurrency())

            async def one(p: LockedPackage) -> None:
                async with gate:
                    await _fetch_one(
                        p,
                        urls[p.file_name],
                        dests[p.file_name],
                        progress.add_bytes,
                        progress.retrying,
                    )
                if validate is not None:  # off the loop: the other downloads go on
                    dest = dests[p.file_name]
                    checked[p.file_name] = await asyncio.to_thread(validate, dest, p, None)
                progress.archive_done()

            try:
                return await asyncio.gather(*(one(p) for p in todo), return_exceptions=True)
            finally:
                await asyncio.sleep(0.05)  # let rattler's background tasks finish

        results = asyncio.run(run())
    progress.end_fetch()
    for p, result in zip(todo, results, strict=True):
        if result is None:
            if state[p.file_name] is False:
                progress.say(
                    f"  {p.file_name}: cached copy did not match the lock's hash; fetched again"
                )
                report.refetched.append(p.file_name)
            report.fetched.append(p.file_name)
    failures = [r for r in results if isinstance(r, BaseException)]
    for kind in (UsageError, ChangedFile, NetworkFailure, BaseException):
        first = next((f for f in failures if isinstance(f, kind)), None)
        if first is not None:
            if isinstance(first, NetworkFailure) and len(failures) > 1:
                first.message += f" ({len(failures)} of {len(todo)} downloads failed)"
            raise first
    return dests, {**checked, **shared}


STALE_TEMP_S = 900  # a live download writes its temp file every moment


def sweep_stale_temps(archive_dir: Path) -> None:
    """Temp files a killed install left (kill -9 runs no cleanup): removed once nobody has
    written them for STALE_TEMP_S — another install sharing the cache may be writing a fresh one."""
    cutoff = time.time() - STALE_TEMP_S
    for tmp in archive_dir.glob(".*.part"):
        with contextlib.suppress(OSError):
            if os.lstat(tmp).st_mtime < cutoff:
                tmp.unlink()
