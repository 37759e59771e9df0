"""Install a conda-lock.yml (v1) into a prefix with py-rattler: no conda executable needed.

Order of work, chosen so nothing is ever half-done or unverified:
  1. read the lock (v1 by envtool's reader, checked against conda-lock's parser in tests),
     pick the platform's packages;
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
from envtool.errors import DiagnosedFailure, UsageError
from envtool.output import note

ARCHIVE_SUFFIXES = (".conda", ".tar.bz2")


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    manager: str  # conda | pip
    platform: str
    url: str
    sha256: str | None
    md5: str | None
    build: str | None = None  # conda only; parsed from the file name

    @property
    def file_name(self) -> str:
        return file_name_of(self.url)

    @property
    def subdir(self) -> str:
        parts = self.url.split("#", 1)[0].rstrip("/").split("/")
        return parts[-2] if len(parts) >= 2 else self.platform


@dataclass
class LockContents:
    path: Path
    sha256: str
    platforms: list[str]
    channels: list[str]
    custom_metadata: dict[str, str]
    packages: list[LockedPackage]

    def for_platform(self, platform: str) -> list[LockedPackage]:
        return [p for p in self.packages if p.platform == platform]

    def require_platform(self, platform: str, hint: str) -> None:
        """Refuse a platform the lock holds no solution for (instead of doing nothing for it)."""
        if platform not in self.platforms:
            raise UsageError(
                f"{self.path}: the lock has no {platform} solution "
                f"(it has {', '.join(self.platforms)})",
                hint,
            )


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


def file_name_of(url: str) -> str:
    """'https://…/linux-64/x-1.0-h0_0.conda#md5' -> 'x-1.0-h0_0.conda'."""
    return urllib.parse.unquote(url.rsplit("/", 1)[-1].split("#", 1)[0])


def parse_build_from_file_name(file_name: str, name: str, version: str) -> str | None:
    """'pytorch-2.7.1-cuda126_mkl_py311_h30b5a27_300.conda' -> 'cuda126_mkl_py311_h30b5a27_300'."""
    stem = file_name
    for suffix in ARCHIVE_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    else:
        return None
    head = f"{name}-{version}-"
    if stem.startswith(head):
        return stem[len(head) :]
    return stem.rsplit("-", 1)[-1] if stem.count("-") >= 2 else None


def read_lock(lock_path: Path) -> LockContents:
    """Read a conda-lock.yml into plain records: v1 with envtool's own reader (importing the
    conda_lock package costs ~1.5 s per command); v2 and anything unusual through conda-lock's
    parser. tests/test_install.py checks both agree on real locks."""
    lock_path = Path(lock_path)
    if not lock_path.is_file():
        raise UsageError(
            f"{lock_path}: no such lock file",
            "run `envtool lock NAME` (or `envtool create NAME`) first, or pass --lock FILE",
        )
    data = lock_path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    key = (str(lock_path.resolve()), digest)
    if key in _LOCK_CACHE:  # `install` reads the lock for its checks, then to install
        return _LOCK_CACHE[key]
    from envtool.adapters.lock_io import load_yaml

    try:
        content = load_yaml(data)
        if isinstance(content, dict) and content.get("version") == 1:
            parsed = parse_lock_v1(content)
        else:
            parsed = _parse_with_conda_lock(content)
    except Exception as exc:  # yaml, pydantic, key or version errors: "not a usable lock"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"{lock_path}: not a readable conda-lock file ({first})",
            "regenerate it with `envtool lock NAME`",
        ) from exc
    platforms, channels, custom, packages = parsed
    contents = LockContents(lock_path, digest, platforms, channels, custom, packages)
    _LOCK_CACHE[key] = contents
    return contents


_LOCK_CACHE: dict[tuple[str, str], LockContents] = {}


def parse_lock_v1(
    content: dict[str, Any],
) -> tuple[list[str], list[str], dict[str, str], list[LockedPackage]]:
    """conda-lock v1 (`version: 1`, metadata + package list) → platforms, channels, custom
    metadata, packages. Optional (dev/extra category) entries are skipped, like `conda-lock
    install` does by default; an entry repeated per category is kept once."""
    meta = content["metadata"]
    channels = [c["url"] if isinstance(c, dict) else str(c) for c in meta.get("channels", [])]
    packages: list[LockedPackage] = []
    seen: set[tuple[str, str, str]] = set()
    for dep in content["package"]:
        if dep.get("optional") and dep.get("category", "main") != "main":
            continue
        ident = (dep["manager"], dep["name"], dep["platform"])
        if ident in seen:
            continue
        seen.add(ident)
        packages.append(_locked_package(dep))
    custom = {str(k): str(v) for k, v in (meta.get("custom_metadata") or {}).items()}
    return [str(p) for p in meta["platforms"]], channels, custom, packages


def _locked_package(dep: dict[str, Any]) -> LockedPackage:
    name, version, manager = str(dep["name"]), str(dep["version"]), dep["manager"]
    if manager not in ("conda", "pip"):
        raise ValueError(f"package {name}: unknown manager {manager!r}")
    url = str(dep["url"])
    hashes = dep.get("hash") or {}
    build = None
    if manager == "conda":
        build = dep.get("build") or parse_build_from_file_name(file_name_of(url), name, version)
    return LockedPackage(
        name=name,
        version=version,
        manager=manager,
        platform=str(dep["platform"]),
        url=url,
        sha256=hashes.get("sha256"),
        md5=hashes.get("md5"),
        build=build,
    )


def _parse_with_conda_lock(
    content: Any,
) -> tuple[list[str], list[str], dict[str, str], list[LockedPackage]]:
    """conda-lock's own models (v2 and future versions it knows)."""
    from envtool.adapters.lock_io import validate_lock_v2

    if not isinstance(content, dict):
        raise ValueError("not a YAML mapping")
    version = content.pop("version", None)
    if version != 2:
        raise ValueError(f"unsupported lock version {version!r}")
    lock = validate_lock_v2(content)
    packages = [
        _locked_package(
            {
                "name": d.name,
                "version": d.version,
                "manager": d.manager,
                "platform": d.platform,
                "url": d.url,
                "hash": {"sha256": d.hash.sha256, "md5": d.hash.md5},
                "build": d.build,
            }
        )
        for d in lock.package
        if "main" in d.categories
    ]
    meta = lock.metadata
    return (
        list(meta.platforms),
        [c.url for c in meta.channels],
        dict(meta.custom_metadata or {}),
        packages,
    )


def current_platform() -> str:
    from rattler.platform import Subdir

    return str(Subdir.current())


def default_cache_dir() -> Path:
    """ENVTOOL_CACHE_DIR, else the user's cache dir: shared by every env, so reinstalls are offline."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return Path(os.environ["ENVTOOL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envtool"


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


def _install_hint(lock: LockContents, platform: str) -> str:
    return f"re-lock with `--platform {platform}` or install on a {lock.platforms[0]} host"


def plan_install(
    lock: LockContents,
    prefix: Path,
    platform: str,
    channels_override: list[str] | None,
    cache_dir: Path,
) -> dict[str, Any]:
    """What an install would do (for --dry-run): no file is written."""
    lock.require_platform(platform, _install_hint(lock, platform))
    pkgs = lock.for_platform(platform)
    archive_dir = cache_dir / "archives"
    rows = []
    for p in pkgs:
        url = remap_to_channels(p, channels_override) if channels_override else p.url
        cached = p.manager == "conda" and (archive_dir / p.file_name).is_file()
        rows.append(
            {
                "name": p.name,
                "version": p.version,
                "build": p.build,
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
    pkgs = lock.for_platform(platform)
    conda_pkgs = [p for p in pkgs if p.manager == "conda"]
    pip_pkgs = [p for p in pkgs if p.manager == "pip"]
    report = InstallReport(str(prefix), str(lock.path), lock.sha256, platform)

    urls = {
        p.file_name: (remap_to_channels(p, channels_override) if channels_override else p.url)
        for p in pkgs
    }
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
        await install(
            records,
            target_prefix=prefix,
            cache_dir=rattler_cache,
            platform=Subdir(platform),
            show_progress=False,
            reporter=_LinkReporter(say, len(records)),
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
    from envtool.adapters.uv_pip import uv_binary

    python = python_in(prefix)
    if not python.exists():
        raise DiagnosedFailure(
            f"the lock has pip packages but {prefix} has no python",
            "add python to the environment's conda dependencies and re-lock",
        )
    lines = []
    for p in pkgs:
        if not p.sha256:
            raise DiagnosedFailure(
                f"pip package {p.name} {p.version} has no sha256 in the lock",
                "re-lock so every pip entry carries a hash",
            )
        lines.append(f"{p.name} @ {urls[p.file_name].split('#', 1)[0]} --hash=sha256:{p.sha256}")
    req = install_state.envtool_meta_dir(prefix) / "pip-requirements.txt"
    req.write_text("\n".join(lines) + "\n")
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
