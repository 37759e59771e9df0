"""Doctor checks: small pure functions over recorded facts, each returning a verdict with its fix.

Every check takes (HostFacts, EnvFacts), never raises, and returns a Check whose summary names the
cause (not the symptom). Missing facts give `skip` with the reason. No I/O here: the facts were
probed (or replayed) elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from envtool.core import cuda as cudak
from envtool.core.facts import EnvFacts, HostFacts
from envtool.core.hints import finish_install_command
from envtool.core.shell_quote import quote_posix
from envtool.core.suggest import (
    Gpu,
    Suggestion,
    driver_ceiling_for_gpus,
    driver_floor_for_gpus,
    suggest_cuda,
)
from envtool.core.versions import cuda_from_build_tag, cuda_from_int, major_minor, parse_version

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
_RANK = {SKIP: 0, OK: 0, WARN: 1, FAIL: 2}
GIB = 1 << 30


@dataclass
class Check:
    id: str
    status: str  # ok | warn | fail | skip
    summary: str
    evidence: list[str] | dict[str, Any]
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- derived facts


def _torch_label(env: EnvFacts) -> str:
    if env.torch and env.torch.version:
        return f"torch {env.torch.version}"
    pkg = env.conda_packages.get("pytorch")
    if pkg:
        return f"pytorch {pkg.get('version', '?')} ({pkg.get('build', '?')})"
    return "torch"


def _conda_build(env: EnvFacts, name: str) -> str:
    return (env.conda_packages.get(name) or {}).get("build", "") or ""


def torch_is_cpu_build(env: EnvFacts) -> bool | None:
    """True when the torch in the env is a CPU-only build; None when we cannot tell.

    What the env's python imports wins (a pip CUDA wheel over a conda CPU build is a CUDA torch,
    see two-torch-installs); conda metadata decides only when torch was not probed."""
    t = env.torch
    if t and t.version:
        if "+cpu" in t.version:
            return True
        if t.cuda or cuda_from_build_tag(t.version.partition("+")[2]) is not None:
            return False
        return True  # torch.version.cuda is None: a CPU build
    build = _conda_build(env, "pytorch")
    if "cpuonly" in env.conda_packages or _conda_build(env, "pytorch-mutex") == "cpu":
        return True
    if build:
        return build.startswith("cpu") or "_cpu_" in build or cuda_from_build_tag(build) is None
    return None


def torch_cuda(env: EnvFacts) -> str | None:
    """The CUDA version the env's torch was built for ("12.1"), from the probe or the build tag."""
    t = env.torch
    if t and t.cuda:
        try:
            return major_minor(t.cuda)
        except ValueError:
            pass
    if t and t.version and "+" in t.version:
        found = cuda_from_build_tag(t.version.partition("+")[2])
        if found:
            return found
    build = _conda_build(env, "pytorch")
    if build and not torch_is_cpu_build(env):
        return cuda_from_build_tag(build)
    return None


_FOUND_VERSION = re.compile(r"too old \(found version (\d+)\)")


def driver_cuda_from_message(env: EnvFacts) -> str | None:
    """torch says "The NVIDIA driver on your system is too old (found version 11040)" -> "11.4"."""
    msg = env.torch.available_message if env.torch else None
    m = _FOUND_VERSION.search(msg or "")
    return cuda_from_int(int(m.group(1))) if m else None


def driver_cuda(host: HostFacts, env: EnvFacts) -> str | None:
    """Newest CUDA the driver runs: the probe's value, else derived from the driver version,
    else torch's own "found version NNNNN" message (a container without nvidia-smi)."""
    if host.driver_cuda:
        return host.driver_cuda
    if host.driver_version:
        return cudak.newest_cuda_native(host.driver_version)
    return driver_cuda_from_message(env)


def _driver_seen(host: HostFacts, env: EnvFacts) -> bool:
    return host.has_driver or driver_cuda(host, env) is not None


def _gpu_count(host: HostFacts, env: EnvFacts) -> int:
    if host.gpus:
        return len(host.gpus)
    return len(env.torch.capabilities) if env.torch and env.torch.capabilities else 0


def _gpus(host: HostFacts, env: EnvFacts) -> list[Gpu]:
    """The GPUs the checks and the suggested `create --cuda` are for: the ones the job sees
    (host_record.visible_gpus: CUDA_VISIBLE_DEVICES), as create plans for them and torch counts
    them; torch's own list when the host named none."""
    from envtool.core.host_record import visible_gpus

    gpus = [Gpu(g.capability, g.name) for g in visible_gpus(host)[0] if g.capability]
    if not gpus and env.torch and env.torch.capabilities:
        gpus = [Gpu(c) for c in env.torch.capabilities]
    return gpus


def suggestion_for(host: HostFacts, env: EnvFacts) -> Suggestion | None:
    """What `envtool create NAME --cuda X` should ask for on this host: core.suggest's answer for
    this driver (or, with no version, the CUDA level torch's message names) and these GPUs, over
    the builds conda-forge publishes (create's default channel). None when nothing is known
    about the driver."""
    dc = None if host.driver_version else driver_cuda(host, env)
    if not host.driver_version and not dc:
        return None
    return suggest_cuda(
        host.driver_version, _gpus(host, env), None, driver_cuda=dc, platform=_platform(host)
    )


def _platform(host: HostFacts) -> str:
    return host.platform if host.platform in ("linux-64", "linux-aarch64", "win-64") else "linux-64"


def pick_cuda_for_driver(host: HostFacts, env: EnvFacts) -> str | None:
    """The CUDA of suggestion_for, when the answer is a CUDA build (not a driver upgrade)."""
    s = suggestion_for(host, env)
    return s.cuda if s and s.kind == "cuda" else None


def _cu_tag(cuda: str) -> str:
    return "cu" + major_minor(cuda).replace(".", "")


# --------------------------------------------------------------------------- checks


def _name(env: EnvFacts) -> str:
    """What fixes call the environment: its name when the user gave one (`doctor demo`)."""
    return quote_posix(env.name) if env.name else "NAME"  # pasted into a shell


def _reinstall_fix(env: EnvFacts) -> str | None:
    """An env envtool installed from a lock is repaired by installing that lock again (it
    relinks what is gone); create --cuda auto would plan anew and rewrite environment.yml."""
    if env.install_state is None or not env.install_lock:
        return None
    return (
        f"{finish_install_command(env.name, env.prefix, env.install_lock)} relinks what is "
        f"missing (`envtool verify {_name(env)}` lists it)"
    )


def check_torch_present(host: HostFacts, env: EnvFacts) -> Check:
    ev: list[str] = []
    if env.python_exe:
        ev.append(f"python: {env.python_exe}")
    if env.status == "timeout" and host.driver_hung:
        # torch's CUDA init blocks on the same wedged driver: a symptom, not a second failure.
        ev.extend([env.error] if env.error else [])
        return Check(
            "torch-present",
            SKIP,
            "the environment's python timed out: explained by nvidia-driver (driver not answering)",
            ev,
        )
    if env.status in ("timeout", "crashed", "no-python"):
        summary = {
            "timeout": "the environment's python timed out importing torch",
            "crashed": "the environment's python crashed importing torch",
            "no-python": "the environment has no python interpreter",
        }[env.status]
        if env.error:
            ev.append(env.error)
        if env.status == "no-python" and env.install_state is None and not env.conda_packages:
            summary = f"{env.prefix or 'this folder'} holds no python (is it an environment?)"
        return Check(
            "torch-present",
            FAIL,
            summary,
            ev,
            (_reinstall_fix(env) if env.status == "no-python" else None)
            or "run `python -c 'import torch'` in the environment to see the error; "
            f"recreate it with `envtool create {_name(env)} --cuda auto` if it is broken",
        )
    if env.torch is None:
        if env.torch_import_error:
            ev.append(env.torch_import_error)
            return Check(
                "torch-present",
                FAIL,
                "torch is not importable in this environment",
                ev,
                # files gone (no torch module at all): relink; any other import error (a missing
                # libcuda, an ABI clash) is not fixed by installing the same lock again
                (_reinstall_fix(env) if "No module named" in env.torch_import_error else None)
                or f"envtool create {_name(env)} --cuda auto (or `pip install torch` in the "
                "environment)",
            )
        if env.status == "not-probed" and not env.prefix:
            return Check("torch-present", SKIP, "the environment was not probed", ev)
        if "pytorch" not in env.conda_packages:
            return Check(
                "torch-present",
                FAIL,
                "torch is not installed in this environment",
                ev,
                _reinstall_fix(env)
                or f"envtool create {_name(env)} --cuda auto (or `pip install torch` in the "
                "environment)",
            )
    if env.torch and env.torch.path:
        ev.append(f"imported from {env.torch.path}")
    return Check("torch-present", OK, f"{_torch_label(env)} is installed", ev)


def check_nvidia_driver(host: HostFacts, env: EnvFacts) -> Check:
    ev: list[str] = []
    if host.driver_hung:  # NVML never answered; /proc may still name the version
        ev.extend(host.probe_errors)
        if host.driver_version:
            ev.append(f"driver {host.driver_version} (source: {host.source or '?'})")
        return Check(
            "nvidia-driver",
            FAIL,
            "the NVIDIA driver is not answering (NVML hung): a GPU may have fallen off the bus",
            ev,
            "check `dmesg | grep -i xid` (Xid 79: a GPU fell off the bus); reboot the node "
            "(`nvidia-smi -r` resets a GPU only while the driver still answers, and it uses the "
            "same library that hung here). A node that is only slow to start its GPUs (no "
            "persistence mode): raise ENVTOOL_NVML_TIMEOUT",
        )
    if host.has_driver:
        ev.append(f"driver {host.driver_version} (source: {host.source or '?'})")
        if host.driver_cuda:
            ev.append(f"driver supports CUDA ≤ {host.driver_cuda}")
        return Check("nvidia-driver", OK, f"NVIDIA driver {host.driver_version}", ev)
    from_msg = driver_cuda_from_message(env)
    if from_msg:
        ev.append(env.torch.available_message if env.torch else "")
        return Check(
            "nvidia-driver",
            OK,
            f"an NVIDIA driver is present (version not probed; it reports CUDA {from_msg})",
            ev,
        )
    ev.extend(host.probe_errors or ([host.no_driver_reason] if host.no_driver_reason else []))
    tc = torch_cuda(env)
    cpu = torch_is_cpu_build(env)
    if tc and not cpu:
        floor = cudak.min_driver(tc)
        need = f"≥ {floor} (CUDA {tc})" if floor else f"that supports CUDA {tc}"
        if env.torch and env.torch.available_message:
            ev.append(env.torch.available_message)
        return Check(
            "nvidia-driver",
            FAIL,
            f"no NVIDIA driver: {_torch_label(env)} is a CUDA {tc} build but this host has no usable driver",
            ev,
            f"install an NVIDIA driver {need}; in a container, start it with `--gpus all` "
            "(NVIDIA Container Toolkit)",
        )
    detail = [f"{_torch_label(env)} is a CPU build"] if cpu else []
    if host.nvcc_version:
        detail.append(f"a CUDA {host.nvcc_version} toolkit is installed but no driver")
    return Check(
        "nvidia-driver",
        OK,
        "no NVIDIA driver — CPU only" + (f" ({'; '.join(detail)})" if detail else ""),
        ev,
        f"if this machine has an NVIDIA GPU: install its driver, then `envtool create {_name(env)} --cuda auto`"
        if host.nvcc_version or host.gpus
        else None,
    )


def _driver_fix(host: HostFacts, env: EnvFacts, floor: str | None, tc: str) -> str:
    upgrade = (
        f"upgrade the NVIDIA driver to ≥ {floor} (CUDA {tc})" if floor else "upgrade the driver"
    )
    s = suggestion_for(host, env)
    arch = _arch_problem(host, env)
    if arch:  # no driver adds kernels for this GPU to the build: the fix is another CUDA
        return f"no driver makes this build run on {arch} (see gpu-arch-covered): " + _cuda_fix(
            host, env, s
        )
    if s and s.kind == "ceiling":
        return s.advice()
    if s and s.kind == "driver" and s.gpu:  # no CUDA build helps: the GPU needs a newer driver
        return f"{upgrade}; no older CUDA build helps: {s.gpu} needs ≥ {s.driver}"
    if s and s.kind == "cuda" and s.cuda and parse_version(s.cuda) < parse_version(tc):
        return (
            f"{upgrade}, or `envtool create {_name(env)} --cuda {s.cuda}` "
            "(the newest CUDA this driver runs)"
        )
    return upgrade


def check_driver_vs_gpu(host: HostFacts, env: EnvFacts) -> Check:
    """A driver older than a GPU's own floor cannot drive that GPU, whatever the CUDA."""
    cid = "driver-vs-gpu"
    gpus = _gpus(host, env)
    if not host.driver_version or not gpus:
        return Check(cid, SKIP, "needs a known driver version and GPU", [])
    over = driver_ceiling_for_gpus(host.driver_version, gpus)
    if over:  # a family's last branch is older than this driver: the facts cannot all be true
        branch, gpu, family = over
        s = suggestion_for(host, env)
        return Check(
            cid,
            FAIL,
            f"driver {host.driver_version} does not drive {gpu.label()}: R{branch} is the last "
            f"driver branch for {family} GPUs",
            [
                f"driver {host.driver_version} (branch R{cudak.driver_branch(host.driver_version)})",
                f"GPU {gpu.label()}: {family}, last driver branch R{branch}",
                "a recorded or overridden host may be mixing two machines' facts",
            ],
            s.advice() if s and s.kind == "ceiling" else f"install an R{branch} driver",
        )
    too_old = driver_floor_for_gpus(host.driver_version, gpus)
    if too_old is None:
        return Check(cid, OK, f"driver {host.driver_version} drives every GPU", [])
    floor, gpu = too_old
    s = Suggestion("driver", driver=floor, gpu=gpu.label())
    return Check(
        cid,
        FAIL,
        f"driver {host.driver_version} cannot drive {gpu.label()}: it needs ≥ {floor}",
        [f"driver {host.driver_version}", f"GPU {gpu.label()}: driver floor {floor}"],
        s.upgrade(),
    )


def check_driver_vs_torch_cuda(host: HostFacts, env: EnvFacts) -> Check:
    cid = "driver-vs-torch-cuda"
    tc = torch_cuda(env)
    if tc is None or torch_is_cpu_build(env):
        return Check(cid, SKIP, "torch is not a CUDA build", [])
    msg = env.torch.available_message if env.torch else None
    ev: list[str] = []
    if host.driver_version:
        v = cudak.driver_supports(host.driver_version, tc)
        native = cudak.newest_cuda_native(host.driver_version)
        compat = cudak.newest_cuda_compat(host.driver_version)
        runs = f"driver {host.driver_version} runs CUDA ≤ {native or '?'} natively"
        if compat and compat != native:
            runs += f" (≤ {compat} with minor-version compatibility)"
        ev.append(runs)
        if host.platform.startswith("win"):
            ev.append(
                "driver floors are NVIDIA's Linux numbers; Windows floors are slightly higher"
            )
        if msg:
            ev.append(msg)
        if v.mode == "no":
            return Check(
                cid,
                FAIL,
                f"{_torch_label(env)} needs driver ≥ {v.min_driver} (CUDA {tc}); {runs}",
                ev,
                _driver_fix(host, env, v.min_driver, tc),
            )
        if v.mode == "unknown":
            return Check(cid, SKIP, f"CUDA {tc} is not in envtool's driver table", ev)
        if v.mode == "compat":
            return Check(
                cid,
                OK,
                f"driver {host.driver_version} runs CUDA {tc} via minor-version compatibility",
                ev,
            )
        return Check(cid, OK, f"driver {host.driver_version} supports CUDA {tc}", ev)
    dc = driver_cuda(host, env)
    if dc is None:
        return Check(cid, SKIP, "no NVIDIA driver seen (see nvidia-driver)", [])
    # Driver version unknown, but the driver's CUDA level is (torch's "found version" message).
    if msg:
        ev.append(msg)
    floor = cudak.min_driver(tc)
    if parse_version(dc) < parse_version(tc):
        same_major = parse_version(dc)[0] == parse_version(tc)[0]
        cfloor = cudak.compat_floor(tc)
        if not (same_major and cfloor and msg is None):
            return Check(
                cid,
                FAIL,
                f"{_torch_label(env)} needs driver ≥ {floor or '?'} (CUDA {tc}); "
                f"the installed driver runs CUDA ≤ {dc}",
                ev,
                _driver_fix(host, env, floor, tc),
            )
    return Check(cid, OK, f"driver supports CUDA {dc} ≥ {tc}", ev)


def check_minor_version_compat(host: HostFacts, env: EnvFacts) -> Check:
    cid = "minor-version-compat"
    tc = torch_cuda(env)
    if tc is None or torch_is_cpu_build(env) or not host.driver_version:
        return Check(cid, SKIP, "needs a CUDA torch build and a known driver version", [])
    v = cudak.driver_supports(host.driver_version, tc)
    if v.mode != "compat":
        if v.mode == "native":
            return Check(cid, OK, f"driver runs CUDA {tc} natively", [])
        return Check(cid, SKIP, f"driver cannot run CUDA {tc} (see driver-vs-torch-cuda)", [])
    return Check(
        cid,
        WARN,
        f"driver {host.driver_version} runs CUDA {tc} only through minor-version compatibility "
        "(PTX JIT of newer code fails, e.g. Triton/torch.compile kernels)",
        [f"native needs ≥ {v.min_driver}; compatibility floor {v.compat_floor}"],
        f"upgrade the NVIDIA driver to ≥ {v.min_driver}",
    )


def _cpu_markers(env: EnvFacts) -> list[str]:
    ev = []
    t = env.torch
    if t and t.version:
        ev.append(f"torch {t.version}, torch.version.cuda = {t.cuda!r}")
    if _conda_build(env, "pytorch"):
        ev.append(f"conda pytorch build {_conda_build(env, 'pytorch')}")
    if _conda_build(env, "pytorch-mutex"):
        ev.append(f"pytorch-mutex {_conda_build(env, 'pytorch-mutex')}")
    if "cpuonly" in env.conda_packages:
        ev.append("cpuonly package installed (it forces the CPU variant)")
    for name in ("cudatoolkit", "pytorch-cuda", "cuda-version"):
        if name in env.conda_packages:
            ev.append(
                f"{name} {env.conda_packages[name].get('version')} is installed but unused by a CPU torch"
            )
    return ev


def check_cpu_torch_on_gpu_host(host: HostFacts, env: EnvFacts) -> Check:
    cid = "cpu-torch-on-gpu-host"
    cpu = torch_is_cpu_build(env)
    if cpu is None:
        return Check(cid, SKIP, "no torch facts", [])
    if not cpu:
        return Check(cid, OK, "torch is a CUDA build", [])
    ev = _cpu_markers(env)
    gpus = _gpu_count(host, env)
    if not _driver_seen(host, env):
        # A CPU torch on a machine without a driver is a valid setup (CI, login nodes); the
        # nvidia-driver check already says "no NVIDIA driver — CPU only".
        if host.nvcc_version:
            ev.append(f"a CUDA {host.nvcc_version} toolkit is installed (nvcc) but no driver")
        return Check(cid, OK, "CPU torch on a host without NVIDIA GPUs", ev)
    names = sorted({g.name for g in host.gpus}) or [f"{gpus} GPU(s)"]
    if gpus == 0:
        names = ["an NVIDIA driver"]
    s = suggestion_for(host, env)
    pick = s.cuda if s and s.kind == "cuda" else None
    series = env.torch.version if env.torch and env.torch.version else None
    wheel_cuda = None
    if series:
        builds = cudak.official_cuda_builds(series)
        dc = (
            cudak.newest_cuda_compat(host.driver_version)
            if host.driver_version
            else driver_cuda(host, env)
        )
        if builds and dc:
            ok_builds = [b for b in builds if parse_version(b) <= parse_version(dc)]
            wheel_cuda = ok_builds[-1] if ok_builds else None
        elif "cudatoolkit" in env.conda_packages:
            wheel_cuda = major_minor(env.conda_packages["cudatoolkit"]["version"])
    fix = f"envtool create {_name(env)} --cuda {pick or 'auto'}"
    if s and s.kind in ("driver", "ceiling"):
        fix = f"{s.upgrade()}, then `{fix}`"
        if s.gpu:  # the driver cannot drive the GPU: no wheel runs on it either
            wheel_cuda = None
    if wheel_cuda and series:
        base = series.partition("+")[0]
        fix += (
            f", or in this env: pip install torch=={base} --index-url "
            f"https://download.pytorch.org/whl/{_cu_tag(wheel_cuda)}"
        )
    if "cpuonly" in env.conda_packages:
        fix += " (and `conda remove cpuonly`)"
    return Check(
        cid,
        FAIL,
        f"{_torch_label(env)} is a CPU-only build on a machine with {', '.join(names)}",
        ev,
        fix,
    )


def check_cuda_available(host: HostFacts, env: EnvFacts) -> Check:
    cid = "cuda-available"
    t = env.torch
    tc = torch_cuda(env)
    if t is None or t.is_available is None:
        return Check(cid, SKIP, "torch.cuda.is_available() was not run (use without --fast)", [])
    if tc is None or torch_is_cpu_build(env):
        return Check(cid, SKIP, "torch is a CPU build (see cpu-torch-on-gpu-host)", [])
    if t.is_available:
        n = t.device_count
        return Check(cid, OK, f"torch sees {n if n is not None else 'the'} GPU(s)", [])
    if not _driver_seen(host, env):
        return Check(cid, SKIP, "explained by nvidia-driver (no driver)", [])
    if host.driver_version and cudak.driver_supports(host.driver_version, tc).mode == "no":
        return Check(cid, SKIP, "explained by driver-vs-torch-cuda", [])
    if driver_cuda_from_message(env):
        return Check(cid, SKIP, "explained by driver-vs-torch-cuda", [])
    if host.cuda_visible_devices is not None and host.cuda_visible_devices.strip() in ("", "-1"):
        return Check(cid, SKIP, "explained by cuda-visible-devices", [])
    ev = [t.available_message] if t.available_message else []
    return Check(
        cid,
        FAIL,
        "torch.cuda.is_available() is False although the driver supports this build"
        + (f": {t.available_message.splitlines()[0]}" if t.available_message else ""),
        ev,
        "check `nvidia-smi` works in this shell/container and that /dev/nvidia* are accessible; "
        "see ld-library-path and cuda-visible-devices",
    )


def _arch_list(env: EnvFacts, platform: str = "linux-64") -> tuple[tuple[str, ...] | None, str]:
    t = env.torch
    if t and t.arch_list:
        try:
            return cudak.parse_arch_list(list(t.arch_list)), "torch.cuda.get_arch_list()"
        except ValueError:
            pass
    tc = torch_cuda(env)
    if tc:
        flavor, version = _torch_build_origin(env)
        archs = cudak.build_archs(flavor, tc, version, platform)
        if archs:
            who = "conda-forge" if flavor == "conda-forge" else "official"
            return archs, f"{who} CUDA {tc} builds (envtool table)"
    return None, ""


def _cuda_fix(host: HostFacts, env: EnvFacts, s: Suggestion | None) -> str:
    """The fix for a build without kernels for a GPU: the CUDA whose builds carry its arch (and
    the driver that needs, if any); with none left, the last torch that runs on it."""
    s = s or suggest_cuda(None, _gpus(host, env), None, platform=_platform(host))
    create = f"envtool create {_name(env)} --cuda"
    if s.kind == "cuda":
        return f"{create} {s.cuda}"
    if s.kind == "driver" and s.cuda and not s.gpu:
        how = " (minor-version compatibility)" if s.mode == "compat" else ""
        return f"{create} {s.cuda}, on a driver ≥ {s.driver}{how}"
    if s.kind == "driver":
        return s.upgrade()
    if s.kind == "ceiling":
        return s.advice()
    last = s.last or "build torch from source for this GPU"
    return f"no current build runs on it: {last}"


def _arch_problem(host: HostFacts, env: EnvFacts) -> str | None:
    """'Tesla K80 (sm_37)' when the env's torch build has no kernels for a GPU; None otherwise."""
    gpus = [(g.name, g.capability) for g in host.gpus if g.capability]
    archs, _ = _arch_list(env, _platform(host))
    if not archs:
        return None
    for name, cap in gpus:
        try:
            if not cudak.arch_covered(cap, archs):
                return f"{name} (sm_{cap.replace('.', '')})"
        except ValueError:
            continue
    return None


def _torch_build_origin(env: EnvFacts) -> tuple[str, str | None]:
    """(flavor, torch release) of the env's torch build, for its arch list: a conda pytorch from
    conda-forge (and not shadowed by a pip wheel, whose version says +cuXXX) is conda-forge's own
    build; anything else is PyTorch's official build."""
    t = env.torch
    conda = env.conda_packages.get("pytorch") or {}
    pip_wheel = bool(t and t.version and "+" in t.version)
    if conda and "conda-forge" in (conda.get("channel") or "") and not pip_wheel:
        return "conda-forge", conda.get("version") or (t.version if t else None)
    return "pytorch", t.version if t and t.version else conda.get("version")


def check_gpu_arch_covered(host: HostFacts, env: EnvFacts) -> Check:
    cid = "gpu-arch-covered"
    if torch_cuda(env) is None or torch_is_cpu_build(env):
        return Check(cid, SKIP, "torch is not a CUDA build", [])
    gpus = [(g.index, g.name, g.capability) for g in host.gpus if g.capability]
    if not gpus and env.torch and env.torch.capabilities:
        gpus = [(i, f"GPU {i}", c) for i, c in enumerate(env.torch.capabilities)]
    if not gpus:
        return Check(cid, SKIP, "no GPU compute capabilities known", [])
    archs, source = _arch_list(env, _platform(host))
    if not archs:
        return Check(cid, SKIP, f"arch list of CUDA {torch_cuda(env)} builds unknown", [])
    ev = [f"arch list ({source}): {' '.join(archs)}"]
    missing = []
    for idx, name, cap in gpus:
        try:
            covered = cudak.arch_covered(cap, archs)
        except ValueError:
            continue
        ev.append(
            f"GPU {idx} {name}: sm_{cap.replace('.', '')} {'covered' if covered else 'NOT covered'}"
        )
        if not covered:
            missing.append((idx, name, cap))
    if not missing:
        return Check(cid, OK, "every GPU's architecture is in torch's build", ev)
    idx, name, cap = missing[0]
    fix = _cuda_fix(host, env, suggestion_for(host, env))
    return Check(
        cid,
        FAIL,
        f"{_torch_label(env)} has no kernels for {name} (compute capability {cap}): "
        '"no kernel image is available"',
        ev,
        fix,
    )


def _conda_cuda_claims(env: EnvFacts) -> dict[str, str]:
    claims: dict[str, str] = {}
    for name in ("cuda-version", "cudatoolkit", "pytorch-cuda"):
        pkg = env.conda_packages.get(name)
        if pkg and pkg.get("version"):
            try:
                claims[name] = major_minor(pkg["version"])
            except ValueError:
                pass
    build = _conda_build(env, "pytorch")
    if build and not torch_is_cpu_build(env):
        bc = cuda_from_build_tag(build)
        if bc:
            claims["pytorch build"] = bc
    return claims


def check_conda_cuda_consistent(host: HostFacts, env: EnvFacts) -> Check:
    cid = "conda-cuda-consistent"
    claims = _conda_cuda_claims(env)
    if len(claims) < 2:
        return Check(cid, SKIP, "fewer than two conda packages name a CUDA version", claims)
    ev = {k: v for k, v in claims.items()}
    target = claims.get("pytorch build") or claims.get("pytorch-cuda")
    pin = f"pin cuda-version={target}" if target else "pin one cuda-version"
    if target:
        pin += f" (the CUDA torch was built for) and re-create: `envtool create {_name(env)} --cuda {target}`"
    majors = {parse_version(v)[0] for v in claims.values()}
    listing = ", ".join(f"{k} {v}" for k, v in claims.items())
    if len(majors) > 1:
        return Check(cid, FAIL, f"conda packages mix CUDA majors: {listing}", ev, pin)
    if "pytorch-cuda" in claims and len(set(claims.values())) > 1:
        return Check(
            cid,
            WARN,
            f"pytorch-cuda pins CUDA {claims['pytorch-cuda']} but {listing}: mixed CUDA runtime libraries",
            ev,
            pin,
        )
    built = claims.get("pytorch build")
    runtime = [claims[k] for k in ("cuda-version", "cudatoolkit") if k in claims]
    if built and any(parse_version(r) < parse_version(built) for r in runtime):
        return Check(cid, WARN, f"CUDA runtime older than torch's build: {listing}", ev, pin)
    return Check(cid, OK, f"conda CUDA packages agree: {listing}", ev)


def check_two_torch_installs(host: HostFacts, env: EnvFacts) -> Check:
    cid = "two-torch-installs"
    pips = [
        p
        for p in env.pip_torch
        if (p.get("name") or "torch").lower() == "torch" and (p.get("installer") or "") != "conda"
    ]
    conda = env.conda_packages.get("pytorch")
    installs = (
        [f"conda pytorch {conda.get('version')} ({conda.get('build', '')})"] if conda else []
    ) + [f"pip torch {p.get('version')} at {p.get('location', '?')}" for p in pips]
    if len(installs) < 2:
        return Check(cid, OK, "one torch install", installs)
    imported = env.torch.version if env.torch else None
    ev = installs + (
        [f"python imports torch {imported} from {env.torch.path}"] if env.torch else []
    )
    pip_imported = bool(imported) and any(p.get("version") == imported for p in pips)
    if conda and pip_imported:
        # pip unpacked over the conda package: the files are pip's, conda's record is stale
        fix = (
            f"re-create the environment (`envtool create {_name(env)}`), or keep the pip wheel and "
            f"`conda remove --force pytorch` (conda's record of {conda.get('version')} is stale)"
        )
    elif conda and imported and _same_release(imported, conda.get("version", "")):
        fix = "in the environment: pip uninstall torch (the stray pip copy)"
    elif conda:
        fix = f"conda remove pytorch (or pip uninstall torch), keeping one; or re-create with `envtool create {_name(env)}`"
    else:
        fix = "pip uninstall torch until one copy remains, then reinstall the one you want"
    return Check(
        cid,
        FAIL,
        f"{len(installs)} torch installs in one environment; python imports "
        f"{imported or 'an unpredictable one'}",
        ev,
        fix,
    )


def _same_release(a: str, b: str) -> bool:
    try:
        return parse_version(a) == parse_version(b)
    except ValueError:
        return False


def check_cuda_visible_devices(host: HostFacts, env: EnvFacts) -> Check:
    cid = "cuda-visible-devices"
    cvd = host.cuda_visible_devices
    if cvd is None:
        return Check(cid, OK, "CUDA_VISIBLE_DEVICES is not set (all GPUs visible)", [])
    shown = f'CUDA_VISIBLE_DEVICES="{cvd}"'  # as a user would type it in a shell
    ev = [shown]
    n = len(host.gpus)
    items = [x.strip() for x in cvd.split(",")]
    if cvd.strip() in ("", "-1") or (items and items[0] in ("", "-1")):
        if n == 0:
            return Check(cid, OK, "CUDA_VISIBLE_DEVICES hides all GPUs (none present)", ev)
        return Check(
            cid,
            FAIL,
            f"{shown} hides all {n} GPU(s) from CUDA",
            ev,
            "unset CUDA_VISIBLE_DEVICES",
        )
    if n == 0:
        return Check(cid, SKIP, "no GPUs probed to compare CUDA_VISIBLE_DEVICES with", ev)
    uuids = [g.uuid for g in host.gpus if g.uuid]
    bad = []
    for it in items:
        if it.isdigit():
            if int(it) >= n:
                bad.append(it)
        elif it.upper().startswith(("GPU-", "MIG-")):
            if (
                uuids
                and not any(u.startswith(it) for u in uuids)
                and not it.upper().startswith("MIG-")
            ):
                bad.append(it)
        else:
            bad.append(it)
    if bad:
        return Check(
            cid,
            FAIL,
            f"CUDA_VISIBLE_DEVICES names GPU(s) that do not exist: {', '.join(bad)} "
            f"(this host has {n}: 0..{n - 1})",
            ev,
            f"unset CUDA_VISIBLE_DEVICES, or use indexes 0..{n - 1}",
        )
    return Check(cid, OK, f"CUDA_VISIBLE_DEVICES selects {len(items)} of {n} GPU(s)", ev)


def check_ld_library_path(host: HostFacts, env: EnvFacts) -> Check:
    cid = "ld-library-path"
    if not host.ld_library_hits:
        return Check(cid, OK, "no CUDA libraries on LD_LIBRARY_PATH", [])
    prefix = env.prefix or ""
    # libcuda.so is the driver's own library (NVIDIA containers put it on LD_LIBRARY_PATH on
    # purpose); only toolkit runtimes (cudart, cublas, nccl, cudnn) can shadow the env's copies.
    hits = [
        h
        for h in host.ld_library_hits
        if not (prefix and h.startswith(prefix)) and not _basename(h).startswith("libcuda.so")
    ]
    if not hits:
        return Check(
            cid,
            OK,
            "no CUDA runtime libraries from outside the environment on LD_LIBRARY_PATH",
            host.ld_library_hits,
        )
    dirs = sorted({h.rsplit("/", 1)[0] if "/" in h else h for h in hits})
    failed = bool(env.torch and env.torch.is_available is False and torch_cuda(env))
    return Check(
        cid,
        FAIL if failed else WARN,
        f"LD_LIBRARY_PATH puts {', '.join(dirs)} first, shadowing the environment's CUDA libraries",
        hits,
        "unset LD_LIBRARY_PATH (or remove " + ", ".join(dirs) + " from it)",
    )


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def check_nvcc_vs_torch(host: HostFacts, env: EnvFacts) -> Check:
    cid = "nvcc-vs-torch"
    tc = torch_cuda(env)
    if not host.nvcc_version:
        return Check(cid, SKIP, "no nvcc / CUDA_HOME found (only needed to build extensions)", [])
    if tc is None or torch_is_cpu_build(env):
        return Check(cid, SKIP, "torch is not a CUDA build", [f"nvcc {host.nvcc_version}"])
    ev = [
        f"nvcc {host.nvcc_version}" + (f" at {host.cuda_home}" if host.cuda_home else ""),
        f"torch CUDA {tc}",
    ]
    if parse_version(host.nvcc_version)[0] != parse_version(tc)[0]:
        return Check(
            cid,
            WARN,
            f"nvcc {host.nvcc_version} and torch's CUDA {tc} differ in major version: "
            "building CUDA extensions will fail",
            ev,
            f"point CUDA_HOME at a CUDA {tc} toolkit, or `conda install -c conda-forge cuda-nvcc={tc}`",
        )
    return Check(cid, OK, f"nvcc {host.nvcc_version} matches torch's CUDA {tc} major", ev)


def check_dev_shm(host: HostFacts, env: EnvFacts) -> Check:
    cid = "dev-shm"
    if host.shm_bytes is None:
        return Check(cid, SKIP, "/dev/shm size not probed", [])
    size = f"{host.shm_bytes / (1 << 20):.0f} MiB"
    if host.shm_bytes < GIB and len(host.gpus) >= 2:
        return Check(
            cid,
            WARN,
            f"/dev/shm is only {size}: NCCL and DataLoader workers run out of shared memory",
            [f"/dev/shm {host.shm_bytes} bytes", f"{len(host.gpus)} GPUs"],
            "in Docker: --ipc=host or --shm-size=16g",
        )
    return Check(cid, OK, f"/dev/shm {size}", [])


def check_mig(host: HostFacts, env: EnvFacts) -> Check:
    cid = "mig"
    migs = [g for g in host.gpus if g.mig_enabled]
    if not migs:
        return Check(cid, OK if host.gpus else SKIP, "MIG is off", [])
    ev = [f"GPU {g.index} {g.name}: MIG on, {g.mig_devices} instance(s)" for g in migs]
    return Check(
        cid,
        WARN,
        f"MIG is enabled on {len(migs)} GPU(s): a process can use only one MIG instance",
        ev,
        "set CUDA_VISIBLE_DEVICES to one MIG UUID (`nvidia-smi -L` lists them); "
        "multi-GPU training needs MIG off",
    )


def check_install_state(host: HostFacts, env: EnvFacts) -> Check:
    cid = "install-state"
    if env.install_state is None:
        return Check(cid, SKIP, "not an envtool-installed environment", [])
    if env.install_state == "incomplete":
        return Check(
            cid,
            FAIL,
            "the last install of this environment did not finish",
            [f"install_state: {env.install_state}"]
            + ([f"installed from {env.install_lock}"] if env.install_lock else []),
            finish_install_command(env.name, env.prefix, env.install_lock),
        )
    return Check(cid, OK, f"install state: {env.install_state}", [])


def check_lock_drift(host: HostFacts, env: EnvFacts) -> Check:
    """EnvFacts.drift is `envtool verify`'s result: {clean, missing, extra, changed, lock_path}."""
    cid = "lock-drift"
    drift = env.drift
    if drift is None:
        return Check(cid, SKIP, "no lock to compare with (or --fast)", [])
    if drift.get("error"):
        return Check(
            cid,
            WARN,
            f"could not compare with the lock: {drift['error']}",
            [drift["error"]],
            f"envtool verify {_name(env)}",
        )
    if drift.get("clean", not drift):
        # records only (doctor stays fast): a file deleted from a package is verify's to see
        return Check(
            cid,
            OK,
            "installed package records match the lock (their files: `envtool verify`)",
            [],
        )
    ev: list[str] = []
    for kind in ("changed", "missing", "extra"):
        for item in drift.get(kind) or []:
            if isinstance(item, dict):
                name = f"{item.get('manager', '')} {item.get('name', '?')}".strip()
                was, now = item.get("locked"), item.get("installed")
                ev.append(
                    f"{kind}: {name}"
                    + (f" (locked {was})" if was else "")
                    + (f" (installed {now})" if now else "")
                )
            else:
                ev.append(f"{kind}: {item}")
    counts = ", ".join(
        f"{len(drift.get(k) or [])} {k}" for k in ("changed", "missing", "extra") if drift.get(k)
    )
    return Check(
        cid,
        FAIL,
        f"installed packages differ from the lock ({counts or 'see evidence'})",
        ev or [f"{k}: {v}" for k, v in drift.items()],
        f"{finish_install_command(env.name, env.prefix, drift.get('lock_path') or env.install_lock)}"
        f" (restore the locked packages); `envtool verify {_name(env)}` lists them",
    )


CHECKS: tuple[Callable[[HostFacts, EnvFacts], Check], ...] = (
    # Order matters: the first failing check is the headline, so causes come before symptoms.
    check_install_state,  # an interrupted install explains everything after it
    check_torch_present,
    check_nvidia_driver,
    check_driver_vs_gpu,  # a driver past the GPU's last branch, or below its floor
    check_gpu_arch_covered,  # architecture before driver: no driver adds kernels to a build
    check_driver_vs_torch_cuda,
    check_cpu_torch_on_gpu_host,
    check_lock_drift,
    check_two_torch_installs,
    check_cuda_visible_devices,
    check_conda_cuda_consistent,
    check_minor_version_compat,
    check_ld_library_path,
    check_cuda_available,
    check_nvcc_vs_torch,
    check_dev_shm,
    check_mig,
)


def run_checks(host: HostFacts, env: EnvFacts) -> list[Check]:
    """Every check, in headline order. A check that trips over odd facts becomes a skip."""
    out = []
    for fn in CHECKS:
        try:
            out.append(fn(host, env))
        except Exception as exc:  # noqa: BLE001 - a check must never take the doctor down
            cid = fn.__name__.removeprefix("check_").replace("_", "-")
            out.append(Check(cid, SKIP, f"could not evaluate: {exc!r}", []))
    return out


def overall(checks: list[Check]) -> str:
    worst = max((_RANK.get(c.status, 0) for c in checks), default=0)
    return {0: OK, 1: WARN, 2: FAIL}[worst]


def headline(checks: list[Check]) -> str:
    """The one-line verdict: the first failing cause, else the first warning, else a short OK."""
    for status in (FAIL, WARN):
        for c in checks:
            if c.status == status:
                return c.summary
    driver = check_by_id(checks, "nvidia-driver")
    if driver and driver.summary.startswith("no NVIDIA driver"):
        return driver.summary
    return "no problems found"


def check_by_id(checks: list[Check], cid: str) -> Check | None:
    return next((c for c in checks if c.id == cid), None)


# --------------------------------------------------------------------------- --deep results


def check_deep_matmul(deep: dict[str, Any]) -> Check:
    cid = "deep-matmul"
    if deep.get("skipped"):
        return Check(cid, SKIP, deep["skipped"], [])
    mm = deep.get("matmul") or {}
    if mm.get("error") and not mm.get("results"):
        return Check(
            cid,
            FAIL,
            f"the GPU matmul test did not run: {mm['error'].splitlines()[0]}",
            [mm["error"]],
            "run `envtool doctor --deep --verbose` and read the error; see the other checks first",
        )
    rows = mm.get("results") or []
    if not rows:
        return Check(cid, SKIP, "no matmul results", [])
    ev = []
    for r in rows:
        if "rel_error" in r:
            line = f"{r.get('device')} {r.get('name', '')} {r.get('dtype')}: rel error {r['rel_error']:.2e}"
        else:  # the matmul itself raised on this GPU: the row carries only the error
            line = f"{r.get('device')} {r.get('dtype')}: {r.get('error', 'no result')}"
        if r.get("tflops") is not None:
            line += f", {r['tflops']} TFLOP/s"
        ev.append(line.replace("  ", " "))
    bad = [r for r in rows if not r.get("ok")]
    if bad:
        r = bad[0]
        why = r.get("error") or f"relative error {r.get('rel_error'):.2e} > {r.get('tolerance')}"
        return Check(
            cid,
            FAIL,
            f"wrong matmul results on {r.get('device')} ({r.get('dtype')}): {why}",
            ev,
            "take the GPU out of service and check `nvidia-smi -q -d ECC,PAGE_RETIREMENT`; "
            "reset it or contact the host's admin",
        )
    summary = f"matmul correct on {len({r['device'] for r in rows})} device(s) (bf16, fp32)"
    speeds = [r["tflops"] for r in rows if r.get("dtype") == "bfloat16" and r.get("tflops")]
    if speeds:
        summary += f"; bf16 {min(speeds):.0f}–{max(speeds):.0f} TFLOP/s"
    return Check(cid, OK, summary, ev)


def check_deep_allreduce(deep: dict[str, Any]) -> Check:
    cid = "deep-allreduce"
    if deep.get("skipped"):
        return Check(cid, SKIP, deep["skipped"], [])
    ar = deep.get("allreduce")
    if not ar:
        return Check(cid, SKIP, "all-reduce not run", [])
    if ar.get("skipped"):
        return Check(cid, SKIP, ar["skipped"], [])
    sizes = ar.get("sizes") or []
    ev: dict[str, Any] = {
        "world_size": ar.get("world_size"),
        "backend": ar.get("backend"),
        "nccl": ar.get("nccl"),
        "busbw_gbps": {f"{s['size_mib']} MiB": s["busbw_gbps"] for s in sizes},
        "algbw_gbps": {f"{s['size_mib']} MiB": s["algbw_gbps"] for s in sizes},
    }
    if ar.get("error"):
        ev["error"] = ar["error"]
        return Check(
            cid,
            FAIL,
            f"{ar.get('backend') or 'NCCL'} all-reduce failed: {ar['error'].splitlines()[0]}",
            ev,
            "rerun with NCCL_DEBUG=INFO (`envtool launch` shows it per rank); check dev-shm, "
            "cuda-visible-devices and the GPU topology (`nvidia-smi topo -m`)",
        )
    wrong = [s for s in sizes if not s.get("exact")]
    if wrong or ar.get("sum_exact") is False:
        return Check(
            cid,
            FAIL,
            f"all-reduce returned wrong sums at {', '.join(str(s['size_mib']) + ' MiB' for s in wrong)}",
            ev,
            "a GPU or link corrupts data: test GPUs pairwise with CUDA_VISIBLE_DEVICES and "
            "take the bad one out of service",
        )
    if not sizes:
        return Check(cid, SKIP, "no all-reduce results", ev)
    top = max(sizes, key=lambda s: s["size_mib"])
    return Check(
        cid,
        OK,
        f"{ar.get('backend')} all-reduce correct on {ar.get('world_size')} ranks; "
        f"bus bandwidth {top['busbw_gbps']:.1f} GB/s at {top['size_mib']} MiB",
        ev,
    )


def run_deep_checks(deep: dict[str, Any] | None) -> list[Check]:
    if deep is None:
        return []
    return [check_deep_matmul(deep), check_deep_allreduce(deep)]
