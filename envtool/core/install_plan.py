"""An install as data: what `envtool install` will do, built from one read of the lock
(adapters/install/installer.plan_install), printed by `--dry-run`, and executed as it is by
adapters/install/installer.apply_install. Pure: no I/O; the adapter fills in what it saw on disk."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envtool.core.lockfile import LockedPackage

# where a conda package's files come from, as the plan saw the caches (apply checks each again:
# a cached copy that fails the lock's hash is fetched, one that is not there any more too)
FETCH = "fetch"  # downloaded (or copied from --channel / --from) and hash-checked as it streams
REUSE = "reuse"  # envtool's archive cache holds it: hash-checked, not downloaded
PACKAGE_CACHE = "package-cache"  # extracted in rattler's package cache: checked file by file
PIP = "pip"  # the pip part: uv, --require-hashes --no-deps


@dataclass(frozen=True)
class PlannedPackage:
    package: LockedPackage
    url: str  # the lock's URL, or the same file in --channel / a --from bundle's channel
    source: str  # FETCH | REUSE | PACKAGE_CACHE | PIP

    def row(self) -> dict[str, Any]:
        p = self.package
        return {
            "name": p.name,
            "version": p.version,
            "build": p.build or None,  # null: pip, or a build the lock does not name
            "manager": p.manager,
            "url": self.url,
            "cached": self.source == REUSE,
        }


@dataclass(frozen=True)
class InstallPlan:
    """Everything the apply step needs; nothing it looks up again (the lock is not re-read)."""

    prefix: str
    prefix_exists: bool
    install_state: str | None
    lock_path: str
    lock_sha256: str
    lock_metadata: dict[str, str]  # recorded in the env's state (its CUDA, driver floor, …)
    platform: str
    packages: tuple[PlannedPackage, ...]  # in the lock's order
    cache_dir: str  # envtool's archive cache is cache_dir/archives
    package_cache: str  # rattler's extracted packages (shared with pixi unless ENVTOOL_CACHE_DIR)
    offline: bool  # a bundle: a file missing from its channel is never downloaded
    host_check: str  # "ok", or "skipped (--force)"; a refusal never becomes a plan
    variant: dict[str, str] | None = field(default=None)  # the variant lock chosen, and why

    @property
    def conda(self) -> list[PlannedPackage]:
        return [p for p in self.packages if p.package.manager == "conda"]

    @property
    def pip(self) -> list[PlannedPackage]:
        return [p for p in self.packages if p.package.manager == "pip"]

    def file_names(self, source: str) -> list[str]:
        return [p.package.file_name for p in self.packages if p.source == source]

    def to_dict(self) -> dict[str, Any]:
        """The --dry-run --json payload: the rows `packages` (as before), and the plan's parts."""
        out: dict[str, Any] = {
            "prefix": self.prefix,
            "prefix_exists": self.prefix_exists,
            "install_state": self.install_state,
            "lock_path": self.lock_path,
            "lock_sha256": self.lock_sha256,
            "platform": self.platform,
            "packages": [p.row() for p in self.packages],
            "fetch": self.file_names(FETCH),
            "reuse": self.file_names(REUSE),
            "from_package_cache": self.file_names(PACKAGE_CACHE),
            "link": [p.package.file_name for p in self.conda],
            "pip": [p.package.file_name for p in self.pip],
            "offline": self.offline,
            "host_check": self.host_check,
        }
        if self.variant is not None:
            out["variant"] = self.variant
        return out

    def render(self) -> list[str]:
        """--dry-run's lines."""
        text = [
            f"would install {len(self.packages)} packages into {self.prefix} from {self.lock_path}"
        ]
        text += [
            f"  {p.package.name} {p.package.version} {p.package.build or ''} "
            f"({p.package.manager}{', cached' if p.source == REUSE else ''})"
            for p in self.packages
        ]
        return text


def plan_download(plan: InstallPlan, sizes: dict[str, int]) -> dict[str, Any]:
    """What the install downloads: the packages it fetches (conda archives not in any cache, and
    the pip wheels), their total bytes where `sizes` (file name → bytes, as an adapter learnt
    them) knows them, and how many it does not."""
    fetched = [p for p in plan.packages if p.source in (FETCH, PIP)]
    known = [sizes[p.package.file_name] for p in fetched if p.package.file_name in sizes]
    return {
        "packages": len(fetched),
        "bytes": sum(known),
        "unknown": len(fetched) - len(known),
        "cached": len(plan.packages) - len(fetched),
    }


def render_bytes(n: int) -> str:
    """1536 → '1.5 KB', decimal units as download tools show them."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def render_download(download: dict[str, Any]) -> str:
    """--dry-run's line: 'download: 1.2 GB in 140 packages (12 cached)'."""
    n, unknown, cached = download["packages"], download["unknown"], download["cached"]
    if n == 0:
        return f"download: nothing (all {cached} packages cached)"
    total = render_bytes(download["bytes"])
    if unknown == n:
        size = "size unknown"
    elif unknown:
        size = f"at least {total} ({unknown} of them of unknown size)"
    else:
        size = total
    return f"download: {size} in {n} package{'s' * (n != 1)}" + (
        f" ({cached} cached)" if cached else ""
    )
