"""pixi interop, the pure half: what one pixi.lock environment × platform holds (its torch build,
CUDA, the driver it needs, the GPU architectures it carries) as the lock metadata envtool's host
check reads, and environment.yml (+ variants) rendered as a pixi.toml.

The file reading (py-rattler's `LockFile`) is adapters/lockfile/pixi_lock.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from envtool.core.credentials import redact_credentials
from envtool.core.lockfile import LockedPackage
from envtool.core.versions import cuda_from_build_tag, major_minor

TORCH_NAMES = ("pytorch", "libtorch", "pytorch-gpu", "pytorch-cpu")
# a pixi environment's name: what pixi allows ([a-z0-9-]), generously (envtool only prints it)
ENV_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class PixiTarget:
    """One environment × platform of a pixi.lock, as envtool judges it."""

    environment: str
    platform: str
    packages: int
    pypi: int
    torch: str | None  # pytorch's version
    torch_build: str | None
    cuda: str | None  # the CUDA the torch build (else cuda-version) is for; None: no CUDA
    flavor: str  # conda-forge | pytorch (the legacy channel's build strings)
    min_driver: str | None
    archs: tuple[str, ...]

    def describe(self) -> str:
        what = f"pytorch {self.torch} {self.torch_build}" if self.torch else "no pytorch"
        if self.cuda:
            need = f"CUDA {self.cuda}, driver >= {self.min_driver or 'unknown'}"
        else:
            need = "CPU, no driver needed"
        return f"{self.environment} {self.platform}: {what} — {need} ({self.packages} packages)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "platform": self.platform,
            "packages": self.packages,
            "pypi_packages": self.pypi,
            "torch": self.torch,
            "torch_build": self.torch_build,
            "cuda": self.cuda,
            "flavor": self.flavor,
            "min_driver": self.min_driver,
            "gpu_archs": list(self.archs),
        }

    def lock_metadata(self) -> dict[str, str]:
        """The custom_metadata keys core/host_check reads, as envtool writes them into its own
        locks: a pixi.lock install is checked against this host like a conda-lock."""
        return {
            "envtool_flavor": self.flavor,
            "envtool_cuda": self.cuda or "cpu",
            "envtool_min_driver": self.min_driver or "",
            "envtool_gpu_archs": " ".join(self.archs),
            "envtool_torch": self.torch or "",
            "envtool_platforms_cuda": f"{self.platform}={self.cuda or 'cpu'}",
        }


def _torch_cuda(build: str) -> str | None:
    """The CUDA a torch build string names; None for a CPU build (`cpu_…`, `py3.10_cpu_0`)."""
    if build.startswith("cpu") or "_cpu" in build:
        return None
    return cuda_from_build_tag(build)


def judge_target(environment: str, platform: str, packages: list[LockedPackage]) -> PixiTarget:
    """What one environment × platform needs of a host, from its locked packages."""
    from envtool.core.cuda import build_archs, min_driver

    conda = {p.name: p for p in packages if p.manager == "conda"}
    torch = next((conda[n] for n in TORCH_NAMES if n in conda), None)
    cuda = _torch_cuda(torch.build) if torch else None
    no_cuda = platform.startswith("osx")  # macOS has no CUDA driver, whatever is locked
    if torch is None and "cuda-version" in conda and not no_cuda:  # jax, cupy: no torch
        cuda = major_minor(conda["cuda-version"].version)
    # the legacy pytorch channel spells the CUDA inside the build (py3.11_cuda12.1_cudnn…_0)
    flavor = "pytorch" if torch and re.match(r"py\d", torch.build) else "conda-forge"
    archs: tuple[str, ...] = ()
    if cuda and torch:
        archs = build_archs(flavor, cuda, torch.version) or ()
    return PixiTarget(
        environment,
        platform,
        len(conda),
        sum(1 for p in packages if p.manager == "pip"),
        torch.version if torch else None,
        torch.build if torch else None,
        cuda,
        flavor,
        min_driver(cuda) if cuda else None,
        archs,
    )


# ------------------------------------------------------------------ pixi.toml (export)


def toml_string(value: str) -> str:
    """A TOML basic string that reads back as exactly `value` (tomllib): backslash, quote and
    every control character escaped, so a name or spec from a file cannot add TOML."""
    out = ['"']
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    """A bare key when TOML allows one, else a quoted key."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


def _inline(table: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{toml_key(k)} = {_value(v)}" for k, v in table.items()) + " }"


def _value(v: Any) -> str:
    if isinstance(v, dict):
        return _inline(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return toml_string(str(v))


@dataclass(frozen=True)
class PixiVariant:
    """One envtool variant as a pixi feature + environment: its name (cpu, cuda12.6), the CUDA
    it needs (None: cpu), the lowest GPU arch it was planned for (CEP 46's __cuda_arch), and
    the dependencies that pin its build."""

    name: str
    cuda: str | None
    dependencies: tuple[tuple[str, Any], ...]
    cuda_arch: str | None = None


# what a variant's feature pins (so [dependencies] leaves them out)
VARIANT_PINNED = ("cuda-version", "pytorch-cuda", "cpuonly", "cudatoolkit", "pytorch-mutex")


def plan_pixi_variant(
    name: str, cuda: str | None, flavor: str, cuda_arch: str | None = None
) -> PixiVariant:
    """The feature of one variant: conda-forge pins pytorch's build (`cuda126*`, `cpu*`) and
    cuda-version; the legacy pytorch channel pins pytorch-cuda (or cpuonly)."""
    if flavor == "pytorch":
        deps: tuple[tuple[str, Any], ...] = (
            (("pytorch-cuda", f"{cuda}.*"),) if cuda else (("cpuonly", "*"),)
        )
    elif cuda:
        tag = "cuda" + cuda.replace(".", "")
        deps = (("pytorch", {"version": "*", "build": f"{tag}*"}), ("cuda-version", f"{cuda}.*"))
    else:
        deps = (("pytorch", {"version": "*", "build": "cpu*"}),)
    return PixiVariant(name, cuda, deps, cuda_arch)


def pixi_name(text: str) -> str:
    """A feature / environment / platform name pixi accepts ([a-z0-9-]): cuda12.6 -> cuda12-6."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "env"


def _dependency_value(version: str | None, build: str | None, channel: str | None) -> Any:
    if not build and not channel:
        return version or "*"
    table: dict[str, str] = {"version": version or "*"}
    if build:
        table["build"] = build
    if channel:
        table["channel"] = channel
    return table


def pixi_version(spec: Any) -> str | None:
    """A conda spec's version as pixi reads it, through rattler's MatchSpec: conda's `=2.7`
    shorthand means 2.7.*, which pixi's bare "2.7" would not (it is ==2.7 there)."""
    from rattler import MatchSpec

    if spec.version is None:
        return None
    parsed = MatchSpec(f"{spec.name} {spec.version}", strict=False).version
    return str(parsed) if parsed is not None else None


def _cuda_platforms(platforms: list[str]) -> list[str]:
    return [p for p in platforms if p.startswith(("linux", "win"))]


def render_pixi_toml(
    name: str,
    channels: list[str],
    platforms: list[str],
    dependencies: list[Any],
    pypi: list[tuple[str, str]],
    variants: list[PixiVariant],
    source: str,
) -> str:
    """A pixi.toml for environment.yml's request: [workspace] (name, channels, platforms),
    [dependencies], [pypi-dependencies], and each variant as a feature + environment. A CUDA
    variant runs on pixi ≥ 0.71 rich platforms (`{ platform, cuda = { driver, arch } }`; the
    arch only when the lock recorded one), which its feature names in `platforms`."""
    lines = [
        f"# written by `envtool export --format pixi` from {source}",
        "[workspace]",
        f"name = {toml_string(name)}",
        f"channels = {_value(channels)}",
    ]
    rich: list[str] = []
    for v in variants:
        if not v.cuda:
            continue
        cuda: Any = {"driver": v.cuda, "arch": v.cuda_arch} if v.cuda_arch else v.cuda
        for p in _cuda_platforms(platforms):
            rich.append(_inline({"name": pixi_name(f"{p}-{v.name}"), "platform": p, "cuda": cuda}))
    plain = [toml_string(p) for p in platforms]
    if rich:
        lines.append("platforms = [")
        lines += [f"  {item}," for item in (*plain, *rich)]
        lines += ["]", 'requires-pixi = ">=0.71"']
    else:
        lines.append(f"platforms = [{', '.join(plain)}]")
    pinned = {n for v in variants for n, _ in v.dependencies}
    lines += ["", "[dependencies]"]
    for d in dependencies:
        if d.name in VARIANT_PINNED and variants:
            continue
        build = None if d.name in pinned else d.build  # the variant's feature sets it
        lines.append(
            f"{toml_key(d.name)} = {_value(_dependency_value(d.version, build, d.channel))}"
        )
    if pypi:
        lines += ["", "[pypi-dependencies]"]
        lines += [f"{toml_key(n)} = {toml_string(spec or '*')}" for n, spec in pypi]
    for v in variants:
        feature = pixi_name(v.name)
        lines += ["", f"[feature.{feature}]"]
        if v.cuda:
            names = [pixi_name(f"{p}-{v.name}") for p in _cuda_platforms(platforms)]
            lines.append(f"platforms = {_value(names)}")
        lines.append(f"[feature.{feature}.dependencies]")
        lines += [f"{toml_key(n)} = {_value(value)}" for n, value in v.dependencies]
    if variants:
        lines += ["", "[environments]"]
        lines += [f"{pixi_name(v.name)} = [{toml_string(pixi_name(v.name))}]" for v in variants]
    return redact_credentials("\n".join(lines) + "\n", strip=True)  # a file: no secrets
