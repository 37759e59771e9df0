"""Can this host run a lock's build? The one host check of `create`, `install` (NAME, --lock,
--from a bundle) and `verify`'s relink hint: the same refusal and the same `--force` everywhere.

Pure: the lock's envtool metadata (envtool_cuda / envtool_platforms_cuda, envtool_min_driver,
envtool_gpu_archs) and HostFacts in, problems out. A lock without that metadata is not judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envtool.errors import UsageError

if TYPE_CHECKING:
    from envtool.core.facts import HostFacts

# the fix of every refusal ends with it: the one way past the check, in every command
FORCE = "--force"


def locked_cuda(meta: dict[str, str], platform: str) -> str | None:
    """The CUDA the lock holds for `platform` ("cpu", "12.6", …; None: not an envtool lock)."""
    for item in meta.get("envtool_platforms_cuda", "").split():
        plat, _, cuda = item.partition("=")
        if plat == platform:
            return cuda
    return meta.get("envtool_cuda") or meta.get("cuda")


def host_problems(meta: dict[str, str], platform: str, host: HostFacts) -> list[tuple[str, str]]:
    """[(problem, fix)] for a host that cannot run the locked build; empty when it can.

    The order is core/suggest.judge_cuda's, the one every command uses: a driver newer than a
    GPU family's last branch, then the GPUs' architectures against the locked build's (no driver
    adds an arch: the fix is a CUDA whose builds carry it), then the GPU's own driver floor, then
    the driver against the locked CUDA."""
    from envtool.core.cuda import parse_arch_list
    from envtool.core.host_record import visible_gpus
    from envtool.core.suggest import Gpu, judge_cuda

    cuda = locked_cuda(meta, platform)
    if not cuda or cuda == "cpu":
        return []
    if not host.has_driver:
        reason = host.no_driver_reason or "no NVIDIA driver found"
        return [
            (
                f"the lock is a CUDA {cuda} build but this host has no usable NVIDIA driver ({reason})",
                f"install on a GPU node, or pass {FORCE} to install anyway (e.g. on a login node)",
            )
        ]
    driver = host.driver_version
    # the GPUs the job will see (CUDA_VISIBLE_DEVICES): the ones create planned for
    gpus = [Gpu(g.capability, g.name) for g in visible_gpus(host)[0] if g.capability]
    archs_text = meta.get("envtool_gpu_archs", "")
    try:
        archs = parse_arch_list(archs_text) if archs_text.strip() else ()
    except ValueError:
        archs = ()
    flavor = meta.get("envtool_flavor") or "conda-forge"
    v = judge_cuda(driver, gpus, cuda, flavor=flavor, platform=platform, archs=archs or None)
    if v.runs:
        return []
    s = v.suggestion
    if v.kind == "ceiling" and s is not None:
        return [(s.reasons[0], f"{s.advice()}, or pass {FORCE}")]
    if v.kind == "arch":
        then = ""
        if s is not None and s.kind in ("cuda", "driver") and s.cuda:
            then = f"re-create with `--cuda {s.cuda}` (its builds carry this GPU's architecture)"
            if s.kind == "driver":
                then += f" on a driver ≥ {s.driver}"
        elif s is not None and s.kind == "cpu":
            then = "re-create with `--cuda cpu`" + (
                f" (the last torch for this GPU: {s.last})" if s.last else ""
            )
        fix = f"{then}, or pass {FORCE}" if then else f"pass {FORCE}"
        return [(f"the locked build has no kernels for this GPU: {v.message}", fix)]
    if v.kind == "gpu-driver" and s is not None:
        return [(v.message.replace(": it needs ≥ ", " (needs >= ") + ")", s.upgrade())]
    floor = meta.get("envtool_min_driver") or (v.message.split("≥ ", 1)[-1].split(";")[0])
    way = ", re-create with `--cuda auto`" if s is not None and s.kind == "cuda" else ""
    return [
        (
            f"driver {driver} cannot run the locked CUDA {cuda} build (needs >= {floor})",
            f"upgrade the driver{way}, or pass {FORCE}",
        )
    ]


def host_refusal(meta: dict[str, str], platform: str, host: HostFacts) -> UsageError | None:
    """The one refusal (its first problem, `(+N more)`, and the fix) or None: the host runs it."""
    problems = host_problems(meta, platform, host)
    if not problems:
        return None
    problem, fix = problems[0]
    extra = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    return UsageError(problem + extra, fix)
