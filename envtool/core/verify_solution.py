"""Verify a solution before it is written: the build kind and one CUDA version. Pure.

A failed check is a DiagnosedFailure (exit 1): envtool worked, and the solver's answer is not
what the plan asked for, so nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from envtool.core.lockfile import SolvedPackage
from envtool.core.plan import TOOLKIT_VERSIONED, PlatformPlan
from envtool.core.versions import cuda_from_build_tag, major_minor, parse_version


@dataclass(frozen=True)
class Problem:
    platform: str
    check: str  # cuda-build | cpu-build | one-cuda | no-pytorch
    message: str


def torch_build_cuda(pkg: SolvedPackage) -> str | None:
    """The CUDA a pytorch record was built for (None: CPU build)."""
    if pkg.build.startswith("cpu") or "_cpu" in pkg.build:
        return None
    return cuda_from_build_tag(pkg.build)


def verify_solution(pp: PlatformPlan, packages: list[SolvedPackage]) -> list[Problem]:
    """Problems with one platform's solution; [] when it is what the plan asked for."""
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
