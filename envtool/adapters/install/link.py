"""Link verified packages into a prefix with rattler.

Records are built from the verified archives themselves; packages already extracted in
rattler's cache (checked against the archive's paths.json first) are given under their lock URL,
the others as file:// URLs of the verified copies, so rattler never downloads anything itself.
rattler writes conda-meta, removes packages the lock no longer has, and converges on a re-run;
conda-meta then names the lock's URLs (restore_locked_urls).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from envtool.adapters.install.archive_check import (
    ArchiveContents,
    archive_softlinks,
    extracted_entry,
    misplaced_entry,
    remove_entry,
    verify_extracted,
)
from envtool.adapters.install.progress import Progress
from envtool.core.credentials import redact_credentials
from envtool.core.lockfile import LockedPackage
from envtool.errors import DiagnosedFailure, UsageError, first_line


class _LinkReporter:
    """rattler InstallerReporter: linked packages counted on the progress line; hosts the
    mid-link hook."""

    def __init__(
        self,
        progress: Progress,
        total: int,
        on_first_link: Callable[[], None],
        locked: frozenset[str] = frozenset(),
    ) -> None:
        self.locked = locked  # names the lock holds: unlinked to be linked again, not removed
        self.progress = progress
        self.on_first_link = on_first_link
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
            self.on_first_link()

    def on_unlink_start(self, operation: int, package_name: str) -> int:
        if package_name in self.locked:  # another build of it, or a damaged one relinked
            self.say(f"  unlinking {package_name} (linked again as the lock has it)")
        else:
            self.say(f"  removing {package_name} (not in the lock)")
        return operation


def link_packages(
    pkgs: list[LockedPackage],
    archives: dict[str, Path],
    contents: dict[str, ArchiveContents],
    prefix: Path,
    platform: str,
    rattler_cache: Path,
    progress: Progress,
    on_first_link: Callable[[], None] = lambda: None,
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
    same_index: dict[str, Path] = {}  # entries whose info/index.json is the archive's, checked
    for p in pkgs:
        if (p.name, p.version, p.build) in installed and p.name not in damaged:
            continue
        entry = extracted_entry(rattler_cache, p)  # core/lockfile checked the parts
        misplaced = misplaced_entry(entry, rattler_cache)
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
            remove_entry(entry)
        elif entry.is_dir():
            got = contents[p.file_name]
            why = verify_extracted(
                entry, got, lambda p=p, got=got: archive_softlinks(archives[p.file_name], p, got)
            )
            if why:
                say(f"  {entry.name}: extracted copy changed ({why}); extracting it again")
                shutil.rmtree(entry)
            elif got.paths is not None and got.index_bytes:  # compared byte for byte above
                same_index[p.file_name] = entry / "info" / "index.json"

    async def run() -> None:
        from rattler.package_cache import PackageCache

        index = await PackageCache(rattler_cache).index() if rattler_cache.is_dir() else None
        # The records come from the verified (and validated) archives themselves.
        with tempfile.TemporaryDirectory(prefix="envtool-index-") as scratch:
            read = await asyncio.gather(
                *(
                    _record_of(
                        p,
                        archives[p.file_name],
                        contents[p.file_name],
                        Path(scratch) / f"{i}.json",
                        same_index.get(p.file_name),
                    )
                    for i, p in enumerate(pkgs)
                ),
                return_exceptions=True,  # never leave a reader running while the loop closes
            )
        records = []
        for p, rec in zip(pkgs, read, strict=True):
            if isinstance(rec, BaseException):
                raise UsageError(
                    f"{p.name} {p.version} ({p.file_name}): rattler cannot read it ({first_line(rec)})",
                    "regenerate the lock from a channel you trust",
                )
            rec.channel = channel_of(redact_credentials(p.url, strip=True))
            if p.md5:
                rec.md5 = bytes.fromhex(p.md5)
            rec.url = redact_credentials(p.url, strip=True)  # conda-meta: no credentials
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
            reporter=_LinkReporter(
                progress, len(records), on_first_link, frozenset(p.name for p in pkgs)
            ),
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
        _wait_for_rattler()
        disk = _disk_refusal(failure, captured.text)
        if disk is not None:  # not the package's fault, nor worth a retry: the room it needs
            from envtool.adapters.install.fetch import disk_full

            needed = sum(
                e["size_in_bytes"]
                for c in contents.values()
                for e in c.paths or []
                if isinstance(e.get("size_in_bytes"), int)
            )
            full = disk_full(prefix, disk, needed, at_least=False)
            full.message = full.message.replace("nothing was linked", "linking stopped")
            full.hint = "free space there, then run the same install again to finish it"
            raise full from None
        unpacked = _unpack_refusal(failure, from_local)
        if unpacked is not None:  # our verified copy: the archive itself, not the network
            name, cause = unpacked
            raise DiagnosedFailure(
                f"linking into {prefix} failed: {name} (its bytes match the lock's sha256) could "
                f"not be unpacked: {cause}",
                "the archive itself is broken or unsafe, so running the install again gets the "
                "same; ask the channel to rebuild it (the environment is marked incomplete)",
            ) from None
        raise DiagnosedFailure(
            f"linking into {prefix} failed: {first_line(failure)}{captured.summary()}",
            "the environment is marked incomplete; run the same install again to finish it",
        ) from None
    return from_local


def _unpack_refusal(failure: BaseException, local: set[str]) -> tuple[str, str] | None:
    """rattler's "failed to fetch NAME … Caused by: failed to unpack …" for an archive envtool
    handed it from its own verified cache (a member rattler refuses: a hardlink or a path out
    of the package): (NAME, the last cause), else None. Said as "failed to fetch … run it
    again", a rerun would only fail the same way."""
    lines = [x.strip() for x in str(failure).splitlines() if x.strip()]
    if not lines or not lines[0].startswith("failed to fetch "):
        return None
    name = lines[0].removeprefix("failed to fetch ").strip()
    causes = [x.removeprefix("Caused by:").strip() for x in lines[1:] if x.startswith("Caused by:")]
    if name not in local or not any("unpack" in c for c in causes):
        return None
    return name, causes[-1][:200]


def _wait_for_rattler(timeout: float = 2.0, quiet: float = 0.05) -> None:
    """After a failed install, rattler's threads may still be at work; one that enters Python
    while the interpreter exits aborts the process ("PyGILState_Release ... finalizing", exit
    -6 instead of envtool's 1: 5 of 12 runs of the full-disk link test here). Wait, bounded,
    until every other thread has been asleep for `quiet` seconds (Linux's /proc; elsewhere
    `quiet` once). In that test no thread was seen busy and the quiet 50 ms alone ended the
    aborts (0 of 28); the busy check is for larger installs whose other files are still
    being written when one fails."""
    tasks = Path("/proc/self/task")
    me = str(threading.get_native_id())
    deadline = time.monotonic() + timeout
    still_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.005)
        try:
            busy = any(_thread_state(t) in ("R", "D") for t in tasks.iterdir() if t.name != me)
        except OSError:  # no /proc here (macOS): one quiet period is all we can give
            time.sleep(quiet)
            return
        if busy:
            still_since = time.monotonic()
        elif time.monotonic() - still_since >= quiet:
            return


def _thread_state(task: Path) -> str:
    """One thread's state letter from /proc/self/task/TID/stat (R running, D in a disk write,
    S asleep ...); '' when it has just exited."""
    try:
        stat = (task / "stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2 :][:1]  # after "(comm)", which may hold spaces


def _disk_refusal(failure: BaseException, stderr: str) -> OSError | None:
    """The disk's refusal (ENOSPC, EDQUOT, EFBIG) behind a failed link, or None. rattler reports
    it in its error text ("… (os error 28)"), or as the OSError itself."""
    import errno
    import re

    codes = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
    if isinstance(failure, OSError) and failure.errno in codes:
        return failure
    for text in (str(failure), stderr):
        for code in re.findall(r"os error (\d+)", text):
            if int(code) in codes:
                return OSError(int(code), os.strerror(int(code)))
        for code in codes:  # the message without its number (a panic's text)
            if os.strerror(code) in text:
                return OSError(code, os.strerror(code))
    return None


async def _record_of(
    pkg: LockedPackage,
    path: Path,
    contents: ArchiveContents,
    scratch: Path,
    same_index: Path | None = None,
) -> Any:
    """rattler's record of a verified package: its own info/index.json (validated against the
    lock by read_archive_contents / read_extracted_contents) with the lock's hashes. Not
    RepoDataRecord.from_package_archive: that reads and hashes the whole archive once more
    (0.9 s for a 558 MB libtorch), after the fetch hashed it and before rattler hashes it again
    while extracting. `same_index`: the extracted copy's info/index.json, just found equal to
    the archive's (verify_extracted): read in place instead of written to `scratch`."""
    from rattler import PackageRecord, RepoDataRecord

    if path.is_dir():  # used from rattler's cache without its archive
        index = path / "info" / "index.json"
        record = PackageRecord.from_index_json(index, sha256=pkg.sha256, md5=pkg.md5 or None)
    elif not contents.index_bytes:  # nothing validated to build it from: rattler reads it
        return await RepoDataRecord.from_package_archive(path)
    else:  # rattler reads index.json from a file: `scratch`, a new file per record in one
        # folder (a folder each cost 4 ms of mkdir/rmdir; rewriting one file 2.7 ms: ext4 flushes
        # a file truncated and written again on close, auto_da_alloc)
        if same_index is None:
            scratch.write_bytes(contents.index_bytes)
        record = PackageRecord.from_index_json(
            same_index or scratch, size=path.stat().st_size, sha256=pkg.sha256, md5=pkg.md5 or None
        )
    return RepoDataRecord(record, pkg.file_name, pkg.url, channel_of(pkg.url))


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


def channel_of(url: str) -> str:
    """https://conda.anaconda.org/conda-forge/linux-64/x.conda -> https://conda.anaconda.org/conda-forge/"""
    parts = url.split("#", 1)[0].rsplit("/", 2)
    return parts[0] + "/" if len(parts) == 3 else url


def restore_locked_urls(prefix: Path, pkgs: list[LockedPackage]) -> None:
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
        url = redact_credentials(p.url, strip=True) if p is not None else ""
        if p is None or data.get("url") == url:
            continue
        data["url"] = url
        data["channel"] = channel_of(url)
        write_atomic(meta, json.dumps(data, indent=2))
