"""Build real, installable local conda channels for tests (py-rattler-build + rattler's indexer).

The package graph mirrors real conda-forge metadata (fixtures/repodata/harvested-from-pixi-locks):
`pytorch 2.7.1 cuda126_mkl_py311_…_300` depends on `__cuda`, `cuda-version >=12.6,<13` and the
matching `libtorch` build; the CPU build constrains `pytorch-gpu <0.0a0`; `cuda-version 12.6`
constrains `__cuda >=12`. Dependency lists are trimmed to what the stub channel holds.

`python` is a stub whose bin/python links to the interpreter running the tests, with a
pyvenv.cfg beside it, so the env has a working python with its own site-packages (pip part).

Also: `solve_records` solves specs over a channel with rattler, `write_lock` writes the records
as a conda-lock v1 file through envtool's own lock writer, and `build_wheel` writes a tiny
pure-python wheel.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import sys
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

STAMP = datetime(2025, 6, 1, tzinfo=timezone.utc)
PY_VER = f"{sys.version_info.major}.{sys.version_info.minor}"
PY_TAG = f"py{sys.version_info.major}{sys.version_info.minor}"
CP_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
NEXT_PY = f"{sys.version_info.major}.{sys.version_info.minor + 1}"


@dataclass
class Pkg:
    name: str
    version: str
    build: str
    subdir: str = "linux-64"
    depends: list[str] = field(default_factory=list)
    constrains: list[str] = field(default_factory=list)
    build_number: int = 0
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text
    symlinks: dict[str, str] = field(default_factory=dict)  # relative path -> target
    tar_bz2: bool = False  # the legacy .tar.bz2 format instead of .conda


def _real_python() -> Path:
    base = getattr(sys, "_base_executable", None) or sys.executable
    return Path(base).resolve()


def cuda_graph() -> list[Pkg]:
    """python stub, python_abi, cuda-version, libtorch + pytorch in cuda126 and cpu builds."""
    real = _real_python()
    py_dep = f"python >={PY_VER},<{NEXT_PY}.0a0"
    abi_dep = f"python_abi {PY_VER}.* *_{CP_TAG}"
    lt_cuda = "cuda126_mkl_hc2b21a2_300"
    lt_cpu = "cpu_mkl_hb1c5dc7_100"
    return [
        Pkg(
            "python",
            f"{PY_VER}.{sys.version_info.micro}",
            "h_envtool_stub_0_cpython",
            files={"pyvenv.cfg": f"home = {real.parent}\ninclude-system-site-packages = false\n"},
            symlinks={"bin/python": str(real), "bin/python3": "python"},
        ),
        Pkg(
            "python_abi",
            PY_VER,
            f"8_{CP_TAG}",
            build_number=8,
            constrains=[f"python {PY_VER}.* *_cpython"],
            files={"share/python_abi/README": "abi marker\n"},
        ),
        Pkg(
            "cuda-version",
            "12.6",
            "h7480c83_3",
            subdir="noarch",
            build_number=3,
            constrains=["cudatoolkit 12.6|12.6.*", "__cuda >=12"],
            files={"share/cuda-version/VERSION": "12.6\n"},
        ),
        Pkg(
            "libtorch",
            "2.7.1",
            lt_cuda,
            build_number=300,
            depends=["cuda-version >=12.6,<13"],
            constrains=[
                "pytorch-gpu 2.7.1",
                "pytorch-cpu <0.0a0",
                f"pytorch 2.7.1 {lt_cuda[:7]}*_300",
            ],
            files={
                "lib/libtorch_cuda.so": "stub cuda126 library\n",
                "etc/conda/activate.d/libtorch_activate.sh": (
                    'export ENVTOOL_TEST_LIBTORCH="cuda126"\n'
                    'export ENVTOOL_TEST_PREFIX_SEEN="$CONDA_PREFIX"\n'
                ),
            },
        ),
        Pkg(
            "libtorch",
            "2.7.1",
            lt_cpu,
            build_number=100,
            constrains=["pytorch 2.7.1 cpu_mkl_*_100", "pytorch-gpu <0.0a0", "pytorch-cpu 2.7.1"],
            files={"lib/libtorch_cpu.so": "stub cpu library\n"},
        ),
        Pkg(
            "pytorch",
            "2.7.1",
            f"cuda126_mkl_{PY_TAG}_h30b5a27_300",
            build_number=300,
            depends=[
                "__cuda",
                "cuda-version >=12.6,<13",
                f"libtorch 2.7.1 {lt_cuda}",
                py_dep,
                abi_dep,
            ],
            constrains=["pytorch-cpu <0.0a0", "pytorch-gpu 2.7.1"],
            files={
                f"lib/python{PY_VER}/site-packages/torch_stub/__init__.py": "BUILD = 'cuda126'\n"
            },
        ),
        Pkg(
            "pytorch",
            "2.7.1",
            f"cpu_mkl_{PY_TAG}_hea9ba1b_100",
            build_number=100,
            depends=[f"libtorch 2.7.1 {lt_cpu}", py_dep, abi_dep],
            constrains=["pytorch-cpu 2.7.1", "pytorch-gpu <0.0a0"],
            files={f"lib/python{PY_VER}/site-packages/torch_stub/__init__.py": "BUILD = 'cpu'\n"},
        ),
    ]


def cuda118_pkgs() -> list[Pkg]:
    """A CUDA 11.8 line of cuda_graph's torch (conda-forge's shape), to add to cuda_graph()."""
    py_dep = f"python >={PY_VER},<{NEXT_PY}.0a0"
    abi_dep = f"python_abi {PY_VER}.* *_{CP_TAG}"
    lt = "cuda118_mkl_h1111111_300"
    return [
        Pkg(
            "cuda-version",
            "11.8",
            "h70ddcb2_3",
            subdir="noarch",
            build_number=3,
            constrains=["cudatoolkit 11.8|11.8.*", "__cuda >=11"],
            files={"share/cuda-version/VERSION": "11.8\n"},
        ),
        Pkg(
            "libtorch",
            "2.7.1",
            lt,
            build_number=300,
            depends=["cuda-version >=11.8,<12"],
            constrains=["pytorch-gpu 2.7.1", "pytorch-cpu <0.0a0"],
            files={"lib/libtorch_cuda.so": "stub cuda118 library\n"},
        ),
        Pkg(
            "pytorch",
            "2.7.1",
            f"cuda118_mkl_{PY_TAG}_h2222222_300",
            build_number=300,
            depends=["__cuda", "cuda-version >=11.8,<12", f"libtorch 2.7.1 {lt}", py_dep, abi_dep],
            constrains=["pytorch-cpu <0.0a0", "pytorch-gpu 2.7.1"],
            files={
                f"lib/python{PY_VER}/site-packages/torch_stub/__init__.py": "BUILD = 'cuda118'\n"
            },
        ),
    ]


def walkthrough_graph() -> list[Pkg]:
    """What README's walkthrough (`create hello --cuda cpu --profile lm`) needs from conda-forge:
    python (the stub above), python_abi, a CPU `pytorch` 2.13.0 whose site-packages holds a .pth
    naming the test interpreter's site-packages (so the env's python imports the torch 2.13.0+cpu
    the tests run with: real, without copying 700 MB into every env), numpy and pip (the lm
    profile's other packages) as marker packages."""
    import sysconfig

    py_dep = f"python >={PY_VER},<{NEXT_PY}.0a0"
    abi_dep = f"python_abi {PY_VER}.* *_{CP_TAG}"
    site = sysconfig.get_paths()["purelib"]
    base = [p for p in cuda_graph() if p.name in ("python", "python_abi")]
    return [
        *base,
        Pkg(
            "pytorch",
            "2.13.0",
            f"cpu_generic_{PY_TAG}_h0a1b2c3_0",
            depends=[py_dep, abi_dep],
            constrains=["pytorch-gpu <0.0a0"],
            files={f"lib/python{PY_VER}/site-packages/torch-from-the-tests.pth": f"{site}\n"},
        ),
        Pkg(
            "numpy",
            "2.3.0",
            f"{PY_TAG}_h0a1b2c3_0",
            depends=[py_dep, abi_dep],
            files={"share/numpy-marker/README": "numpy comes from the torch .pth\n"},
        ),
        Pkg(
            "pip",
            "25.0",
            "pyh0a1b2c3_0",
            subdir="noarch",
            depends=["python"],
            files={"share/pip-marker/README": "pip marker\n"},
        ),
    ]


def synthetic_graph(n: int, files_per_pkg: int = 5) -> list[Pkg]:
    """n small noarch packages plus one `synthetic-all` that depends on all of them."""
    pkgs = [
        Pkg(
            f"synthetic-{i:04d}",
            "1.0",
            "h0000000_0",
            subdir="noarch",
            files={
                f"share/synthetic-{i:04d}/f{j}.txt": f"{i}:{j}\n" * 20 for j in range(files_per_pkg)
            },
        )
        for i in range(n)
    ]
    pkgs.append(
        Pkg(
            "synthetic-all",
            "1.0",
            "h0000000_0",
            subdir="noarch",
            depends=[p.name for p in pkgs],
            files={"share/synthetic-all/README": "all\n"},
        )
    )
    return pkgs


def build_channel(root: Path, pkgs: list[Pkg]) -> Path:
    """Assemble each package as a .conda under root/<subdir>/ and index the channel."""
    from rattler_build import ArchiveType, assemble_package

    root.mkdir(parents=True, exist_ok=True)
    for sub in ("noarch", "linux-64"):
        (root / sub).mkdir(exist_ok=True)
    stage_root = root.parent / f".{root.name}-stage"
    for pkg in pkgs:
        stage = stage_root / f"{pkg.name}-{pkg.version}-{pkg.build}"
        stage.mkdir(parents=True, exist_ok=True)
        for rel, text in pkg.files.items():
            dest = stage / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
        for rel, target in pkg.symlinks.items():
            dest = stage / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.is_symlink():
                dest.symlink_to(target)
        assemble_package(
            name=pkg.name,
            version=pkg.version,
            target_platform=pkg.subdir,
            build_string=pkg.build,
            output_dir=root / pkg.subdir,
            files_dir=stage,
            depends=pkg.depends or None,
            constrains=pkg.constrains or None,
            build_number=pkg.build_number,
            noarch="generic" if pkg.subdir == "noarch" else None,
            compression_level=1,
            timestamp=STAMP,
            detect_prefix=False,
            archive_type=ArchiveType.TarBz2 if pkg.tar_bz2 else ArchiveType.Conda,
        )
    index_channel(root)
    return root


def index_channel(root: Path) -> None:
    from rattler.index import index_fs

    async def _run() -> None:
        await index_fs(root, write_zst=False, write_shards=False, force=True)
        await asyncio.sleep(0.05)

    asyncio.run(_run())


# What channel_builder's solves assume of the target machine besides __cuda.
LINUX_VIRTUAL = (("__glibc", "2.35", "0"), ("__unix", "0", "0"), ("__linux", "6.0", "0"))


def solve_records(
    channels: Path | list[str],
    specs: list[str],
    cuda: str | None = "12.6",
    virtual: tuple[tuple[str, str, str], ...] = LINUX_VIRTUAL,
) -> list:
    """Solve specs over a built channel (or channel URLs, in priority order) for linux-64 with a
    target __cuda (None: no GPU) and `virtual` (name, version, build) packages; rattler's own
    records (RepoDataRecord), which tests and benchmarks install or compare directly."""
    from rattler import Channel, GenericVirtualPackage, MatchSpec, PackageName, solve
    from rattler.package import BuildString
    from rattler.version import Version

    urls = [channels.as_uri()] if isinstance(channels, Path) else channels
    given = [*virtual, *([("__cuda", cuda, "0")] if cuda else [])]
    vps = [GenericVirtualPackage(PackageName(n), Version(v), BuildString(b)) for n, v, b in given]

    async def _run() -> list:
        recs = await solve(
            sources=[Channel(u) for u in urls],
            specs=[MatchSpec(s, strict=False) for s in specs],
            platforms=["linux-64", "noarch"],
            virtual_packages=vps,
        )
        await asyncio.sleep(0.05)
        return recs

    return asyncio.run(_run())


def write_lock(
    path: Path,
    records: list,
    channels: str | list[str],
    custom_metadata: dict[str, str] | None = None,
    pip: list[tuple[str, str, Path]] | None = None,
) -> Path:
    """Write a conda-lock v1 file for linux-64 from rattler records with envtool's own writer
    (lock_io.write_lock, held to conda-lock's writer byte for byte), as `envtool lock` writes one.

    `channels` is the channel (URL or name) or channels the records were solved from; `pip`
    entries are (name, version, wheel path)."""
    from envtool.adapters.lockfile.lock_io import write_lock as write_lock_file
    from envtool.adapters.solve.rattler_solve import to_solved
    from envtool.core.lockfile import LockContent, PipPackage

    conda = [to_solved(r, "linux-64") for r in records]
    wheels = [
        PipPackage(
            name,
            version,
            "linux-64",
            wheel.as_uri(),
            hashlib.sha256(wheel.read_bytes()).hexdigest(),
        )
        for name, version, wheel in pip or []
    ]
    urls = sorted([*(p.url for p in conda), *(w.url for w in wheels)])
    content = LockContent(
        packages={"linux-64": conda},
        pip_packages={"linux-64": wheels},
        channels=[channels] if isinstance(channels, str) else channels,
        content_hash={"linux-64": hashlib.sha256(repr(urls).encode()).hexdigest()},
        custom_metadata=custom_metadata or {},
        sources=["environment.yml"],
    )
    write_lock_file(path, content)
    return path


def build_wheel(
    dest_dir: Path,
    name: str = "envtool_demo",
    version: str = "0.1.0",
    requires: tuple[str, ...] = (),
) -> Path:
    """A minimal pure-python wheel (what a `pip:` section of a lock points to); `requires`
    become its Requires-Dist lines."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    wheel = dest_dir / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: envtool-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record_lines = []
    for rel, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record_lines.append(f"{rel},sha256={digest.decode()},{len(text.encode())}")
    record_lines.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record_lines) + "\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for rel, text in files.items():
            zi = zipfile.ZipInfo(rel, date_time=(2025, 6, 1, 0, 0, 0))
            zf.writestr(zi, text)
    return wheel


@dataclass
class CudaSetup:
    """A built channel, a wheel, and a conda-lock v1 (conda + pip parts) solved over them."""

    root: Path
    channel: Path
    wheel: Path
    lock: Path
    records: list


_CACHE: dict[str, CudaSetup] = {}


def cuda_setup(base: Path) -> CudaSetup:
    """Build once per test session (callers pass tmp_path_factory.getbasetemp())."""
    if "cuda" not in _CACHE:
        root = base / "cuda-setup"
        channel = build_channel(root / "channel", cuda_graph())
        wheel = build_wheel(root / "wheels")
        records = solve_records(channel, ["pytorch * cuda*", "cuda-version 12.6.*"])
        meta = {
            "envtool_flavor": "conda-forge",
            "envtool_cuda": "12.6",
            "envtool_min_driver": "560.28.03",
            "envtool_gpu_archs": "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
            "envtool_torch": "2.7",
        }
        lock = write_lock(
            root / "project" / "environments" / "demo" / "conda-lock.yml",
            records,
            channel.as_uri(),
            meta,
            pip=[("envtool-demo", "0.1.0", wheel)],
        )
        _CACHE["cuda"] = CudaSetup(root, channel, wheel, lock, records)
    return _CACHE["cuda"]


def flip_byte(path: Path, offset: int = -10) -> None:
    """Change one byte of a file (tamper tests)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def edit_lock(src: Path, dest: Path, edits: dict[str, dict]) -> Path:
    """A copy of the conda-lock v1 `src` at `dest` with package entries changed: edits maps a
    package name to the fields to set (`hash` is merged into the entry's hash mapping)."""
    import yaml

    data = yaml.safe_load(Path(src).read_text())
    for entry in data["package"]:
        for key, value in edits.get(entry["name"], {}).items():
            if key == "hash":
                entry["hash"] = {**entry["hash"], **value}
            else:
                entry[key] = value
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def run_paused(point: str, seconds: float, argv: list[str]) -> None:
    """`envtool ARGV` in this process with the installer's test seam set to sleep at `point`
    (after-download, mid-link, after-link), announcing it on stderr, so a test can kill the
    install there. Run in a child: `python -c 'import channel_builder; …run_paused(…)'`."""
    import time

    from envtool.adapters.install import installer
    from envtool.cli import main

    def pause(at: str) -> None:
        if at == point:
            sys.stderr.write(f"PAUSED AT {point}\n")
            sys.stderr.flush()
            time.sleep(seconds)

    installer._pause_hook = pause
    main(argv)


def paused_argv(point: str, seconds: float, *args: str) -> list[str]:
    """The argv of a child `envtool ARGS` paused at `point` (see run_paused)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import channel_builder as cb; "
        "cb.run_paused(sys.argv[2], float(sys.argv[3]), sys.argv[4:])"
    )
    return [sys.executable, "-c", code, str(Path(__file__).parent), point, str(seconds), *args]


def sharded_copy(channel: Path, dest: Path, keep_json: bool = False) -> Path:
    """A copy of `channel` with sharded repodata (CEP-16) and no repodata.json: a solve that
    read repodata.json would fail (`keep_json`: both, as conda-forge publishes them)."""
    import asyncio
    import shutil

    from rattler.index import index_fs

    shutil.copytree(channel, dest)
    for sub in dest.iterdir():
        for name in ("repodata.json", "repodata.json.zst", "repodata.json.bz2"):
            (sub / name).unlink(missing_ok=True)

    async def index() -> None:
        await index_fs(dest, write_zst=False, write_shards=True, force=True)
        await asyncio.sleep(0.05)

    asyncio.run(index())
    for sub in dest.iterdir():
        if not keep_json:
            (sub / "repodata.json").unlink(missing_ok=True)
    return dest
