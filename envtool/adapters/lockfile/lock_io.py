"""conda-lock.yml on disk: written (version 1) as conda-lock's writer writes it
(core/lock_render.py, held to conda-lock byte for byte in tests), atomically; read back into
envtool's lock model (core/lockfile.py) by `read_lock`, the one reader.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

from envtool.adapters.files import write_atomic
from envtool.core.credentials import redact_credentials
from envtool.core.lockfile import (
    DIGEST_PLACEHOLDER,
    KEY_DIGEST,
    Lock,
    LockContent,
    LockedPackage,
    entry_problem,
    file_name_of,
    parse_build_from_file_name,
    platform_problem,
    with_content_digest,
)
from envtool.errors import UsageError


def write_lock(path: Path, content: LockContent) -> None:
    """Render and atomically write conda-lock.yml. Deterministic: no time or git metadata."""
    from envtool.core.lock_render import render_lock_v1  # PyYAML: not on the no-op path

    metadata = {**content.custom_metadata, KEY_DIGEST: DIGEST_PLACEHOLDER}
    text = render_lock_v1(path.name, dataclasses.replace(content, custom_metadata=metadata))
    # the lock's own content digest (lock --check: an edited url/sha256 is not fresh), written
    # whole or not at all like every file envtool writes (fsync, then rename); never a URL's
    # credentials: a lock is committed and shared (core/credentials)
    text = redact_credentials(text, strip=True)
    write_atomic(path, with_content_digest(text.encode()))


def load_yaml(data: Any) -> Any:
    """YAML of envtool's own writer with libyaml's safe loader (tests compare written locks);
    a lock from outside is read by read_lock, strictly (safe_load.parse_yaml)."""
    import yaml

    return yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def read_lock(lock_path: Path | str, follow_symlinks: bool = True) -> Lock:
    """Read a conda-lock.yml (version 1 or 2) into envtool's lock model, without conda-lock
    (importing it costs ~1.5 s per command; tests check both agree). The one reader of
    install, bundle, verify/drift and export; tests check it agrees with conda-lock's parser.
    `follow_symlinks=False` (a bundle's lock): a symbolic link there is refused, not followed."""
    lock_path = Path(lock_path)
    from envtool.adapters.lockfile.pixi_lock import read_pixi_lock, split_pixi_ref

    if (pixi := split_pixi_ref(lock_path)) is not None:  # an env installed from a pixi.lock
        return read_pixi_lock(pixi[0]).as_lock(pixi[1])
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
    except Exception as exc:  # missing keys, wrong types: "not a usable lock"
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
    return _lock_meta(content["metadata"], packages)


def _lock_meta(meta: dict[str, Any], packages: list[LockedPackage]) -> Lock:
    """The metadata both versions share, around their packages."""
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
    """conda-lock v2: one entry per package with its `categories`; optional unless in `main`."""
    packages = []
    for dep in content["package"]:
        categories = dep.get("categories") or []
        if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
            raise ValueError(f"package {dep['name']!r}: categories is not a list of names")
        packages.append(_locked_package(dep, "main" not in categories))
    return _lock_meta(content["metadata"], packages)


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
