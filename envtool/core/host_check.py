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
    """[(problem, fix)] for a host that cannot run the locked build; empty when it can."""
    from envtool.core.cuda import arch_covered, driver_supports, parse_arch_list
    from envtool.core.suggest import Gpu, suggest_cuda

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
    problems: list[tuple[str, str]] = []
    driver = host.driver_version
    # the one answer create and doctor give: a GPU this driver cannot drive gets "upgrade the
    # driver for this GPU", not a CUDA to re-create with
    s = suggest_cuda(driver, [Gpu(g.capability, g.name) for g in host.gpus if g.capability], None)
    if s.kind == "driver" and s.gpu:
        problems.append(
            (f"driver {driver} cannot drive {s.gpu} (needs >= {s.driver})", s.upgrade())
        )
    verdict = driver_supports(driver, cuda)
    floor = meta.get("envtool_min_driver") or verdict.min_driver
    if verdict.mode == "no":
        way = "" if s.kind == "driver" else ", re-create with `--cuda auto`"
        problems.append(
            (
                f"driver {driver} cannot run the locked CUDA {cuda} build (needs >= {floor})",
                f"upgrade the driver{way}, or pass {FORCE}",
            )
        )
    archs_text = meta.get("envtool_gpu_archs", "")
    if archs_text.strip():
        try:
            archs = parse_arch_list(archs_text)
        except ValueError:
            archs = ()
        for gpu in host.gpus:
            if gpu.capability and archs and not arch_covered(gpu.capability, archs):
                problems.append(
                    (
                        f"GPU {gpu.index} ({gpu.name}, sm_{gpu.capability.replace('.', '')}) is not in "
                        f"the locked build's archs ({archs_text})",
                        f"pick a CUDA version whose builds cover this GPU, or pass {FORCE}",
                    )
                )
    return problems


def host_refusal(meta: dict[str, str], platform: str, host: HostFacts) -> UsageError | None:
    """The one refusal (its first problem, `(+N more)`, and the fix) or None: the host runs it."""
    problems = host_problems(meta, platform, host)
    if not problems:
        return None
    problem, fix = problems[0]
    extra = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    return UsageError(problem + extra, fix)
