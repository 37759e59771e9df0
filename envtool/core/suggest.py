"""The CUDA to suggest: one answer to "which CUDA build should this machine ask for?".

`--cuda auto` in create/lock, the way out of a refused `--cuda X.Y`, install's host check and
doctor's fixes all call `suggest_cuda`. Pure: the inputs are the driver, the GPUs, the CUDA
versions torch has builds for (the channels' real builds when they were listed, PyTorch's
official table otherwise) and the flavor.

The rule, in order:
  1. a driver older than a GPU's own floor (cuda_data.json gpu_arch / gpu_product_driver) cannot
     drive that GPU whatever the CUDA: the answer is "upgrade the driver to ≥ X for this GPU";
  2. among the available CUDA versions, drop those the toolkit or the build's arch list (the
     flavor's own: cuda.build_archs; PTX counts) do not support on every GPU, and those the driver cannot run (natively or through minor-version
     compatibility); the newest left is the answer;
  3. none left, but some cover the GPUs: "upgrade the driver to ≥ X" (X runs the newest of them);
  4. none covers the GPUs (or no CUDA build at all): the CPU build.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from envtool.core import cuda as cu
from envtool.core.versions import parse_version


@dataclass(frozen=True)
class Gpu:
    """What the suggestion needs of one GPU: its compute capability ("9.0") and, when known, its
    name (a product row can raise the driver floor above its architecture's)."""

    capability: str
    name: str | None = None

    def label(self) -> str:
        try:
            arch = cu.capability_to_arch(self.capability)
        except ValueError:
            arch = self.capability
        return f"{self.name}, {arch}" if self.name else arch


@dataclass(frozen=True)
class Suggestion:
    """kind "cuda": ask for `cuda` (mode native | compat | target); kind "driver": upgrade the
    driver to ≥ `driver` (for `gpu` when the GPU itself needs it; `cuda` then names what that
    driver runs); kind "cpu": no CUDA build here runs on these GPUs."""

    kind: str
    cuda: str | None = None
    mode: str | None = None
    driver: str | None = None
    gpu: str | None = None
    reasons: tuple[str, ...] = ()

    @property
    def flag(self) -> str | None:
        """The --cuda flag to pass: '--cuda 11.8', '--cuda cpu'; None for an upgrade."""
        if self.kind == "cuda":
            return f"--cuda {self.cuda}"
        if self.kind == "cpu":
            return "--cuda cpu"
        return None

    def upgrade(self) -> str:
        """'upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (NVIDIA H200, sm_90)'."""
        if self.gpu:
            return f"upgrade the NVIDIA driver to ≥ {self.driver} for this GPU ({self.gpu})"
        if self.cuda:
            return f"upgrade the NVIDIA driver to ≥ {self.driver} (CUDA {self.cuda})"
        return f"upgrade the NVIDIA driver to ≥ {self.driver}"

    def advice(self) -> str:
        """One clause a refusal can end with."""
        if self.kind == "driver":
            return self.upgrade()
        if self.kind == "cpu":
            why = f" ({self.reasons[-1]})" if self.reasons else ""
            return f"pass --cuda cpu{why}"
        return f"pass --cuda {self.cuda}"


def official_cuda(flavor: str = "conda-forge") -> list[str]:
    """CUDA versions PyTorch published official builds for (the pytorch channel: up to its last
    release), oldest first: the candidates when no channel was listed (doctor, install)."""
    data = cu.load_cuda_data()
    last = parse_version(data.pytorch_channel_last)
    return sorted(
        {
            c
            for t, cs in data.torch_cuda.items()
            if flavor != "pytorch" or parse_version(t) <= last
            for c in cs
        },
        key=parse_version,
    )


def driver_floor_for_gpus(driver: str, gpus: Iterable[Gpu]) -> tuple[str, Gpu] | None:
    """(floor, gpu) for the GPU whose own driver floor `driver` misses (the highest such floor);
    None when the driver can drive every GPU (or their floors are not known)."""
    worst: tuple[str, Gpu] | None = None
    for g in gpus:
        floor = cu.gpu_min_driver(g.capability, g.name)
        if floor and not cu.driver_at_least(driver, floor):
            if worst is None or parse_version(floor) > parse_version(worst[0]):
                worst = (floor, g)
    return worst


def gpu_problem(
    cuda: str, gpus: Sequence[Gpu], *, flavor: str, torch: str | None = None
) -> str | None:
    """Why CUDA `cuda` builds of `flavor` (torch `torch`; None: the newest) cannot run on one of
    the GPUs (None: they can, or no data says no)."""
    dropped = []
    for g in gpus:
        row = cu.gpu_arch_row(g.capability)
        if not cu.toolkit_supports_gpu(cuda, g.capability) and row:
            dropped.append(
                f"CUDA {parse_version(cuda)[0]} dropped {row.family} ({g.label()}): "
                f"the last CUDA for it is {row.last_cuda_major}.x"
            )
    if dropped:
        return dropped[0]
    archs = cu.build_archs(flavor, cuda, torch)
    if not archs:
        return None  # unknown arch list: cannot judge, do not block
    missing = []
    for g in gpus:
        try:
            if not cu.arch_covered(g.capability, archs):
                missing.append(f"{g.capability} ({cu.capability_to_arch(g.capability)})")
        except ValueError:
            continue  # an unparseable capability is not evidence against a build
    if missing:
        return f"CUDA {cuda} builds carry {' '.join(archs)}, not GPU capability " + ", ".join(
            dict.fromkeys(missing)
        )
    return None


def suggest_cuda(
    driver: str | None,
    gpus: Sequence[Gpu],
    available: Iterable[str] | None,
    *,
    flavor: str = "conda-forge",
    major: str | None = None,
    driver_cuda: str | None = None,
    torch: Mapping[str, str] | None = None,
) -> Suggestion:
    """The CUDA this machine should ask for (see the module docstring for the rule).

    `available`: CUDA versions with torch builds on the searched channels (None: PyTorch's official
    table for `flavor`); `major`: only that major's versions (`--cuda 12`); `driver_cuda`: the
    newest CUDA the driver runs when its version is unknown (torch's "found version" message);
    `torch`: the torch release a solve would take per CUDA (the arch lists change between
    releases; a CUDA not in it: the newest release the flavor's table knows).
    """
    if driver:
        too_old = driver_floor_for_gpus(driver, gpus)
        if too_old:
            floor, gpu = too_old
            return Suggestion(
                "driver",
                driver=floor,
                gpu=gpu.label(),
                reasons=(f"driver {driver} cannot drive {gpu.label()} (needs ≥ {floor})",),
            )
    cands = sorted(
        set(official_cuda(flavor) if available is None else available), key=parse_version
    )
    if major is not None:
        cands = [c for c in cands if c.split(".")[0] == major]
    runnable: list[tuple[str, str]] = []
    covering: list[str] = []
    reasons: list[str] = []
    for c in cands:
        problem = gpu_problem(c, gpus, flavor=flavor, torch=(torch or {}).get(c))
        if problem:
            reasons.append(problem)
            continue
        covering.append(c)
        if driver:
            verdict = cu.driver_supports(driver, c)
            if verdict.mode in ("no", "unknown"):
                reasons.append(f"CUDA {c} needs driver ≥ {verdict.min_driver or '?'}")
                continue
            runnable.append((c, verdict.mode))
        elif driver_cuda:
            if parse_version(c)[:2] > parse_version(driver_cuda)[:2]:
                reasons.append(f"CUDA {c} is newer than the driver's CUDA {driver_cuda}")
                continue
            runnable.append((c, "native"))
        else:
            runnable.append((c, "target"))
    if runnable:
        cuda, mode = runnable[-1]
        return Suggestion("cuda", cuda=cuda, mode=mode, reasons=tuple(reasons))
    if covering:
        newest = covering[-1]
        return Suggestion(
            "driver", cuda=newest, driver=cu.min_driver(newest), reasons=tuple(reasons)
        )
    if not cands:
        reasons.append("no CUDA build of torch" + (f" for CUDA {major}.x" if major else ""))
    return Suggestion("cpu", reasons=tuple(reasons))
