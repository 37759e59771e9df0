"""conda-lock.yml (version 1) on disk, through conda-lock's own models and writer.

Written atomically: the file is rendered into a private temp folder beside the target (under the
same name, so conda-lock's header names the real file) and moved into place with os.replace.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import types
from pathlib import Path
from typing import Any

from envtool.core.lockfile import PipPackage, SolvedPackage, dependency_map
from envtool.errors import UsageError, cannot_write

_preload: threading.Thread | None = None


def _import_lockfile_module() -> types.ModuleType:
    """conda_lock.lockfile without conda_lock/__init__.py, which imports conda-lock's whole CLI
    (vendored poetry, conda solver: ~0.4 s) only to re-export `main`. The package is registered
    as a lazy proxy that still resolves `conda_lock.main` and `__version__` on first use."""
    if "conda_lock" not in sys.modules:
        import importlib.util

        spec = importlib.util.find_spec("conda_lock")
        if spec is not None and spec.submodule_search_locations:
            proxy = types.ModuleType("conda_lock")
            proxy.__path__ = list(spec.submodule_search_locations)
            proxy.__file__ = spec.origin
            proxy.__spec__ = spec
            proxy.__getattr__ = _conda_lock_attr  # type: ignore[method-assign]
            sys.modules["conda_lock"] = proxy
    import conda_lock.lockfile

    return conda_lock.lockfile


def _conda_lock_attr(name: str) -> object:
    if name == "main":
        from conda_lock.conda_lock import main

        return main
    if name == "__version__":
        from importlib.metadata import version

        return version("conda-lock")
    raise AttributeError(f"module 'conda_lock' has no attribute {name!r}")


def preload_lock_writer() -> None:
    """Import conda-lock's models in a background thread while rattler solves (the import costs
    about as much as the solve itself; rattler's work runs outside the GIL)."""
    global _preload
    if _preload is None and "conda_lock.lockfile" not in sys.modules:
        _preload = threading.Thread(target=_import_lockfile_module, daemon=True)
        _preload.start()


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
    if _preload is not None:
        _preload.join()
    write_conda_lock_file = _import_lockfile_module().write_conda_lock_file
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
    """Write beside the target, then os.replace: readers see the old file or the new one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:  # plain open: the user's umask decides the mode
            f.write(text)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise cannot_write(path, exc) from None
        raise


def load_yaml(data: Any) -> Any:
    """YAML (bytes, text or a file) with libyaml's safe loader when present, else PyYAML's
    SafeLoader: real locks are 100k+ lines and the pure-Python loader takes seconds on them."""
    import yaml

    return yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def validate_lock_v2(content: dict[str, Any]) -> Any:
    """A parsed `version: 2` lock (the version key removed) as conda-lock's Lockfile model,
    without importing conda-lock's CLI. Raises pydantic's ValidationError (a ValueError)."""
    return _import_lockfile_module().Lockfile.model_validate(content)


def read_lock_model(path: Path) -> Any:
    """Parse conda-lock.yml into conda-lock's own (v2prelim) Lockfile model, as
    conda_lock.lockfile.parse_conda_lock_file does, but with libyaml's C loader when available."""
    import yaml

    lockfile = _import_lockfile_module()
    try:
        with path.open(encoding="utf-8") as f:
            content = load_yaml(f)
    except FileNotFoundError:
        raise UsageError(
            f"{path}: no such lock file", "pass the path of a conda-lock.yml"
        ) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read the lock ({exc})", "check the file") from None
    if not isinstance(content, dict) or content.get("version") not in (1, 2):
        raise UsageError(
            f"{path}: not a conda-lock file (version 1 or 2)",
            "pass a conda-lock.yml written by envtool lock or conda-lock",
        )
    version = content.pop("version")
    try:
        if version == 1:
            lock = lockfile.lockfile_v1_to_v2(lockfile.LockfileV1.model_validate(content))
        else:
            lock = validate_lock_v2(content)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        first = str(exc).splitlines()[0]
        raise UsageError(f"{path}: invalid conda-lock file ({first})", "re-lock it") from None
    lock.toposort_inplace()
    return lock
