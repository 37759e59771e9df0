"""The CUDA to suggest: one answer to "which CUDA build should this machine ask for?".

`--cuda auto` in create/lock, the way out of a refused `--cuda X.Y`, install's host check, the
lock's host check and doctor's fixes all call `suggest_cuda` (or `judge_cuda` for one named
CUDA). Pure: the inputs are the driver, the GPUs, the CUDA versions torch has builds for (the
channels' real builds when they were listed, the channel's published table otherwise: see
cuda.published_lines) and the flavor.

The rule, in order (architecture before driver: no driver makes a build carry an arch):
  1. a GPU whose family's last driver branch is older than the driver's (Kepler: R470;
     Maxwell, Pascal, Volta: R580) describes a host that cannot exist: say so, and name the
     CUDA whose builds run on that GPU on its last branch ("ceiling");
  2. drop the CUDA versions whose toolkit or build arch list (the flavor's own, for the torch
     release a solve takes; PTX counts) misses a GPU; none left: the CPU build, with the last
     torch that runs on the GPU and where to get it;
  3. a driver older than a GPU's own floor cannot drive it whatever the CUDA: "upgrade the driver
     to ≥ X for this GPU";
  4. among the covering versions, the newest the driver runs (natively or through minor-version
     compatibility); none: "upgrade the driver to ≥ X" (X runs the newest covering one, and never
     above the GPU family's last branch).
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
    driver runs); kind "ceiling": the driver is newer than `gpu`'s last branch (`branch`), a host
    that cannot exist — on that branch, pass `cuda`; kind "cpu": no CUDA build here runs on these
    GPUs (`last`: the newest torch build that does, and where to get it)."""

    kind: str
    cuda: str | None = None
    mode: str | None = None
    driver: str | None = None
    gpu: str | None = None
    reasons: tuple[str, ...] = ()
    branch: int | None = None
    last: str | None = None

    @property
    def flag(self) -> str | None:
        """The --cuda flag to pass on this host: '--cuda 11.8', '--cuda cpu'; None for an upgrade
        or a host that cannot exist."""
        if self.kind == "cuda":
            return f"--cuda {self.cuda}"
        if self.kind == "cpu":
            return "--cuda cpu"
        return None

    def upgrade(self) -> str:
        """'upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (NVIDIA H200, sm_90)'."""
        if self.kind == "ceiling":
            return self.advice()
        if self.gpu:
            return f"upgrade the NVIDIA driver to ≥ {self.driver} for this GPU ({self.gpu})"
        if self.cuda:
            return f"upgrade the NVIDIA driver to ≥ {self.driver} (CUDA {self.cuda})"
        return f"upgrade the NVIDIA driver to ≥ {self.driver}"

    def advice(self) -> str:
        """One clause a refusal can end with."""
        if self.kind == "ceiling":
            then = f", then pass --cuda {self.cuda}" if self.cuda else ", then pass --cuda cpu"
            return f"install an R{self.branch} driver (the last branch for {self.gpu}){then}"
        if self.kind == "driver":
            return self.upgrade()
        if self.kind == "cpu":
            why = f" ({self.reasons[-1]})" if self.reasons else ""
            last = f"; the last torch for this GPU: {self.last}" if self.last else ""
            return f"pass --cuda cpu{why}{last}"
        return f"pass --cuda {self.cuda}"


def official_cuda(flavor: str = "conda-forge", platform: str = "linux-64") -> list[str]:
    """CUDA versions the flavor's channel published torch builds for (cuda.published_lines:
    conda-forge's own lines, the legacy pytorch channel up to its last release, or every
    official wheel), oldest first: the candidates when no channel was listed (doctor, install)."""
    return sorted({c for _, c in cu.published_lines(flavor, platform)}, key=parse_version)


def where_to_get(torch: str, cuda: str, flavor: str) -> str:
    """'torch 2.14 with CUDA 12.6: pip install "torch==2.14.*" --index-url …/whl/cu126'."""
    tag = "cu" + cuda.replace(".", "")
    if flavor == "conda-forge":
        return (
            f"conda-forge pytorch {torch} cuda{tag[2:]} builds "
            f"(envtool create NAME --torch {torch} --cuda {cuda})"
        )
    if flavor == "pytorch":
        return f"pytorch {torch} with CUDA {cuda} (envtool create NAME --flavor pytorch --torch {torch} --cuda {cuda})"
    return (
        f"torch {torch} with CUDA {cuda} wheels (pip install 'torch=={torch}.*' "
        f"--index-url https://download.pytorch.org/whl/{tag})"
    )


def last_torch_text(gpus: Iterable[Gpu], flavor: str, platform: str = "linux-64") -> str | None:
    """The newest torch build that runs on every one of these GPUs, and where to get it: from the
    flavor's channel, and PyTorch's wheels when they go further (None: no known build does)."""
    texts = []
    for source in dict.fromkeys((flavor, "pypi")):
        found = None
        for g in gpus:
            last = cu.last_torch_for_gpu(g.capability, source, platform)
            if last is None:
                found = None
                break
            if found is None or parse_version(last[0]) < parse_version(found[0]):
                found = last
        if found:
            texts.append(where_to_get(found[0], found[1], source))
    return "; or ".join(dict.fromkeys(texts)) or None


def driver_ceiling_for_gpus(driver: str, gpus: Iterable[Gpu]) -> tuple[int, Gpu, str] | None:
    """(last branch, gpu, family) for a GPU whose family's last driver branch is older than
    `driver`'s branch: no such driver drives it (R470 for Kepler, R580 for Maxwell-Volta)."""
    try:
        branch = cu.driver_branch(driver)
    except ValueError:
        return None
    worst: tuple[int, Gpu, str] | None = None
    for g in gpus:
        try:
            last = cu.gpu_last_branch(g.capability)
            row = cu.gpu_arch_row(g.capability)
        except ValueError:
            continue
        if last is not None and row is not None and branch > last:
            if worst is None or last < worst[0]:
                worst = (last, g, row.family)
    return worst


def gpus_ceiling(gpus: Iterable[Gpu]) -> int | None:
    """The newest driver branch that drives every one of these GPUs (None: no limit known)."""
    lasts = [b for g in gpus if (b := _last_branch(g)) is not None]
    return min(lasts) if lasts else None


def _no_common_driver(gpus: Sequence[Gpu]) -> str | None:
    """Why no one driver drives all these GPUs (one's floor is past another's last branch)."""
    ceiling = gpus_ceiling(gpus)
    if ceiling is None:
        return None
    for g in gpus:
        floor = cu.gpu_min_driver(g.capability, g.name)
        if floor and cu.driver_branch(floor) > ceiling:
            old = next(x for x in gpus if _last_branch(x) == ceiling)
            return (
                f"no driver drives both {old.label()} (last branch R{ceiling}) and {g.label()} "
                f"(needs ≥ {floor}): run them on separate hosts, or hide one with "
                "CUDA_VISIBLE_DEVICES"
            )
    return None


def _last_branch(g: Gpu) -> int | None:
    try:
        return cu.gpu_last_branch(g.capability)
    except ValueError:
        return None


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
    cuda: str,
    gpus: Sequence[Gpu],
    *,
    flavor: str,
    torch: str | None = None,
    platform: str = "linux-64",
) -> str | None:
    """Why CUDA `cuda` builds of `flavor` (torch `torch`; None: the newest) on `platform` cannot
    run on one of the GPUs (None: they can, or no data says no)."""
    dropped = _toolkit_problem(cuda, gpus)
    if dropped:
        return dropped
    archs = cu.build_archs(flavor, cuda, torch, platform)
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


def upgrade_target(cuda: str, gpus: Sequence[Gpu]) -> tuple[str, str] | None:
    """(driver floor, mode) of the smallest driver that runs CUDA `cuda` on these GPUs: its
    toolkit driver, or, when that is beyond the GPUs' last branch (CUDA 11.8 on a Kepler GPU:
    520.61.05 > R470), the major's minor-version compatibility floor. None: no driver does."""
    native = cu.min_driver(cuda)
    ceiling = gpus_ceiling(gpus)
    if native and (ceiling is None or cu.driver_branch(native) <= ceiling):
        return native, "native"
    compat = cu.compat_floor(cuda)
    if compat and ceiling is not None and cu.driver_branch(compat) <= ceiling:
        return compat, "compat"
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
    platform: str = "linux-64",
) -> Suggestion:
    """The CUDA this machine should ask for (see the module docstring for the rule).

    `available`: CUDA versions with torch builds on the searched channels (None: the channel's
    published table for `flavor`); `major`: only that major's versions (`--cuda 12`);
    `driver_cuda`: the newest CUDA the driver runs when its version is unknown (torch's "found
    version" message); `torch`: the torch release a solve would take per CUDA (the arch lists
    change between releases; a CUDA not in it: the newest release the flavor's table knows).
    """
    cands = sorted(
        set(official_cuda(flavor, platform) if available is None else available),
        key=parse_version,
    )
    if major is not None:
        cands = [c for c in cands if c.split(".")[0] == major]
    clash = _no_common_driver(gpus)
    if clash:  # a Kepler GPU beside a Blackwell one: no driver drives both
        return Suggestion("cpu", reasons=(clash,))
    if driver:
        over = driver_ceiling_for_gpus(driver, gpus)
        if over:  # 1. no driver of this branch drives the GPU
            branch, gpu, family = over
            on_branch = suggest_cuda(
                str(branch), gpus, cands, flavor=flavor, torch=torch, platform=platform
            )
            return Suggestion(
                "ceiling",
                cuda=on_branch.cuda if on_branch.kind == "cuda" else None,
                mode=on_branch.mode,
                driver=cu.driver_release(str(branch)),
                gpu=gpu.label(),
                branch=branch,
                reasons=(
                    f"driver {driver} cannot drive {gpu.label()}: R{branch} is the last driver "
                    f"branch for {family} GPUs, so no such host exists",
                ),
            )
    covering: list[str] = []
    reasons: list[str] = []
    for c in cands:  # 2. architecture first: no driver makes a build carry an arch
        problem = gpu_problem(c, gpus, flavor=flavor, torch=(torch or {}).get(c), platform=platform)
        if problem:
            reasons.append(problem)
        else:
            covering.append(c)
    if not covering:
        if not cands:
            reasons.append("no CUDA build of torch" + (f" for CUDA {major}.x" if major else ""))
        last = last_torch_text(gpus, flavor, platform) if gpus else None
        return Suggestion("cpu", reasons=tuple(reasons), last=last)
    if driver:
        too_old = driver_floor_for_gpus(driver, gpus)
        if too_old:  # 3. the driver cannot drive the GPU whatever the CUDA
            floor, gpu = too_old
            return Suggestion(
                "driver",
                cuda=covering[-1],  # what to ask for once the driver drives the GPU
                driver=floor,
                gpu=gpu.label(),
                reasons=(f"driver {driver} cannot drive {gpu.label()} (needs ≥ {floor})",),
            )
    runnable: list[tuple[str, str]] = []
    for c in covering:  # 4. the newest covering CUDA this driver runs
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
    for c in reversed(covering):
        target = upgrade_target(c, gpus)
        if target:
            return Suggestion(
                "driver", cuda=c, driver=target[0], mode=target[1], reasons=tuple(reasons)
            )
    last = last_torch_text(gpus, flavor, platform) if gpus else None
    return Suggestion("cpu", reasons=tuple(reasons), last=last)


@dataclass(frozen=True)
class CudaVerdict:
    """Can this host (driver, GPUs) run CUDA `cuda` builds of a flavor? The first problem in the
    one order every command uses: kind ceiling | arch | gpu-driver | driver (refusals), compat
    (runs, with a warning) or ok; `message` says why, `suggestion` is what to do instead."""

    kind: str
    message: str
    suggestion: Suggestion | None = None
    mode: str = "target"  # the driver verdict when it runs: native | compat | target

    @property
    def runs(self) -> bool:
        return self.kind in ("ok", "compat")


def judge_cuda(
    driver: str | None,
    gpus: Sequence[Gpu],
    cuda: str,
    *,
    flavor: str = "conda-forge",
    torch: str | None = None,
    platform: str = "linux-64",
    archs: Sequence[str] | None = None,
    available: Iterable[str] | None = None,
    torch_by_cuda: Mapping[str, str] | None = None,
) -> CudaVerdict:
    """The one decision for a named CUDA (create's --cuda X.Y, a lock's build, doctor's installed
    torch): ceiling, then architecture, then the GPU's own driver floor, then driver vs CUDA.
    `archs`: the build's own arch list when known (a lock's record, torch.cuda.get_arch_list());
    else the flavor's table for `torch`. `available`/`torch_by_cuda`: what the suggestion may
    name (None: the channel's published table)."""
    cands = None if available is None else list(available)

    def instead() -> Suggestion:
        return suggest_cuda(
            driver, gpus, cands, flavor=flavor, torch=torch_by_cuda, platform=platform
        )

    if driver:
        over = driver_ceiling_for_gpus(driver, gpus)
        if over:
            s = instead()
            return CudaVerdict("ceiling", s.reasons[0] if s.reasons else "", s)
    if archs:
        missing = [g for g in gpus if _not_covered(g, archs)]
        problem = (
            f"CUDA {cuda} builds carry {' '.join(archs)}, not "
            + ", ".join(dict.fromkeys(g.label() for g in missing))
            if missing
            else None
        )
        if problem is None:  # a recorded list can still be a toolkit that dropped the GPU
            problem = _toolkit_problem(cuda, gpus)
    else:
        problem = gpu_problem(cuda, gpus, flavor=flavor, torch=torch, platform=platform)
    if problem:
        return CudaVerdict("arch", problem, instead())
    if driver is None:
        return CudaVerdict("ok", "", None, "target")
    too_old = driver_floor_for_gpus(driver, gpus)
    if too_old:
        floor, gpu = too_old
        return CudaVerdict(
            "gpu-driver",
            f"driver {driver} cannot drive {gpu.label()}: it needs ≥ {floor}",
            instead(),
        )
    verdict = cu.driver_supports(driver, cuda)
    if verdict.mode == "no":
        native = cu.newest_cuda_native(driver) or "none"
        return CudaVerdict(
            "driver",
            f"CUDA {cuda} needs driver ≥ {verdict.min_driver}; this driver ({driver}) runs "
            f"CUDA ≤ {native}",
            instead(),
        )
    if verdict.mode == "compat":
        return CudaVerdict(
            "compat",
            f"driver {driver} runs CUDA {cuda} only through minor-version compatibility "
            f"(native ≥ {verdict.min_driver}; PTX JIT of newer code fails)",
            None,
            "compat",
        )
    return CudaVerdict("ok", "", None, verdict.mode)


def _not_covered(g: Gpu, archs: Sequence[str]) -> bool:
    try:
        return not cu.arch_covered(g.capability, tuple(archs))
    except ValueError:
        return False  # an unreadable capability is no evidence against a build


def _toolkit_problem(cuda: str, gpus: Sequence[Gpu]) -> str | None:
    for g in gpus:
        row = cu.gpu_arch_row(g.capability)
        if row and not cu.toolkit_supports_gpu(cuda, g.capability):
            return (
                f"CUDA {parse_version(cuda)[0]} dropped {row.family} ({g.label()}): "
                f"the last CUDA for it is {row.last_cuda_major}.x"
            )
    return None
