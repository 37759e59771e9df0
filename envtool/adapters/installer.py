"""Install a conda-lock.yml (v1) into a prefix with py-rattler: no conda executable needed.

Order of work, chosen so nothing is ever half-done or unverified:
  1. read the lock (lock_io.read_lock, the one reader), pick the platform's packages;
  2. take the per-environment file lock, write the `incomplete` marker;
  3. fetch every archive into envtool's archive cache and check its sha256/md5 against the
     lock — the lock is the authority: a bad cached copy is discarded and fetched again, a bad
     fetched copy is refused, and nothing is linked until every archive passed;
  4. build records from the verified archives and let rattler link them: packages already
     extracted in rattler's cache are given under their lock URL, the others as file:// URLs
     of the verified copies (so rattler never downloads anything itself); rattler writes
     conda-meta, removes packages the lock no longer has, and converges on a re-run;
  5. install the lock's `manager: pip` entries with uv (`--require-hashes --no-deps`);
  6. write conda-meta/envtool/state.json, then drop the marker.

Test hook: ENVTOOL_TEST_PAUSE_AT=after-download|mid-link|after-link (after-link: before the
pip part) makes the installer sleep at that point so tests can SIGKILL it deterministically
(ENVTOOL_TEST_PAUSE_S, default 60 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envtool.adapters import install_state
from envtool.adapters.lock_io import read_lock
from envtool.core.lock_model import Lock, LockedPackage
from envtool.errors import DiagnosedFailure, UsageError
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
    seconds: float = 0.0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def current_platform() -> str:
    from rattler.platform import Subdir

    return str(Subdir.current())


def default_cache_dir() -> Path:
    """ENVTOOL_CACHE_DIR, else the user's cache dir: shared by every env, so reinstalls are offline."""
    from envtool.adapters.locate import checked_dir

    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return checked_dir(Path(os.environ["ENVTOOL_CACHE_DIR"]), "ENVTOOL_CACHE_DIR")
    if os.environ.get("XDG_CACHE_HOME"):
        return checked_dir(Path(os.environ["XDG_CACHE_HOME"]) / "envtool", "XDG_CACHE_HOME")
    return checked_dir(Path.home() / ".cache" / "envtool", "HOME")


def remap_to_channels(pkg: LockedPackage, channels: list[str]) -> str:
    """The URL of the same file in a local channel (bundles, mirrors): matched by file name."""
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
    if pkg.manager == "pip":  # a conda mirror need not hold wheels: keep the locked URL
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


def file_digest(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def archive_matches(path: Path, pkg: LockedPackage) -> bool:
    """sha256 when the lock has it (the authority), else md5."""
    if pkg.sha256:
        return file_digest(path, "sha256") == pkg.sha256.lower()
    if pkg.md5:
        return file_digest(path, "md5") == pkg.md5.lower()
    return False  # a lock entry without a hash cannot be verified: refuse


def fetch_url(url: str, dest: Path) -> None:
    """file:// → copy; http(s) → urllib. Written to a temp name, then renamed."""
    tmp = dest.with_name(dest.name + f".part{os.getpid()}")
    parsed = urllib.parse.urlparse(url)
    try:
        if parsed.scheme == "file":
            src = Path(urllib.request.url2pathname(parsed.path))
            shutil.copyfile(src, tmp)
        elif parsed.scheme in ("http", "https"):
            with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as out:
                shutil.copyfileobj(resp, out, 1 << 20)
        else:
            raise UsageError(f"{url}: unsupported URL scheme", "use file://, http:// or https://")
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DiagnosedFailure(
            f"could not fetch {url} ({exc})",
            "check the network, or install offline with `envtool install --from BUNDLE_DIR`",
        ) from exc


def fetch_verified(pkg: LockedPackage, url: str, archive_dir: Path, report: InstallReport) -> Path:
    """A local archive whose hash matches the lock, or a refusal naming the package."""
    archive_dir.mkdir(parents=True, exist_ok=True)
    dest = archive_dir / pkg.file_name
    if dest.is_file():
        if archive_matches(dest, pkg):
            report.reused.append(pkg.file_name)
            return dest
        # A corrupt or tampered cache entry: the lock decides, so fetch it again.
        note(f"  {pkg.file_name}: cached copy does not match the lock's hash, fetching again")
        dest.unlink()
        report.refetched.append(pkg.file_name)
    fetch_url(url, dest)
    if not archive_matches(dest, pkg):
        got = file_digest(dest, "sha256")
        dest.unlink(missing_ok=True)
        raise DiagnosedFailure(
            f"{pkg.name} {pkg.version} ({pkg.file_name}): hash mismatch — the lock says "
            f"sha256 {pkg.sha256 or '(none)'} / md5 {pkg.md5 or '(none)'}, {url} has sha256 {got}; "
            "nothing was linked",
            "the package source changed or was tampered with; re-lock (`envtool lock NAME`) "
            "only if you trust the new file",
        )
    report.fetched.append(pkg.file_name)
    return dest


def _install_hint(lock: Lock, platform: str) -> str:
    return f"re-lock with `--platform {platform}` or install on a {lock.platforms[0]} host"


def plan_install(
    lock: Lock,
    prefix: Path,
    platform: str,
    channels_override: list[str] | None,
    cache_dir: Path,
) -> dict[str, Any]:
    """What an install would do (for --dry-run): no file is written."""
    lock.require_platform(platform, _install_hint(lock, platform))
    pkgs = lock.hashed_for_platform(platform)
    archive_dir = cache_dir / "archives"
    rows = []
    for p in pkgs:
        url = remap_to_channels(p, channels_override) if channels_override else p.url
        cached = p.manager == "conda" and (archive_dir / p.file_name).is_file()
        rows.append(
            {
                "name": p.name,
                "version": p.version,
                "build": p.build or None,  # null: pip, or a build the lock does not name
                "manager": p.manager,
                "url": url,
                "cached": cached,
            }
        )
    return {
        "prefix": str(prefix),
        "prefix_exists": prefix.exists(),
        "install_state": install_state.read_install_state(prefix) if prefix.exists() else None,
        "lock_path": str(lock.path),
        "lock_sha256": lock.sha256,
        "platform": platform,
        "packages": rows,
    }


def install_from_lock(
    lock_path: Path | str,
    prefix: Path | str,
    platform: str | None = None,
    channels_override: list[str] | None = None,
    cache_dir: Path | str | None = None,
    progress: bool = True,
    force: bool = False,
) -> InstallReport:
    """Install a conda-lock.yml into prefix; converge if the prefix exists or was interrupted.

    `force` is for callers that already decided to skip host checks; the install itself always
    verifies hashes. `channels_override` remaps every URL to the same file in those channels.
    """
    started = time.monotonic()
    lock = read_lock(Path(lock_path))
    prefix = Path(prefix).expanduser().absolute()
    platform = platform or current_platform()
    lock.require_platform(platform, _install_hint(lock, platform))
    from envtool.adapters.locate import looks_like_env

    if prefix.exists() and any(prefix.iterdir()) and not looks_like_env(prefix):
        raise UsageError(
            f"{prefix} exists and is not a conda environment (no conda-meta/)",
            "install into a new or empty directory, or an existing environment",
        )
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    say: Callable[[str], None] = note if progress else (lambda _msg: None)
    pkgs = lock.hashed_for_platform(platform)  # before the incomplete marker: nothing to undo
    conda_pkgs = [p for p in pkgs if p.manager == "conda"]
    pip_pkgs = [p for p in pkgs if p.manager == "pip"]
    report = InstallReport(str(prefix), str(lock.path), lock.sha256, platform)

    urls = {
        p.file_name: (remap_to_channels(p, channels_override) if channels_override else p.url)
        for p in pkgs
    }
    if pip_pkgs:  # a bad pip entry is refused before anything is fetched or linked
        from envtool.adapters.uv_pip import pip_requirements

        pip_requirements(pip_pkgs, urls, str(lock.path))
    with install_state.hold_env_lock(prefix, prefix.name, on_wait=note):
        install_state.write_incomplete_marker(prefix, lock.sha256, lock.path)
        say(f"fetching {len(conda_pkgs)} packages (hash-checked against {lock.path.name})")
        archives = _fetch_all(conda_pkgs, urls, cache / "archives", report, say)
        _pause_hook("after-download")
        say(f"linking {len(conda_pkgs)} packages into {prefix}")
        from_local = _link(conda_pkgs, archives, prefix, platform, cache / "rattler", say)
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
                "lock_sha256": lock.sha256,
                "lock_path": str(lock.path.resolve()),
                "platform": platform,
                "plan": lock.custom_metadata,
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "conda_packages": len(conda_pkgs),
                "pip_packages": len(pip_pkgs),
                "forced": force,
            },
        )
    say(
        f"installed {len(conda_pkgs)} conda + {len(pip_pkgs)} pip packages in {report.seconds:.1f}s"
    )
    return report


def _fetch_all(
    pkgs: list[LockedPackage],
    urls: dict[str, str],
    archive_dir: Path,
    report: InstallReport,
    say: Callable[[str], None],
) -> dict[str, Path]:
    archive_dir.mkdir(parents=True, exist_ok=True)
    total = len(pkgs)

    def one(item: tuple[int, LockedPackage]) -> tuple[str, Path]:
        i, p = item
        path = fetch_verified(p, urls[p.file_name], archive_dir, report)
        say(f"  [{i}/{total}] {p.name} {p.version} {p.build or ''} ok")
        return p.file_name, path

    # Every archive is verified before anything is linked; a refusal stops the whole install.
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, enumerate(pkgs, 1)))


class _LinkReporter:
    """rattler InstallerReporter: one stderr line per linked package; hosts the mid-link hook."""

    def __init__(self, say: Callable[[str], None], total: int) -> None:
        self.say = say
        self.total = total
        self.names: dict[int, str] = {}
        self.done = 0

    def on_link_start(self, operation: int, package_name: str) -> int:
        self.names[operation] = package_name
        return operation

    def on_link_complete(self, index: int) -> None:
        self.done += 1
        self.say(f"  linked [{self.done}/{self.total}] {self.names.get(index, '?')}")
        if self.done == 1:
            _pause_hook("mid-link")

    def on_unlink_start(self, operation: int, package_name: str) -> int:
        self.say(f"  removing {package_name} (not in the lock)")
        return operation


def _link(
    pkgs: list[LockedPackage],
    archives: dict[str, Path],
    prefix: Path,
    platform: str,
    rattler_cache: Path,
    say: Callable[[str], None],
) -> set[str]:
    """Link with rattler; returns the file names it read from envtool's verified copies."""
    import asyncio

    from rattler import RepoDataRecord, install
    from rattler.platform import Subdir

    from_local: set[str] = set()

    async def run() -> None:
        from rattler.package_cache import PackageCache

        index = await PackageCache(rattler_cache).index() if rattler_cache.is_dir() else None
        # The records come from the verified archives themselves (noarch, build number, depends).
        read = await asyncio.gather(
            *(RepoDataRecord.from_package_archive(archives[p.file_name]) for p in pkgs)
        )
        records = []
        for p, rec in zip(pkgs, read, strict=True):
            rec.channel = _channel_of(p.url)
            if p.md5:
                rec.md5 = bytes.fromhex(p.md5)
            rec.url = p.url
            if index is None or not index.contains_record(rec):
                # Not extracted yet: rattler must read our verified copy, never the network.
                rec.url = archives[p.file_name].resolve().as_uri()
                from_local.add(p.file_name)
            records.append(rec)
        damaged = _damaged_in(prefix)
        if damaged:
            say(f"  relinking {len(damaged)} damaged package(s): {', '.join(sorted(damaged))}")
        await install(
            records,
            target_prefix=prefix,
            cache_dir=rattler_cache,
            platform=Subdir(platform),
            show_progress=False,
            reporter=_LinkReporter(say, len(records)),
            reinstall_packages=damaged or None,  # rattler skips a package it sees as installed
        )
        await asyncio.sleep(0.05)  # let rattler's background tasks finish before the loop closes

    try:
        asyncio.run(run())
    except Exception as exc:
        if isinstance(exc, (UsageError, DiagnosedFailure)):
            raise
        raise DiagnosedFailure(
            f"linking into {prefix} failed: {exc}",
            "the environment is marked incomplete; run the same install again to finish it",
        ) from exc
    return from_local


def _damaged_in(prefix: Path) -> set[str]:
    """Installed packages with files gone from disk: the install relinks them (converge)."""
    from envtool.adapters.installed import damaged_packages, read_conda_meta

    if not (prefix / "conda-meta").is_dir():
        return set()
    return {row["name"] for row in damaged_packages(prefix, read_conda_meta(prefix))}


def _channel_of(url: str) -> str:
    """https://conda.anaconda.org/conda-forge/linux-64/x.conda -> https://conda.anaconda.org/conda-forge/"""
    parts = url.split("#", 1)[0].rsplit("/", 2)
    return parts[0] + "/" if len(parts) == 3 else url


def _restore_locked_urls(prefix: Path, pkgs: list[LockedPackage]) -> None:
    """rattler linked these from verified local copies; conda-meta should name where the lock
    says each package comes from, like any conda-installed env."""
    from envtool.adapters.lock_io import write_text_atomic

    by_file = {p.file_name: p for p in pkgs}
    if not by_file:
        return
    for meta in (prefix / "conda-meta").glob("*.json"):
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        p = by_file.get(data.get("fn", ""))
        if p is None or data.get("url") == p.url:
            continue
        data["url"] = p.url
        data["channel"] = _channel_of(p.url)
        write_text_atomic(meta, json.dumps(data, indent=2))


def _install_pip(
    pkgs: list[LockedPackage], urls: dict[str, str], prefix: Path, uv_cache: Path
) -> None:
    from envtool.adapters.locate import python_in
    from envtool.adapters.proc import run_capture
    from envtool.adapters.uv_pip import pip_requirements, uv_binary

    python = python_in(prefix)
    if not python.exists():
        raise DiagnosedFailure(
            f"the lock has pip packages but {prefix} has no python",
            "add python to the environment's conda dependencies and re-lock",
        )
    req = install_state.envtool_meta_dir(prefix) / "pip-requirements.txt"
    req.write_text(pip_requirements(pkgs, urls, "the lock"))  # the one checked writer
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
    """Test hook (see module docstring): sleep here so a test can kill us at this point."""
    if os.environ.get("ENVTOOL_TEST_PAUSE_AT") == point:
        note(f"ENVTOOL_TEST_PAUSE_AT={point}: pausing")
        time.sleep(float(os.environ.get("ENVTOOL_TEST_PAUSE_S", "60")))
