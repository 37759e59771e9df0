"""Verify a solution before it is written: the build kind, one CUDA version, and a CUDA build
that has kernels for every GPU the plan was made for. Pure.

A failed check is a DiagnosedFailure (exit 1): envtool worked, and the solver's answer is not
what the plan asked for, so nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from envtool.core import cuda as cu
from envtool.core.lockfile import SolvedPackage
from envtool.core.plan import TOOLKIT_VERSIONED, PlatformPlan
from envtool.core.suggest import Gpu, suggest_cuda
from envtool.core.versions import cuda_from_build_tag, major_minor, parse_version


@dataclass(frozen=True)
class Problem:
    platform: str
    check: str  # cuda-build | cpu-build | one-cuda | no-pytorch | gpu-arch
    message: str
    hint: str | None = None  # the way out, when the problem has its own (gpu-arch)


def torch_build_cuda(pkg: SolvedPackage) -> str | None:
    """The CUDA a pytorch record was built for (None: CPU build)."""
    if pkg.build.startswith("cpu") or "_cpu" in pkg.build:
        return None
    return cuda_from_build_tag(pkg.build)


def verify_solution(
    pp: PlatformPlan,
    packages: list[SolvedPackage],
    *,
    gpus: Sequence[str] = (),
    driver: str | None = None,
    flavor: str = "conda-forge",
    available: Iterable[str] | None = None,
) -> list[Problem]:
    """Problems with one platform's solution; [] when it is what the plan asked for.

    `gpus`: the compute capabilities the plan was made for (--gpu or probed); a CUDA build whose
    architecture list (cuda.build_archs: per flavor, CUDA and torch release) has neither machine code of the GPU's major nor PTX
    that can JIT for it is refused, naming the GPU, the build and the --cuda to pass: suggest_cuda
    over `driver` and `available` (the CUDA lines the channel listing found; None: PyTorch's
    official builds)."""
    by_name = {p.name: p for p in packages}
    problems: list[Problem] = []
    torch = by_name.get("pytorch")
    if torch is None:
        return [Problem(pp.platform, "no-pytorch", "the solution has no pytorch package")]
    built_for = torch_build_cuda(torch)
    label = f"pytorch {torch.version} {torch.build}"
    if pp.cuda:
        if built_for is None:
            problems.append(
                Problem(
                    pp.platform, "cuda-build", f"{label} is not a CUDA build (CUDA {pp.cuda} asked)"
                )
            )
        elif built_for != pp.cuda:
            problems.append(
                Problem(
                    pp.platform,
                    "cuda-build",
                    f"{label} is built for CUDA {built_for}, not {pp.cuda}",
                )
            )
    elif built_for is not None:
        problems.append(Problem(pp.platform, "cpu-build", f"{label} is a CUDA build; CPU asked"))
    if built_for is not None and gpus:
        arch_problem = _arch_problem(
            pp.platform, label, (torch.version, built_for), gpus, driver, flavor, available
        )
        if arch_problem:
            problems.append(arch_problem)
    if "pytorch-mutex" in by_name and by_name["pytorch-mutex"].build != (
        "cuda" if pp.cuda else "cpu"
    ):
        problems.append(
            Problem(
                pp.platform,
                "cuda-build" if pp.cuda else "cpu-build",
                f"pytorch-mutex {by_name['pytorch-mutex'].build} contradicts the plan",
            )
        )
    seen: dict[str, list[str]] = {}
    for name in TOOLKIT_VERSIONED:
        pkg = by_name.get(name)
        if pkg is not None:
            seen.setdefault(major_minor(pkg.version), []).append(f"{name} {pkg.version}")
    if built_for:
        seen.setdefault(built_for, []).append(f"pytorch ({torch.build})")
    if "libcublas" in by_name and pp.cuda and parse_version(pp.cuda)[0] >= 12:
        cublas = by_name["libcublas"]
        if parse_version(cublas.version)[0] != parse_version(pp.cuda)[0]:
            seen.setdefault(major_minor(cublas.version), []).append(f"libcublas {cublas.version}")
    if not pp.cuda:
        seen.pop("", None)
    if len(seen) > 1 or (pp.cuda and seen and pp.cuda not in seen):
        parts = "; ".join(f"CUDA {v}: {', '.join(names)}" for v, names in sorted(seen.items()))
        problems.append(
            Problem(
                pp.platform, "one-cuda", f"more than one CUDA version in the solution — {parts}"
            )
        )
    return problems


def _arch_problem(
    platform: str,
    label: str,
    build: tuple[str, str],
    gpus: Sequence[str],
    driver: str | None,
    flavor: str,
    available: Iterable[str] | None,
) -> Problem | None:
    """The first GPU a CUDA build has no kernels for (None: every GPU covered, or no arch list is
    known for that CUDA: no evidence against the build)."""
    torch_version, built_for = build
    archs = cu.build_archs(flavor, built_for, torch_version, platform)
    if not archs:
        return None
    for g in gpus:
        try:
            covered = cu.arch_covered(g, archs)
            arch = cu.capability_to_arch(g)
        except ValueError:
            continue  # an unreadable capability is not evidence against a build
        if covered:
            continue
        ptx = [a for a in archs if a.startswith("compute_")]
        carries = " ".join(archs) + ("" if ptx else ", no PTX")
        s = suggest_cuda(
            driver, [Gpu(x) for x in _readable(gpus)], available, flavor=flavor, platform=platform
        )
        return Problem(
            platform,
            "gpu-arch",
            f"{label} (CUDA {built_for}: {carries}) has no kernels for GPU {arch}",
            s.advice() + f" (its builds cover {arch})" if s.kind == "cuda" else s.advice(),
        )
    return None


def _readable(gpus: Sequence[str]) -> list[str]:
    out = []
    for g in gpus:
        try:
            out.append(cu.capability_text(g))
        except ValueError:
            continue
    return out
