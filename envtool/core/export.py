"""Export a lock as a portable environment.yml or a conda @EXPLICIT file. Pure: lock model
(core/lockfile.py, every category, as conda-lock's parser sees the lock) and request in, text out.

Portable means: channel names (not URLs), the user's top-level specs pinned to the locked
versions without build strings, the pip section kept, no prefix, no virtual packages, and only
packages that every exported platform has. One exception to "no build strings": a package
whose locked build is a CUDA build keeps a glob naming that CUDA (`pytorch=2.7.1=*cuda126*`),
and for conda-forge CUDA builds the locked `cuda-version` is pinned too. Without them a solver
may return a newer CPU build (the silent CPU fallback) or a newer CUDA that needs a newer driver.
A CPU pytorch likewise keeps `cpu*` (`pytorch=2.7.1=cpu*`): bare, it re-solves to CUDA on a GPU host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envtool.core.credentials import redact_credentials
from envtool.core.lockfile import Lock, LockedPackage, toposorted
from envtool.core.spec import CondaSpec, EnvSpec, parse_pip_line, render_environment_yml
from envtool.errors import UsageError

# The CUDA part of a build string: conda-forge `cuda126_mkl_…`, pytorch channel `py3.11_cuda12.1_…`
_CUDA_TAG = re.compile(r"cuda\d+(?:\.\d+)?")


def channel_name(channel: str) -> tuple[str, str | None]:
    """A channel as a portable name, plus a warning when it cannot be made portable.

    https://conda.anaconda.org/conda-forge -> conda-forge; …/pytorch/label/nightly ->
    pytorch/label/nightly; https://repo.anaconda.com/pkgs/main -> defaults; other URLs stay
    (they work anywhere); file:// channels stay but only work on this machine."""
    text = channel.rstrip("/")
    if text.startswith("file://") or text.startswith("/"):
        return text, f"channel {text} is a local folder: the export only works where it exists"
    m = re.match(r"https?://conda\.anaconda\.org/(.+)$", text)
    if m:
        return m.group(1), None
    if re.match(r"https?://repo\.anaconda\.com/pkgs/(main|r|msys2)$", text):
        return "defaults", None
    return text, None


@dataclass
class ExportPlan:
    env: EnvSpec
    platforms: list[str]
    warnings: list[str] = field(default_factory=list)


def select_platforms(lock: Lock, platform: str | None) -> list[str]:
    if platform is None:
        return sorted(lock.platforms)
    if platform not in lock.platforms:
        raise UsageError(
            f"--platform {platform}: the lock has no solution for it",
            f"pick one of: {', '.join(sorted(lock.platforms))}",
        )
    return [platform]


def explicit_platform(lock: Lock, platform: str | None) -> str:
    """--format explicit is per platform: the one asked for, linux-64, or the lock's only one."""
    if platform is not None:
        return select_platforms(lock, platform)[0]
    if "linux-64" in lock.platforms:
        return "linux-64"
    if len(lock.platforms) == 1:
        return lock.platforms[0]
    raise UsageError(
        "an @EXPLICIT file holds one platform and the lock has several",
        f"add --platform (one of: {', '.join(sorted(lock.platforms))})",
    )


def _root_specs(lock: Lock, platforms: list[str]) -> list[CondaSpec]:
    """Without an environment.yml: the locked packages nothing else depends on (plus pytorch)."""
    needed: set[str] = set()
    names: set[str] = set()
    for platform in platforms:
        pkgs = lock.conda(platform)
        names |= set(pkgs)
        for p in pkgs.values():
            needed |= set(p.dependencies)
    roots = sorted(n for n in names if n not in needed or n == "pytorch")
    return [CondaSpec(n, raw=n) for n in roots if not n.startswith("__")]


def _cuda_glob(builds: list[str]) -> str | None:
    """`*cuda126*` when every platform's build names the same CUDA, `*cuda*` when they differ,
    None when any build is not a CUDA build."""
    tags = set()
    for build in builds:
        m = _CUDA_TAG.search(build)
        if not m:
            return None
        tags.add(m.group(0))
    return f"*{tags.pop()}*" if len(tags) == 1 else "*cuda*"


def _cpu_glob(builds: list[str]) -> str | None:
    """A CPU pytorch keeps its kind too: a bare `pytorch=2.7.1` re-solves to a CUDA build on a
    GPU host (and `envtool inspect` cannot tell what it asks for). `cpu*` for conda-forge's
    `cpu_mkl_…`/`cpu_generic_…`, `*cpu*` for the pytorch channel's `py3.11_cpu_0`; None when a
    build names no CPU (an unknown kind: nothing to keep)."""
    if not builds or not all("cpu" in b for b in builds):
        return None
    return "cpu*" if all(b.startswith("cpu") for b in builds) else "*cpu*"


def _warn_cpu_torch(
    found: dict[str, LockedPackage],
    per_platform: dict[str, dict[str, LockedPackage]],
    warnings: list[str],
) -> None:
    """A CPU pytorch locked next to CUDA packages is a broken lock; exporting it keeps it broken."""
    for platform, pkg in sorted(found.items()):
        cuda_pkgs = [n for n in ("pytorch-cuda", "cudatoolkit") if n in per_platform[platform]]
        if "cpu" in pkg.build and cuda_pkgs:
            warnings.append(
                f"pytorch on {platform} is locked as a CPU build ({pkg.build}) next to "
                f"{', '.join(cuda_pkgs)}: the lock itself is broken; re-lock it"
            )


def _torch_kind(lock: Lock, platform: str) -> str:
    """'cuda126' / 'cuda12.1' for a CUDA pytorch build, 'cpu' otherwise (or no pytorch)."""
    pkg = lock.conda(platform).get("pytorch")
    m = _CUDA_TAG.search(pkg.build) if pkg else None
    return m.group(0) if m else "cpu"


def _one_torch_build_kind(lock: Lock, platforms: list[str], warnings: list[str]) -> list[str]:
    """One environment.yml has no per-platform specs: when the platforms locked different torch
    builds (a CUDA 12.6 build on linux-64, the CPU build on osx-arm64), a file for all of them
    must drop the CUDA glob and cuda-version/pytorch-cuda, and a solver then picks any build (the
    silent CPU fallback). Export the platforms of the first CUDA kind instead (linux-64 first)
    and say how to get the others."""
    kinds = {p: _torch_kind(lock, p) for p in platforms}
    if len(set(kinds.values())) <= 1:
        return platforms
    order = sorted(platforms, key=lambda p: (kinds[p] == "cpu", p != "linux-64", p))
    kept = [p for p in platforms if kinds[p] == kinds[order[0]]]
    others = [p for p in platforms if p not in kept]
    described = ", ".join(f"{p}: {kinds[p]}" for p in platforms)
    warnings.append(
        f"the platforms locked different torch builds ({described}); one environment.yml cannot "
        f"ask for each, so this export is for {', '.join(kept)} — export "
        + " and ".join(f"--platform {p}" for p in others)
        + " for the others"
    )
    return kept


def plan_export(
    lock: Lock, request: EnvSpec | None, platforms: list[str], name: str | None
) -> ExportPlan:
    """Which specs, channels and pip lines a portable environment.yml of this lock holds."""
    warnings: list[str] = []
    platforms = _one_torch_build_kind(lock, platforms, warnings)
    per_platform = {p: lock.conda(p) for p in platforms}
    wanted = request.dependencies if request is not None else _root_specs(lock, platforms)
    specs: list[CondaSpec] = []
    seen: set[str] = set()
    cuda_forge_build = False
    for spec in wanted:
        if spec.name.startswith("__") or spec.name in seen:
            continue  # virtual packages describe a host, not a package to install
        seen.add(spec.name)
        found = {p: per_platform[p][spec.name] for p in platforms if spec.name in per_platform[p]}
        if not found:
            warnings.append(f"{spec.name}: not in the lock for {', '.join(platforms)}; left out")
            continue
        if len(found) < len(platforms):
            missing = ", ".join(p for p in platforms if p not in found)
            warnings.append(
                f"{spec.name}: locked for {', '.join(sorted(found))} only (not {missing}); "
                "left out — export with --platform to keep it"
            )
            continue
        versions = {pkg.version for pkg in found.values()}
        channel = channel_name(spec.channel)[0] if spec.channel else None
        if len(versions) > 1:
            warnings.append(
                f"{spec.name}: locked at different versions per platform "
                f"({', '.join(sorted(versions))}); kept as requested"
            )
            specs.append(CondaSpec(spec.name, spec.version, None, channel, spec.raw))
            continue
        builds = [pkg.build for pkg in found.values()]
        glob = _cuda_glob(builds)
        if spec.name == "pytorch" and glob is None:
            before = len(warnings)
            _warn_cpu_torch(found, per_platform, warnings)
            if len(warnings) == before:  # a CPU build next to CUDA packages: broken, not a pin
                glob = _cpu_glob(builds)
        if glob and re.match(r"cuda\d{3}", builds[0]):
            cuda_forge_build = True
        specs.append(CondaSpec(spec.name, versions.pop(), glob, channel, spec.raw))
    if cuda_forge_build and "cuda-version" not in seen:
        # conda-forge cuda126 builds accept any cuda-version 12.x; pin the locked one so the
        # re-solved environment needs the same driver as the lock.
        versions = {per_platform[p].get("cuda-version") for p in platforms}
        if None not in versions and len({v.version for v in versions if v}) == 1:
            version = next(v for v in versions if v).version
            specs.append(CondaSpec("cuda-version", version, raw=f"cuda-version={version}"))

    channels: list[str] = []
    for channel in request.channels if request is not None else lock.channels:
        text, warning = channel_name(channel)
        if warning:
            warnings.append(warning)
        if text not in channels:
            channels.append(text)

    pip = _export_pip(lock, request, platforms, warnings)
    env = EnvSpec(
        name=name if name is not None else (request.name if request is not None else None),
        channels=channels,
        dependencies=specs,
        pip=pip,
        variables=dict(request.variables) if request is not None else {},
        prefix=None,
        source="export",
        has_pip_section=bool(pip),
        platforms=[p for p in (request.platforms if request else []) if p in platforms],
    )
    return ExportPlan(env=env, platforms=platforms, warnings=warnings)


def _export_pip(
    lock: Lock, request: EnvSpec | None, platforms: list[str], warnings: list[str]
) -> list[str]:
    """pip lines: the request's index options, the locked pip packages pinned `name==version`,
    then the request's other lines (`-e .`, git URLs) that a lock cannot pin."""
    lines = [parse_pip_line(p) for p in (request.pip if request else [])]
    pinned: list[str] = []
    per_platform = [lock.pip(p) for p in platforms]
    for pip_name in sorted(set().union(*per_platform) if per_platform else set()):
        versions = {pkgs[pip_name].version for pkgs in per_platform if pip_name in pkgs}
        if any(pip_name not in pkgs for pkgs in per_platform):
            warnings.append(f"pip {pip_name}: not locked for every platform; left out")
        elif len(versions) > 1:
            warnings.append(f"pip {pip_name}: different versions per platform; left out")
        else:
            pinned.append(f"{pip_name}=={versions.pop()}")
    if not pinned:
        return [line.raw for line in lines]
    options = [line.raw for line in lines if line.kind == "option"]
    others = [line.raw for line in lines if line.kind == "other"]
    return options + pinned + others


def render_export_env(plan: ExportPlan, lock_name: str) -> str:
    header = (
        f"# Exported by envtool from {lock_name} for {', '.join(plan.platforms)}.\n"
        "# Top-level specs pinned to the locked versions; CUDA builds kept as a build glob.\n"
    )
    return redact_credentials(header + render_environment_yml(plan.env), strip=True)


def render_explicit(lock: Lock, platform: str) -> str:
    """conda's @EXPLICIT format, as `conda-lock render -k explicit` writes it: conda packages in
    topological order (conda-lock's) as `URL#md5`, pip packages as `# pip name @ URL#sha256=…`.

    Every value is one line of printable text or the export fails naming it: a newline in a hash
    or a name would add a hash-less URL line that `conda create --file` installs."""
    source = lock.path or "the lock"
    lines = [
        "# Generated by envtool export.",
        f"# platform: {_one_line(platform, 'platform', source)}",
        f"# input_hash: {_one_line(str(lock.content_hash.get(platform)), 'content_hash', source)}",
        "@EXPLICIT",
    ]
    ordered = toposorted([p for p in lock.packages if p.platform == platform])
    for p in ordered:
        if p.manager == "conda" and not p.name.startswith("__"):
            url = _one_line(p.url, f"package {p.name}: url", source, spaces=False)
            md5 = _one_line(p.md5, f"package {p.name}: md5", source, spaces=False) if p.md5 else ""
            lines.append(f"{url}#{md5}" if md5 else url)
    for p in ordered:
        if p.manager == "pip":
            name = _one_line(p.name, f"pip package {p.name!r}: name", source, spaces=False)
            url = _one_line(p.url, f"pip package {p.name}: url", source, spaces=False)
            sha = p.sha256 and _one_line(p.sha256, f"pip package {p.name}: sha256", source, False)
            lines.append(f"# pip {name} @ {url}{f'#sha256={sha}' if sha else ''}")
    return redact_credentials("\n".join(lines) + "\n", strip=True)  # the auth store has them


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(value: str, what: str, source: object, spaces: bool = True) -> str:
    """`value` when it is printable text on one line (no spaces either, for URLs and hashes)."""
    if _UNPRINTABLE.search(value) or (not spaces and (" " in value or value == "")):
        raise UsageError(
            f"{source}: {what} {value!r} holds control characters or spaces; nothing was written",
            "regenerate the lock with `envtool lock NAME`",
        )
    return value
