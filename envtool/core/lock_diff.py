"""What a re-lock changed: two lock models in, the packages added, removed, upgraded, downgraded
or rebuilt per platform out, CUDA build changes called out. Pure.

The one diff every re-lock prints (lock, lock --variants, add, drop, update) and carries in
--json; `render_lock_diff` is the one place it becomes text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from envtool.core.lockfile import Lock, LockedPackage, PipPackage, SolvedPackage

KINDS = ("added", "removed", "upgraded", "downgraded", "rebuilt")
_ARROW = "→"
# the build tag that names what a package was built for: conda-forge `cuda126_mkl_…`,
# `cpu_mkl_…`; the legacy pytorch channel `py3.11_cuda12.1_cudnn8.9.2_0`
_BUILD_TAG = re.compile(r"(?:^|_)(cuda\d*(?:\.\d+)?|cpu)(?=_|$)")
# a re-lock that moved more packages than this lists the CUDA changes and counts per platform
# (--json carries every change)
MAX_LISTED = 60


@dataclass(frozen=True)
class PackageChange:
    platform: str
    manager: str  # conda | pip
    name: str
    kind: str  # one of KINDS
    old_version: str | None = None
    old_build: str = ""
    new_version: str | None = None
    new_build: str = ""

    @property
    def old_tag(self) -> str | None:
        return build_tag(self.old_build)

    @property
    def new_tag(self) -> str | None:
        return build_tag(self.new_build)

    @property
    def cuda_change(self) -> bool:
        """The package moved to another CUDA build (cuda126 → cuda129, cpu → cuda129); a tag that
        only appears or goes (pyarrow's `_cpu`) without a CUDA one is not a CUDA change."""
        if self.kind in ("added", "removed") or self.old_tag == self.new_tag:
            return False
        return any(t and t.startswith("cuda") for t in (self.old_tag, self.new_tag))

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "manager": self.manager,
            "name": self.name,
            "kind": self.kind,
            "old": None
            if self.old_version is None
            else {"version": self.old_version, "build": self.old_build, "tag": self.old_tag},
            "new": None
            if self.new_version is None
            else {"version": self.new_version, "build": self.new_build, "tag": self.new_tag},
            "cuda_change": self.cuda_change,
        }


@dataclass(frozen=True)
class LockDiff:
    changes: tuple[PackageChange, ...]
    first_lock: bool = False  # there was no lock before: everything is "added"

    def count(self, kind: str) -> int:
        return sum(1 for c in self.changes if c.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_lock": self.first_lock,
            "counts": {k: self.count(k) for k in KINDS},
            "cuda_changes": [c.to_dict() for c in self.changes if c.cuda_change],
            "changes": [c.to_dict() for c in self.changes],
        }


def build_tag(build: str) -> str | None:
    """'cuda126_mkl_py312_h…_300' -> 'cuda126'; 'py3.11_cuda12.1_cudnn8.9.2_0' -> 'cuda12.1';
    'cpu_mkl_…' -> 'cpu'; a build that names neither -> None."""
    m = _BUILD_TAG.search(build)
    return m.group(1) if m else None


def _compare(old: str, new: str) -> int:
    """-1, 0, 1 as conda orders the versions (rattler's Version); text order for what is no
    version (a pip version conda cannot read)."""
    from rattler import Version

    try:
        a, b = Version(old), Version(new)
    except Exception:  # rattler's InvalidVersionError: compare the text
        return (old > new) - (old < new)
    return (a > b) - (a < b)


def _by_key(lock: Lock | None) -> dict[tuple[str, str, str], LockedPackage]:
    if lock is None:
        return {}
    return {(p.platform, p.manager, p.name): p for p in lock.packages}


def diff_locks(old: Lock | None, new: Lock) -> LockDiff:
    """Every package whose version or build differs between `old` and `new`, per platform (a
    platform only one lock holds counts as all added, or all removed); sorted by platform,
    then name. `old` None: the first lock, everything added."""
    before, after = _by_key(old), _by_key(new)
    changes: list[PackageChange] = []
    for key in sorted(set(before) | set(after)):
        platform, manager, name = key
        a, b = before.get(key), after.get(key)
        if a is None and b is not None:
            changes.append(
                PackageChange(platform, manager, name, "added", None, "", b.version, b.build)
            )
        elif b is None and a is not None:
            changes.append(PackageChange(platform, manager, name, "removed", a.version, a.build))
        elif a is not None and b is not None and (a.version, a.build) != (b.version, b.build):
            order = _compare(a.version, b.version)
            kind = "upgraded" if order < 0 else "downgraded" if order > 0 else "rebuilt"
            changes.append(
                PackageChange(platform, manager, name, kind, a.version, a.build, b.version, b.build)
            )
    return LockDiff(tuple(changes), first_lock=old is None)


def _label(version: str | None, build: str) -> str:
    tag = build_tag(build)
    return f"{version} {tag}" if tag else str(version)


def render_change(c: PackageChange) -> str:
    """'pytorch 2.7.1 cuda126 → 2.8.0 cuda129'; an added or removed package with its version."""
    if c.kind == "added":
        return f"+ {c.name} {_label(c.new_version, c.new_build)}"
    if c.kind == "removed":
        return f"- {c.name} {_label(c.old_version, c.old_build)}"
    old, new = _label(c.old_version, c.old_build), _label(c.new_version, c.new_build)
    if c.kind == "rebuilt" and old == new:  # same version and tag: show the builds
        old, new = f"{c.old_version} {c.old_build}", f"{c.new_version} {c.new_build}"
    mark = {"upgraded": "↑", "downgraded": "↓", "rebuilt": "~"}[c.kind]
    return f"{mark} {c.name} {old} {_ARROW} {new}"


def render_lock_diff(diff: LockDiff, label: str = "") -> list[str]:
    """The diff as text: one summary line, CUDA build changes called out first, then every
    change per platform. `label`: what was re-locked (a variant's name) for the summary line."""
    head = f"{label}: " if label else ""
    if not diff.changes:
        return [f"{head}lock diff: no package changed"]
    if diff.first_lock:
        platforms = sorted({c.platform for c in diff.changes})
        return [
            f"{head}lock diff: first lock, {len(diff.changes)} packages ({', '.join(platforms)})"
        ]
    counts = ", ".join(f"{diff.count(k)} {k}" for k in KINDS if diff.count(k))
    lines = [f"{head}lock diff: {counts}"]
    for c in diff.changes:
        if c.cuda_change:
            lines.append(f"  CUDA build changed ({c.platform}): {render_change(c)[2:]}")
    if len(diff.changes) > MAX_LISTED:
        for platform in sorted({c.platform for c in diff.changes}):
            here = [c for c in diff.changes if c.platform == platform]
            kinds = ", ".join(
                f"{n} {k}" for k in KINDS if (n := sum(1 for c in here if c.kind == k))
            )
            lines.append(f"  {platform}: {kinds}")
        lines.append(f"  ({len(diff.changes)} changes: --json lists every one)")
        return lines
    platform = None
    for c in diff.changes:
        if c.platform != platform:
            platform = c.platform
            lines.append(f"  {platform}:")
        lines.append(f"    {render_change(c)}" + (" (pip)" if c.manager == "pip" else ""))
    return lines


def solution_as_lock(
    solved: dict[str, list[SolvedPackage]], pip: dict[str, list[PipPackage]] | None = None
) -> Lock:
    """A solve's answer as the lock model it will be written as (what --dry-run diffs against
    the lock on disk, before anything is written)."""
    packages = [
        LockedPackage(p.name, p.version, "conda", platform, p.url, p.build, p.md5, p.sha256)
        for platform, records in solved.items()
        for p in records
    ]
    packages += [
        LockedPackage(p.name, p.version, "pip", platform, p.url, "", None, p.sha256)
        for platform, entries in (pip or {}).items()
        for p in entries
    ]
    return Lock(packages=packages, platforms=sorted(solved), channels=[])
