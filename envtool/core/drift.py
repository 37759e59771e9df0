"""Drift: what an installed environment holds vs what its lock says. Pure: plain records in, plan out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envtool.core.spec import normalize_pip_name


@dataclass(frozen=True)
class PackageId:
    """One package as installed or locked. `build` is None for pip packages."""

    name: str
    version: str
    manager: str  # conda | pip
    build: str | None = None

    def label(self) -> str:
        return f"{self.version} {self.build}" if self.build else self.version


def normalize_name(name: str, manager: str) -> str:
    """pip names compare PEP 503-normalized (Foo_Bar == foo-bar); conda names are lower-case already."""
    return normalize_pip_name(name) if manager == "pip" else name.lower()


def diff_packages(installed: list[PackageId], locked: list[PackageId]) -> dict[str, Any]:
    """missing: locked, not installed · extra: installed, not locked · changed: other version/build.

    A package counts per manager, so a pip copy of a conda package shows up as extra: that is
    exactly the shadowing users need to hear about.
    """

    def key(p: PackageId) -> tuple[str, str]:
        return (p.manager, normalize_name(p.name, p.manager))

    have = {key(p): p for p in installed}
    want = {key(p): p for p in locked}
    missing = [
        {"name": w.name, "manager": w.manager, "locked": w.label()}
        for k, w in sorted(want.items())
        if k not in have
    ]
    extra = [
        {"name": h.name, "manager": h.manager, "installed": h.label()}
        for k, h in sorted(have.items())
        if k not in want
    ]
    changed = []
    for k, w in sorted(want.items()):
        h = have.get(k)
        if h is None:
            continue
        same_build = w.build is None or h.build is None or w.build == h.build
        if _same_version(h.version, w.version, w.manager) and same_build:
            continue
        changed.append(
            {"name": w.name, "manager": w.manager, "locked": w.label(), "installed": h.label()}
        )
    return {
        "clean": not (missing or extra or changed),
        "missing": missing,
        "extra": extra,
        "changed": changed,
    }


def _same_version(a: str, b: str, manager: str) -> bool:
    if manager == "pip":  # "2.3.1+cu121" vs "2.3.1+CU121": local labels compare case-insensitively
        return a.strip().lower() == b.strip().lower()
    return a.strip() == b.strip()


def render_drift(drift: dict[str, Any]) -> list[str]:
    """Human lines for `envtool verify`."""
    if drift["clean"]:
        return ["clean: the installed packages match the lock"]
    lines = []
    for row in drift["missing"]:
        lines.append(f"missing  {row['name']} {row['locked']} ({row['manager']})")
    for row in drift["changed"]:
        lines.append(
            f"changed  {row['name']}: locked {row['locked']}, installed {row['installed']} ({row['manager']})"
        )
    for row in drift["extra"]:
        lines.append(f"extra    {row['name']} {row['installed']} ({row['manager']})")
    for row in drift.get("damaged", []):
        n = row["missing_files"]
        lines.append(
            f"damaged  {row['name']}: {n} file{'s' if n > 1 else ''} gone (first: {row['first']})"
        )
    return lines
