"""pixi.lock read through py-rattler's lock-file support (`rattler.LockFile`), into envtool's own
lock model (core/lockfile.Lock) one environment × platform at a time, so `install --lock
pixi.lock --environment NAME` goes through the one install path (plan_from_lock: the host check,
hash-verified fetch, link) and `doctor --lock` compares against it like a conda-lock.

The file is untrusted: read bounded (files.read_bytes), refused unless its YAML is one strict
document (no aliases, no duplicate keys, bounded depth: core/safe_load), then parsed by rattler
from a private copy of exactly those bytes; every entry is checked (core/lockfile.entry_problem:
plain archive file names, hashes) before it becomes a path.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envtool.core.lockfile import Lock, LockedPackage, entry_problem, platform_problem
from envtool.core.pixi import ENV_NAME, PixiTarget, judge_target
from envtool.core.shell_quote import printable
from envtool.errors import UsageError

PIXI_LOCK_VERSIONS = range(4, 8)  # what py-rattler 0.28 reads (pixi writes 6; pixi 0.71+ 7)
# The lock path an install records for a pixi.lock environment: `<path>#environment=<name>`.
# Every reader of a recorded lock (verify, doctor's drift, the finish-install hint) goes through
# lock_io.read_lock, which reads such a reference back through this module.
REF = "#environment="


def pixi_ref(path: Path, environment: str) -> Path:
    return Path(f"{path}{REF}{environment}")


def lock_file_exists(path: Path | str) -> bool:
    """A recorded lock is still there: a file, or a pixi.lock reference whose file is."""
    ref = split_pixi_ref(path)
    return Path(path).is_file() if ref is None else ref[0].is_file()


def split_pixi_ref(path: Path | str) -> tuple[Path, str] | None:
    """(pixi.lock, environment) for a recorded reference; None for a plain path (an existing
    file of that name is a file, never a reference)."""
    text = str(path)
    if REF not in text or Path(text).exists():
        return None
    file, _, env = text.rpartition(REF)
    return (Path(file), env) if file and ENV_NAME.fullmatch(env) else None


@dataclass
class PixiLock:
    path: Path
    sha256: str
    version: int
    # environment -> platform -> packages (file order), channels per environment
    packages: dict[str, dict[str, list[LockedPackage]]] = field(default_factory=dict)
    channels: dict[str, list[str]] = field(default_factory=dict)

    def targets(self) -> list[PixiTarget]:
        """Every environment × platform, judged (core/pixi.judge_target)."""
        return [
            judge_target(env, platform, pkgs)
            for env, platforms in sorted(self.packages.items())
            for platform, pkgs in sorted(platforms.items())
        ]

    def as_lock(self, environment: str, platform: str | None = None) -> Lock:
        """One environment × platform (None: every platform of it) as envtool's lock model, with
        the metadata the host check reads derived from its packages (a pixi.lock records
        none). Its path is the reference (pixi_ref) an install records."""
        if environment not in self.packages:
            raise UsageError(
                f"{self.path}: no environment {printable(repr(environment))}",
                f"pick one of: {', '.join(sorted(self.packages))}",
            )
        platforms = self.packages[environment]
        if platform is not None and platform not in platforms:
            raise UsageError(
                f"{self.path}: environment {environment} has no {platform} solution "
                f"(it has {', '.join(sorted(platforms)) or 'none'})",
                "pick another --environment, or pass --platform",
            )
        chosen = [platform] if platform is not None else sorted(platforms)
        targets = [judge_target(environment, p, platforms[p]) for p in chosen]
        meta = targets[0].lock_metadata() if len(targets) == 1 else _merged_metadata(targets)
        return Lock(
            packages=[pkg for p in chosen for pkg in platforms[p]],
            platforms=chosen,
            channels=list(self.channels.get(environment, [])),
            sources=["pixi.toml"],
            custom_metadata=meta,
            path=pixi_ref(self.path, environment),
            sha256=self.sha256,
        )


def _merged_metadata(targets: list[PixiTarget]) -> dict[str, str]:
    """Host-check metadata for several platforms: each platform's CUDA; the driver floor and
    arch list only where every CUDA platform agrees (else the check takes the CUDA's floor)."""
    cudas = [t for t in targets if t.cuda]
    meta = {"envtool_platforms_cuda": " ".join(f"{t.platform}={t.cuda or 'cpu'}" for t in targets)}
    if cudas and len({(t.cuda, t.min_driver, t.archs) for t in cudas}) == 1:
        one = cudas[0].lock_metadata()
        meta.update(
            {k: one[k] for k in ("envtool_min_driver", "envtool_gpu_archs", "envtool_flavor")}
        )
    return meta


def looks_like_pixi_lock(path: Path) -> bool:
    """A pixi.lock by name, or a file whose first lines say `version: N` then `environments:`
    (conda-lock's say `version: 1` then `metadata:`); reads at most 4 KiB."""
    if path.name.endswith("pixi.lock"):
        return True
    from envtool.adapters.files import head_keys

    keys = head_keys(path)  # the caller reads the file bounded afterwards
    return len(keys) >= 2 and keys[0].startswith("version:") and keys[1] == "environments:"


def read_pixi_lock(path: Path | str) -> PixiLock:
    """A pixi.lock into PixiLock, every entry checked; a one-line UsageError naming the file."""
    import rattler

    from envtool.adapters.files import LOCK_FILE_LIMIT, read_bytes
    from envtool.core.safe_load import parse_yaml

    path = Path(path)
    data = read_bytes(path, LOCK_FILE_LIMIT, what="pixi.lock")
    hint = "pass a pixi.lock written by pixi (lock versions 4 to 7)"
    content = parse_yaml(data, str(path), hint)
    if (
        not isinstance(content, dict)
        or content.get("version") not in PIXI_LOCK_VERSIONS
        or not isinstance(content.get("environments"), dict)
    ):
        raise UsageError(f"{path}: not a pixi.lock (version 4 to 7 with environments)", hint)
    fd, copy = tempfile.mkstemp(prefix="envtool-pixi-", suffix=".lock")
    try:
        with os.fdopen(fd, "wb") as f:  # rattler reads paths: give it exactly the bytes checked
            f.write(data)
        try:
            lock_file = rattler.LockFile.from_path(copy)
        except Exception as exc:  # rattler's ParseLockFileError and friends
            first = (
                str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            )
            raise UsageError(f"{path}: invalid pixi.lock ({printable(first)})", hint) from None
    finally:
        os.unlink(copy)
    out = PixiLock(path, hashlib.sha256(data).hexdigest(), int(content["version"]))
    try:
        for name, env in lock_file.environments():
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"environment name {name[:80]!r} is not a pixi name")
            out.channels[name] = [str(c) for c in env.channels()]
            out.packages[name] = {str(p): _packages(env, p, str(p)) for p in env.platforms()}
    except ValueError as exc:
        raise UsageError(f"{path}: invalid pixi.lock ({printable(str(exc))})", hint) from None
    return out


def _packages(env: Any, lock_platform: Any, platform: str) -> list[LockedPackage]:
    problem = platform_problem(platform)
    if problem:
        raise ValueError(problem)
    out: list[LockedPackage] = []
    for r in env.conda_repodata_records_for_platform(lock_platform) or []:
        out.append(
            _checked(
                LockedPackage(
                    name=r.name.normalized,
                    version=str(r.version),
                    manager="conda",
                    platform=platform,
                    url=str(r.url),
                    build=str(r.build),
                    md5=r.md5.hex() if r.md5 else None,
                    sha256=r.sha256.hex() if r.sha256 else None,
                    dependencies=tuple(sorted({d.split()[0] for d in r.depends if d.split()})),
                )
            )
        )
    for p in env.pypi_packages_for_platform(lock_platform) or []:
        hashes = p.hashes
        sha256 = hashes.sha256.hex() if hashes is not None and hashes.sha256 else None
        out.append(
            _checked(
                LockedPackage(
                    name=str(p.name),
                    version=str(p.version),
                    manager="pip",
                    platform=platform,
                    url=str(p.location),
                    sha256=sha256,
                )
            )
        )
    return out


def _checked(pkg: LockedPackage) -> LockedPackage:
    problem = entry_problem(pkg)
    if problem:
        raise ValueError(f"package {pkg.name!r} ({pkg.platform}): {problem}")
    return pkg
