"""Install a conda-lock.yml (v1) into a prefix with py-rattler: no conda executable needed.

Order of work, chosen so nothing is ever half-done or unverified:
  1. read the lock once (lock_io.read_lock, the one reader) and plan (plan_install: the
     platform's packages, their URLs, what the caches hold — core/install_plan.InstallPlan,
     what `install --dry-run` prints); apply_install executes that plan, steps 2–6;
  2. take the env mutex (adapters/mutex.py); check the prefix's package records; fetch (step 3);
     then write the `incomplete` marker;
  3. fetch every archive into envtool's archive cache through rattler's client (network.py:
     retries, the user's credentials and mirrors; a body cut short is fetched again, then a
     network failure — never "changed") and check its sha256/md5 against the lock while it
     streams — the lock is the authority: a bad cached copy is replaced only by a fetched copy
     that matches, a bad fetched copy is refused; a verified archive is renamed into the cache
     at once, so a killed or failed install resumes without fetching it again. A package with
     no archive here that is already extracted in rattler's shared package cache (pixi's) from
     the lock's sha256, every file intact, is used as it is (read_extracted_contents). Each
     archive is then validated in Python (structure, its own index.json names the locked
     package, paths.json stays in the prefix);
  4. build records from the verified archives and let rattler link them (an extracted copy in
     rattler's cache is checked against the archive's paths.json first): packages already
     extracted in rattler's cache are given under their lock URL, the others as file:// URLs
     of the verified copies (so rattler never downloads anything itself); rattler writes
     conda-meta, removes packages the lock no longer has, and converges on a re-run;
  5. install the lock's `manager: pip` entries with uv (`--require-hashes --no-deps`);
  6. write conda-meta/envtool/state.json, then drop the marker.

Everything that can refuse an install (prefix records, hashes, archive validity, relabelled
archives) runs before step 2's marker, so a refused install leaves a healthy env healthy.
`_pause_hook` is a no-op seam that tests replace to kill an install at a known point.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envtool.adapters import mutex
from envtool.adapters.files import file_digest
from envtool.adapters.install import install_state
from envtool.adapters.install.installed import check_prefix_records, set_aside_records
from envtool.adapters.install.progress import Progress
from envtool.adapters.locate import current_platform, default_cache_dir
from envtool.adapters.lockfile.lock_io import read_lock
from envtool.core.install_plan import (
    FETCH,
    PACKAGE_CACHE,
    PIP,
    REUSE,
    InstallPlan,
    PlannedPackage,
)
from envtool.core.lockfile import Lock, LockedPackage
from envtool.errors import DiagnosedFailure, UsageError, cannot_write
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


def rattler_package_cache(cache: Path) -> Path:
    """Where rattler keeps extracted packages, which it hardlinks into prefixes.

    With ENVTOOL_CACHE_DIR set: envtool's own (CACHE/rattler, isolated). Otherwise rattler's
    shared package cache — the one pixi and rattler-build use (RATTLER_CACHE_DIR, else
    $XDG_CACHE_HOME or ~/.cache, + rattler/cache; packages under pkgs/) — so a package already
    extracted on this machine is linked, not downloaded and extracted again. Every entry rattler
    would link from is still checked against the lock-verified archive (verify_extracted)."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return cache / "rattler"
    if os.environ.get("RATTLER_CACHE_DIR"):
        root = Path(os.environ["RATTLER_CACHE_DIR"])
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"]) / "rattler" / "cache"
    else:
        root = Path.home() / ".cache" / "rattler" / "cache"
    return root / "pkgs"


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


def archive_matches(path: Path, pkg: LockedPackage) -> bool:
    """sha256 when the lock has it (the authority), else md5."""
    if pkg.sha256:
        return file_digest(path, "sha256") == pkg.sha256.lower()
    if pkg.md5:
        return file_digest(path, "md5") == pkg.md5.lower()
    return False  # a lock entry without a hash cannot be verified: refuse


def cache_path(archive_dir: Path, file_name: str) -> Path:
    """archive_dir/file_name, confined: the name is a plain file name (core/lockfile checked it when
    the lock was read) and the resolved path must still be directly under the resolved cache."""
    root = archive_dir.resolve()
    dest = root / file_name
    if dest.parent != root or dest.name != file_name or file_name in ("", ".", ".."):
        raise UsageError(
            f"{file_name!r}: not a plain archive file name", "fix or regenerate the lock"
        )
    return dest


def _is_own_file(path: Path) -> bool:
    """A regular file of the cache itself (not a link someone planted, not a device)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


FETCH_LIMIT = 16 << 30  # the largest conda packages (CUDA libraries) are ~3 GiB
ATTEMPTS = 4  # a body cut short is fetched again up to 3 more times (rattler retries the rest)
_REMOTE = ("http", "https", "s3", "gcs", "oci")  # what rattler's client fetches


class _Sink:
    """The writer rattler streams a body into: a file object (never a bare fd, which a late
    write from a cancelled transfer could hit after reuse), the running digest, a size cap and
    the byte count for progress. `size` counts every byte in the file, across resumed tries."""

    def __init__(self, fh: Any, digest: Any, size: int, on_bytes: Callable[[int], None]) -> None:
        self.fh = fh
        self.digest = digest
        self.size = size
        self.on_bytes = on_bytes

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > FETCH_LIMIT:  # a server that never stops must not fill the disk
            raise _TooLarge
        self.fh.write(data)
        self.digest.update(data)
        self.on_bytes(len(data))
        return len(data)


class _TooLarge(Exception):
    pass


def _lock_digest(pkg: LockedPackage) -> tuple[str, str]:
    """(algorithm, expected hex) — sha256 when the lock has it (the authority), else md5."""
    if pkg.sha256:
        return "sha256", pkg.sha256.lower()
    return "md5", (pkg.md5 or "").lower()


class NetworkFailure(DiagnosedFailure):
    """A download that did not complete (exit 1): retried, then reported; never "changed"."""


class ChangedFile(DiagnosedFailure):
    """A complete download whose hash is not the lock's (exit 1)."""


def network_failure(url: str, why: str) -> NetworkFailure:
    """A download that did not complete: the network's fault or the mirror's, never the lock's."""
    hint = "check the network / mirror, then run the same command again (archives already fetched are kept)"
    if "401" in why or "403" in why:
        hint = (
            "the server wants credentials: add them to rattler's store (`pixi auth login HOST`, "
            "or a RATTLER_AUTH_FILE), then run the same command again"
        )
    elif "404" in why:
        hint = "the mirror does not have this file: check the channel / mirror the lock points to"
    return NetworkFailure(f"could not fetch {url}: {why}; nothing was linked", hint)


def changed_file(pkg: LockedPackage, url: str, got: str) -> ChangedFile:
    """A complete file whose hash is not the lock's (a body cut short never gets here)."""
    algo, want = _lock_digest(pkg)
    return ChangedFile(
        f"{pkg.name} {pkg.version} ({pkg.file_name}): hash mismatch — the file at {url} is not "
        f"the one the lock names (lock {algo} {want or '(none)'}, file {algo} {got}); "
        "nothing was linked",
        "if the lock is right, the mirror serves a different file — fix the mirror or use "
        "another; re-lock only if you trust the new file",
    )


async def _download(
    url: str, dest: Path, algo: str, on_bytes: Callable[[int], None], resume: bool = True
) -> tuple[Path, str, bool]:
    """Stream `url` into a fresh exclusive temp file beside `dest` (mkstemp: a random name,
    O_EXCL, so no planted link or other process can aim the write) and return (temp path, hex
    digest, resumed); the caller renames it over `dest` only once the digest is the lock's.

    rattler's client retries 5xx, resets and time-outs before the body; a body cut short (an
    OSError from the stream) is fetched again here, ATTEMPTS times with back-off — from where
    it stopped, with `Range: bytes=N-` (a client with that default header: rattler's download
    calls take no per-request headers), unless `resume` is off — then reported as a network
    failure naming the bytes received, never as a changed file. rattler does not expose the
    answer's status, so a server that ignores Range (200, the whole file again) is only seen
    in the digest: the caller then fetches the file once more without resuming."""
    import asyncio

    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("file", *_REMOTE):
        raise UsageError(
            f"{url}: unsupported URL scheme", "use file://, http(s)://, s3://, gcs:// or oci://"
        )
    try:
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    except OSError as exc:
        raise cannot_write(dest.parent, exc) from None
    tmp = Path(tmp_name)
    digest = hashlib.new(algo)
    size = 0
    resumed = False
    counted = [0]  # bytes of this file shown in the progress, taken back if it is dropped

    def count(n: int) -> None:
        counted[0] += n
        on_bytes(n)

    try:
        with os.fdopen(fd, "wb") as fh:
            for attempt in range(1, ATTEMPTS + 1):
                sink = _Sink(fh, digest, size, count)
                try:
                    if parsed.scheme == "file":
                        await asyncio.to_thread(_copy_local, url, sink)
                    else:
                        from rattler.package_streaming import download_to_writer

                        from envtool.adapters.solve.network import client

                        resumed = resumed or size > 0
                        await download_to_writer(client(size), url, sink)
                    fh.flush()
                    return tmp, digest.hexdigest(), resumed
                except _TooLarge:
                    raise DiagnosedFailure(
                        f"{url}: larger than {FETCH_LIMIT >> 30} GiB, not a package; "
                        "nothing was linked",
                        "check the lock's URL",
                    ) from None
                except (UsageError, DiagnosedFailure):
                    raise
                except OSError as exc:  # the body was cut short, or the connection dropped
                    if parsed.scheme == "file":
                        raise network_failure(url, exc.strerror or _first_line(exc)) from None
                    size = sink.size
                    if not resume and size:  # start over: drop what this try wrote
                        count(-counted[0])
                        fh.seek(0)
                        fh.truncate()
                        digest, size = hashlib.new(algo), 0
                    if attempt == ATTEMPTS:
                        raise network_failure(
                            url,
                            f"the connection dropped after {sink.size} bytes "
                            f"({_first_line(exc)}; {ATTEMPTS} tries)",
                        ) from None
                    await asyncio.sleep(0.25 * 2**attempt)
                except Exception as exc:  # rattler's request error: transient ones were retried
                    raise network_failure(url, _first_line(exc)) from None
        raise AssertionError("unreachable")
    except BaseException:
        tmp.unlink(missing_ok=True)
        on_bytes(-counted[0])
        raise


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
    pkg: LockedPackage, url: str, dest: Path, on_bytes: Callable[[int], None]
) -> None:
    """Download, check against the lock, rename into the cache: the cached copy (if any) is
    only ever replaced by a fetched file that matched the hash, so a lock (or a source) with
    the wrong hash cannot destroy a good cached archive."""
    algo, want = _lock_digest(pkg)
    tmp, got, resumed = await _download(url, dest, algo, on_bytes)
    if resumed and got != want:  # the server may have ignored Range: once more, from byte 0
        tmp.unlink(missing_ok=True)
        tmp, got, _ = await _download(url, dest, algo, on_bytes, resume=False)
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
    stale = _is_own_file(dest)
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


def _install_hint(lock: Lock, platform: str) -> str:
    return f"re-lock with `--platform {platform}` or install on a {lock.platforms[0]} host"


def plan_install(
    lock: Lock,
    prefix: Path | str,
    platform: str,
    channels_override: list[str] | None,
    cache_dir: Path | str | None = None,
    offline: bool = False,
    host_check: str = "ok",
    variant: dict[str, str] | None = None,
) -> InstallPlan:
    """The install of `lock` (read once, by the caller) into `prefix`, as data: what --dry-run
    prints and what apply_install executes. Reads only: no file is written, no archive hashed
    (apply checks every cached copy again). `host_check`: the caller's verdict (a refusal is
    raised before there is a plan); `variant`: the variant lock chosen, and why."""
    lock.require_platform(platform, _install_hint(lock, platform))
    pkgs = lock.hashed_for_platform(platform)
    prefix = Path(prefix).expanduser().absolute()
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    extracted = cache / "rattler" if cache_dir else rattler_package_cache(cache)
    archive_dir = cache / "archives"

    def source(p: LockedPackage) -> str:
        if p.manager != "conda":
            return PIP
        if _is_own_file(archive_dir / p.file_name):
            return REUSE
        try:  # apply checks it file by file (read_extracted_contents) before using it
            in_package_cache = _extracted_entry(extracted, p).is_dir()
        except OSError:
            in_package_cache = False
        return PACKAGE_CACHE if in_package_cache else FETCH

    planned = tuple(
        PlannedPackage(
            p,
            remap_to_channels(p, channels_override, offline) if channels_override else p.url,
            source(p),
        )
        for p in pkgs
    )
    return InstallPlan(
        prefix=str(prefix),
        prefix_exists=prefix.exists(),
        install_state=install_state.read_install_state(prefix) if prefix.exists() else None,
        lock_path=str(lock.path),
        lock_sha256=lock.sha256,
        lock_metadata=dict(lock.custom_metadata),
        platform=platform,
        packages=planned,
        cache_dir=str(cache),
        package_cache=str(extracted),
        offline=offline,
        host_check=host_check,
        variant=variant,
    )


def install_from_lock(
    lock_path: Path | str,
    prefix: Path | str,
    platform: str | None = None,
    channels_override: list[str] | None = None,
    cache_dir: Path | str | None = None,
    progress: bool = True,
    force: bool = False,
    offline: bool = False,
) -> InstallReport:
    """Install a conda-lock.yml into prefix; converge if the prefix exists or was interrupted:
    read the lock once, plan_install, apply_install (`envtool install` does the same steps
    itself, to show the plan with --dry-run and to record the host check it made).

    `force` is for callers that already decided to skip host checks; the install itself always
    verifies hashes. `channels_override` remaps every URL to the same file in those channels;
    `offline` (a bundle): a file missing there is an error, never fetched from the lock's URL.
    """
    lock = read_lock(Path(lock_path))
    platform = platform or current_platform()
    plan = plan_install(lock, prefix, platform, channels_override, cache_dir, offline)
    return apply_install(plan, progress=progress, force=force)


def apply_install(plan: InstallPlan, progress: bool = True, force: bool = False) -> InstallReport:
    """Execute `plan`: exactly its packages, from its URLs, for its platform, into its prefix,
    with its caches; the state records its lock's sha256 and metadata. Nothing is planned
    again and the lock is not read again; every archive is still checked against the lock's
    hashes (a cached copy the plan counted on that fails is fetched again). `force`: recorded
    in the env's state (the caller skipped the host check)."""
    started = time.monotonic()
    prefix = Path(plan.prefix)
    lock_path = Path(plan.lock_path)
    from envtool.adapters.locate import looks_like_env

    if prefix.exists() and any(prefix.iterdir()) and not looks_like_env(prefix):
        raise UsageError(
            f"{prefix} exists and is not a conda environment (no conda-meta/)",
            "install into a new or empty directory, or an existing environment",
        )
    cache = Path(plan.cache_dir)
    extracted = Path(plan.package_cache)
    shown = Progress(quiet=not progress)
    say: Callable[[str], None] = shown.say
    # the plan's packages were checked when it was made: nothing to undo before the marker
    conda_pkgs = [p.package for p in plan.conda]
    pip_pkgs = [p.package for p in plan.pip]
    report = InstallReport(str(prefix), plan.lock_path, plan.lock_sha256, plan.platform)

    urls = {p.package.file_name: p.url for p in plan.packages}
    if pip_pkgs:  # a bad pip entry is refused before anything is fetched or linked
        from envtool.core.pip_lock import pip_requirements

        pip_requirements(pip_pkgs, urls, plan.lock_path)
    with mutex.hold_env_mutex(prefix, prefix.name, on_wait=note):
        # Everything that can refuse the install runs before the prefix is touched: a refused
        # install leaves a healthy env healthy (no marker) and the archive cache as it was.
        damaged_records = check_prefix_records(prefix) if prefix.is_dir() else []
        archives, contents = _fetch_all(
            conda_pkgs, urls, cache / "archives", report, shown, lock_path.name, extracted
        )
        for p in conda_pkgs:  # every downloaded or cached archive validated before linking
            if p.file_name not in contents:
                contents[p.file_name] = read_archive_contents(archives[p.file_name], p)
        install_state.write_incomplete_marker(prefix, plan.lock_sha256, lock_path)
        _pause_hook("after-download")
        set_aside_records(prefix, damaged_records, say)
        shown.start_link(len(conda_pkgs), str(prefix))
        try:
            from_local = _link(
                conda_pkgs, archives, contents, prefix, plan.platform, extracted, shown
            )
        finally:
            shown.end_link()
        _restore_locked_urls(prefix, [p for p in conda_pkgs if p.file_name in from_local])
        _pause_hook("after-link")
        if pip_pkgs:
            say(f"installing {len(pip_pkgs)} pip packages (--require-hashes --no-deps)")
            _install_pip(pip_pkgs, urls, prefix, cache / "uv")
        report.conda_packages = len(conda_pkgs)
        report.pip_packages = len(pip_pkgs)
        report.seconds = round(time.monotonic() - started, 3)
        install_state.write_complete_state(
            prefix,
            {
                "lock_sha256": plan.lock_sha256,
                "lock_path": str(lock_path.resolve()),
                "platform": plan.platform,
                "plan": plan.lock_metadata,
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "conda_packages": len(conda_pkgs),
                "pip_packages": len(pip_pkgs),
                "forced": force,
            },
        )
    pip_part = f", {len(pip_pkgs)} pip package{'s' * (len(pip_pkgs) != 1)}" if pip_pkgs else ""
    say(f"{shown.summary()}{pip_part}; {report.seconds:.1f} s in all")
    shown.close()
    return report


def _fetch_all(
    pkgs: list[LockedPackage],
    urls: dict[str, str],
    archive_dir: Path,
    report: InstallReport,
    progress: Progress,
    lock_name: str,
    extracted: Path | None = None,
) -> tuple[dict[str, Path], dict[str, ArchiveContents]]:
    """Every archive verified in the cache, or a refusal. Cached copies are hashed first (a
    verified copy is never fetched again: an install killed or failed half-way resumes with the
    archives it completed); the rest stream through rattler's client, several at once, each
    renamed into the cache the moment its hash matches. A failure lets the other transfers
    finish (they are kept for the rerun), then the worst is raised: a bad URL, a changed file,
    a network failure.

    With `extracted` (rattler's package cache), a package whose archive is not in envtool's cache
    but which is extracted there and checks out (read_extracted_contents) is not downloaded: it
    is returned in the second mapping, by file name, with its contents; its path is the entry."""
    import asyncio

    archive_dir.mkdir(parents=True, exist_ok=True)
    _sweep_stale_temps(archive_dir)
    dests = {p.file_name: cache_path(archive_dir, p.file_name) for p in pkgs}

    shared: dict[str, ArchiveContents] = {}

    def cached(p: LockedPackage) -> tuple[str, bool | None]:
        dest = dests[p.file_name]
        ok = archive_matches(dest, p) if _is_own_file(dest) else None
        if ok is None and extracted is not None:  # no archive here (a bad one is refetched)
            entry = _extracted_entry(extracted, p)
            contents = read_extracted_contents(entry, p)
            if contents is not None:
                shared[p.file_name] = contents
                return p.file_name, True
        return p.file_name, ok

    with ThreadPoolExecutor(max_workers=4) as pool:  # hashlib and reads release the GIL
        state = dict(pool.map(cached, pkgs))
    for name in shared:
        dests[name] = _extracted_entry(extracted, next(p for p in pkgs if p.file_name == name))  # type: ignore[arg-type]
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
                    await _fetch_one(p, urls[p.file_name], dests[p.file_name], progress.add_bytes)
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
    return dests, shared


def _extracted_entry(extracted: Path, pkg: LockedPackage) -> Path:
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
    from envtool.adapters.files import read_bytes

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


STALE_TEMP_S = 900  # a live download writes its temp file every moment


def _sweep_stale_temps(archive_dir: Path) -> None:
    """Temp files a killed install left (kill -9 runs no cleanup): removed once nobody has
    written them for STALE_TEMP_S — another install sharing the cache may be writing a fresh one."""
    cutoff = time.time() - STALE_TEMP_S
    for tmp in archive_dir.glob(".*.part"):
        with contextlib.suppress(OSError):
            if os.lstat(tmp).st_mtime < cutoff:
                tmp.unlink()


class _LinkReporter:
    """rattler InstallerReporter: linked packages counted on the progress line; hosts the
    mid-link hook."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.say = progress.say
        self.total = total
        self.names: dict[int, str] = {}
        self.done = 0

    def on_link_start(self, operation: int, package_name: str) -> int:
        self.names[operation] = package_name
        return operation

    def on_link_complete(self, index: int) -> None:
        self.done += 1
        self.progress.package_linked(self.names.get(index, "?"))
        if self.done == 1:
            _pause_hook("mid-link")

    def on_unlink_start(self, operation: int, package_name: str) -> int:
        self.say(f"  removing {package_name} (not in the lock)")
        return operation


@dataclass
class ArchiveContents:
    """What a verified archive says about itself: info/index.json and info/paths.json."""

    index: dict[str, Any]
    paths: list[dict[str, Any]] | None  # None: an old package without info/paths.json
    index_bytes: bytes = b""
    paths_bytes: bytes | None = None


_INFO_LIMIT = 64 * 1024 * 1024  # info/paths.json of the largest CUDA packages is a few MB


def read_archive_contents(path: Path, pkg: LockedPackage) -> ArchiveContents:
    """Validate a hash-verified archive in Python before rattler sees it, and read its own
    index.json and paths.json. A file with the right hash can still be no package at all (rattler's
    reader then crashed the interpreter in about a third of runs), or another package than the
    lock says (a relabelled archive), or one shipping paths that leave the prefix: refused here,
    with one line naming the lock entry, before anything is linked."""
    import tarfile
    import zipfile

    def refuse(reason: str) -> UsageError:
        return UsageError(
            f"{pkg.name} {pkg.version} ({pkg.file_name}): {reason}; nothing was linked",
            "the lock names a file that is not this package: regenerate the lock from a channel "
            "you trust (`envtool lock NAME --force`)",
        )

    members: dict[str, bytes] = {}
    try:
        if pkg.file_name.endswith(".conda"):
            with zipfile.ZipFile(path) as zf:
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

            with bz2.open(path, "rb") as fh:
                members = _info_members(tarfile.open(fileobj=_Capped(fh), mode="r|"))
    except UsageError:
        raise
    except ImportError:  # no zstandard: rattler reads the info part alone
        return ArchiveContents({}, None)
    except Exception as exc:  # zipfile, tarfile, zstd, EOF, a member too large
        raise refuse(f"not a valid conda package ({_first_line(exc)})") from None
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _link_leaves_prefix(rel: str, link: str) -> str | None:
    """Why a softlink at `rel` (in a prefix) with target `link` may lead out of the prefix."""
    if link.startswith("/"):
        return "an absolute link"
    parts = os.path.normpath(os.path.join(os.path.dirname(rel), link)).split("/")
    if not link or parts[0] == "..":
        return "a link out of the environment"
    return None


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


def _misplaced_entry(entry: Path, root: Path) -> str | None:
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
    if entry.resolve().parent != root.resolve():
        return "a folder outside the cache"
    return None


def _remove_entry(entry: Path) -> None:
    """Remove a cache entry without following it: a link (or a file) is unlinked, a folder
    (only ever a real one inside the cache) removed with what it holds."""
    if stat.S_ISDIR(os.lstat(entry).st_mode):
        shutil.rmtree(entry)
    else:
        os.unlink(entry)


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
        try:
            if (entry / rel).read_bytes() != want:
                return f"{rel} differs from the archive's"
        except OSError:
            return f"{rel} is missing"
    for item in contents.paths:
        rel = item["_path"]
        target = entry / rel
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
        if isinstance(sha, str) and file_digest(target, "sha256") != sha.lower():
            return f"{rel} does not match its sha256"
    return None


def _link(
    pkgs: list[LockedPackage],
    archives: dict[str, Path],
    contents: dict[str, ArchiveContents],
    prefix: Path,
    platform: str,
    rattler_cache: Path,
    progress: Progress,
) -> set[str]:
    """Link with rattler; returns the file names it read from envtool's verified copies."""
    import asyncio

    from rattler import install
    from rattler.platform import Subdir

    say = progress.say
    from_local: set[str] = set()
    damaged = _damaged_in(prefix)
    if damaged:
        say(f"  relinking {len(damaged)} damaged package(s): {', '.join(sorted(damaged))}")
    installed = _installed_ids(prefix)
    # What rattler will link (not installed yet, or damaged) from its extracted cache must be
    # what the verified archive holds: a changed extracted copy is dropped, re-extracted below.
    # An entry that is a link, or leads out of the cache, is never followed: rattler would link
    # from wherever it points, unchecked. It is removed (the link itself) and rattler extracts
    # the verified archive again; with no archive to extract from, the install stops here.
    for p in pkgs:
        if (p.name, p.version, p.build) in installed and p.name not in damaged:
            continue
        entry = _extracted_entry(rattler_cache, p)  # core/lockfile checked the parts
        misplaced = _misplaced_entry(entry, rattler_cache)
        if archives[p.file_name] == entry:  # no archive: the entry itself was verified
            if misplaced:
                raise DiagnosedFailure(
                    f"{p.name} {p.version}: {entry} became {misplaced} after it was verified; "
                    "nothing was linked from it",
                    "run the same install again: the package's archive is downloaded instead",
                )
            continue
        if misplaced:
            say(f"  {entry.name}: {misplaced} in rattler's cache; extracting the archive again")
            _remove_entry(entry)
        elif entry.is_dir():
            got = contents[p.file_name]
            why = verify_extracted(
                entry, got, lambda p=p, got=got: archive_softlinks(archives[p.file_name], p, got)
            )
            if why:
                say(f"  {entry.name}: extracted copy changed ({why}); extracting it again")
                shutil.rmtree(entry)

    async def run() -> None:
        from rattler.package_cache import PackageCache

        index = await PackageCache(rattler_cache).index() if rattler_cache.is_dir() else None
        # The records come from the verified (and validated) archives themselves.
        read = await asyncio.gather(
            *(_record_of(p, archives[p.file_name], contents[p.file_name]) for p in pkgs),
            return_exceptions=True,  # never leave a reader running while the loop closes
        )
        records = []
        for p, rec in zip(pkgs, read, strict=True):
            if isinstance(rec, BaseException):
                raise UsageError(
                    f"{p.name} {p.version} ({p.file_name}): rattler cannot read it ({_first_line(rec)})",
                    "regenerate the lock from a channel you trust",
                )
            rec.channel = _channel_of(p.url)
            if p.md5:
                rec.md5 = bytes.fromhex(p.md5)
            rec.url = p.url
            if archives[p.file_name].is_dir():
                pass  # linked from the verified entry in rattler's cache, under the lock's URL
            elif index is None or not index.contains_record(rec):
                # Not extracted yet: rattler must read our verified copy, never the network.
                rec.url = archives[p.file_name].resolve().as_uri()
                from_local.add(p.file_name)
            records.append(rec)
        await install(
            records,
            target_prefix=prefix,
            cache_dir=rattler_cache,
            platform=Subdir(platform),
            show_progress=False,
            reporter=_LinkReporter(progress, len(records)),
            reinstall_packages=damaged or None,  # rattler skips a package it sees as installed
        )
        await asyncio.sleep(0.05)  # let rattler's background tasks finish before the loop closes

    failure: BaseException | None = None
    with _rust_stderr_captured() as captured:
        try:
            asyncio.run(run())
        except (UsageError, DiagnosedFailure, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # pyo3's PanicException is a BaseException
            failure = exc
    if failure is not None:
        raise DiagnosedFailure(
            f"linking into {prefix} failed: {_first_line(failure)}{captured.summary()}",
            "the environment is marked incomplete; run the same install again to finish it",
        ) from None
    return from_local


async def _record_of(pkg: LockedPackage, path: Path, contents: ArchiveContents) -> Any:
    """rattler's record of a verified package: its own info/index.json (validated against the
    lock by read_archive_contents / read_extracted_contents) with the lock's hashes. Not
    RepoDataRecord.from_package_archive: that reads and hashes the whole archive once more
    (0.9 s for a 558 MB libtorch), after the fetch hashed it and before rattler hashes it again
    while extracting."""
    from rattler import PackageRecord, RepoDataRecord

    if path.is_dir():  # used from rattler's cache without its archive
        index = path / "info" / "index.json"
        record = PackageRecord.from_index_json(index, sha256=pkg.sha256, md5=pkg.md5 or None)
    elif not contents.index_bytes:  # nothing validated to build it from: rattler reads it
        return await RepoDataRecord.from_package_archive(path)
    else:
        with tempfile.TemporaryDirectory(prefix="envtool-index-") as tmp:
            index = Path(tmp) / "index.json"
            index.write_bytes(contents.index_bytes)
            record = PackageRecord.from_index_json(
                index, size=path.stat().st_size, sha256=pkg.sha256, md5=pkg.md5 or None
            )
    return RepoDataRecord(record, pkg.file_name, pkg.url, _channel_of(pkg.url))


class _Captured:
    def __init__(self) -> None:
        self.text = ""

    def summary(self) -> str:
        """rattler's panic message (its stderr), in one line."""
        for line in self.text.splitlines():
            if "panicked at" in line:
                rest = self.text.split(line, 1)[1].strip().splitlines()
                return f" (rattler panicked: {rest[0] if rest else line.strip()})"
        return ""


@contextlib.contextmanager
def _rust_stderr_captured() -> Iterator[_Captured]:
    """Rust panics write a backtrace straight to fd 2: collect it while rattler links (our own
    progress lines still reach the terminal through a copy of the real stderr) and keep it to
    one line in the error. Anything else rattler printed is passed through afterwards."""
    import sys

    captured = _Captured()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        sink = tempfile.TemporaryFile()
    except (OSError, ValueError):
        yield captured
        return
    original = sys.stderr
    try:
        sys.stderr = open(
            saved,
            "w",
            closefd=False,
            encoding=getattr(original, "encoding", None) or "utf-8",
            errors="replace",
        )  # noqa: SIM115
        os.dup2(sink.fileno(), 2)
        yield captured
    finally:
        sys.stderr.flush()
        sys.stderr = original
        os.dup2(saved, 2)
        os.close(saved)
        sink.seek(0)
        captured.text = sink.read(1 << 20).decode("utf-8", "replace")
        sink.close()
        if captured.text and not captured.summary():
            original.write(captured.text)
            original.flush()


def _damaged_in(prefix: Path) -> set[str]:
    """Installed packages with files gone from disk, of the wrong size, or modified since they
    were linked with another sha256: the install relinks them (converge)."""
    from envtool.adapters.install.installed import damaged_packages, read_conda_meta

    if not (prefix / "conda-meta").is_dir():
        return set()
    return {row["name"] for row in damaged_packages(prefix, read_conda_meta(prefix))}


def _installed_ids(prefix: Path) -> set[tuple[str, str, str]]:
    from envtool.adapters.install.installed import read_conda_meta

    if not (prefix / "conda-meta").is_dir():
        return set()
    return {
        (str(r.get("name")), str(r.get("version")), str(r.get("build")))
        for r in read_conda_meta(prefix)
    }


def _channel_of(url: str) -> str:
    """https://conda.anaconda.org/conda-forge/linux-64/x.conda -> https://conda.anaconda.org/conda-forge/"""
    parts = url.split("#", 1)[0].rsplit("/", 2)
    return parts[0] + "/" if len(parts) == 3 else url


def _restore_locked_urls(prefix: Path, pkgs: list[LockedPackage]) -> None:
    """rattler linked these from verified local copies; conda-meta should name where the lock
    says each package comes from, like any conda-installed env."""
    from envtool.adapters.files import write_atomic

    by_file = {p.file_name: p for p in pkgs}
    if not by_file:
        return
    from envtool.adapters.install.installed import load_record

    for meta in (prefix / "conda-meta").glob("*.json"):
        data = load_record(meta)  # bounded and strict, like every record read
        if not isinstance(data, dict):
            continue
        p = by_file.get(data.get("fn", ""))
        if p is None or data.get("url") == p.url:
            continue
        data["url"] = p.url
        data["channel"] = _channel_of(p.url)
        write_atomic(meta, json.dumps(data, indent=2))


def _install_pip(
    pkgs: list[LockedPackage], urls: dict[str, str], prefix: Path, uv_cache: Path
) -> None:
    from envtool.adapters.install.uv_pip import uv_binary
    from envtool.adapters.locate import python_in
    from envtool.adapters.proc import run_capture
    from envtool.core.pip_lock import pip_requirements

    python = python_in(prefix)
    if not python.exists():
        raise DiagnosedFailure(
            f"the lock has pip packages but {prefix} has no python",
            "add python to the environment's conda dependencies and re-lock",
        )
    req = install_state.envtool_meta_dir(prefix) / "pip-requirements.txt"
    from envtool.adapters.files import write_atomic

    write_atomic(req, pip_requirements(pkgs, urls, "the lock"))  # the one checked writer
    offline = all(urls[p.file_name].startswith("file://") for p in pkgs)
    argv = [
        uv_binary(),
        "pip",
        "install",
        "--python",
        str(python),
        "--no-deps",
        "--require-hashes",
        "--link-mode",
        "copy",
        "--cache-dir",
        str(uv_cache),
        "-r",
        str(req),
    ]
    if offline:
        argv.insert(3, "--offline")
    proc = run_capture(argv, timeout=1800)
    if not proc.ok:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise DiagnosedFailure(
            f"pip part of the install failed: {' | '.join(tail)}",
            "the environment is marked incomplete; fix the cause and run the install again",
        )


def _pause_hook(point: str) -> None:
    """A seam for tests, and a no-op: tests that must kill an install at a known point
    (after-download, mid-link, after-link) replace this function in a child process
    (tests/channel_builder.run_paused). No environment variable or flag reaches it."""
