"""What CUDA does an environment file ask for? Pure: EnvSpec in, CudaAsk out.

Precedence when a file carries several signals (first match wins; the rest only add problems):
1. a pip `torch` requirement — pip runs after conda and replaces any conda torch. CUDA comes
   from the wheel's local tag (`+cu121`), else the download.pytorch.org index (`/whl/cu118`),
   else PyPI's default linux-64 build for that release (cuda_data.json "pypi_default_cuda"; a
   release outside that table is a CUDA build of unknown version). `+cpu` / `/whl/cpu` -> cpu;
   ROCm (`+rocm5.6`, `/whl/rocm5.6`) -> pip-wheel with cuda null (it is an AMD build).
2. an explicit CPU ask: `cpuonly`, `pytorch-cpu`, or a pytorch build string with `cpu`.
3. `pytorch-cuda=X.Y` -> the legacy pytorch channel.
4. a pytorch build string naming CUDA: `cuda12.1` (pytorch-channel style) or `cuda126`/`*cuda*`
   (conda-forge style).
5. `cuda-version=X.Y` or `pytorch-gpu` -> conda-forge.
6. `cudatoolkit[=X.Y]` -> cudatoolkit (pytorch channel <= 1.12, conda-forge CUDA 11 builds).
7. only NVIDIA toolkit packages (`cuda`, `cuda-toolkit`, `cuda-nvcc`, `cuda-runtime`) ->
   unspecified, but a GPU is still required.
8. nothing -> unspecified (torch present: the solver alone decides CPU or CUDA).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from envtool.core import cuda as cuda_knowledge
from envtool.core.spec import CondaSpec, EnvSpec, PipLine
from envtool.core.versions import cuda_from_build_tag, parse_version

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


def inspect_env(env: EnvSpec) -> CudaAsk:
    """Infer the CUDA ask of an environment file (see the module docstring for precedence)."""
    problems: list[str] = []
    torch = _first(env.find("pytorch"))
    gpu_meta = _first(env.find("pytorch-gpu"))
    cpu_meta = _first(env.find("cpuonly", "pytorch-cpu"))
    pt_cuda_specs = env.find("pytorch-cuda")
    pt_cuda = _first(pt_cuda_specs)
    toolkit = _first(env.find("cudatoolkit"))
    cuda_version = _first(env.find("cuda-version"))
    nv_toolkit = env.find(*_TOOLKIT_NAMES)
    python = _first(env.find("python"))
    pip_lines = env.pip_lines()
    pip_torch = _pip_torch(pip_lines)
    channels = _channel_names(env)
    torch_channel = _torch_channel(env, torch)
    torch_build = (torch.build or "") if torch else ""
    build_cuda = cuda_from_build_tag(torch_build)

    if len({cuda_of_version(s.version) for s in pt_cuda_specs}) > 1:
        asked = ", ".join(_as_written(s) for s in pt_cuda_specs)
        problems.append(f"conflicting pytorch-cuda pins ({asked}): keep one")

    ask = CudaAsk(
        flavor="unspecified",
        cuda=None,
        gpu_required=False,
        min_driver=None,
        torch=_as_written(torch) if torch else (_as_written(gpu_meta) if gpu_meta else None),
        python=_as_written(python) if python else None,
        torch_version=torch.version if torch else None,
    )
    cpu_asked = cpu_meta is not None or "cpu" in torch_build
    # Anything that asks conda for CUDA, used to spot contradictions with a CPU ask.
    conda_cuda_ask = next(
        (
            _as_written(s)
            for s in (pt_cuda, gpu_meta, cuda_version, toolkit)
            if s is not None and (s is not toolkit or cuda_of_version(s.version))
        ),
        _as_written(torch) if build_cuda or "cuda" in torch_build else None,
    )

    if pip_torch is not None:
        _pip_ask(ask, pip_torch, pip_lines, problems)
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
    elif cpu_asked:
        ask.flavor, ask.via = "cpu", "a CPU build"
        if conda_cuda_ask:
            what = _as_written(cpu_meta) if cpu_meta else _as_written(torch)  # type: ignore[arg-type]
            problems.append(
                f"{what} asks for a CPU build together with {conda_cuda_ask}: "
                "conda installs CPU torch; drop one of the two"
            )
    elif pt_cuda is not None:
        ask.flavor, ask.cuda = "pytorch-channel", cuda_of_version(pt_cuda.version)
        ask.via = "pytorch-cuda (pytorch channel)"
        if "nvidia" not in channels and not any(
            (d.channel or "").startswith("nvidia") for d in env.dependencies
        ):
            problems.append(
                f"{_as_written(pt_cuda)} needs the nvidia channel for its CUDA libraries: "
                "add `- nvidia` to channels"
            )
        if ask.cuda is None:
            problems.append(f"{_as_written(pt_cuda)} does not pin one CUDA version: write X.Y")
        _check_pytorch_channel_release(torch, problems)
    elif build_cuda or "cuda" in torch_build:
        assert torch is not None
        legacy = bool(re.search(r"cuda\d+\.\d", torch_build))
        ask.flavor = "pytorch-channel" if legacy else "conda-forge"
        ask.cuda = build_cuda or cuda_of_version(cuda_version.version if cuda_version else None)
        ask.via = f"a {torch_build} build" + (" (pytorch channel)" if legacy else " (conda-forge)")
        if legacy:
            _check_pytorch_channel_release(torch, problems)
    elif cuda_version is not None or gpu_meta is not None:
        ask.flavor = "conda-forge"
        ask.cuda = cuda_of_version(cuda_version.version if cuda_version else None)
        if ask.cuda is None and toolkit is not None:
            ask.cuda = cuda_of_version(toolkit.version)
        ask.via = "pytorch-gpu (conda-forge)" if gpu_meta else "cuda-version (conda-forge)"
        if torch is not None and gpu_meta is None:
            problems.append(
                f"{_as_written(torch)} with {_as_written(cuda_version)} does not force a CUDA "  # type: ignore[arg-type]
                "build: a solver can pick a newer CPU build (add `pytorch=*=cuda*` or `pytorch-gpu`)"
            )
    elif toolkit is not None:
        ask.flavor, ask.cuda = "cudatoolkit", cuda_of_version(toolkit.version)
        ask.via = "cudatoolkit" + (f" ({torch_channel} channel)" if torch_channel else "")
        if ask.cuda is None:
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
    elif any(cuda_of_version(s.version) for s in nv_toolkit):
        spec = next(s for s in nv_toolkit if cuda_of_version(s.version))
        ask.cuda = cuda_of_version(spec.version)
        ask.via = _as_written(spec)
        if torch is not None:
            problems.append(
                f"{_as_written(spec)} installs the CUDA toolkit but does not select a CUDA build "
                f"of {_as_written(torch)}"
            )
    elif torch is not None:
        problems.append(
            f"{_as_written(torch)} has no CUDA selector: the solver decides between CPU and "
            "CUDA builds (add pytorch-cuda=X.Y, cudatoolkit=X.Y or `pytorch=*=cuda*` with cuda-version)"
        )

    if ask.flavor in ("conda-forge", "pytorch-channel", "cudatoolkit") or (
        ask.flavor == "unspecified" and ask.cuda
    ):
        ask.gpu_required = True
    _check_toolkit_agrees(ask, env, nv_toolkit, cuda_version, problems)
    _check_official_pair(ask, torch, torch_channel, pip_torch, problems)
    if ask.cuda:
        ask.min_driver = cuda_knowledge.min_driver(ask.cuda)
        if ask.min_driver is None:
            known = ", ".join(cuda_knowledge.known_cuda_versions())
            problems.append(f"CUDA {ask.cuda} is not a known CUDA release (known: {known})")
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


def _pip_ask(ask: CudaAsk, pip_torch: PipLine, lines: list[PipLine], problems: list[str]) -> None:
    ask.torch = pip_torch.raw.strip()
    ask.torch_version = pip_torch.specifier
    local = ""
    pinned = pip_torch.pinned_version
    if pinned and "+" in pinned:
        local = pinned.split("+", 1)[1]
    tag = local or _pip_index_tag(lines) or ""
    ask.flavor = "pip-wheel"
    if tag == "cpu":
        ask.flavor, ask.via = "cpu", "a CPU wheel"
    elif tag.startswith("rocm"):
        ask.gpu_required = True
        ask.via = f"a ROCm {tag[4:]} wheel"
        problems.append(
            f"asks for ROCm {tag[4:]} (AMD GPU) wheels, not CUDA: NVIDIA driver checks do not apply"
        )
    elif tag:
        ask.cuda = cuda_from_build_tag(tag)
        ask.gpu_required = ask.cuda is not None
        ask.via = f"a +{tag} wheel" if local else f"the download.pytorch.org/whl/{tag} index"
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
        ask.via = "PyPI's default linux-64 wheel"
        series = torch_series_of(pinned) if pinned else None
        # PyPI's linux-64 torch wheels are CUDA builds, pinned or not.
        ask.gpu_required = True
        if series is None:
            problems.append(_unpinned_pypi_torch(pip_torch))
            return
        ask.cuda = cuda_knowledge.pypi_default_cuda(series)
        if ask.cuda is None:  # a release missing from the table is still a CUDA build
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
    return lines
