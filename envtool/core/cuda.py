"""CUDA knowledge: driver floors, torch builds and GPU architectures, as pure functions over cuda_data.json.

No I/O beyond reading the packaged data file once. Every number comes from a cited row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from envtool.core.versions import major_minor, parse_version


@dataclass(frozen=True)
class CudaData:
    min_driver: dict[str, str]
    compat_floor: dict[int, str]
    torch_cuda: dict[str, tuple[str, ...]]
    pypi_default_cuda: dict[str, str]  # torch X.Y -> CUDA of PyPI's linux-64 wheel
    cuda_archs: tuple[ArchRow, ...]  # PyTorch's official builds, per CUDA, torch range, platform
    conda_forge_archs: tuple[ArchRow, ...]  # conda-forge's own builds, per CUDA and torch range
    conda_forge_builds: tuple[PublishedLine, ...]  # the CUDA lines conda-forge built pytorch for
    conda_forge_newest: str  # the newest torch release the conda-forge rows were checked against
    pytorch_channel_last: str
    sources: dict[str, str]
    gpu_arch: dict[str, GpuArchRow]  # "sm_90" -> its driver floor and last CUDA major
    gpu_products: tuple[tuple[str, str, str], ...]  # (product, arch, driver floor)


@dataclass(frozen=True)
class ArchRow:
    """One flavor-specific arch row: the TORCH_CUDA_ARCH_LIST a build script sets for these CUDA
    versions, for torch releases from `torch_min` to `torch_max` (inclusive; None: open)."""

    cuda: tuple[str, ...]
    torch_min: str | None
    torch_max: str | None
    arch_list: str  # the build script's text, e.g. "5.0;6.0;...;9.0+PTX"
    archs: tuple[str, ...]  # parsed: sm_XY machine code, compute_XY PTX
    platform: str | None = None  # linux-64 | linux-aarch64 (None: every platform)


@dataclass(frozen=True)
class PublishedLine:
    """A CUDA line a channel built torch for, for torch releases torch_min..torch_max."""

    cuda: str
    torch_min: str | None
    torch_max: str | None
    platforms: tuple[str, ...]


@dataclass(frozen=True)
class GpuArchRow:
    arch: str
    family: str
    driver: str | None  # oldest driver that knows this architecture (None: older than the table)
    last_cuda_major: int | None  # the last CUDA major that supports it (None: still supported)
    last_branch: int | None = None  # the newest driver branch that drives it (None: all so far)


@lru_cache(maxsize=1)
def load_cuda_data() -> CudaData:
    raw = json.loads(resources.files("envtool.core").joinpath("cuda_data.json").read_text())
    return CudaData(
        min_driver={r["cuda"]: r["driver"] for r in raw["min_driver"]},
        compat_floor={int(r["major"]): r["driver"] for r in raw["minor_compat_floor"]},
        torch_cuda={r["torch"]: tuple(r["cuda"]) for r in raw["torch_cuda"]},
        pypi_default_cuda={r["torch"]: r["cuda"] for r in raw["pypi_default_cuda"]},
        cuda_archs=tuple(_arch_row(r) for r in raw["cuda_archs"]),
        conda_forge_archs=tuple(_arch_row(r) for r in raw["cuda_archs_conda_forge"]),
        conda_forge_builds=tuple(
            PublishedLine(r["cuda"], r["torch_min"], r["torch_max"], tuple(r["platforms"]))
            for r in raw["conda_forge_cuda_builds"]
        ),
        conda_forge_newest=raw["conda_forge_newest_known"]["torch"],
        pytorch_channel_last=raw["pytorch_channel_last"]["torch"],
        sources=raw["sources"],
        gpu_arch={
            r["arch"]: GpuArchRow(
                r["arch"], r["family"], r["driver"], r["last_cuda_major"], r.get("last_branch")
            )
            for r in raw["gpu_arch"]
        },
        gpu_products=tuple(
            (r["product"], r["arch"], r["driver"]) for r in raw["gpu_product_driver"]
        ),
    )


def _arch_row(r: dict) -> ArchRow:
    return ArchRow(
        tuple(r["cuda"]),
        r["torch_min"],
        r["torch_max"],
        r["arch_list"],
        parse_arch_list(r["arch_list"]),
        r.get("platform"),
    )


def known_cuda_versions() -> list[str]:
    return sorted(load_cuda_data().min_driver, key=parse_version)


def min_driver(cuda: str) -> str | None:
    """Minimum Linux driver that runs CUDA `cuda` natively (GA toolkit driver). None if unknown."""
    return load_cuda_data().min_driver.get(major_minor(cuda))


def compat_floor(cuda: str) -> str | None:
    """Minimum driver for minor-version compatibility within CUDA `cuda`'s major (11.x and later)."""
    return load_cuda_data().compat_floor.get(parse_version(cuda)[0])


def driver_release(driver: str) -> str:
    """The driver version a comparison uses. A bare branch ("535", as `--driver 535` gives it)
    means that branch's first production release in NVIDIA's toolkit table (535 -> 535.54.03,
    580 -> 580.65.06): every release of a branch runs the same CUDA, and none is older than the
    first. A branch the table has no row for stays as given (565: above every R560 floor, below
    every R570 one). Anything else is returned unchanged."""
    text = driver.strip()
    if not text.isdigit():
        return text
    firsts = [d for d in load_cuda_data().min_driver.values() if parse_version(d)[0] == int(text)]
    return min(firsts, key=parse_version) if firsts else text


def driver_branch(driver: str) -> int:
    """'535.54.03' -> 535 (NVIDIA's branch: the major of the driver version)."""
    return parse_version(driver)[0]


def driver_at_least(driver: str, floor: str) -> bool:
    return parse_version(driver_release(driver)) >= parse_version(floor)


def newest_cuda_native(driver: str) -> str | None:
    """Newest CUDA toolkit whose GA driver floor this driver meets (e.g. 470.182.03 -> 11.4)."""
    best = None
    for cuda in known_cuda_versions():
        if driver_at_least(driver, load_cuda_data().min_driver[cuda]):
            best = cuda
    return best


def newest_cuda_compat(driver: str) -> str | None:
    """Newest CUDA reachable with minor-version compatibility: the newest known X.Y whose major's
    compatibility floor this driver meets (e.g. 470 -> 11.8, 525.60.13 -> 12.9)."""
    best = newest_cuda_native(driver)
    for cuda in known_cuda_versions():
        floor = compat_floor(cuda)
        if (
            floor
            and driver_at_least(driver, floor)
            and (best is None or parse_version(cuda) > parse_version(best))
        ):
            best = cuda
    return best


@dataclass(frozen=True)
class DriverVerdict:
    """Can driver D run CUDA C? `native` (full support), `compat` (minor-version compatibility:
    works, but PTX JIT of newer code fails), or `no`."""

    mode: str  # "native" | "compat" | "no" | "unknown"
    cuda: str
    driver: str
    min_driver: str | None
    compat_floor: str | None


def driver_supports(driver: str, cuda: str) -> DriverVerdict:
    cuda = major_minor(cuda)
    floor = min_driver(cuda)
    cfloor = compat_floor(cuda)
    if floor is None:
        return DriverVerdict("unknown", cuda, driver, None, cfloor)
    if driver_at_least(driver, floor):
        mode = "native"
    elif cfloor and driver_at_least(driver, cfloor):
        mode = "compat"
    else:
        mode = "no"
    return DriverVerdict(mode, cuda, driver, floor, cfloor)


def torch_series(torch_version: str) -> str:
    """'2.3.1+cu121' -> '2.3'."""
    return major_minor(torch_version)


def official_cuda_builds(torch_version: str) -> tuple[str, ...] | None:
    """CUDA versions PyTorch built official binaries for, for this torch release (None: not in table)."""
    return load_cuda_data().torch_cuda.get(torch_series(torch_version))


def official_torch_for_cuda(cuda: str) -> list[str]:
    """Torch series that have an official build for CUDA `cuda`, oldest first."""
    cuda = major_minor(cuda)
    data = load_cuda_data().torch_cuda
    return sorted((t for t, cs in data.items() if cuda in cs), key=parse_version)


def pypi_default_cuda(torch_version: str) -> str | None:
    """CUDA of the linux-64 wheel a plain `pip install torch==X.Y.*` (no index) fetches from PyPI
    (None: release not in the table)."""
    return load_cuda_data().pypi_default_cuda.get(torch_series(torch_version))


def pypi_default_series() -> list[str]:
    """Torch series whose PyPI default CUDA is known, oldest first."""
    return sorted(load_cuda_data().pypi_default_cuda, key=parse_version)


def pytorch_channel_has(torch_version: str) -> bool:
    """Was this torch release published on the legacy `-c pytorch` conda channel?"""
    return parse_version(torch_series(torch_version)) <= parse_version(
        load_cuda_data().pytorch_channel_last
    )


def build_archs(
    flavor: str, cuda: str, torch: str | None = None, platform: str = "linux-64"
) -> tuple[str, ...] | None:
    """The one answer to "which GPU architectures does the torch build of flavor F, torch T, CUDA C
    on platform P carry": sm_XY (machine code) and compute_XY (PTX) names; None when no row knows
    that build.

    conda-forge builds its own arch lists (pytorch-cpu-feedstock recipe/build.sh: table
    cuda_archs_conda_forge, rows per CUDA and torch range); every other flavor (the pytorch
    channel, PyPI and download.pytorch.org wheels) is PyTorch's official build (cuda_archs, rows
    per CUDA, torch range and platform: the aarch64 wheels carry fewer). `torch` ('2.7.1', or a
    series '2.7'): the release; None: the newest release a row covers (what a solve without
    --torch picks). win-64 wheels carry the linux-64 list.
    """
    data = load_cuda_data()
    cuda = major_minor(cuda)
    table = data.conda_forge_archs if flavor == "conda-forge" else data.cuda_archs
    plat = "linux-64" if platform == "win-64" else platform
    rows = [r for r in table if cuda in r.cuda and r.platform in (None, plat)]
    if torch is not None:
        rows = [r for r in rows if _torch_in_range(torch, r.torch_min, r.torch_max)]
    if not rows:
        return None
    return max(rows, key=lambda r: parse_version(r.torch_min or "0")).archs


def arch_table_cudas(flavor: str) -> list[str]:
    """The CUDA versions `flavor`'s arch table has rows for, oldest first."""
    data = load_cuda_data()
    table = data.conda_forge_archs if flavor == "conda-forge" else data.cuda_archs
    return sorted({c for r in table for c in r.cuda}, key=parse_version)


def published_lines(flavor: str, platform: str = "linux-64") -> list[tuple[str, str]]:
    """(torch series, CUDA) pairs the flavor's channel published builds for on `platform`, oldest
    first: PyTorch's release matrix (the legacy pytorch channel: up to its last release; wheels:
    every release; aarch64 wheels only where an aarch64 arch row exists), or conda-forge's own
    lines (up to the newest release those rows were checked against). What a suggestion falls
    back on when the channel's repodata was not read."""
    data = load_cuda_data()
    series = sorted(data.torch_cuda, key=parse_version)
    out: list[tuple[str, str]] = []
    if flavor == "conda-forge":
        newest = parse_version(data.conda_forge_newest)
        for t in series:
            for line in data.conda_forge_builds:
                if (
                    parse_version(t) <= newest
                    and platform in line.platforms
                    and _torch_in_range(t, line.torch_min, line.torch_max)
                ):
                    out.append((t, line.cuda))
        return out
    last = parse_version(data.pytorch_channel_last)
    for t in series:
        if flavor == "pytorch" and parse_version(t) > last:
            continue
        for c in data.torch_cuda[t]:
            if platform in ("linux-64", "win-64") or build_archs(flavor, c, t, platform):
                out.append((t, c))
    return out


def last_torch_for_gpu(
    capability: str | tuple[int, int], flavor: str, platform: str = "linux-64"
) -> tuple[str, str] | None:
    """(torch series, CUDA) of the newest published build whose arch list covers this GPU (machine
    code or PTX): the last torch that runs on it from that channel. None: no row covers it."""
    found = []
    for t, c in published_lines(flavor, platform):
        archs = build_archs(flavor, c, t, platform)
        try:
            if archs and arch_covered(capability, archs):
                found.append((t, c))
        except ValueError:
            return None
    return max(found, key=lambda p: (parse_version(p[0]), parse_version(p[1])), default=None)


def _torch_in_range(torch: str, low: str | None, high: str | None) -> bool:
    """Is torch release `torch` within [low, high]? Compared to the shorter of the two: a bound
    'X.Y' spans the whole series, and a series 'X.Y' asked matches any of its releases."""
    try:
        parts = parse_version(torch)
    except ValueError:
        return True  # an unreadable version rules no row out
    for bound, sign in ((low, 1), (high, -1)):
        if bound is None:
            continue
        edge = parse_version(bound)
        width = min(len(parts), len(edge))
        if sign * (_cmp(parts[:width], edge[:width])) < 0:
            return False
    return True


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return (a > b) - (a < b)


_ARCH = re.compile(r"^(sm|compute)_(\d+)([a-z]?)$")


def parse_arch_list(text: str | list[str]) -> tuple[str, ...]:
    """torch.cuda.get_arch_list() output or TORCH_CUDA_ARCH_LIST -> normalized names.

    Accepts ['sm_80', 'compute_90'], "sm_80 sm_86", and "8.0;8.6;9.0+PTX" (the +PTX suffix adds compute_XX).
    """
    items = text if isinstance(text, list) else re.split(r"[;,\s]+", text.strip())
    out: list[str] = []
    for item in items:
        item = item.strip().strip("'\"[]")
        if not item:
            continue
        if _ARCH.match(item):
            out.append(item)
            continue
        m = re.match(r"^(\d+)\.(\d+)([a-z]?)(\+PTX)?$", item, re.IGNORECASE)
        if not m:
            raise ValueError(f"not a GPU architecture: {item!r}")
        num = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        out.append(f"sm_{num}")
        if m.group(4):
            out.append(f"compute_{num}")
    return tuple(out)


def capability_to_arch(capability: str | tuple[int, int]) -> str:
    """'8.6' or (8, 6) -> 'sm_86'; also accepts 'sm_86'."""
    if isinstance(capability, tuple):
        return f"sm_{capability[0]}{capability[1]}"
    if capability.startswith("sm_"):
        if not _ARCH.match(capability):
            raise ValueError(f"not a GPU architecture: {capability!r}")
        return capability
    major, _, minor = capability.partition(".")
    return f"sm_{int(major)}{int(minor or 0)}"


def _split_arch(name: str) -> tuple[int, int, str]:
    m = _ARCH.match(name)
    if not m:
        raise ValueError(f"not a GPU architecture: {name!r}")
    digits = m.group(2)
    return int(digits[:-1]), int(digits[-1]), m.group(3)


def arch_covered(capability: str | tuple[int, int], arch_list: tuple[str, ...] | list[str]) -> bool:
    """Will a build with `arch_list` run kernels on a GPU of this compute capability?

    Machine code (sm_XY) runs on the same major with an equal or higher minor (sm_80 runs on 8.6/8.9);
    arch-specific variants (sm_90a) only on that exact GPU; PTX (compute_XY) JIT-compiles for any
    GPU of capability >= X.Y.
    """
    return arch_coverage(capability, arch_list) is not None


def arch_coverage(
    capability: str | tuple[int, int], arch_list: tuple[str, ...] | list[str]
) -> str | None:
    """How a build with `arch_list` runs on this GPU: "sm" (machine code for it), "ptx" (only PTX
    the driver JIT-compiles on first launch), None (no kernels: "no kernel image is available")."""
    gmaj, gmin, _ = _split_arch(capability_to_arch(capability))
    ptx = False
    for name in arch_list:
        kind = name.split("_", 1)[0]
        amaj, amin, suffix = _split_arch(name)
        if kind == "sm":
            if suffix and (amaj, amin) == (gmaj, gmin):
                return "sm"
            if not suffix and amaj == gmaj and amin <= gmin:
                return "sm"
        elif (amaj, amin) <= (gmaj, gmin):
            ptx = True
    return "ptx" if ptx else None


def gpu_arch_row(capability: str | tuple[int, int]) -> GpuArchRow | None:
    """The gpu_arch row for a GPU: its own architecture, else the nearest lower minor of the same
    major (sm_87 -> sm_86, sm_121 -> sm_120); None when the table has no row for that major."""
    try:
        major, minor, _ = _split_arch(capability_to_arch(capability))
    except ValueError:
        return None
    rows = load_cuda_data().gpu_arch
    best: GpuArchRow | None = None
    for name, row in rows.items():
        amaj, amin, _ = _split_arch(name)
        if amaj == major and amin <= minor and (best is None or amin > _split_arch(best.arch)[1]):
            best = row
    return best


def gpu_min_driver(capability: str | tuple[int, int], name: str | None = None) -> str | None:
    """Oldest driver that can drive this GPU: a product row (by name, e.g. 'NVIDIA B200') where the
    product needs more than its architecture, else the architecture's row. None: not in the table."""
    row = gpu_arch_row(capability)
    floor = row.driver if row else None
    if name:
        words = set(re.findall(r"[a-z0-9]+", name.lower()))
        for product, arch, driver in load_cuda_data().gpu_products:
            if product.lower() in words and (row is None or row.arch == arch):
                if floor is None or parse_version(driver) > parse_version(floor):
                    floor = driver
    return floor


def gpu_last_branch(capability: str | tuple[int, int]) -> int | None:
    """The newest NVIDIA driver branch that drives a GPU of this architecture (Kepler: 470;
    Maxwell, Pascal, Volta: 580); None: every branch so far (or not in the table)."""
    row = gpu_arch_row(capability)
    return row.last_branch if row else None


def toolkit_supports_gpu(cuda: str, capability: str | tuple[int, int]) -> bool:
    """Does CUDA `cuda` support this GPU at all (CUDA 12 dropped Kepler, 13 Maxwell-Volta)?"""
    row = gpu_arch_row(capability)
    if row is None or row.last_cuda_major is None:
        return True
    return parse_version(cuda)[0] <= row.last_cuda_major


def capability_text(capability: str | tuple[int, int]) -> str:
    """'sm_90a', 'sm_90', '9.0' or (9, 0) -> '9.0': a compute capability as conda's `__cuda_arch`
    writes it (CEP 46: `{major}.{minor}`, subarchitecture letters dropped). ValueError if not one."""
    major, minor, _ = _split_arch(capability_to_arch(capability))
    return f"{major}.{minor}"


def cuda_arch_version(capabilities: Iterable[str | tuple[int, int]]) -> str | None:
    """The `__cuda_arch` virtual package's version for these GPUs (CEP 46, as py-rattler detects
    it): the lowest compute capability among them, '9.0'; None without GPUs."""
    found = sorted({capability_text(c) for c in capabilities}, key=parse_version)
    return found[0] if found else None
