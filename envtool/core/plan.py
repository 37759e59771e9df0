"""The plan: a request plus host facts (or --driver/--gpu) -> flavor, CUDA version, specs and
virtual packages per platform. Pure: no I/O, no rattler. An impossible request is refused here,
before anything is solved.

Rule for `--cuda auto` (stated in README.md):
  no driver (and no --driver) -> CPU, with a note.
  otherwise, among the CUDA versions torch was built for (conda-forge: discovered from the
  channel's repodata; pytorch flavor: PyTorch's official table), drop those the driver cannot run
  at all and those whose architecture list misses one of the GPUs (cuda.build_archs: the
  flavor's own list for the torch release that line would solve; PTX counts, and a GPU that only
  PTX covers gets a note on the first-launch JIT), then take the newest.
  A pick that needs minor-version compatibility (driver older than the toolkit's own driver but
  at least the major's compatibility floor) is allowed with a warning that names the newest
  natively supported alternative.
  A major alone (`--cuda 12`, or `cuda-version=12` in a file, which conda reads as 12.*) applies
  the same rule to that major's versions only.
  The pick, and the --cuda a refusal suggests, is envtool.core.suggest.suggest_cuda (also used by
  install and doctor): a driver older than a GPU's own floor gets "upgrade the driver to ≥ X for
  this GPU", never a CUDA; a toolkit that dropped the GPU (CUDA 12: Kepler) is not a candidate.
  The solve adapter drops a picked CUDA whose builds do not solve with the request and plans
  again, and solves a suggested --cuda before naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envtool.core import cuda as cu
from envtool.core.facts import HostFacts
from envtool.core.host_record import render_visible_gpus, visible_gpus
from envtool.core.suggest import Gpu, Suggestion, judge_cuda, suggest_cuda
from envtool.core.versions import conda_order, major_minor, parse_version
from envtool.errors import UsageError

FLAVORS = ("conda-forge", "pytorch")
PLATFORMS = ("linux-64", "linux-aarch64", "osx-arm64", "osx-64", "win-64")
NO_CUDA_PLATFORMS = ("osx-arm64", "osx-64")  # macOS: no NVIDIA GPUs, no CUDA builds
MAX_PLAUSIBLE_CC_MAJOR = 20  # room for GPUs newer than the data; `99` is a typo, not a GPU
DEFAULT_CHANNELS = {
    "conda-forge": ("conda-forge",),
    "pytorch": ("pytorch", "nvidia", "conda-forge"),
}
# Packages whose version is the CUDA toolkit version (major.minor must agree across the lock).
TOOLKIT_VERSIONED = (
    "cuda-version",
    "cudatoolkit",
    "pytorch-cuda",
    "cuda-cudart",
    "cuda-runtime",
    "cuda-nvrtc",
    "cuda-cupti",
    "cuda-nvtx",
    "cuda-libraries",
)
# Names the plan owns: any user spec for these is replaced by the plan's own (idempotent re-plan).
PLAN_OWNED = {"pytorch", "cuda-version", "pytorch-cuda", "pytorch-mutex", "cpuonly", "cudatoolkit"}
# ...and the names it may add to the request it records (_plan_platform): python for --python
# (or the stored pin), pip for a pip section
PLAN_WRITES = PLAN_OWNED | {"python", "pip"}
_DEFAULT_VIRTUAL = {
    "linux-64": {"__glibc": "2.28", "__linux": "5.10", "__unix": "0", "__archspec": "1=x86_64"},
    "linux-aarch64": {
        "__glibc": "2.28",
        "__linux": "5.10",
        "__unix": "0",
        "__archspec": "1=aarch64",
    },
    "osx-arm64": {"__osx": "11.0", "__unix": "0", "__archspec": "1=arm64"},
    "osx-64": {"__osx": "10.15", "__unix": "0", "__archspec": "1=x86_64"},
    "win-64": {"__win": "0", "__archspec": "1=x86_64"},
}


@dataclass(frozen=True)
class Request:
    """What the user asked for, after click parsed it (no host facts yet)."""

    conda_specs: tuple[str, ...] = ("python", "pytorch", "torchvision", "pip")
    pip_specs: tuple[str, ...] = ()
    cuda: str = "auto"  # "auto" | "cpu" | "X.Y" | "X" (auto within major X)
    torch: str | None = None
    python: str | None = None
    flavor: str = "conda-forge"
    platforms: tuple[str, ...] = ("linux-64",)
    channels: tuple[str, ...] = ()  # empty: the flavor's defaults
    driver: str | None = None  # --driver: plan for another machine
    gpus: tuple[str, ...] = ()  # --gpu: compute capabilities "8.0"
    virtual_overrides: tuple[tuple[str, str], ...] = ()  # --virtual-package NAME=VER
    # where `platforms` came from (core/request.choose_platforms): said, never stored or hashed
    platforms_from: str = ""

    def options(self) -> dict[str, object]:
        """The plan options that change a solve (stored in the lock for `envtool lock`)."""
        return {
            "cuda": self.cuda,
            "torch": self.torch,
            "python": self.python,
            "flavor": self.flavor,
            "platforms": list(self.platforms),
            "channels": list(self.channels),
            "driver": self.driver,
            "gpus": list(self.gpus),
            "virtual_overrides": [list(p) for p in self.virtual_overrides],
        }


@dataclass(frozen=True)
class CudaBuild:
    """One torch build found in a channel: torch version, CUDA version (None: CPU), python tag."""

    torch: str
    cuda: str | None
    python: str | None = None  # "3.11" when the build string says py311
    platform: str | None = None  # subdir it was found in (None: any)


@dataclass(frozen=True)
class PlatformPlan:
    platform: str
    cuda: str | None  # None: CPU build on this platform
    specs: tuple[str, ...]
    constraints: tuple[str, ...]
    virtual_packages: tuple[tuple[str, str, str], ...]  # (name, version, build)

    def virtual_specs(self) -> list[str]:
        """'__cuda=12.4', '__glibc=2.28' ('=BUILD' only when the build is not '0')."""
        return [f"{n}={v}" + (f"={b}" if b != "0" else "") for n, v, b in self.virtual_packages]


@dataclass(frozen=True)
class Plan:
    flavor: str
    cuda: str | None  # the planned CUDA (None: CPU everywhere)
    cuda_mode: str  # native | compat | target (no driver to check against) | cpu
    min_driver: str | None
    archs: tuple[str, ...]
    torch: str | None
    python: str | None
    channels: tuple[str, ...]
    platforms: tuple[PlatformPlan, ...]
    pip_specs: tuple[str, ...] = ()
    driver: str | None = None
    gpus: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    picked: bool = False  # the CUDA was chosen by envtool (auto or a major), not named X.Y
    # the `__cuda_arch` virtual package (conda CEP 46, as py-rattler detects it): the lowest
    # compute capability among the GPUs planned for; None for CPU plans and without GPUs
    cuda_arch: str | None = None
    platforms_from: str = ""  # why these platforms: --platform, the file, the last lock, this host

    def to_dict(self) -> dict[str, object]:
        return {
            "flavor": self.flavor,
            "platforms_from": self.platforms_from,
            "cuda": self.cuda,
            "cuda_mode": self.cuda_mode,
            "min_driver": self.min_driver,
            "archs": list(self.archs),
            "torch": self.torch,
            "python": self.python,
            "driver": self.driver,
            "gpus": list(self.gpus),
            "cuda_arch": self.cuda_arch,
            "channels": list(self.channels),
            "platforms": [
                {
                    "platform": p.platform,
                    "cuda": p.cuda,
                    "specs": list(p.specs),
                    "constraints": list(p.constraints),
                    "virtual_packages": p.virtual_specs(),
                }
                for p in self.platforms
            ],
            "pip": list(self.pip_specs),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }


def _cuda_fix(want: str) -> str:
    """The fix for a --cuda value that is not one: the X.Y or the major it spells otherwise
    (`cu126`, `cuda12`), auto for "any GPU build" (`gpu`), else every accepted form."""
    known = cu.known_cuda_versions()
    majors = _cuda_majors()
    meant = _cuda_spelled_otherwise(want)
    if meant in known:
        return f"did you mean --cuda {meant}?"
    m = re.fullmatch(r"(?:cuda-?|cu)(\d+)", want)
    if m and str(int(m.group(1))) in majors:
        major = int(m.group(1))
        return f"did you mean --cuda {major} (the newest {major}.x this host runs)?"
    if want in ("gpu", "cuda", "nvidia", "yes", "true", "on"):
        return "--cuda auto picks the CUDA build this host's driver and GPUs run"
    return f"use auto, cpu, a major ({', '.join(majors)}) or one of {', '.join(known)}"


def _cuda_majors() -> list[str]:
    """The CUDA majors the data knows (`--cuda 12`: the newest 12.x that runs)."""
    return sorted({v.split(".")[0] for v in cu.known_cuda_versions()}, key=int)


def _cuda_spelled_otherwise(text: str) -> str | None:
    """X.Y from the other spellings users bring: a variant's `cuda12.6`, a wheel tag's `cu126`,
    nvcc's `12.8.1`."""
    m = re.fullmatch(r"(?:cuda-?)?(\d+)\.(\d+)(?:\.\d+)?", text)
    if m:
        return f"{int(m.group(1))}.{int(m.group(2))}"
    m = re.fullmatch(r"cu(\d{2})(\d)", text)
    return f"{int(m.group(1))}.{m.group(2)}" if m else None


def parse_cuda_builds(
    records: list[tuple[str, str, list[str]]], platform: str | None = None
) -> list[CudaBuild]:
    """(version, build string, depends) of pytorch records -> CudaBuild list.

    conda-forge build strings carry the CUDA (`cuda126_mkl_py312_…`, `cuda118py39…`); when they
    don't, a `cuda-version >=X.Y` / `cudatoolkit >=X.Y` / `pytorch-cuda` dependency does.
    """
    from envtool.core.versions import cuda_from_build_tag

    out: set[CudaBuild] = set()
    for version, build, depends in records:
        if build.startswith("cpu") or "_cpu" in build:
            cuda = None
        else:
            cuda = cuda_from_build_tag(build)
            if cuda is None:
                for dep in depends:
                    m = re.match(
                        r"^(cuda-version|cudatoolkit|pytorch-cuda)\s+>=?\s*(\d+\.\d+)", dep
                    )
                    if m:
                        cuda = m.group(2)
                        break
            if cuda is None:
                continue  # neither CPU nor CUDA (e.g. a rocm build): not ours to pick
        py = re.search(r"py(3)\.?(\d+)", build)
        out.add(CudaBuild(version, cuda, f"{py.group(1)}.{py.group(2)}" if py else None, platform))
    return sorted(
        out, key=lambda b: (conda_order(b.torch), b.cuda or "", b.python or "", b.platform or "")
    )


def plan_environment(
    request: Request, host: HostFacts | None, builds: list[CudaBuild] | None = None
) -> Plan:
    """Request + host facts (+ the channel's torch builds for conda-forge) -> Plan, or UsageError."""
    check_request(request, host)
    warnings: list[str] = []
    notes: list[str] = []
    driver = request.driver or (host.driver_version if host and host.has_driver else None)
    # the host's GPUs as the job sees them: CUDA_VISIBLE_DEVICES applied by the one rule doctor's
    # headline and install's variant choice use (a T4 + A100 host with the T4 hidden plans for
    # the A100)
    shown, hidden = visible_gpus(host) if host and not request.gpus else ([], [])
    gpu_list = (
        tuple(Gpu(g) for g in request.gpus)
        if request.gpus
        else tuple(Gpu(g.capability, g.name) for g in shown if g.capability is not None)
    )
    if hidden and host is not None:
        notes.append(f"planning for {render_visible_gpus(host)}")
    gpus = tuple(g.capability for g in gpu_list)
    if request.driver and cu.driver_release(request.driver) != request.driver.strip():
        notes.append(
            f"--driver {request.driver}: read as branch R{request.driver.strip()}, whose first "
            f"release {cu.driver_release(request.driver)} (and every later one) runs what the "
            "plan says"
        )
    if request.driver is None and request.gpus and host and host.has_driver:
        notes.append("--gpu given without --driver: using this host's driver")
    torch_series = major_minor(request.torch) if request.torch else None

    cuda_platforms = [p for p in request.platforms if p not in NO_CUDA_PLATFORMS]
    want = request.cuda.lower()
    if want == "cpu":
        cuda, mode = None, "cpu"
        if request.gpus or request.driver:  # said, not silently dropped
            given = " and ".join(
                f for f, v in (("--gpu", request.gpus), ("--driver", request.driver)) if v
            )
            notes.append(f"{given} plan for a GPU machine; --cuda cpu plans the CPU build")
    elif want == "auto" or want.isdigit():
        if not cuda_platforms:
            cuda, mode = None, "cpu"
            notes.append("no CUDA platform requested: planning CPU builds")
        elif driver is None and want == "auto":
            cuda, mode = None, "cpu"
            why = host.no_driver_reason if host and host.no_driver_reason else "no NVIDIA driver"
            notes.append(
                f"{why}: planning a CPU build (pass --driver VER or --cuda X.Y to plan for a GPU machine)"
            )
        else:
            cuda, mode = _pick_cuda(
                request, driver, gpu_list, torch_series, builds, warnings, notes
            )
            if driver is None:  # a major: still a CUDA build (the file or flag asked for one)
                notes.append(
                    f"no NVIDIA driver: planning CUDA {cuda}, the newest {want}.x build "
                    "(pass --driver VER to check it against the machine that will run it)"
                )
    else:
        cuda, mode = _check_explicit_cuda(request, driver, gpu_list, torch_series, builds, warnings)

    torch = request.torch
    if cuda and request.flavor == "pytorch" and torch is None and builds is None:
        torch = _newest_official_torch(cuda)
    build_torch = _torch_by_cuda(request, torch_series, builds).get(cuda or "") or torch
    archs = (
        (cu.build_archs(request.flavor, cuda, build_torch, _host_platform(request)) or ())
        if cuda
        else ()
    )
    notes += _ptx_notes(request.flavor, cuda, archs, gpu_list)
    for p in request.platforms:
        if cuda and p in NO_CUDA_PLATFORMS:
            warnings.append(f"{p} has no CUDA builds: planning the CPU build for {p}")

    channels = request.channels or DEFAULT_CHANNELS[request.flavor]
    cuda_arch = _cuda_arch(gpus) if cuda else None
    platforms = tuple(
        _plan_platform(request, p, None if p in NO_CUDA_PLATFORMS else cuda, torch, cuda_arch)
        for p in request.platforms
    )
    return Plan(
        flavor=request.flavor,
        cuda=cuda,
        cuda_mode=mode,
        min_driver=cu.min_driver(cuda) if cuda else None,
        archs=tuple(archs),
        torch=torch,
        python=request.python,
        channels=tuple(channels),
        platforms=platforms,
        pip_specs=request.pip_specs,
        driver=driver,
        gpus=tuple(gpus),
        warnings=tuple(warnings),
        notes=tuple(notes),
        picked=cuda is not None and (want == "auto" or want.isdigit()),
        cuda_arch=cuda_arch,
        platforms_from=request.platforms_from,
    )


def _ptx_notes(
    flavor: str, cuda: str | None, archs: tuple[str, ...], gpus: tuple[Gpu, ...]
) -> list[str]:
    """A note per GPU the planned build runs only through PTX: no machine code for it, so the
    driver JIT-compiles the kernels on first launch."""
    out = []
    ptx = " ".join(a for a in archs if a.startswith("compute_"))
    for label in dict.fromkeys(g.label() for g in gpus if _coverage(g, archs) == "ptx"):
        out.append(
            f"{label}: {flavor} CUDA {cuda} builds carry no machine code for it; it runs their "
            f"{ptx} PTX, JIT-compiled by the driver on first launch (a one-time compile cost, "
            "then cached)"
        )
    return out


def _coverage(gpu: Gpu, archs: tuple[str, ...]) -> str | None:
    try:
        return cu.arch_coverage(gpu.capability, archs)
    except ValueError:
        return None


def _cuda_arch(gpus: tuple[str, ...]) -> str | None:
    """`__cuda_arch` for these GPUs: the lowest of their compute capabilities."""
    return cu.cuda_arch_version(_capabilities(gpus))


def _capabilities(gpus: tuple[str, ...]) -> tuple[str, ...]:
    """Distinct compute capabilities ('9.0'), lowest first; one no parser reads is left out
    (check_request refuses a bad --gpu; a probed one is no evidence)."""
    out = set()
    for g in gpus:
        try:
            out.add(cu.capability_text(g))
        except ValueError:
            continue
    return tuple(sorted(out, key=parse_version))


def planned_gpus(plan: Plan) -> tuple[str, ...]:
    """The GPUs a CUDA plan was made for, as the lock records them: distinct compute capabilities
    ('9.0'), lowest first. Two H200s or eight, `--gpu 9.0` or `--gpu sm_90`: the same plan, the
    same record. A CPU plan records none (no GPU changes it)."""
    return _capabilities(plan.gpus) if plan.cuda else ()


def check_request(request: Request, host: HostFacts | None = None) -> None:
    """Refusals that need no channel data: bad values, the pytorch channel's end. Called before
    anything is downloaded or solved. (A driver too old for --cuda X.Y or for the GPU is refused by
    plan_environment, where the channel's builds give the --cuda to suggest.)"""
    if request.flavor not in FLAVORS:
        raise UsageError(
            f"--flavor {request.flavor}: unknown flavor", f"use one of {', '.join(FLAVORS)}"
        )
    for p in request.platforms:
        if p not in PLATFORMS:
            raise UsageError(f"--platform {p}: not supported", f"use one of {', '.join(PLATFORMS)}")
    want = request.cuda.lower()
    if want not in ("auto", "cpu") and all(p in NO_CUDA_PLATFORMS for p in request.platforms):
        raise UsageError(  # auto plans the CPU build there; a named CUDA cannot be
            f"CUDA {request.cuda} for {', '.join(request.platforms)}: macOS has no CUDA builds",
            "pass --cuda cpu, or lock for a Linux GPU machine (create --platform linux-64, or "
            "`platforms: [linux-64]` in environment.yml)",
        )
    if re.fullmatch(r"\d+", want):
        majors = _cuda_majors()
        if want not in majors:
            raise UsageError(
                f"--cuda {request.cuda}: no CUDA {want}.x is known",
                f"use auto, cpu, a major ({', '.join(majors)}) or X.Y",
            )
    elif want not in ("auto", "cpu"):
        try:
            mm = major_minor(want)
        except ValueError:
            mm = None
        if mm is None or cu.min_driver(mm) is None or not re.fullmatch(r"\d+\.\d+", want):
            raise UsageError(f"--cuda {request.cuda}: not a known CUDA version", _cuda_fix(want))
    for value, flag, example in (
        (request.driver, "--driver", "535.54.03"),
        (request.torch, "--torch", "2.5"),
    ):
        if value is not None:
            try:
                parse_version(value)
            except ValueError:
                raise UsageError(
                    f"{flag} {value}: not a version", f"e.g. {flag} {example}"
                ) from None
    for g in request.gpus:
        try:
            arch = cu.capability_to_arch(g)
        except ValueError:
            raise UsageError(
                f"--gpu {g}: not a compute capability", "e.g. --gpu 8.0 or --gpu sm_80"
            ) from None
        # a typo like `--gpu 99` (sm_990) rules out every build with a known arch list, keeps
        # one without (CUDA 12.0) and fails in the solver; NVIDIA's capabilities reach 12.x
        if int(re.sub(r"\D", "", arch)[:-1]) > MAX_PLAUSIBLE_CC_MAJOR:
            raise UsageError(
                f"--gpu {g}: not a compute capability (NVIDIA's reach 12.x)",
                "e.g. --gpu 9.0 (H100/H200) or --gpu 8.0 (A100)",
            )
    if request.flavor == "pytorch" and request.torch and not cu.pytorch_channel_has(request.torch):
        last = cu.load_cuda_data().pytorch_channel_last
        raise UsageError(
            f"--torch {request.torch} --flavor pytorch: the pytorch channel stopped at {last}",
            "use --flavor conda-forge (the default), or --torch " + last,
        )


def _candidates(
    request: Request, torch_series: str | None, builds: list[CudaBuild] | None
) -> list[str]:
    """CUDA versions torch was built for, given the flavor and --torch/--python."""
    if request.flavor == "pytorch" and builds is None:
        if torch_series:
            return list(cu.official_cuda_builds(torch_series) or ())
        last = parse_version(cu.load_cuda_data().pytorch_channel_last)
        return sorted(
            {
                c
                for t, cs in cu.load_cuda_data().torch_cuda.items()
                if parse_version(t) <= last
                for c in cs
            },
            key=parse_version,
        )
    usable = _usable_builds(request, torch_series, builds)
    # one plan, one CUDA: it must exist on every CUDA platform whose builds were listed
    listed = {b.platform for b in usable if b.platform}
    wanted = [p for p in request.platforms if p not in NO_CUDA_PLATFORMS and p in listed]
    if wanted:
        found = set.intersection(
            *({b.cuda for b in usable if b.platform in (p, None)} for p in wanted)
        )
    else:
        found = {b.cuda for b in usable}
    return sorted((c for c in found if c), key=parse_version)


def _usable_builds(
    request: Request, torch_series: str | None, builds: list[CudaBuild] | None
) -> list[CudaBuild]:
    """The listed CUDA builds this request can take (flavor's channel end, --torch, --python)."""
    last = parse_version(cu.load_cuda_data().pytorch_channel_last)
    return [
        b
        for b in builds or []
        if b.cuda
        and (request.flavor != "pytorch" or parse_version(b.torch)[:2] <= last)
        and (torch_series is None or major_minor(b.torch) == torch_series)
        and (request.python is None or b.python in (None, major_minor(request.python)))
    ]


def _torch_by_cuda(
    request: Request, torch_series: str | None, builds: list[CudaBuild] | None
) -> dict[str, str]:
    """The torch release a solve takes for each CUDA line, for the arch lists (they change between
    releases): the newest listed build of that line; --torch alone when nothing was listed."""
    out: dict[str, str] = {}
    for b in _usable_builds(request, torch_series, builds):
        if b.cuda and (b.cuda not in out or conda_order(b.torch) > conda_order(out[b.cuda])):
            out[b.cuda] = b.torch
    if torch_series and builds is None:
        return {c: torch_series for c in cu.known_cuda_versions()}
    return out


def _pair_hint(request: Request, torch_series: str | None, builds: list[CudaBuild] | None) -> str:
    if request.flavor == "pytorch" and builds is None:
        pairs = [
            f"{t}: {', '.join(cs)}"
            for t, cs in cu.load_cuda_data().torch_cuda.items()
            if parse_version(t) <= parse_version(cu.load_cuda_data().pytorch_channel_last)
            and (torch_series is None or t == torch_series)
        ]
    else:
        by_torch: dict[str, set[str]] = {}
        for b in builds or []:
            if b.cuda:
                where = f" ({b.platform})" if b.platform and len(request.platforms) > 1 else ""
                by_torch.setdefault(b.torch, set()).add(b.cuda + where)
        pairs = [
            f"{t}: {', '.join(sorted(cs, key=parse_version))}"
            for t, cs in sorted(by_torch.items(), key=lambda kv: parse_version(kv[0]))
        ]
    return "builds that exist: " + ("; ".join(pairs) if pairs else "none in these channels")


def _pick_cuda(
    request: Request,
    driver: str | None,
    gpus: tuple[Gpu, ...],
    torch_series: str | None,
    builds: list[CudaBuild] | None,
    warnings: list[str],
    notes: list[str],
) -> tuple[str, str]:
    candidates = _candidates(request, torch_series, builds)
    if request.cuda.isdigit():  # a major alone: its X.Y versions only
        candidates = [c for c in candidates if c.split(".")[0] == request.cuda]
    if not candidates:
        what = f"torch {request.torch}" if request.torch else "torch"
        if request.cuda.isdigit():
            what += f" for CUDA {request.cuda}.x"
        cuda_platforms = [p for p in request.platforms if p not in NO_CUDA_PLATFORMS]
        where = f" for all of {', '.join(cuda_platforms)}" if len(cuda_platforms) > 1 else ""
        raise UsageError(
            f"no CUDA build of {what}{where} in {_searched(request)}",
            _pair_hint(request, None, builds),
        )
    s = suggest_cuda(
        driver,
        gpus,
        candidates,
        flavor=request.flavor,
        torch=_torch_by_cuda(request, torch_series, builds),
        platform=_host_platform(request),
    )
    if s.kind == "cuda" and s.cuda and s.mode:
        if s.mode == "compat":
            warnings.append(_compat_warning(driver or "?", s.cuda))
        newer = [c for c in candidates if parse_version(c) > parse_version(s.cuda)]
        if newer:  # say why the newer builds were not taken
            notes.append(f"CUDA {s.cuda}, not {', '.join(newer)}: " + "; ".join(s.reasons))
        return s.cuda, s.mode
    if s.kind == "ceiling":
        head = s.reasons[0]
    elif s.kind == "driver" and s.gpu:
        head = f"driver {driver} cannot drive {s.gpu}: it needs ≥ {s.driver}"
    elif driver:
        native = cu.newest_cuda_native(driver) or "none"
        head = (
            f"no CUDA build of torch runs on driver {driver} (runs CUDA ≤ {native})"
            + (" with these GPUs" if gpus else "")
            + ": "
            + "; ".join(dict.fromkeys(s.reasons))
        )
    else:
        head = f"no CUDA {request.cuda}.x build of torch with these GPUs: " + "; ".join(
            dict.fromkeys(s.reasons)
        )
    raise Refusal(head, s, _way_out(s, request))


def _compat_warning(driver: str, cuda: str) -> str:
    return (
        f"driver {driver} runs CUDA ≤ {cu.newest_cuda_native(driver)} natively; CUDA {cuda} "
        "runs through minor-version compatibility (PTX JIT of newer code fails); a driver "
        f"≥ {cu.min_driver(cuda)} runs it natively"
    )


def _searched(request: Request) -> str:
    return ", ".join(request.channels or DEFAULT_CHANNELS[request.flavor])


def _way_out(s: Suggestion, request: Request) -> str:
    """The hint of a refusal: the suggested --cuda (a command that plans and solves on the same
    inputs; the solve adapter checks it) and the driver upgrade."""
    if s.kind == "ceiling":
        return (
            f"{s.gpu} runs only on drivers up to R{s.branch}: on such a host "
            + (f"pass --driver {s.branch} --cuda {s.cuda}" if s.cuda else "pass --cuda cpu")
            + " (check the driver this host really has: `nvidia-smi`)"
        )
    if s.kind == "cuda":
        return f"pass --cuda {s.cuda}, or update the NVIDIA driver"
    if s.kind == "driver":
        return s.upgrade() + ", or pass --cuda cpu"
    why = s.reasons[-1] if s.reasons else ""
    if why.startswith("no CUDA build"):
        why += f" on {_searched(request)}"
    last = f"; the last torch for these GPUs: {s.last}" if s.last else ""
    return (
        f"pass --cuda cpu{f' ({why})' if why else ''}, or plan for another machine with "
        f"--driver/--gpu{last}"
    )


class Refusal(UsageError):
    """A request the plan refuses, with the suggestion its hint names (the solve adapter checks
    that the suggested --cuda solves before the user sees it)."""

    def __init__(self, message: str, suggestion: Suggestion, hint: str) -> None:
        super().__init__(message, hint)
        self.suggestion = suggestion


def _check_explicit_cuda(
    request: Request,
    driver: str | None,
    gpus: tuple[Gpu, ...],
    torch_series: str | None,
    builds: list[CudaBuild] | None,
    warnings: list[str],
) -> tuple[str, str]:
    cuda = major_minor(request.cuda)
    cuda_wanted = not (request.platforms and all(p in NO_CUDA_PLATFORMS for p in request.platforms))
    listed = not (builds is None and request.flavor == "conda-forge")
    candidates = _candidates(request, torch_series, builds) if cuda_wanted else []
    torch_for = _torch_by_cuda(request, torch_series, builds)
    # the one decision (core/suggest.judge_cuda): ceiling, architecture, the GPU's own driver
    # floor, then driver vs CUDA; its suggestion names what this host runs among the real builds
    v = judge_cuda(
        driver,
        gpus,
        cuda,
        flavor=request.flavor,
        torch=torch_for.get(cuda),
        platform=_host_platform(request),
        available=candidates if listed else None,
        torch_by_cuda=torch_for,
    )
    if v.kind == "arch" and v.suggestion is not None:
        raise Refusal(v.message, v.suggestion, _arch_way_out(v.suggestion, gpus))
    if v.kind in ("ceiling", "gpu-driver", "driver") and v.suggestion is not None:
        message = "--cuda " + v.message.removeprefix("CUDA ") if v.kind == "driver" else v.message
        raise Refusal(message, v.suggestion, _way_out(v.suggestion, request))
    if v.kind == "compat":
        warnings.append(v.message)
    mode = v.mode
    if not cuda_wanted or not listed:
        return cuda, mode  # nothing discovered (no channel listing): the verifier still checks
    if cuda not in candidates:
        what = f"torch {request.torch}" if request.torch else "torch"
        raise UsageError(
            f"{what} was never built for CUDA {cuda} on the channels searched ({_searched(request)})",
            _pair_hint(request, torch_series, builds),
        )
    return cuda, mode


def _arch_way_out(s: Suggestion, gpus: tuple[Gpu, ...]) -> str:
    """The hint when the GPUs rule a CUDA out: the CUDA whose builds carry their architecture,
    never a driver upgrade alone (no driver adds an arch to a build)."""
    on = ", ".join(dict.fromkeys(g.label() for g in gpus))
    if s.kind == "cuda":
        return f"pass --cuda {s.cuda}, whose builds run on {on}"
    if s.kind == "driver" and s.cuda:
        how = " (through minor-version compatibility)" if s.mode == "compat" else ""
        return f"pass --cuda {s.cuda}, whose builds run on {on}; it needs driver ≥ {s.driver}{how}"
    last = f"; the last torch for it: {s.last}" if s.last else ""
    return f"pass --cuda cpu (no CUDA build on these channels runs on {on}){last}"


def _host_platform(request: Request) -> str:
    """The platform whose builds run on the planned GPUs: the first CUDA platform asked for."""
    return next((p for p in request.platforms if p not in NO_CUDA_PLATFORMS), "linux-64")


def _newest_official_torch(cuda: str) -> str | None:
    last = parse_version(cu.load_cuda_data().pytorch_channel_last)
    series = [t for t in cu.official_torch_for_cuda(cuda) if parse_version(t) <= last]
    return series[-1] if series else None


def _spec_name(spec: str) -> str:
    name = re.split(r"[\s=<>!~\[]", spec.strip(), maxsplit=1)[0]
    return name.split("::")[-1].lower()


def _plan_platform(
    request: Request,
    platform: str,
    cuda: str | None,
    torch: str | None,
    cuda_arch: str | None = None,
) -> PlatformPlan:
    """Specs that force the intended build: a CUDA build for CUDA plans (never the newer CPU build
    a bare `pytorch` + `cuda-version` lets win), the CPU build for CPU plans."""
    user = [s for s in request.conda_specs if _spec_name(s) not in PLAN_OWNED]
    if request.pip_specs and not any(_spec_name(s) == "pip" for s in user):
        user.append("pip")  # a pip section needs pip in the environment
    if request.python:
        user = [s for s in user if _spec_name(s) != "python"] + [f"python {request.python}.*"]
    tver = f"{torch}.*" if torch else "*"
    specs: list[str] = []
    constraints: list[str] = []
    if request.flavor == "conda-forge":
        if cuda:
            tag = cuda.replace(".", "")
            specs += [f"pytorch {tver} cuda{tag}*", f"cuda-version {cuda}.*"]
        else:
            specs.append(f"pytorch {tver} cpu*")
    else:
        if cuda:
            specs += [
                f"pytorch {tver} *cuda{cuda}*",
                f"pytorch-cuda {cuda}.*",
                "pytorch-mutex * cuda",
            ]
            # CUDA 12+: cuda-version is a spec, not only a constraint, so the written
            # environment.yml (these specs) holds it too: a plain re-solve of that file brought
            # cuda-version 12.6 in next to the 12.1 runtime (fixtures; issue 12 item 3). The
            # nvidia channel's 12.x packages depend on it; 11.x ones do not (and no cuda-version
            # 11.7 need exist), so there it stays a constraint.
            pinned = parse_version(cuda)[0] >= 12
            if pinned:
                specs.append(f"cuda-version {cuda}.*")
            # The nvidia channel drags in a newer cuda-version unless every toolkit-versioned
            # runtime package is pinned to the planned CUDA (fixtures: 12.1 ask -> 12.6 leak).
            constraints += [
                f"{n} {cuda}.*"
                for n in TOOLKIT_VERSIONED
                if n not in ("pytorch-cuda", "cudatoolkit") and not (pinned and n == "cuda-version")
            ]
        else:
            # `cpuonly` is only a pointer to this mutex build; the mutex is what selects CPU.
            specs += [f"pytorch {tver} *cpu*", "pytorch-mutex * cpu"]
    virtual = dict(_DEFAULT_VIRTUAL[platform])
    if cuda:
        virtual["__cuda"] = cuda
        if cuda_arch:  # CEP 46: only beside __cuda; build string 0
            virtual["__cuda_arch"] = cuda_arch
    for name, value in request.virtual_overrides:
        virtual[name] = value
    vps = tuple(_split_virtual(n, v) for n, v in sorted(virtual.items()))
    return PlatformPlan(platform, cuda, tuple(user + specs), tuple(constraints), vps)


def _split_virtual(name: str, value: str) -> tuple[str, str, str]:
    """'1=x86_64' -> ('1', 'x86_64'); '2.17' -> ('2.17', '0')."""
    version, _, build = value.partition("=")
    return (name, version, build or "0")


def render_plan(plan: Plan) -> list[str]:
    """Human text for --dry-run and the create summary."""
    if plan.cuda:
        head = f"CUDA {plan.cuda} ({plan.cuda_mode}), needs driver ≥ {plan.min_driver}"
    else:
        head = "CPU build"
    lines = [
        f"plan: {plan.flavor} flavor, {head}" + (f", torch {plan.torch}" if plan.torch else "")
    ]
    if plan.archs:
        lines.append(f"  GPU architectures: {' '.join(plan.archs)}")
    lines.append(f"  channels: {', '.join(plan.channels)}")
    if plan.platforms_from:
        lines.append(
            f"  platforms: {', '.join(p.platform for p in plan.platforms)} ({plan.platforms_from})"
        )
    for p in plan.platforms:
        lines.append(f"  {p.platform}: {'  '.join(p.specs)}")
        if p.constraints:
            lines.append(f"    constraints: {'  '.join(p.constraints)}")
        lines.append("    virtual: " + " ".join(p.virtual_specs()))
    if plan.pip_specs:
        lines.append(f"  pip: {'  '.join(plan.pip_specs)}")
    # warnings and notes are not repeated here: the lock workflow says them on stderr as the
    # solve starts (with --json too), and the JSON plan carries them
    return lines
