"""What does an environment file ask for? Pure: EnvSpec in, one answer out.

read_ask is **the** reader: `envtool inspect` (inspect_env adds the file's problems to it),
`create -f`, `lock` and `lock --variants` (workflows/lock.request_from_yml) all take its FileAsk, so the
report and the plan never disagree. Its `cuda` is the plan's request: "X.Y", a major "X" (the
newest X.y that runs), "cpu" or "auto" (the file names no CUDA: the host decides).

Precedence when a file carries several signals (first match wins; the rest only add problems):
1. a pip `torch` requirement — pip runs after conda and replaces any conda torch. CUDA comes
   from the wheel's local tag (`+cu121`), else the download.pytorch.org index (`/whl/cu118`),
   else PyPI's default linux-64 build for that release (cuda_data.json "pypi_default_cuda"; a
   release outside that table is a CUDA build of unknown version). `+cpu` / `/whl/cpu` -> cpu;
   ROCm (`+rocm5.6`, `/whl/rocm5.6`) -> pip-wheel with cuda null (it is an AMD build).
   A plan installs torch from conda: `+cu118` / `/whl/cu118` plan CUDA 11.8, `+cpu` plans cpu,
   a PyPI default (no CUDA named) plans auto; the pip torch/torchvision/torchaudio lines become
   their conda packages at the same version (pip would overwrite the planned build).
2. an explicit CPU ask: `cpuonly`, `pytorch-cpu`, `pytorch-mutex=*=cpu`, or a pytorch build
   string with `cpu`.
3. `pytorch-cuda=X.Y` -> the legacy pytorch channel (plan flavor pytorch).
4. a pytorch build string naming CUDA: `cuda12.1` (pytorch-channel style, plan flavor pytorch)
   or `cuda126`/`*cuda*` (conda-forge style; `*cuda12*` names the major 12).
5. `cuda-version=X.Y` or `pytorch-gpu` -> conda-forge.
6. `cudatoolkit[=X.Y]` -> cudatoolkit (pytorch channel <= 1.12, conda-forge CUDA 11 builds).
7. only NVIDIA toolkit packages (`cuda`, `cuda-toolkit`, `cuda-nvcc`, `cuda-runtime`) ->
   unspecified, but a GPU is still required; a pinned one is the CUDA the plan takes.
8. nothing -> unspecified (torch present: the solver alone decides CPU or CUDA); plan auto.
A major only (`cuda-version=12`, `pytorch-cuda=11`, `cudatoolkit=11`, `*cuda12*`) is read as that
major, never as X.0: the plan takes the newest 12.x that runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from envtool.core import cuda as cuda_knowledge
from envtool.core.spec import CondaSpec, EnvSpec, PipLine, normalize_pip_name
from envtool.core.versions import cuda_from_build_tag, major_minor, parse_version

FLAVORS = ("conda-forge", "pytorch-channel", "cudatoolkit", "pip-wheel", "cpu", "unspecified")

# NVIDIA channel packages that are the CUDA toolkit itself (they do not pick a torch build).
_TOOLKIT_NAMES = ("cuda", "cuda-toolkit", "cuda-nvcc", "cuda-runtime")
_TORCH_INDEX = re.compile(
    r"download\.pytorch\.org/whl/(?:nightly/|test/)?(?P<tag>cu\d+|cpu|rocm[\d.]+)(?:/|$)"
)
_PYTORCH_CHANNELS = ("pytorch", "pytorch-nightly", "pytorch-test")


@dataclass
class CudaAsk:
    """The CUDA request of one environment file, plus what is wrong with it."""

    flavor: str
    cuda: str | None
    gpu_required: bool
    min_driver: str | None
    torch: str | None
    python: str | None
    problems: list[str] = field(default_factory=list)
    via: str = ""  # human phrase: "cudatoolkit (pytorch channel)"
    torch_version: str | None = None  # "1.12.*" / "2.1.0+cu121", for the sentence
    notes: list[str] = field(default_factory=list)  # true of the file, not wrong in it
    request: dict[str, Any] = field(default_factory=dict)  # FileAsk.request_data(): the plan's

    def to_data(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "cuda": self.cuda,
            "gpu_required": self.gpu_required,
            "min_driver": self.min_driver,
            "torch": self.torch,
            "python": self.python,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "request": dict(self.request),
        }


def cuda_of_version(version: str | None) -> str | None:
    """A CUDA X.Y from a spec version: '11.3', '=11.3.1', '==11.3.*', '11.7.0' -> X.Y; ranges
    and wildcards like '>=11,<12' or '12.*' -> None (they do not pin one CUDA)."""
    if not version:
        return None
    m = re.fullmatch(r"=*\s*(\d{1,9})\.(\d{1,9})(?:\.\d+)*(?:\.\*)?", version.strip())
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def torch_series_of(version: str | None) -> str | None:
    """A torch X.Y series when the spec pins one ('1.12.1', '1.12.*', '==2.3.1', '2.5',
    '2.1.0+cu121'); None for ranges and bare wildcards ('>=1.13', '2.*')."""
    if not version:
        return None
    m = re.fullmatch(r"=*\s*(\d{1,9})\.(\d{1,9})(?:\.[\w]+)*(?:\.\*)?(?:\+\w+)?", version.strip())
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def _as_written(spec: CondaSpec) -> str:
    return re.split(r"\s#", spec.raw, maxsplit=1)[0].strip() or spec.render()


def _channel_names(env: EnvSpec) -> list[str]:
    return [c.rstrip("/").split("/")[-1] if "://" in c else c for c in env.channels]


def _torch_channel(env: EnvSpec, torch: CondaSpec | None) -> str | None:
    """Where conda would take pytorch from: an explicit `channel::`, else the first listed
    channel that publishes pytorch (channel priority puts it ahead of later ones)."""
    if torch is not None and torch.channel:
        return torch.channel
    for name in _channel_names(env):  # https://conda.anaconda.org/pytorch counts as pytorch
        if name in (*_PYTORCH_CHANNELS, "conda-forge", "defaults", "anaconda", "main"):
            return name
    return None


def _first(specs: list[CondaSpec]) -> CondaSpec | None:
    return specs[0] if specs else None


def _pip_torch(lines: list[PipLine]) -> PipLine | None:
    for line in lines:
        if line.kind == "requirement" and line.name and line.name.lower() == "torch":
            return line
    return None


def _pip_index_tag(lines: list[PipLine]) -> str | None:
    line = _pip_index_line(lines)
    m = _TORCH_INDEX.search(line.value or "") if line else None
    return m.group("tag") if m else None


def _pip_index_line(lines: list[PipLine]) -> PipLine | None:
    """The first pip option pointing at a download.pytorch.org/whl/<tag> index or page."""
    for line in lines:
        if line.kind == "option" and line.value and _TORCH_INDEX.search(line.value):
            return line
    return None


# A plain pin (`12.6`, `==12.6`, `12.6.*`, or `12`, which conda reads as 12.*), not a range.
PLAIN_VERSION = re.compile(r"^(==?)?(\d+(?:\.\d+)*)(\.\*)?$")
# pip wheels a conda plan replaces with its own build, and the conda package each one becomes
_TORCH_FAMILY = {"torch": "pytorch", "torchvision": "torchvision", "torchaudio": "torchaudio"}
# a pip range conda reads the same way (`>=2.1,<2.4`), carried over as a conda limit
_PIP_RANGE = re.compile(r"[<>]=?\d+(?:\.\d+)*(?:,[<>]=?\d+(?:\.\d+)*)*")


@dataclass(frozen=True)
class FileAsk:
    """What one environment file asks for: **the** answer `inspect`, `create -f`, `lock` and
    `lock --variants` all take (read_ask). `cuda` is the request a plan gets from the file:
    "X.Y", "X" (a major only: the newest X.y that runs), "cpu" or "auto" (the file names none)."""

    kind: str  # one of FLAVORS: how the file asks (inspect's "flavor")
    style: str  # the signal that decided: pip, cpu, pytorch-cuda, build, cuda-version, cudatoolkit, toolkit, none
    cuda: str
    via: str = ""  # human phrase: "cudatoolkit (pytorch channel)"
    build_cuda: str | None = None  # the CUDA X.Y the file's build gets, when one is known
    gpu_required: bool = False
    flavor: str | None = (
        None  # plan flavor the file implies: "pytorch" (pytorch-cuda, cudaX.Y builds)
    )
    torch: str | None = None  # a plain torch pin ("2.1.0"), for --torch
    python: str | None = None  # a plain python pin as X.Y, for --python
    # pip lines of torch wheels that the conda plan replaces with its own build (never installed
    # by pip: they would overwrite it), and the conda specs they become
    pip_replaced: tuple[str, ...] = ()
    conda_added: tuple[str, ...] = ()

    def request_data(self) -> dict[str, Any]:
        """The plan request `envtool create -f` / `envtool lock` take from this file."""
        return {
            "cuda": self.cuda,
            "flavor": self.flavor or "conda-forge",
            "torch": self.torch,
            "python": self.python,
            "pip_replaced": list(self.pip_replaced),
        }


def _plain(version: str | None) -> str | None:
    m = PLAIN_VERSION.match(version or "")
    return m.group(2) if m else None


def cuda_request_of(version: str | None) -> str | None:
    """A spec version as a CUDA request: '11.8', '=11.8.0', '11.8.*' -> '11.8'; '12', '12.*'
    -> '12' (a major: conda reads it as 12.*); ranges -> None."""
    xy = cuda_of_version(version)
    if xy:
        return xy
    plain = _plain(version)
    return plain if plain and plain.isdigit() else None


def _glob_major(build: str) -> str | None:
    """`*cuda12*` names a CUDA major (cuda120 … cuda129, cuda12.1); `cuda*` names none."""
    m = re.search(r"cuda(1\d)\*", build)
    return m.group(1) if m else None


class _Found(NamedTuple):
    """The entries of a file both read_ask and inspect_env judge, looked up once per call."""

    torch: CondaSpec | None
    gpu_meta: CondaSpec | None
    cpu_meta: CondaSpec | None
    pt_cuda: CondaSpec | None
    toolkit: CondaSpec | None
    cuda_version: CondaSpec | None
    nv_toolkit: list[CondaSpec]
    python: CondaSpec | None
    pip_lines: list[PipLine]
    pip_torch: PipLine | None
    torch_channel: str | None
    torch_build: str
    build_cuda: str | None


def _found(env: EnvSpec) -> _Found:
    torch = _first(env.find("pytorch"))
    pip_lines = env.pip_lines()
    torch_build = (torch.build or "") if torch else ""
    return _Found(
        torch,
        _first(env.find("pytorch-gpu")),
        _first(env.find("cpuonly", "pytorch-cpu")),
        _first(env.find("pytorch-cuda")),
        _first(env.find("cudatoolkit")),
        _first(env.find("cuda-version")),
        env.find(*_TOOLKIT_NAMES),
        _first(env.find("python")),
        pip_lines,
        _pip_torch(pip_lines),
        _torch_channel(env, torch),
        torch_build,
        cuda_from_build_tag(torch_build),
    )


def read_ask(env: EnvSpec) -> FileAsk:
    """Read what an environment file asks for (precedence: the module docstring). Pure."""
    return _read_ask(env, _found(env))


def _read_ask(env: EnvSpec, f: _Found) -> FileAsk:
    torch, gpu_meta, cpu_meta, pt_cuda, toolkit, cuda_version = f[:6]
    nv_toolkit, python, pip_lines, pip_torch, torch_channel, torch_build, build_cuda = f[6:]
    mutex = _first(env.find("pytorch-mutex"))
    py = _plain(python.version if python else None)
    common: dict[str, Any] = {
        "torch": _plain(torch.version if torch else None),
        "python": major_minor(py) if py else None,
    }

    if pip_torch is not None:
        return _pip_read(pip_torch, pip_lines, env, common)
    if cpu_meta is not None or "cpu" in torch_build or (mutex and mutex.build == "cpu"):
        return FileAsk("cpu", "cpu", "cpu", "a CPU build", **common)
    if pt_cuda is not None:
        request = cuda_request_of(pt_cuda.version)
        return FileAsk(
            "pytorch-channel",
            "pytorch-cuda",
            request or "auto",
            "pytorch-cuda (pytorch channel)",
            cuda_of_version(pt_cuda.version),
            True,
            "pytorch",
            **common,
        )
    if build_cuda or "cuda" in torch_build:
        legacy = bool(re.search(r"cuda\d+\.\d", torch_build))
        pinned = cuda_version.version if cuda_version else None
        request = build_cuda or cuda_request_of(pinned) or _glob_major(torch_build)
        return FileAsk(
            "pytorch-channel" if legacy else "conda-forge",
            "build",
            request or "auto",
            f"a {torch_build} build" + (" (pytorch channel)" if legacy else " (conda-forge)"),
            build_cuda or cuda_of_version(pinned),
            True,
            "pytorch" if legacy else None,
            **common,
        )
    if cuda_version is not None or gpu_meta is not None:
        pinned = cuda_version.version if cuda_version else None
        if cuda_request_of(pinned) is None and toolkit is not None:
            pinned = toolkit.version
        return FileAsk(
            "conda-forge",
            "cuda-version",
            cuda_request_of(pinned) or "auto",
            "pytorch-gpu (conda-forge)" if gpu_meta else "cuda-version (conda-forge)",
            cuda_of_version(pinned),
            True,
            **common,
        )
    if toolkit is not None:
        return FileAsk(
            "cudatoolkit",
            "cudatoolkit",
            cuda_request_of(toolkit.version) or "auto",
            "cudatoolkit" + (f" ({torch_channel} channel)" if torch_channel else ""),
            cuda_of_version(toolkit.version),
            True,
            **common,
        )
    spec = next((s for s in nv_toolkit if cuda_of_version(s.version)), None)
    if spec is not None:  # the toolkit's pin is the only CUDA the file names: plan that one
        xy = cuda_of_version(spec.version)
        return FileAsk(
            "unspecified", "toolkit", xy or "auto", _as_written(spec), xy, True, **common
        )
    return FileAsk("unspecified", "none", "auto", **common)


def _pip_read(
    pip_torch: PipLine, lines: list[PipLine], env: EnvSpec, common: dict[str, Any]
) -> FileAsk:
    """A pip torch wins (pip installs after conda). Its CUDA: the wheel's local tag (`+cu121`),
    else the download.pytorch.org index (`/whl/cu118`), else PyPI's default linux-64 build."""
    pinned = pip_torch.pinned_version
    local = pinned.split("+", 1)[1] if pinned and "+" in pinned else ""
    tag = local or _pip_index_tag(lines) or ""
    torch = _plain(pinned.split("+", 1)[0]) if pinned else None
    fields: dict[str, Any] = {**common, "torch": torch}
    if tag.startswith("rocm"):  # an AMD build: no conda equivalent; the pip line stays
        return FileAsk("pip-wheel", "pip", "auto", f"a ROCm {tag[4:]} wheel", None, True, **fields)
    # A conda plan installs torch itself: the pip torch wheels become their conda packages
    # (version kept, local tag dropped), so pip never overwrites the planned build.
    replaced, added = [], []
    conda_names = {d.name for d in env.dependencies}
    for line in lines:
        name = normalize_pip_name(line.name or "") if line.kind == "requirement" else ""
        if name not in _TORCH_FAMILY:
            continue
        replaced.append(line.raw)
        conda = _TORCH_FAMILY[name]
        version = _plain((line.pinned_version or "").split("+", 1)[0])
        limit = line.specifier if _PIP_RANGE.fullmatch(line.specifier or "") else None
        if conda == "pytorch":  # the plan owns pytorch: a pin is --torch, a range a constraint
            added += [f"pytorch{limit}"] if limit else []
        elif conda not in conda_names:
            added.append(f"{conda}={version}" if version else f"{conda}{limit or ''}")
    fields.update(pip_replaced=tuple(replaced), conda_added=tuple(added))
    if tag == "cpu":
        return FileAsk("cpu", "pip", "cpu", "a CPU wheel", **fields)
    if tag:
        xy = cuda_from_build_tag(tag)
        via = f"a +{tag} wheel" if local else f"the download.pytorch.org/whl/{tag} index"
        return FileAsk("pip-wheel", "pip", xy or "auto", via, xy, xy is not None, **fields)
    # PyPI's linux-64 wheels are CUDA builds, but the file names no CUDA: envtool picks (auto)
    series = torch_series_of(pinned) if pinned else None
    xy = cuda_knowledge.pypi_default_cuda(series) if series else None
    return FileAsk("pip-wheel", "pip", "auto", "PyPI's default linux-64 wheel", xy, True, **fields)


def inspect_env(env: EnvSpec) -> CudaAsk:
    """Inspect's report on an environment file: read_ask's answer plus what is wrong with it."""
    problems: list[str] = []
    f = _found(env)
    read = _read_ask(env, f)
    torch, gpu_meta, cpu_meta, pt_cuda, toolkit, cuda_version = f[:6]
    nv_toolkit, python, pip_lines, pip_torch, torch_channel, torch_build, build_cuda = f[6:]
    pt_cuda_specs = env.find("pytorch-cuda")
    channels = _channel_names(env)
    major = read.cuda if read.cuda.isdigit() else None

    if len({cuda_of_version(s.version) for s in pt_cuda_specs}) > 1:
        asked = ", ".join(_as_written(s) for s in pt_cuda_specs)
        problems.append(f"conflicting pytorch-cuda pins ({asked}): keep one")

    ask = CudaAsk(
        flavor=read.kind,
        cuda=read.build_cuda,
        gpu_required=read.gpu_required,
        min_driver=None,
        torch=_as_written(torch) if torch else (_as_written(gpu_meta) if gpu_meta else None),
        python=_as_written(python) if python else None,
        via=read.via,
        torch_version=torch.version if torch else None,
        request=read.request_data(),
    )
    # Anything that asks conda for CUDA, used to spot contradictions with a CPU ask.
    conda_cuda_ask = next(
        (
            _as_written(s)
            for s in (pt_cuda, gpu_meta, cuda_version, toolkit)
            if s is not None and (s is not toolkit or cuda_of_version(s.version))
        ),
        _as_written(torch) if build_cuda or "cuda" in torch_build else None,
    )

    if read.style == "pip":
        assert pip_torch is not None
        ask.torch = pip_torch.raw.strip()
        ask.torch_version = pip_torch.specifier
        _pip_problems(ask, pip_torch, pip_lines, problems)
        if torch is not None:
            problems.append(
                f"conda {_as_written(torch)} is replaced by pip {pip_torch.raw.strip()}: "
                "pip installs after conda; keep torch in one of the two"
            )
        for spec in (toolkit, pt_cuda):
            if spec is not None:
                problems.append(
                    f"{_as_written(spec)} (conda) does not change the pip torch wheel, "
                    "which brings its own CUDA runtime"
                )
    elif read.style == "cpu":
        if conda_cuda_ask:
            what = (
                _as_written(cpu_meta)
                if cpu_meta
                else _as_written(torch)
                if torch
                else "pytorch-mutex"
            )
            problems.append(
                f"{what} asks for a CPU build together with {conda_cuda_ask}: "
                "conda installs CPU torch; drop one of the two"
            )
    elif read.style == "pytorch-cuda":
        assert pt_cuda is not None
        if "nvidia" not in channels and not any(
            (d.channel or "").startswith("nvidia") for d in env.dependencies
        ):
            problems.append(
                f"{_as_written(pt_cuda)} needs the nvidia channel for its CUDA libraries: "
                "add `- nvidia` to channels"
            )
        if ask.cuda is None and major is None:
            problems.append(f"{_as_written(pt_cuda)} does not pin one CUDA version: write X.Y")
        _check_pytorch_channel_release(torch, problems)
    elif read.style == "build":
        if read.kind == "pytorch-channel":
            _check_pytorch_channel_release(torch, problems)
    elif read.style == "cuda-version":
        if torch is not None and gpu_meta is None:
            problems.append(
                f"{_as_written(torch)} with {_as_written(cuda_version)} does not force a CUDA "  # type: ignore[arg-type]
                "build: a solver can pick a newer CPU build (add `pytorch=*=cuda*` or `pytorch-gpu`)"
            )
    elif read.style == "cudatoolkit":
        assert toolkit is not None
        if ask.cuda is None and major is None:
            problems.append(
                f"{_as_written(toolkit)} does not pin a CUDA version: the solver picks one "
                "(pin it, e.g. cudatoolkit=11.8)"
            )
        series = torch_series_of(torch.version) if torch else None
        if (
            torch is not None
            and torch_channel in _PYTORCH_CHANNELS
            and series
            and parse_version(series) >= (1, 13)
        ):
            problems.append(
                f"pytorch {series} on the pytorch channel selects CUDA with pytorch-cuda, not "
                f"cudatoolkit: {_as_written(toolkit)} does not choose the build "
                f"(use pytorch-cuda={ask.cuda or 'X.Y'})"
            )
    elif read.style == "toolkit":
        if torch is not None:
            problems.append(
                f"{read.via} installs the CUDA toolkit but does not select a CUDA build "
                f"of {_as_written(torch)}"
            )
    elif torch is not None:
        problems.append(
            f"{_as_written(torch)} has no CUDA selector: the solver decides between CPU and "
            "CUDA builds (add pytorch-cuda=X.Y, cudatoolkit=X.Y or `pytorch=*=cuda*` with cuda-version)"
        )

    _check_toolkit_agrees(ask, env, nv_toolkit, cuda_version, problems)
    _check_official_pair(ask, torch, torch_channel, pip_torch, problems)
    if ask.cuda:
        ask.min_driver = cuda_knowledge.min_driver(ask.cuda)
        if ask.min_driver is None:
            known = ", ".join(cuda_knowledge.known_cuda_versions())
            problems.append(f"CUDA {ask.cuda} is not a known CUDA release (known: {known})")
    elif major is not None:  # any X.y of the major: it needs at least the oldest one's driver
        oldest = next(
            (v for v in cuda_knowledge.known_cuda_versions() if v.split(".")[0] == major), None
        )
        ask.min_driver = cuda_knowledge.min_driver(oldest) if oldest else None
        if oldest is None:
            known = ", ".join(cuda_knowledge.known_cuda_versions())
            problems.append(f"CUDA {major} is not a known CUDA major (known: {known})")
    ask.problems = problems
    if ask.flavor == "pytorch-channel" or (
        ask.flavor != "pip-wheel" and torch_channel == "pytorch"
    ):
        _note_pytorch_channel_end(ask)
    return ask


def _note_pytorch_channel_end(ask: CudaAsk) -> None:
    """A file that takes torch from the legacy pytorch channel is frozen there: say so once (a
    torch pinned past the end is already a problem naming it)."""
    last = cuda_knowledge.load_cuda_data().pytorch_channel_last
    if any(f"stopped at torch {last}" in p for p in ask.problems):
        return
    ask.notes.append(
        f"the pytorch conda channel stopped publishing at torch {last}: newer torch is on "
        "conda-forge (`envtool create NAME --flavor conda-forge`) or pip wheels"
    )


def _pip_problems(
    ask: CudaAsk, pip_torch: PipLine, lines: list[PipLine], problems: list[str]
) -> None:
    """What is wrong with a pip torch ask (read_ask has already read its CUDA)."""
    pinned = pip_torch.pinned_version
    local = pinned.split("+", 1)[1] if pinned and "+" in pinned else ""
    tag = local or _pip_index_tag(lines) or ""
    if tag == "cpu":
        return
    if tag.startswith("rocm"):
        problems.append(
            f"asks for ROCm {tag[4:]} (AMD GPU) wheels, not CUDA: NVIDIA driver checks do not apply"
        )
    elif tag:
        index = None if local else _pip_index_line(lines)
        if index is not None and index.option != "--index-url" and not pinned:
            # an extra source: pip takes the highest version from PyPI and it together
            problems.append(
                f"{pip_torch.raw.strip()}: torch is not pinned and `{index.option} {index.value}` "
                "only adds a source: pip takes the highest torch from it and PyPI together, so "
                f"a newer PyPI release (a different CUDA) wins over the {tag} builds; pin "
                f"torch==X.Y.Z+{tag}, or use --index-url"
            )
    else:
        series = torch_series_of(pinned) if pinned else None
        if series is None:
            problems.append(_unpinned_pypi_torch(pip_torch))
        elif ask.cuda is None:  # a release missing from the table is still a CUDA build
            problems.append(_unknown_pypi_default(pip_torch, series))


def _unpinned_pypi_torch(pip_torch: PipLine) -> str:
    head = f"{pip_torch.raw.strip()}: torch is not pinned, so the CUDA of PyPI's wheel is"
    fix = "pin torch==X.Y.Z or pick the CUDA with `--index-url https://download.pytorch.org/whl/cuXYZ`"
    if re.search(r"<|~=", pip_torch.specifier or ""):  # pip takes the newest release under it
        return f"{head} that of the newest release the range allows on install day; {fix}"
    newest = cuda_knowledge.pypi_default_series()[-1]
    cuda = cuda_knowledge.pypi_default_cuda(newest)
    floor = cuda_knowledge.min_driver(cuda) if cuda else None
    needs = f", which needs driver ≥ {floor}" if floor else ""
    return (
        f"{head} whatever the newest release ships on install day (torch {newest}: CUDA "
        f"{cuda}{needs}); {fix}"
    )


def _unknown_pypi_default(pip_torch: PipLine, series: str) -> str:
    known = cuda_knowledge.pypi_default_series()
    oldest, newest = known[0], known[-1]
    if parse_version(series) > parse_version(newest):
        edge = f"stops at torch {newest}"
    elif parse_version(series) < parse_version(oldest):
        edge = f"starts at torch {oldest}"
    else:
        edge = f"has no row for torch {series}"
    builds = cuda_knowledge.official_cuda_builds(series)
    built = f" (torch {series} builds: CUDA {', '.join(builds)})" if builds else ""
    return (
        f"{pip_torch.raw.strip()}: PyPI's default linux-64 wheel of torch {series} is a CUDA build "
        f"of a version envtool does not know (its table of PyPI defaults {edge}); make the CUDA "
        "explicit with `--index-url https://download.pytorch.org/whl/cuXYZ` or a `+cuXYZ` local "
        f"version{built}"
    )


def _check_pytorch_channel_release(torch: CondaSpec | None, problems: list[str]) -> None:
    series = torch_series_of(torch.version) if torch else None
    if torch is not None and series and not cuda_knowledge.pytorch_channel_has(series):
        last = cuda_knowledge.load_cuda_data().pytorch_channel_last
        problems.append(
            f"{_as_written(torch)}: the pytorch conda channel stopped at torch {last}; use "
            "conda-forge (`pytorch=*=cuda*` with cuda-version) or pip wheels"
        )


def _check_toolkit_agrees(
    ask: CudaAsk,
    env: EnvSpec,
    nv_toolkit: list[CondaSpec],
    cuda_version: CondaSpec | None,
    problems: list[str],
) -> None:
    """A second CUDA pin that disagrees with the chosen one means two CUDA versions in one env."""
    if not ask.cuda:
        return
    others = list(nv_toolkit) + ([cuda_version] if cuda_version is not None else [])
    for spec in others:
        other = cuda_of_version(spec.version)
        if other and other != ask.cuda:
            problems.append(
                f"{_as_written(spec)} disagrees with CUDA {ask.cuda} asked via {ask.via}: "
                "one environment gets two CUDA versions"
            )
        elif spec.version is None and ask.flavor == "pytorch-channel" and cuda_version is None:
            problems.append(
                f"{_as_written(spec)} is not pinned: it can pull a CUDA newer than {ask.cuda} "
                f"(pin it to {ask.cuda})"
            )


def _check_official_pair(
    ask: CudaAsk,
    torch: CondaSpec | None,
    torch_channel: str | None,
    pip_torch: PipLine | None,
    problems: list[str],
) -> None:
    """PyPI wheels and the pytorch channel only exist for the pairs in PyTorch's matrix.
    conda-forge builds its own set, so it is not checked against that table."""
    if not ask.cuda:
        return
    if ask.flavor == "pip-wheel" and pip_torch is not None:
        series, what = torch_series_of(pip_torch.pinned_version), pip_torch.raw.strip()
    elif ask.flavor == "pytorch-channel" or (
        ask.flavor == "cudatoolkit" and torch_channel in _PYTORCH_CHANNELS
    ):
        series = torch_series_of(torch.version) if torch else None
        what = _as_written(torch) if torch else ""
    else:
        return
    builds = cuda_knowledge.official_cuda_builds(series) if series else None
    if builds and ask.cuda not in builds:
        problems.append(
            f"torch {series} was never built for CUDA {ask.cuda} ({what}); "
            f"official builds: CUDA {', '.join(builds)}"
        )


def render_inspect_text(ask: CudaAsk, source: str) -> list[str]:
    """A short paragraph: what the file asks for, the driver it needs, then its problems."""
    torch = "no torch"
    if ask.torch:
        version = ask.torch_version
        name = (
            "torch" if ask.flavor in ("pip-wheel",) or ask.torch.startswith("torch") else "pytorch"
        )
        torch = f"{name} {version.lstrip('=')}" if version and version != "*" else name
    if ask.flavor == "cpu":
        head = f"{source} asks for {torch}, CPU only"
    elif "ROCm" in ask.via:
        head = f"{source} asks for {torch} as {ask.via} (AMD GPUs, not CUDA)"
    elif ask.cuda:
        head = f"{source} asks for {torch} with CUDA {ask.cuda} via {ask.via}"
    elif str(ask.request.get("cuda", "")).isdigit():
        major = ask.request["cuda"]
        head = (
            f"{source} asks for {torch} with CUDA {major}.x via {ask.via} (a major only: "
            f"envtool plans the newest {major}.x that runs)"
        )
    elif ask.gpu_required and ask.flavor == "pip-wheel":
        # a PyPI wheel of a release outside envtool's table: CUDA, but which one is unknown
        head = f"{source} asks for {torch} with CUDA (version unknown to envtool) via {ask.via}"
    elif ask.gpu_required:
        head = f"{source} asks for {torch} with CUDA (version not pinned) via {ask.via}"
    else:
        head = f"{source} asks for {torch} with no CUDA request"
    if ask.min_driver:
        head += f"; needs NVIDIA driver ≥ {ask.min_driver}"
    lines = [head + "."]
    lines += [f"Note: {n}." for n in ask.notes]
    if ask.problems:
        lines.append("Problems:")
        lines += [f"  - {p}" for p in ask.problems]
    return lines + _plan_lines(ask)


def _plan_lines(ask: CudaAsk) -> list[str]:
    """What `create -f` / `lock` plan from the file, where the sentence above does not say it."""
    request = ask.request
    out = []
    if request.get("pip_replaced"):
        what = "the CPU build" if request["cuda"] == "cpu" else f"CUDA {request['cuda']}"
        if request["cuda"] == "auto":
            what = "the CUDA this host runs (the file names none)"
        out.append(
            f"Plan: `envtool create -f` installs torch from conda for {what}, in place of the "
            f"pip line(s) {', '.join(p.strip() for p in request['pip_replaced'])}."
        )
    return out
