"""conda-lock.yml on disk: written (version 1) through conda-lock's own models and writer; read
back into envtool's lock model (core/lockfile.py) by `read_lock`, the one reader.

Written atomically: the file is rendered into a private temp folder beside the target (under the
same name, so conda-lock's header names the real file) and moved into place with os.replace.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envtool.adapters.files import write_atomic
from envtool.core.credentials import redact_credentials
from envtool.core.lockfile import (
    DIGEST_PLACEHOLDER,
    KEY_DIGEST,
    Lock,
    LockedPackage,
    PipPackage,
    SolvedPackage,
    dependency_map,
    entry_problem,
    file_name_of,
    parse_build_from_file_name,
    platform_problem,
    with_content_digest,
)
from envtool.errors import UsageError

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
            custom_metadata=dict(
                sorted({**custom_metadata, KEY_DIGEST: DIGEST_PLACEHOLDER}.items())
            ),
        ),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix=".envtool-lock-", dir=path.parent))
    try:
        tmp = tmpdir / path.name
        with _libyaml_emitter():
            write_conda_lock_file(lock, tmp, metadata_choices=None)
        # the lock's own content digest (lock --check: an edited url/sha256 is not fresh),
        # written whole or not at all like every file envtool writes (fsync, then rename)
        # never a URL's credentials: a lock is committed and shared (core/credentials)
        text = redact_credentials(tmp.read_text(encoding="utf-8"), strip=True)
        write_atomic(path, with_content_digest(text.encode("utf-8")))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


@contextmanager
def _libyaml_emitter() -> Iterator[None]:
    """conda-lock's writer calls `yaml.dump` with PyYAML's pure-Python emitter: ~3/4 of `envtool
    lock` at 1000 packages. For the length of the write, that call uses libyaml's emitter (same
    representer, same bytes: tests/lock/test_lock_writer.py compares them on real locks), 4-7x
    faster. Not for a document with non-ASCII text (a source path like /home/josé/…): there the two
    emitters fold long escaped scalars at different places, so conda-lock's own emitter writes it.
    A CLI process is single-threaded here (the preload thread was joined above)."""
    import yaml

    original, cdumper = yaml.dump, getattr(yaml, "CDumper", None)
    if cdumper is None:  # PyYAML built without libyaml: conda-lock's writer as it is
        yield
        return

    def dump(data: Any, stream: Any = None, Dumper: Any = cdumper, **kwds: Any) -> Any:  # noqa: N803
        if not _all_ascii(data):  # the emitters fold long escaped non-ASCII scalars differently
            Dumper = yaml.Dumper  # noqa: N806
        return original(data, stream, Dumper=Dumper, **kwds)

    yaml.dump = dump
    try:
        yield
    finally:
        yaml.dump = original


def _all_ascii(obj: Any) -> bool:
    """Every string in a dumped document is ASCII (keys included)."""
    if isinstance(obj, str):
        return obj.isascii()
    if isinstance(obj, dict):
        return all(_all_ascii(k) and _all_ascii(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return all(_all_ascii(v) for v in obj)
    return True


def load_yaml(data: Any) -> Any:
    """YAML of envtool's own writer with libyaml's safe loader (tests compare written locks);
    a lock from outside is read by read_lock, strictly (safe_load.parse_yaml)."""
    import yaml

    return yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def validate_lock_v2(content: dict[str, Any]) -> Any:
    """A parsed `version: 2` lock (the version key removed) as conda-lock's Lockfile model,
    without importing conda-lock's CLI. Raises pydantic's ValidationError (a ValueError)."""
    return _import_lockfile_module().Lockfile.model_validate(content)


def read_lock(lock_path: Path | str, follow_symlinks: bool = True) -> Lock:
    """Read a conda-lock.yml into envtool's lock model: v1 with envtool's own reader (importing
    conda-lock costs ~1.5 s per command), v2 through conda-lock's models. The one reader of
    install, bundle, verify/drift and export; tests check it agrees with conda-lock's parser.
    `follow_symlinks=False` (a bundle's lock): a symbolic link there is refused, not followed."""
    lock_path = Path(lock_path)
    if not follow_symlinks and lock_path.is_symlink():
        pass  # read_bytes refuses it in one line, whatever it points at
    elif lock_path.is_dir():
        raise UsageError(
            f"{lock_path}: a directory, not a lock file",
            f"pass the file: --lock {lock_path / 'conda-lock.yml'}",
        )
    if not lock_path.exists():  # anything else there (a FIFO, a device) read_bytes refuses
        raise UsageError(
            f"{lock_path}: no such lock file",
            "run `envtool lock NAME` (or `envtool create NAME`) first, or pass --lock FILE",
        )
    from envtool.adapters.files import LOCK_FILE_LIMIT, read_bytes
    from envtool.core.safe_load import parse_yaml

    data = read_bytes(lock_path, LOCK_FILE_LIMIT, follow_symlinks=follow_symlinks, what="lock file")
    digest = hashlib.sha256(data).hexdigest()
    key = (str(lock_path.resolve()), digest)
    if key in _LOCK_CACHE:  # `install` reads the lock for its checks, then to install
        return _LOCK_CACHE[key]
    # strict: no aliases (a 3 KB `[*i]` bomb), no duplicate keys (rattler refuses those files)
    content = parse_yaml(
        data, str(lock_path), "check the file, or regenerate it with `envtool lock NAME`"
    )
    if not isinstance(content, dict) or content.get("version") not in (1, 2):
        raise UsageError(
            f"{lock_path}: not a conda-lock file (version 1 or 2)",
            "pass a conda-lock.yml written by `envtool lock` or conda-lock",
        )
    try:
        lock = _lock_v1(content) if content["version"] == 1 else _lock_v2(content)
        for plat in lock.platforms:  # both versions: a name reaches export's text and paths
            problem = platform_problem(plat)
            if problem:
                raise ValueError(f"metadata: {problem}")
    except Exception as exc:  # missing keys, wrong types, pydantic: "not a usable lock"
        raise UsageError(
            f"{lock_path}: invalid conda-lock file ({_first_line(exc)})",
            "regenerate it with `envtool lock NAME`",
        ) from exc
    lock.path, lock.sha256 = lock_path, digest
    _LOCK_CACHE[key] = lock
    return lock


_LOCK_CACHE: dict[tuple[str, str], Lock] = {}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, KeyError):
        return f"missing key {text}"
    return text.splitlines()[0] if text else type(exc).__name__


def _lock_v1(content: dict[str, Any]) -> Lock:
    """conda-lock v1: one package entry per category of a package. Entries of the same
    manager+name+platform are merged, as conda-lock's parser merges them; the package is
    optional when every entry is (`optional: true` outside `main`)."""
    entries: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for dep in content["package"]:
        entries.setdefault((dep["manager"], dep["name"], dep["platform"]), []).append(dep)
    packages = [
        _locked_package(
            deps[0], all(d.get("optional") and d.get("category", "main") != "main" for d in deps)
        )
        for deps in entries.values()
    ]
    meta = content["metadata"]
    return Lock(
        packages=packages,
        platforms=[str(p) for p in meta["platforms"]],
        channels=[c["url"] if isinstance(c, dict) else str(c) for c in meta.get("channels", [])],
        sources=[str(s) for s in meta.get("sources") or []],
        content_hash=_str_map(meta.get("content_hash")),
        custom_metadata=_str_map(meta.get("custom_metadata")),
    )


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


def _lock_v2(content: dict[str, Any]) -> Lock:
    """conda-lock v2 (and what conda-lock may add to it) through conda-lock's own models."""
    lock = validate_lock_v2({k: v for k, v in content.items() if k != "version"})
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
                "dependencies": d.dependencies,
            },
            "main" not in d.categories,
        )
        for d in lock.package
    ]
    meta = lock.metadata
    return Lock(
        packages=packages,
        platforms=list(meta.platforms),
        channels=[c.url for c in meta.channels],
        sources=list(meta.sources or []),
        content_hash=dict(meta.content_hash or {}),
        custom_metadata=dict(meta.custom_metadata or {}),
    )


def _locked_package(dep: dict[str, Any], optional: bool) -> LockedPackage:
    """One package entry (a v1 mapping, or a v2 model's fields) in plain types; hashes "" -> None."""
    name, version, manager = str(dep["name"]), str(dep["version"]), dep["manager"]
    if manager not in ("conda", "pip"):
        raise ValueError(f"package {name}: unknown manager {manager!r}")
    url = str(dep["url"])
    hashes = dep.get("hash") or {}
    if not isinstance(hashes, dict):
        raise ValueError(f"package {name}: hash is not a mapping")
    for algo in ("sha256", "md5"):
        # YAML reads an unquoted all-digit hash as a number: refused, never silently dropped
        if hashes.get(algo) not in (None, "") and not isinstance(hashes[algo], str):
            raise ValueError(f"package {name}: {algo} is not a string of hex digits")
    build = ""
    if manager == "conda":  # old locks have no `build:`; the archive's name holds it
        build = dep.get("build") or parse_build_from_file_name(file_name_of(url), name, version)
    pkg = LockedPackage(
        name=name,
        version=version,
        manager=manager,
        platform=str(dep["platform"]),
        url=url,
        build=str(build or ""),
        md5=hashes.get("md5") or None,
        sha256=hashes.get("sha256") or None,
        dependencies=tuple(sorted(str(d) for d in dep.get("dependencies") or {})),
        optional=optional,
    )
    problem = entry_problem(pkg)
    if problem:
        raise ValueError(f"package {name!r} ({pkg.platform}): {problem}")
    return pkg


def stored_lock_options(lock_path: Path) -> tuple[str | None, dict[str, Any] | None]:
    """(input hash, stored plan options) from a lock, found without a YAML parser (fast no-op)."""
    from envtool.adapters.files import LOCK_FILE_LIMIT, read_text_or_none
    from envtool.core.lockfile import parse_lock_options, parse_lock_stamp

    text = read_text_or_none(lock_path, LOCK_FILE_LIMIT)
    if text is None:
        return None, None
    return parse_lock_stamp(text), parse_lock_options(text)
