"""Variant locks: one standard conda-lock v1 file per build variant (`cpu`, `cuda11.8`,
`cuda12.6`, …) beside a small index, and the rule that picks the variant a host installs. Pure.

The index (`environments/NAME/variants.yml`) records, per variant, what install must know without
opening the lock: torch version and build per platform, CUDA, the minimum driver, the GPU
architectures the build carries (sm_XX machine code, compute_XX PTX), the lock file and its
sha256 (a hand-edited lock is caught before it is installed).

The choice (`choose_variant`), stated in README.md "One lock, many machines":
  no NVIDIA driver -> `cpu`;
  otherwise the newest CUDA variant whose minimum driver the host meets natively and whose
  architecture list covers every visible GPU (machine code of the same major, or PTX that can
  JIT for it); when none runs natively, the oldest one the driver runs through CUDA
  minor-version compatibility (the least of it; the caveat named); nothing -> a refusal naming the fix (the
  driver to get, the variant to add, or `--variant cpu`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envtool.core import cuda as cu
from envtool.core.shell_quote import quote_posix
from envtool.core.versions import major_minor, parse_version
from envtool.errors import UsageError

if TYPE_CHECKING:
    from envtool.core.facts import HostFacts

INDEX_FILE = "variants.yml"
INDEX_VERSION = 1
CPU = "cpu"
AUTO = "auto"
_NAME = re.compile(r"^(?:cpu|cuda(\d{1,3})\.(\d{1,3}))$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MAX_VARIANTS = 32  # an index is a handful of lines; more is not a real project


# ----------------------------------------------------------------------------- names


def parse_variant(text: str, flag: str = "--variant") -> str:
    """'cuda12.6' / 'cpu' (case and spaces forgiven) -> the canonical name; UsageError otherwise.

    A CUDA variant must name a CUDA version envtool knows the driver floor of (cuda_data.json),
    or the install choice could not judge it."""
    name = text.strip().lower()
    m = _NAME.match(name)
    if not m:
        raise UsageError(
            f"{flag} {text}: not a variant name",
            "use cpu or cudaX.Y (e.g. cpu,cuda11.8,cuda12.6), or auto",
        )
    if name == CPU:
        return CPU
    cuda = f"{int(m.group(1))}.{int(m.group(2))}"
    if cu.min_driver(cuda) is None:
        raise UsageError(
            f"{flag} {text}: CUDA {cuda} is not a known CUDA version",
            "use one of " + ", ".join(f"cuda{c}" for c in cu.known_cuda_versions()[-8:]),
        )
    return f"cuda{cuda}"


def parse_variant_list(text: str) -> tuple[str, ...]:
    """`--variants cpu,cuda11.8,cuda12.6` -> ('cpu', 'cuda11.8', 'cuda12.6') (sorted: cpu, then
    CUDA oldest first); `auto` -> ('auto',)."""
    items = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if [t.lower() for t in items] == [AUTO]:
        return (AUTO,)
    if not items:
        raise UsageError("--variants: empty", "e.g. --variants cpu,cuda11.8,cuda12.6 or auto")
    if AUTO in (t.lower() for t in items):
        raise UsageError(
            f"--variants {text}: auto stands alone", "pass --variants auto, or list the variants"
        )
    if len(items) > _MAX_VARIANTS:
        raise UsageError(f"--variants: {len(items)} variants", f"list at most {_MAX_VARIANTS}")
    names = {parse_variant(t, "--variants") for t in items}
    return tuple(sorted(names, key=variant_sort_key))


def variant_cuda(name: str) -> str | None:
    """'cuda12.6' -> '12.6'; 'cpu' -> None."""
    return None if name == CPU else name.removeprefix("cuda")


def variant_name(cuda: str | None) -> str:
    """'12.6' -> 'cuda12.6'; None -> 'cpu'."""
    return CPU if cuda is None else f"cuda{major_minor(cuda)}"


def variant_sort_key(name: str) -> tuple[int, ...]:
    """cpu first, then CUDA versions oldest first."""
    cuda = variant_cuda(name)
    return (-1,) if cuda is None else parse_version(cuda)


def lock_file_name(name: str) -> str:
    """The variant's lock beside environment.yml: conda-lock.cuda12.6.yml."""
    return f"conda-lock.{name}.yml"


# ----------------------------------------------------------------------------- auto


@dataclass(frozen=True)
class ChannelBuild:
    """One torch build a channel holds (what rattler_solve's discovery reports, in plain types)."""

    torch: str
    cuda: str | None  # None: CPU build
    python: str | None = None
    platform: str | None = None


def _usable(builds: Iterable[ChannelBuild], python: str | None) -> list[ChannelBuild]:
    return [b for b in builds if python is None or b.python in (None, major_minor(python))]


def lines_by_torch(
    builds: Iterable[ChannelBuild], platforms: Sequence[str], python: str | None = None
) -> dict[str, set[str]]:
    """torch version -> the variants it has builds for on every listed platform."""
    usable = _usable(builds, python)
    listed = [p for p in platforms if any(b.platform == p for b in usable)] or [None]
    out: dict[str, set[str]] = {}
    for version in {b.torch for b in usable}:
        per_platform = [
            {
                variant_name(b.cuda)
                for b in usable
                if b.torch == version and (p is None or b.platform in (p, None))
            }
            for p in listed
        ]
        out[version] = set.intersection(*per_platform)
    return out


def common_torch(
    builds: Iterable[ChannelBuild],
    variants: Sequence[str],
    platforms: Sequence[str],
    python: str | None = None,
    series: str | None = None,
) -> str | None:
    """The newest torch version with a build for every variant (on every platform), within
    `series` ('2.7') when given; None when no release has them all."""
    found = [
        v
        for v, lines in lines_by_torch(builds, platforms, python).items()
        if set(variants) <= lines and (series is None or v.startswith(series.rstrip(".") + "."))
    ]
    return max(found, key=parse_version) if found else None


def auto_variants(
    builds: Iterable[ChannelBuild],
    platforms: Sequence[str],
    python: str | None = None,
    series: str | None = None,
) -> tuple[str, tuple[str, ...]]:
    """(torch version, variants) for `--variants auto`: the newest torch release (within
    `series`) that has a CPU build and at least one CUDA build, its CUDA lines — newest per
    driver floor (lines sharing a floor collapse into the newest) — plus cpu. UsageError when
    no release qualifies."""
    table = lines_by_torch(builds, platforms, python)
    good = [
        v
        for v, lines in table.items()
        if CPU in lines
        and any(x != CPU for x in lines)
        and (series is None or v.startswith(series.rstrip(".") + "."))
    ]
    if not good:
        raise UsageError(
            "--variants auto: no torch release"
            + (f" {series}" if series else "")
            + " has both a CPU and a CUDA build here",
            "builds that exist: " + describe_lines(table) + "; list the variants instead",
        )
    torch = max(good, key=parse_version)
    by_floor: dict[str, str] = {}
    for name in sorted(table[torch] - {CPU}, key=variant_sort_key):
        floor = cu.min_driver(variant_cuda(name) or "")
        if floor is None:
            continue  # no driver floor known: install could not choose it
        by_floor[floor] = name  # sorted oldest first: the newest sharing a floor wins
    return torch, tuple(sorted({CPU, *by_floor.values()}, key=variant_sort_key))


def describe_lines(table: dict[str, set[str]]) -> str:
    """'2.0.0: cuda11.8; 2.7.1: cpu, cuda12.6, cuda12.9' (for hints)."""
    if not table:
        return "none"
    return "; ".join(
        f"{v}: {', '.join(sorted(lines, key=variant_sort_key))}"
        for v, lines in sorted(table.items(), key=lambda kv: parse_version(kv[0]))
        if lines
    )


# ----------------------------------------------------------------------------- the index


@dataclass(frozen=True)
class PlatformBuild:
    platform: str
    torch: str  # "2.7.1"
    build: str  # "cuda126_mkl_py312_h30b5a27_300"


@dataclass(frozen=True)
class Variant:
    name: str  # "cuda12.6" | "cpu"
    lock: str  # file name beside the index: conda-lock.cuda12.6.yml
    sha256: str  # of the lock file's bytes
    min_driver: str | None = None
    archs: tuple[str, ...] = ()  # sm_XX (machine code) and compute_XX (PTX)
    builds: tuple[PlatformBuild, ...] = ()

    @property
    def cuda(self) -> str | None:
        return variant_cuda(self.name)

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(b.platform for b in self.builds)

    @property
    def ptx(self) -> tuple[str, ...]:
        return tuple(a for a in self.archs if a.startswith("compute_"))

    @property
    def sm(self) -> tuple[str, ...]:
        return tuple(a for a in self.archs if a.startswith("sm_"))

    def describe(self) -> str:
        """'cuda12.6: torch 2.7.1 (cuda126_mkl_…), driver ≥ 560.28.03, sm_50 … sm_90'."""
        b = self.builds[0] if self.builds else None
        torch = f"torch {b.torch} ({b.build})" if b else "torch ?"
        if self.cuda is None:
            return f"{self.name}: {torch}"
        archs = " ".join(self.archs) or "archs unknown"
        return f"{self.name}: {torch}, driver ≥ {self.min_driver or '?'}, {archs}"


@dataclass(frozen=True)
class VariantIndex:
    name: str
    requested: tuple[str, ...]  # ('auto',) or the listed variants
    torch: str | None  # the torch version every variant was pinned to (None: not one)
    variants: tuple[Variant, ...] = field(default=())

    def get(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)

    def names(self) -> list[str]:
        return [v.name for v in self.variants]


def render_index(index: VariantIndex) -> str:
    """The index as YAML text. Deterministic: fixed key order, variants cpu then CUDA ascending."""
    import yaml

    doc: dict[str, Any] = {
        "version": INDEX_VERSION,
        "name": index.name,
        "requested": ",".join(index.requested),
        "torch": index.torch,
        "variants": [
            {
                "name": v.name,
                "lock": v.lock,
                "sha256": v.sha256,
                "cuda": v.cuda,
                "min_driver": v.min_driver,
                "archs": list(v.sm),
                "ptx": list(v.ptx),
                "platforms": {b.platform: {"torch": b.torch, "build": b.build} for b in v.builds},
            }
            for v in sorted(index.variants, key=lambda v: variant_sort_key(v.name))
        ],
    }
    head = (
        "# envtool variant index: one conda-lock v1 file per variant (written by\n"
        f"# `envtool lock {quote_posix(index.name)} --variants …`); "
        f"`envtool install {quote_posix(index.name)}` picks the\n"
        "# variant this host runs. Do not edit: re-lock instead.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


def parse_index(text: str | bytes, source: str) -> VariantIndex:
    """variants.yml -> VariantIndex. Untrusted text: strict YAML (safe_load), every field checked;
    a lock name must be the variant's own file name (the index never points elsewhere)."""
    from envtool.core.safe_load import parse_yaml

    hint = "re-create it with `envtool lock NAME --variants …`"
    doc = parse_yaml(text, source, hint)

    def bad(what: str) -> UsageError:
        return UsageError(f"{source}: {what}", hint)

    if not isinstance(doc, dict) or doc.get("version") != INDEX_VERSION:
        raise bad(f"not an envtool variant index (version {INDEX_VERSION})")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise bad("no environment name")
    requested_text = doc.get("requested")
    if not isinstance(requested_text, str):
        raise bad("no 'requested' variants")
    try:
        requested = parse_variant_list(requested_text)
    except UsageError as exc:
        raise bad(f"requested: {exc.message}") from None
    torch = doc.get("torch")
    if torch is not None and not isinstance(torch, str):
        raise bad("torch: not a version")
    rows = doc.get("variants")
    if not isinstance(rows, list) or not rows or len(rows) > _MAX_VARIANTS:
        raise bad(f"variants: expected a list of 1 to {_MAX_VARIANTS} entries")
    variants: list[Variant] = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise bad(f"variants[{i}]: not a mapping")
        try:
            variants.append(_parse_row(row))
        except (UsageError, ValueError, TypeError) as exc:
            why = exc.message if isinstance(exc, UsageError) else str(exc)
            raise bad(f"variants[{i}]: {why}") from None
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise bad("a variant is listed twice")
    return VariantIndex(name, requested, torch, tuple(variants))


def _parse_row(row: dict[str, Any]) -> Variant:
    name = parse_variant(str(row.get("name", "")), "name")
    lock = row.get("lock")
    if lock != lock_file_name(name):
        raise ValueError(f"lock {lock!r} is not {lock_file_name(name)}")
    sha = row.get("sha256")
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise ValueError("sha256: not a sha256 hex digest")
    min_driver = row.get("min_driver")
    if min_driver is not None:
        if isinstance(min_driver, bool) or not isinstance(min_driver, (str, int, float)):
            raise ValueError("min_driver: not a driver version")
        parse_version(str(min_driver))  # ValueError: not a version
        min_driver = str(min_driver)
    elif name != CPU:
        raise ValueError("a CUDA variant without min_driver")
    archs: list[str] = []
    for key in ("archs", "ptx"):
        items = row.get(key) or []
        if not isinstance(items, list) or not all(isinstance(a, str) for a in items):
            raise ValueError(f"{key}: not a list of architectures")
        archs += list(cu.parse_arch_list(items))
    plats = row.get("platforms")
    if not isinstance(plats, dict) or not plats:
        raise ValueError("platforms: expected platform -> {torch, build}")
    builds = []
    for plat, b in sorted(plats.items()):
        if not isinstance(plat, str) or not isinstance(b, dict):
            raise ValueError("platforms: expected platform -> {torch, build}")
        builds.append(PlatformBuild(plat, str(b.get("torch", "")), str(b.get("build", ""))))
    return Variant(name, lock, sha, min_driver, tuple(archs), tuple(builds))


# ----------------------------------------------------------------------------- the choice


@dataclass(frozen=True)
class HostGpu:
    """A visible GPU as the choice needs it: compute capability ('9.0') and, when known, a name."""

    capability: str
    name: str | None = None

    @property
    def arch(self) -> str:
        return cu.capability_to_arch(self.capability)

    def label(self) -> str:
        return f"{self.name} ({self.arch})" if self.name else self.arch


@dataclass(frozen=True)
class Choice:
    variant: Variant
    mode: str  # cpu | native | compat | forced
    reason: str  # one line: 'driver 535.104.05 → cuda11.8 variant; cuda12.6 needs ≥ 560.28.03'


def variant_problem(
    variant: Variant, driver: str | None, gpus: Sequence[HostGpu], platform: str
) -> tuple[str, str] | None:
    """Why this host cannot run the variant: (problem, kind) with kind platform | driver |
    compat | arch; None when it runs natively (a cpu variant runs anywhere it was solved for)."""
    if platform not in variant.platforms:
        return (f"{variant.name} has no {platform} solution", "platform")
    if variant.cuda is None:
        return None
    if driver is None:
        return (f"{variant.name} needs an NVIDIA driver", "driver")
    missing = [g for g in gpus if variant.archs and not _covers(g, variant.archs)]
    if missing:
        return (
            f"{variant.name} builds carry {' '.join(variant.archs)}, not "
            + ", ".join(g.label() for g in missing),
            "arch",
        )
    floor = variant.min_driver or cu.min_driver(variant.cuda)
    if floor and not cu.driver_at_least(driver, floor):
        compat = cu.compat_floor(variant.cuda)
        kind = "compat" if compat and cu.driver_at_least(driver, compat) else "driver"
        return (f"{variant.name} needs ≥ {floor}", kind)
    return None


def _covers(gpu: HostGpu, archs: Sequence[str]) -> bool:
    try:
        return cu.arch_covered(gpu.capability, tuple(archs))
    except ValueError:
        return True  # an unreadable capability is no evidence against a build


def _host_label(driver: str | None, gpus: Sequence[HostGpu]) -> str:
    if driver is None:
        return "no NVIDIA driver"
    if not gpus:
        return f"driver {driver}"
    labels = [g.label() for g in gpus]
    shown = sorted(set(labels), key=labels.index)
    counted = [f"{labels.count(x)}× {x}" if labels.count(x) > 1 else x for x in shown]
    return f"driver {driver}, {', '.join(counted)}"


def choose_variant(
    driver: str | None,
    gpus: Sequence[HostGpu],
    index: VariantIndex,
    platform: str = "linux-64",
    no_driver_reason: str | None = None,
) -> Choice:
    """The variant this host installs, with the one-line reason; UsageError (naming the fix)
    when none fits. See the module docstring for the rule."""
    cudas = sorted(
        (v for v in index.variants if v.cuda), key=lambda v: variant_sort_key(v.name), reverse=True
    )
    cpu = index.get(CPU)
    host = _host_label(driver, gpus)
    if driver is None:
        if cpu is not None and platform in cpu.platforms:
            why = no_driver_reason or "no NVIDIA driver"
            return Choice(cpu, "cpu", f"{why} → cpu variant")
        raise UsageError(
            f"no NVIDIA driver here and {index.name}'s lock has no cpu variant"
            + (f" for {platform}" if cpu is not None else "")
            + f" (it has {', '.join(index.names())})",
            f"add one: `envtool lock {quote_posix(index.name)} --variants "
            f"{','.join(sorted({CPU, *index.names()}, key=variant_sort_key))}`, "
            "or install on a GPU host",
        )
    over = _driver_above_gpu_ceiling(driver, gpus)
    if over:  # core/suggest's first rule: no driver of this branch drives the GPU
        message, fix = over
        raise UsageError(message, fix)
    too_old = _driver_below_gpu_floor(driver, gpus)
    if too_old:  # no CUDA build runs on a GPU its driver cannot drive: the driver is the fix
        floor, gpu = too_old
        fixes = [f"upgrade the NVIDIA driver to ≥ {floor} for this GPU"]
        if cpu is not None and platform in cpu.platforms:
            fixes.append(
                f"install the cpu variant: `envtool install {quote_posix(index.name)} --variant cpu`"
            )
        raise UsageError(
            f"driver {driver} cannot drive {gpu} (needs ≥ {floor})", ", or ".join(fixes)
        )
    skipped: list[str] = []
    compat: list[Variant] = []
    for v in cudas:
        problem = variant_problem(v, driver, gpus, platform)
        if problem is None:
            tail = f"; {'; '.join(skipped)}" if skipped else ""
            return Choice(v, "native", f"{host} → {v.name} variant{tail}")
        text, kind = problem
        if kind == "compat":
            compat.append(v)
        skipped.append(text)
    if compat:  # the oldest such variant: the one that leans least on compatibility
        v = compat[-1]
        return Choice(
            v,
            "compat",
            f"{host} → {v.name} variant through CUDA minor-version compatibility (native needs "
            f"≥ {v.min_driver}; PTX JIT of newer code fails)",
        )
    raise UsageError(
        f"{host}: none of {index.name}'s variants runs here ({'; '.join(skipped) or 'none'})",
        _way_out(index, driver, gpus, cudas, platform),
    )


def _driver_above_gpu_ceiling(driver: str, gpus: Sequence[HostGpu]) -> tuple[str, str] | None:
    """(problem, fix) when the driver is newer than a GPU family's last branch (a Kepler GPU on
    R535, a V100 on R590): a host that cannot exist as described; None otherwise."""
    from envtool.core.suggest import Gpu, suggest_cuda

    s = suggest_cuda(driver, [Gpu(g.capability, g.name) for g in gpus], [], flavor="pypi")
    if s.kind != "ceiling":
        return None
    return (
        f"{s.reasons[0]} (is the driver version right? `nvidia-smi` shows it)",
        f"install an R{s.branch} driver (the last branch for {s.gpu}), or pass --force",
    )


def _driver_below_gpu_floor(driver: str, gpus: Sequence[HostGpu]) -> tuple[str, str] | None:
    """(floor, GPU label) when the driver is older than a GPU's own floor (core/suggest.py's
    per-GPU table: an H200 needs ≥ 520.61.05 whatever the CUDA); None otherwise."""
    from envtool.core.suggest import Gpu, driver_floor_for_gpus

    found = driver_floor_for_gpus(driver, [Gpu(g.capability, g.name) for g in gpus])
    return (found[0], found[1].label()) if found else None


def _way_out(
    index: VariantIndex,
    driver: str,
    gpus: Sequence[HostGpu],
    cudas: Sequence[Variant],
    platform: str,
) -> str:
    """The fix when no variant fits: the driver to get (for the newest variant that covers these
    GPUs), else the variant to add (the newest CUDA this driver runs whose official builds cover
    them); and `--variant cpu` when the lock has one."""
    fixes: list[str] = []
    covering = [
        v
        for v in cudas
        if platform in v.platforms and not (v.archs and any(not _covers(g, v.archs) for g in gpus))
    ]
    if covering:  # the smallest upgrade that runs one, and the one that runs the newest
        low, high = covering[-1], covering[0]
        more = f"; ≥ {high.min_driver} runs {high.name}" if high is not low else ""
        fixes.append(f"upgrade the NVIDIA driver to ≥ {low.min_driver} ({low.name}{more})")
    else:
        add = _variant_to_add(driver, gpus)
        if add:
            names = sorted({*index.names(), add}, key=variant_sort_key)
            fixes.append(
                f"add a variant: `envtool lock {quote_posix(index.name)} --variants "
                f"{','.join(names)}`"
            )
    cpu = index.get(CPU)
    if cpu is not None and platform in cpu.platforms:
        fixes.append(
            f"install the cpu variant: `envtool install {quote_posix(index.name)} --variant cpu`"
        )
    return ", or ".join(fixes) or f"re-lock {index.name} with variants for {platform}"


def _variant_to_add(driver: str, gpus: Sequence[HostGpu]) -> str | None:
    """The variant to add: core/suggest's answer for this driver and these GPUs among the CUDA
    lines conda-forge (lock's default channel) publishes. The index does not record its flavor,
    so a suggestion never names a line that channel lacks (no cuda11.3 for a K80)."""
    from envtool.core.suggest import Gpu, suggest_cuda

    s = suggest_cuda(driver, [Gpu(g.capability, g.name) for g in gpus], None, flavor="conda-forge")
    return variant_name(s.cuda) if s.kind == "cuda" and s.cuda else None


def check_chosen(
    name: str,
    driver: str | None,
    gpus: Sequence[HostGpu],
    index: VariantIndex,
    platform: str = "linux-64",
) -> Choice:
    """`--variant NAME`: the variant must be in the index; a host that cannot run it is a
    UsageError naming what it would pick instead (`--force` skips this check in the command)."""
    variant = index.get(name)
    if variant is None:
        raise UsageError(
            f"--variant {name}: {index.name}'s lock has no such variant",
            f"use one of {', '.join(index.names())}, or add it with "
            f"`envtool lock {quote_posix(index.name)} "
            f"--variants {','.join(sorted({*index.names(), name}, key=variant_sort_key))}`",
        )
    problem = variant_problem(variant, driver, gpus, platform)
    if problem is None:
        return Choice(variant, "cpu" if variant.cuda is None else "native", f"--variant {name}")
    text, kind = problem
    if kind == "compat":
        return Choice(
            variant,
            "compat",
            f"--variant {name} (driver {driver} runs it only through CUDA minor-version "
            f"compatibility; native needs ≥ {variant.min_driver})",
        )
    try:
        other = choose_variant(driver, gpus, index, platform).variant.name
        instead = f"this host would install {other}; "
    except UsageError:
        instead = ""
    raise UsageError(
        f"--variant {name}: {text} ({_host_label(driver, gpus)})",
        f"{instead}pass --force to install it anyway",
    )


# ----------------------------------------------------------------------------- after install

_LOCK_FILE = re.compile(r"^conda-lock\.(cpu|cuda\d{1,3}\.\d{1,3})\.yml$")


def variant_of_lock_file(path: str | None) -> str | None:
    """'…/environments/demo/conda-lock.cuda12.6.yml' -> 'cuda12.6'; any other lock -> None."""
    if not path:
        return None
    m = _LOCK_FILE.match(path.replace("\\", "/").rsplit("/", 1)[-1])
    return m.group(1) if m else None


def check_installed_variant(
    installed: str, env_label: str, pick: Choice | None, refusal: str | None
) -> Any:
    """doctor's "variant-choice" check: the installed variant against the one this host would
    install now (e.g. after a driver upgrade: 'cuda12.9 now runs here; reinstall to get it')."""
    from envtool.core.checks import Check

    cid = "variant-choice"
    install = f"envtool install {env_label}"
    if pick is None:
        return Check(
            cid,
            "warn",
            f"installed variant {installed}, and no variant of this lock runs here now",
            [refusal or "no variant fits"],
            refusal.split(" — ", 1)[-1] if refusal and " — " in refusal else None,
        )
    if pick.variant.name == installed:
        return Check(cid, "ok", f"installed variant {installed} is this host's pick", [pick.reason])
    newer = variant_sort_key(pick.variant.name) > variant_sort_key(installed)
    summary = (
        f"{pick.variant.name} now runs here; installed variant is {installed}"
        if newer
        else f"installed variant {installed} is not this host's pick ({pick.variant.name})"
    )
    return Check(cid, "warn", summary, [pick.reason], f"reinstall to get it: `{install}`")


def decide_variants(
    request: Any, builds: list[Any], requested: tuple[str, ...]
) -> tuple[tuple[str, ...], str | None, list[str]]:
    """`lock --variants`' decision, from the request every variant shares and the torch `builds`
    its channels list: (variants, torch pin, notes): `auto` expanded; the torch release every
    variant shares (none: each variant takes its newest, and a warning says so)."""
    from envtool.core.plan import NO_CUDA_PLATFORMS

    platforms = [p for p in request.platforms if p not in NO_CUDA_PLATFORMS] or list(
        request.platforms
    )
    notes: list[str] = []
    if requested == (AUTO,):
        found, variants = auto_variants(builds, platforms, request.python, request.torch)
        torch = request.torch or found
        notes.append(f"auto: torch {found} has builds for {', '.join(variants)}")
        return variants, torch, notes
    if request.torch:
        return requested, request.torch, notes
    torch = common_torch(builds, requested, platforms, request.python)
    if torch is None:
        notes.append(
            f"warning: no torch release has builds for all of {', '.join(requested)}: each "
            "variant takes its newest torch (builds: "
            + describe_lines(lines_by_torch(builds, platforms, request.python))
            + "); pin one with pytorch=X.Y in environment.yml"
        )
    return requested, torch, notes


def host_gpus(host: HostFacts) -> list[HostGpu]:
    """The GPUs this process would use (core/host_record.visible_gpus: CUDA_VISIBLE_DEVICES by
    index; "" hides them all; names are not mapped, so every GPU counts then)."""
    from envtool.core.host_record import visible_gpus

    return [HostGpu(g.capability, g.name) for g in visible_gpus(host)[0] if g.capability]
