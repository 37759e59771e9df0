"""The lockfile model, both ways: what envtool writes (solved packages, the input hash that makes
`envtool lock` a no-op when nothing changed, the plan recorded in `metadata.custom_metadata`, the
content digest) and a conda-lock.yml as read back (`Lock`, `LockedPackage`: the one model that
install, bundle, verify/drift and export share; every entry checked before it becomes a path).

Pure: the adapter (adapters/lockfile/lock_io.py) reads and writes the file (conda-lock's writer, envtool's
own v1 reader); nothing here imports conda-lock or touches the disk.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtool.errors import UsageError

if TYPE_CHECKING:  # an annotation only: importing core.plan costs every lock reader ~25 ms
    from envtool.core.plan import Plan

# custom_metadata keys envtool writes (conda-lock wants str -> str).
KEY_HASH = "envtool_input_hash"
KEY_REQUEST = "envtool_request"
# sha256 of the environment.yml text the lock was solved from: tells a file envtool wrote (and
# may replace) from one edited since (create must not discard the edits)
KEY_FILE = "envtool_request_file_sha256"
HASH_LINE = re.compile(r"^\s*" + KEY_HASH + r":\s*'?([0-9a-f]{64})'?\s*$", re.MULTILINE)
_FILE_LINE = re.compile(r"^\s*" + KEY_FILE + r":\s*'?([0-9a-f]{64})'?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class SolvedPackage:
    """One conda record of a solution (what rattler returned, in plain types)."""

    name: str
    version: str
    build: str
    platform: str
    url: str
    subdir: str = ""
    channel: str = ""
    md5: str | None = None
    sha256: str | None = None
    depends: tuple[str, ...] = ()


@dataclass(frozen=True)
class PipPackage:
    """One pip distribution resolved by `uv pip compile` for a platform."""

    name: str
    version: str
    platform: str
    url: str
    sha256: str | None
    dependencies: tuple[str, ...] = ()


@dataclass(frozen=True)
class LockContent:
    """What a conda-lock.yml (version 1) that envtool writes records: the solution per platform,
    the channels it came from, the input hash per platform, the plan (custom_metadata) and the
    files it was made from."""

    packages: dict[str, list[SolvedPackage]]
    pip_packages: dict[str, list[PipPackage]]
    channels: list[str]
    content_hash: dict[str, str]
    custom_metadata: dict[str, str]
    sources: list[str]


def compute_input_hash(
    environment_yml: str, options: dict[str, Any], channel_identity: list[str], version: str
) -> str:
    """sha256 over everything that can change a solve: the request file, the plan options, what the
    channels hold (local repodata size+mtime; remote channels by URL) and envtool's version."""
    payload = json.dumps(
        {
            "environment.yml": environment_yml,
            "options": options,
            "channels": channel_identity,
            "envtool": version,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def render_options(options: dict[str, Any]) -> str:
    """Compact JSON (no spaces, so YAML keeps it on one line and `parse_lock_options` finds it
    without a YAML parser)."""
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


# The lock's own content digest: sha256 of the file's bytes without the line that records it.
# The input hash says the *request* is unchanged; this says the *lock* is what envtool wrote (an
# edited url/sha256 is not "fresh"). An integrity check against edits, not a signature: whoever
# edits the file can recompute it.
KEY_DIGEST = "envtool_lock_sha256"
DIGEST_PLACEHOLDER = "x" * 64  # written first, replaced by the digest of the rendered file
_DIGEST_LINE = re.compile(rb"^[ \t]*" + KEY_DIGEST.encode() + rb":[^\n]*\n?", re.MULTILINE)
_DIGEST_VALUE = re.compile(
    rb"^[ \t]*" + KEY_DIGEST.encode() + rb":[ \t]*'?([0-9a-f]{64})'?[ \t]*\r?$", re.MULTILINE
)


def lock_content_digest(lock_bytes: bytes) -> str:
    """sha256 of a conda-lock.yml without its content-digest line (the first one)."""
    return hashlib.sha256(_DIGEST_LINE.sub(b"", lock_bytes, count=1)).hexdigest()


def with_content_digest(lock_bytes: bytes) -> bytes:
    """The rendered lock with DIGEST_PLACEHOLDER replaced by its content digest (quoted: a
    digest of digits only must stay a string)."""
    digest = lock_content_digest(lock_bytes)
    return lock_bytes.replace(DIGEST_PLACEHOLDER.encode(), f"'{digest}'".encode(), 1)


def content_digest_state(lock_bytes: bytes) -> str | None:
    """None when the lock is what envtool wrote; else why not ('no digest', 'edited')."""
    m = _DIGEST_VALUE.search(lock_bytes)
    if m is None:
        return "no digest"
    return None if m.group(1).decode() == lock_content_digest(lock_bytes) else "edited"


_REQUEST_LINE = re.compile(r"^\s*" + KEY_REQUEST + r":\s*'(.*)'\s*$", re.MULTILINE)


def parse_lock_options(lock_text: str) -> dict[str, Any] | None:
    """The plan options recorded in a conda-lock.yml (None when absent or unreadable)."""
    m = _REQUEST_LINE.search(lock_text)
    if not m:
        return None
    try:
        value = json.loads(m.group(1).replace("''", "'"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def request_file_sha256(environment_yml: str) -> str:
    return hashlib.sha256(environment_yml.encode("utf-8", "surrogateescape")).hexdigest()


def parse_lock_file_sha256(lock_text: str) -> str | None:
    """The sha256 of the environment.yml the lock was solved from (None: an older envtool's
    lock, or not envtool's), found without a YAML parser."""
    m = _FILE_LINE.search(lock_text)
    return m.group(1) if m else None


def parse_lock_stamp(lock_text: str) -> str | None:
    """The input hash recorded in a conda-lock.yml, found without a YAML parser (fast no-op path)."""
    m = HASH_LINE.search(lock_text)
    return m.group(1) if m else None


def plan_custom_metadata(
    plan: Plan,
    options: dict[str, Any],
    input_hash: str,
    envtool_version: str,
    solved_torch: str = "",
    request_file: str | None = None,
) -> dict[str, str]:
    """What envtool records about the plan inside the lock (all str, sorted by the writer).
    `envtool_cuda_arch` (the plan's `__cuda_arch`) only when the plan has one: a CPU plan or one
    made without GPUs records no GPU assumption."""
    arch = {"envtool_cuda_arch": plan.cuda_arch} if plan.cuda_arch else {}
    if request_file is not None:
        arch[KEY_FILE] = request_file_sha256(request_file)
    return {
        **arch,
        "envtool_version": envtool_version,
        "envtool_flavor": plan.flavor,
        "envtool_cuda": plan.cuda or "cpu",
        "envtool_min_driver": plan.min_driver or "",
        "envtool_gpu_archs": " ".join(_solved_archs(plan, solved_torch)),
        "envtool_torch": solved_torch or plan.torch or "",
        "envtool_platforms_cuda": " ".join(
            f"{p.platform}={p.cuda or 'cpu'}" for p in plan.platforms
        ),
        KEY_REQUEST: render_options(options),
        KEY_HASH: input_hash,
    }


def _solved_archs(plan: Plan, solved_torch: str) -> tuple[str, ...]:
    """The GPU architectures of the build the solve chose (its torch release's row); the plan's
    when the platforms solved different releases or no row knows the release."""
    from envtool.core.cuda import build_archs

    if not plan.cuda or not solved_torch or " " in solved_torch:
        return plan.archs
    return build_archs(plan.flavor, plan.cuda, solved_torch) or plan.archs


def split_dependency(spec: str) -> tuple[str, str]:
    """'python >=3.11,<3.12.0a0' -> ('python', '>=3.11,<3.12.0a0'); 'filelock' -> ('filelock', '*')."""
    name, _, rest = spec.strip().partition(" ")
    return name, rest.strip() or "*"


def dependency_map(depends: tuple[str, ...]) -> dict[str, str]:
    """conda-lock's `dependencies:` mapping; repeated names are joined with ','."""
    out: dict[str, str] = {}
    for dep in depends:
        name, spec = split_dependency(dep)
        out[name] = spec if name not in out else f"{out[name]},{spec}"
    return dict(sorted(out.items()))


def solved_torch(solved: dict[str, list[Any]]) -> str:
    """The pytorch version(s) the solve chose, e.g. '2.7.1' (or '2.7.1 linux-64, 2.7.0 win-64')."""
    found = {
        p: next((r.version for r in recs if r.name == "pytorch"), "") for p, recs in solved.items()
    }
    versions = sorted(set(found.values()))
    if len(versions) == 1:
        return versions[0]
    return ", ".join(f"{v} {p}" for p, v in sorted(found.items()))


# --- the lock as read back (adapters/lockfile/lock_io.read_lock fills it) ---
ARCHIVE_SUFFIXES = (".conda", ".tar.bz2")


PIP_SUFFIXES = (".whl", ".tar.gz", ".zip")  # wheels, and the sdists uv may lock
_HEX = re.compile(r"[0-9a-fA-F]+")
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")  # controls and whitespace: never in a field
# Package names as conda and PEP 508 spell them; they become requirement lines and export text.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_SUBDIR = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def file_name_of(url: str) -> str:
    """'https://…/linux-64/x-1.0-h0_0.conda#md5' -> 'x-1.0-h0_0.conda' (percent-decoded)."""
    return urllib.parse.unquote(url.rsplit("/", 1)[-1].split("#", 1)[0])


def archive_name_problem(file_name: str, manager: str = "conda") -> str | None:
    """Why `file_name` (already percent-decoded) cannot name a file in envtool's archive cache,
    or None: it must be one plain file name — it is joined to the cache dir and a bundle's
    channel dir, and a lock can come from anyone (`..%2F..%2Fx.conda` decodes to a path)."""
    suffixes = ARCHIVE_SUFFIXES if manager == "conda" else PIP_SUFFIXES
    if not file_name or file_name in (".", ".."):
        return "no file name"
    if "/" in file_name or "\\" in file_name or ".." in file_name:
        return f"archive file name {file_name!r} is a path, not a file name"
    if _CONTROL.search(file_name) or "%" in file_name:  # '%' left after decoding: double-encoded
        return f"archive file name {file_name!r} holds control, space or '%' characters"
    if "?" in file_name or "#" in file_name:  # a query or fragment: the name is not the file's
        return f"archive file name {file_name!r} holds '?' or '#'"
    if file_name.startswith(".") or len(file_name.encode("utf-8", "surrogateescape")) > 255:
        return f"archive file name {file_name!r} is not a plain file name"
    if not file_name.endswith(suffixes) or file_name in suffixes:
        return f"archive file name {file_name!r} does not end in {' or '.join(suffixes)}"
    return None


def entry_problem(pkg: LockedPackage) -> str | None:
    """Why a lock entry cannot be trusted to become paths, requirement lines or export text, or
    None. Every field envtool writes anywhere is checked here, once, when the lock is read."""
    if not _NAME.fullmatch(pkg.name):
        return f"package name {pkg.name!r} is not a package name"
    if not _SUBDIR.fullmatch(pkg.platform):
        return f"platform {pkg.platform!r} is not a platform name"
    for label, value in (("version", pkg.version), ("build", pkg.build), ("url", pkg.url)):
        if _CONTROL.search(value):
            return f"{label} {value!r} holds control or space characters"
    if pkg.version == "" or pkg.url == "":
        return "no version or no url"
    if "$" in pkg.url:
        # uv and pip expand ${VAR} in requirement URLs: a lock could send the user's secrets
        # (GITHUB_TOKEN, AWS keys) to its server before any hash is checked
        return f"url {pkg.url!r} holds '$' (an environment-variable reference)"
    for label, value in (("version", pkg.version), ("build", pkg.build)):
        # both name folders (rattler's cache entry `name-version-build`): never a path
        if "/" in value or "\\" in value or ".." in value:
            return f"{label} {value!r} is a path"
    for label, value, size in (("sha256", pkg.sha256, 64), ("md5", pkg.md5, 32)):
        if value is not None and (len(value) != size or not _HEX.fullmatch(value)):
            return f"{label} {value!r} is not {size} hex digits"
    problem = archive_name_problem(file_name_of(pkg.url), pkg.manager)
    if problem:
        return problem
    if pkg.url.lower().startswith("file:") and ("?" in pkg.url or "#" in pkg.url):
        # file:///dev/zero?/x-1.0-h0_0.conda names x-1.0-h0_0.conda but opens /dev/zero
        return f"url {pkg.url!r} is a file:// URL with a query or fragment"
    if pkg.manager == "conda" and not _SUBDIR.fullmatch(pkg.subdir):
        return f"subdir {pkg.subdir!r} (from the url) is not a platform name"
    return None


def platform_problem(platform: str) -> str | None:
    """Why a lock's platform name cannot be used (it names folders and export lines), or None."""
    return None if _SUBDIR.fullmatch(platform) else f"platform {platform!r} is not a platform name"


def parse_build_from_file_name(file_name: str, name: str, version: str) -> str | None:
    """'pytorch-2.7.1-cuda126_mkl_py311_h30b5a27_300.conda' -> 'cuda126_mkl_py311_h30b5a27_300'.

    The head is `name-version-` (so a build string holding '-' survives); a file name that does
    not start with it falls back to the part after the last '-'; not a conda archive -> None."""
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


@dataclass(frozen=True)
class LockedPackage:
    """One package entry of a conda-lock file, in plain types (one per manager+name+platform)."""

    name: str
    version: str
    manager: str  # "conda" | "pip"
    platform: str
    url: str
    build: str = ""  # conda: the lock's build, else parsed from the file name; "" = none/unknown
    md5: str | None = None
    sha256: str | None = None
    dependencies: tuple[str, ...] = ()  # names only, sorted (their order means nothing)
    # only in dev/extra categories: `conda-lock install` leaves it out by default, export keeps it
    optional: bool = False

    @cached_property  # asked ~20 times a package by an install: decoded and checked once
    def file_name(self) -> str:
        """The archive's plain file name (read_lock refused every entry for which it is not)."""
        name = file_name_of(self.url)
        problem = archive_name_problem(name, self.manager)
        if problem:  # defence in depth: a model built without read_lock
            raise UsageError(f"package {self.name}: {problem}", "fix or regenerate the lock")
        return name

    @property
    def subdir(self) -> str:
        parts = self.url.split("#", 1)[0].rstrip("/").split("/")
        return parts[-2] if len(parts) >= 2 else self.platform


@dataclass
class Lock:
    """A whole conda-lock file: packages in file order, every category."""

    packages: list[LockedPackage]
    platforms: list[str]
    channels: list[str]
    sources: list[str] = field(default_factory=list)
    content_hash: dict[str, str] = field(default_factory=dict)
    custom_metadata: dict[str, str] = field(default_factory=dict)
    path: Path | None = None  # where it was read from, and the sha256 of those bytes
    sha256: str = ""

    def for_platform(self, platform: str) -> list[LockedPackage]:
        """What gets installed for the platform: optional (dev/extra) entries left out."""
        return [p for p in self.packages if p.platform == platform and not p.optional]

    def conda(self, platform: str) -> dict[str, LockedPackage]:
        """Every conda package of the platform by name, optional ones too (as conda-lock's
        parser returns them: export and render see the whole lock)."""
        return {p.name: p for p in self.packages if p.manager == "conda" and p.platform == platform}

    def pip(self, platform: str) -> dict[str, LockedPackage]:
        return {p.name: p for p in self.packages if p.manager == "pip" and p.platform == platform}

    def require_platform(self, platform: str, hint: str) -> None:
        """Refuse a platform the lock holds no solution for (instead of doing nothing for it)."""
        if platform not in self.platforms:
            raise UsageError(
                f"{self.path}: the lock has no {platform} solution "
                f"(it has {', '.join(self.platforms)})",
                hint,
            )

    def hashed_for_platform(self, platform: str) -> list[LockedPackage]:
        """for_platform, refusing a lock entry with no hash: envtool verifies every file against
        the lock before linking, and an entry without one cannot be verified."""
        pkgs = self.for_platform(platform)
        missing = [p.name for p in pkgs if not p.sha256 and not p.md5]
        if missing:
            raise UsageError(
                f"{self.path}: {len(missing)} {platform} package(s) have no hash "
                f"({some_names(missing)})",
                "envtool installs only hash-pinned files: re-lock with `envtool lock NAME`",
            )
        return pkgs


def some_names(names: list[str], limit: int = 3) -> str:
    """'a, b, c and 4 more': a list of package names in an error line, cut."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def toposorted(packages: list[LockedPackage]) -> list[LockedPackage]:
    """The order conda-lock's parser gives (Lockfile.toposort_inplace): per platform (sorted),
    conda packages then pip packages, each topologically by dependency names."""
    out: list[LockedPackage] = []
    for platform in sorted({p.platform for p in packages}):
        for manager in ("conda", "pip"):
            pkgs = {p.name: p for p in packages if p.platform == platform and p.manager == manager}
            order = _toposort_names({n: set(p.dependencies) for n, p in pkgs.items()})
            out += [pkgs[n] for n in order if n in pkgs]
    return out


def _toposort_names(graph: dict[str, set[str]]) -> list[str]:
    """conda's toposort (safe mode): layers of ready names, each sorted; on a cycle the name with
    the fewest open dependencies (then the first by name) goes next. pip -> python is dropped so
    python comes before pip.

    Kahn's algorithm by layers: each name counts its open dependencies and knows its dependents,
    so a layer costs what it touches (conda's loop rescans every name per layer: quadratic in a
    dependency chain, 10k packages took 15 s, 50k over 300 s)."""
    data = {k: set(v) - {k} for k, v in graph.items()}
    if "python" in data:
        data["python"].discard("pip")
    for extra in set().union(*data.values()) - set(data):
        data[extra] = set()  # a dependency outside the graph (virtual, other manager)
    dependents: dict[str, list[str]] = {k: [] for k in data}
    for name, deps in data.items():
        for dep in deps:
            dependents[dep].append(name)
    open_deps = {k: len(v) for k, v in data.items()}
    done: set[str] = set()
    order: list[str] = []
    ready = sorted(k for k, n in open_deps.items() if n == 0)
    while len(done) < len(data):
        if not ready:  # a cycle: break it where conda does
            ready = [min((k for k in data if k not in done), key=lambda k: (open_deps[k], k))]
        order += ready
        done.update(ready)
        following: list[str] = []
        for name in ready:
            for dependent in dependents[name]:
                if dependent not in done:
                    open_deps[dependent] -= 1
                    if open_deps[dependent] == 0:
                        following.append(dependent)
        ready = sorted(following)
    return order
