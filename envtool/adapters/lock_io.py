"""conda-lock.yml (version 1) on disk, through conda-lock's own models and writer.

Written atomically: the file is rendered into a private temp folder beside the target (under the
same name, so conda-lock's header names the real file) and moved into place with os.replace.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from envtool.core.lockfile import PipPackage, SolvedPackage, dependency_map
from envtool.errors import UsageError


def write_lock(
    path: Path,
    packages: dict[str, list[SolvedPackage]],
    pip_packages: dict[str, list[PipPackage]],
    channels: list[str],
    content_hash: dict[str, str],
    custom_metadata: dict[str, str],
    sources: list[str],
) -> None:
    """Render and atomically write conda-lock.yml. Deterministic: no time or git metadata."""
    from conda_lock.lockfile import write_conda_lock_file
    from conda_lock.lockfile.v1.models import HashModel, LockMeta
    from conda_lock.lockfile.v2prelim.models import LockedDependency, Lockfile
    from conda_lock.models.channel import Channel

    entries: list[LockedDependency] = []
    for platform, pkgs in sorted(packages.items()):
        for p in pkgs:
            entries.append(
                LockedDependency(
                    name=p.name,
                    version=p.version,
                    manager="conda",
                    platform=platform,
                    dependencies=dependency_map(p.depends),
                    url=p.url,
                    hash=HashModel(md5=p.md5 or "", sha256=p.sha256),
                    build=p.build,
                    categories={"main"},
                )
            )
    for platform, pkgs in sorted(pip_packages.items()):
        for q in pkgs:
            entries.append(
                LockedDependency(
                    name=q.name,
                    version=q.version,
                    manager="pip",
                    platform=platform,
                    dependencies={d: "*" for d in sorted(q.dependencies)},
                    url=q.url,
                    hash=HashModel(sha256=q.sha256),
                    categories={"main"},
                )
            )
    lock = Lockfile(
        package=entries,
        metadata=LockMeta(
            content_hash=dict(sorted(content_hash.items())),
            channels=[Channel.from_string(c) for c in channels],
            platforms=sorted(packages),
            sources=sources,
            custom_metadata=dict(sorted(custom_metadata.items())),
        ),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix=".envtool-lock-", dir=path.parent))
    try:
        tmp = tmpdir / path.name
        write_conda_lock_file(lock, tmp, metadata_choices=None)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_lock(path: Path):
    """Parse conda-lock.yml with conda-lock (returns its v2prelim Lockfile model)."""
    from conda_lock.lockfile import parse_conda_lock_file

    try:
        return parse_conda_lock_file(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no lock file", "run `envtool create NAME` first") from None
    except Exception as exc:
        raise UsageError(
            f"{path}: not a conda-lock file ({exc})",
            "re-create it with `envtool lock NAME --force`",
        ) from None
