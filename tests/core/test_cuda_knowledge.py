"""Every row of the CUDA knowledge table, against the values in design.md / NVIDIA / PyTorch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envtool.core import cuda
from envtool.core.versions import cuda_from_build_tag, cuda_from_int, parse_version

MIN_DRIVER = {
    "9.0": "384.81",
    "9.2": "396.26",
    "10.0": "410.48",
    "10.1": "418.39",
    "10.2": "440.33",
    "11.0": "450.36.06",
    "11.1": "455.23",
    "11.2": "460.27.03",
    "11.3": "465.19.01",
    "11.4": "470.42.01",
    "11.5": "495.29.05",
    "11.6": "510.39.01",
    "11.7": "515.43.04",
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.4": "550.54.14",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
    "13.1": "590.44.01",
    "13.2": "595.45.04",
}

TORCH_CUDA = {
    "2.0": ("11.7", "11.8"),
    "2.1": ("11.8", "12.1"),
    "2.2": ("11.8", "12.1"),
    "2.3": ("11.8", "12.1"),
    "2.4": ("11.8", "12.1", "12.4"),
    "2.5": ("11.8", "12.1", "12.4"),
    "2.6": ("11.8", "12.4", "12.6"),
    "2.7": ("11.8", "12.6", "12.8"),
    "2.8": ("12.6", "12.8", "12.9"),
    "2.9": ("12.6", "12.8", "13.0"),
    "2.10": ("12.6", "12.8", "13.0"),
    "2.11": ("12.6", "12.8", "13.0"),
    "2.12": ("12.6", "13.0", "13.2"),  # pytorch#178665
    "2.13": ("12.6", "13.0", "13.2"),  # no RFC found: 2.12's matrix (marked unverified)
    "2.14": ("12.6", "13.0", "13.2"),  # pytorch#190355
    "2.15": ("13.0", "13.2"),  # pytorch#190385: cu126 dropped
}

# CUDA of the linux-64 wheel a plain `pip install torch==X.Y.*` gets from PyPI (cuda_data.json
# "pypi_default_cuda"; 2.9-2.11 from PyTorch's CUDA RFCs/build matrix and PyPI wheel deps).
PYPI_DEFAULT = {
    "1.5": "10.2",
    "1.6": "10.2",
    "1.7": "10.2",
    "1.8": "10.2",
    "1.9": "10.2",
    "1.10": "10.2",
    "1.11": "10.2",
    "1.12": "10.2",
    "1.13": "11.7",
    "2.0": "11.7",
    "2.1": "12.1",
    "2.2": "12.1",
    "2.3": "12.1",
    "2.4": "12.1",
    "2.5": "12.4",
    "2.6": "12.4",
    "2.7": "12.6",
    "2.8": "12.8",
    "2.9": "12.8",
    "2.10": "12.8",
    "2.11": "13.0",
    "2.12": "13.0",
    "2.13": "13.0",  # sources disagree (design.md: 13.2); pytorch#190355: 13.2 from 2.14
    "2.14": "13.2",
    "2.15": "13.2",
}


@pytest.mark.parametrize("cuda_version,driver", sorted(MIN_DRIVER.items()))
def test_min_driver_row(cuda_version: str, driver: str) -> None:
    assert cuda.min_driver(cuda_version) == driver
    verdict = cuda.driver_supports(driver, cuda_version)
    assert verdict.mode == "native"
    # one patch level below the GA floor is no longer native
    below = list(parse_version(driver))
    below[-1] -= 1
    below_s = ".".join(str(x) for x in below)
    assert cuda.driver_supports(below_s, cuda_version).mode in ("compat", "no")


@pytest.mark.parametrize("major,floor", [(11, "450.80.02"), (12, "525.60.13"), (13, "580")])
def test_minor_compat_floor(major: int, floor: str) -> None:
    assert cuda.compat_floor(f"{major}.0") == floor
    assert cuda.compat_floor(f"{major}.9") == floor


def test_driver_470_runs_114_natively_and_118_with_compat() -> None:
    assert cuda.newest_cuda_native("470.182.03") == "11.4"
    assert cuda.newest_cuda_compat("470.182.03") == "11.8"
    assert cuda.driver_supports("470.182.03", "11.8").mode == "compat"
    v = cuda.driver_supports("470.182.03", "12.4")
    assert v.mode == "no" and v.min_driver == "550.54.14"


def test_driver_examples() -> None:
    assert cuda.newest_cuda_native("580.159.04") == "13.0"
    assert cuda.newest_cuda_native("410.104") == "10.0"
    assert cuda.newest_cuda_native("384.0") is None
    assert cuda.newest_cuda_compat("535.98") == "12.9"  # 12.x compat floor met, 13 not
    assert cuda.driver_supports("535.98", "12.6").mode == "compat"
    assert cuda.driver_supports("440.33", "11.0").mode == "no"  # below 11.x compat floor
    assert cuda.driver_supports("999.1", "99.9").mode == "unknown"


@pytest.mark.parametrize("torch_version,cudas", sorted(TORCH_CUDA.items()))
def test_torch_cuda_row(torch_version: str, cudas: tuple[str, ...]) -> None:
    assert cuda.official_cuda_builds(torch_version) == cudas
    assert cuda.official_cuda_builds(torch_version + ".1+cu999") == cudas
    for c in cudas:
        assert torch_version in cuda.official_torch_for_cuda(c)


@pytest.mark.parametrize("torch_version,cuda_version", sorted(PYPI_DEFAULT.items()))
def test_pypi_default_cuda_row(torch_version: str, cuda_version: str) -> None:
    assert cuda.pypi_default_cuda(torch_version) == cuda_version
    assert cuda.pypi_default_cuda(torch_version + ".1") == cuda_version
    assert cuda.min_driver(cuda_version) is not None
    # PyPI only carries a build PyTorch made: the default is one of that release's official CUDAs
    builds = cuda.official_cuda_builds(torch_version)
    assert builds is None or cuda_version in builds


def test_pypi_default_table_is_exactly_the_known_rows() -> None:
    assert cuda.pypi_default_series() == sorted(PYPI_DEFAULT, key=parse_version)
    assert cuda.pypi_default_cuda("2.99.0") is None
    assert cuda.pypi_default_cuda("1.4.0") is None


def test_pytorch_channel_end() -> None:
    assert cuda.pytorch_channel_has("2.5.1")
    assert not cuda.pytorch_channel_has("2.6.0")
    assert not cuda.pytorch_channel_has("2.7")


@pytest.mark.parametrize("cuda_version", ["11.8", "12.1", "12.4", "12.6", "12.8", "12.9", "13.0"])
def test_arch_rows_cover_hopper(cuda_version: str) -> None:
    archs = cuda.build_archs("pytorch", cuda_version)
    assert archs and cuda.arch_covered("9.0", archs)


def test_cuda13_drops_below_sm75_and_128_adds_blackwell() -> None:
    a13 = cuda.build_archs("pytorch", "13.0")
    assert not cuda.arch_covered("7.0", a13) and not cuda.arch_covered("6.1", a13)
    assert cuda.arch_covered("7.5", a13)
    for c in ("12.8", "12.9", "13.0"):
        assert cuda.arch_covered("10.0", cuda.build_archs("pytorch", c))
        assert cuda.arch_covered("12.0", cuda.build_archs("pytorch", c))
    for c in ("11.8", "12.1", "12.4", "12.6"):
        # RTX 50xx: no kernel image in PyTorch's own builds (conda-forge's carry 9.0+PTX)
        assert not cuda.arch_covered("12.0", cuda.build_archs("pytorch", c))
        assert cuda.arch_covered("6.1", cuda.build_archs("pytorch", c))  # GTX 10xx via sm_60


def test_official_cu118_builds_carry_sm_37() -> None:
    """pytorch/builder manywheel/build_cuda.sh (2.0 era: base 3.7;5.0;6.0;7.0, 11.8 adds
    7.5;8.0;8.6;9.0) and .ci/manywheel/build_cuda.sh (2.4 era: 11.8 appends 3.7;9.0): a K80 runs
    official cu118 wheels; CUDA 12 builds dropped Kepler."""
    assert cuda.build_archs("pytorch", "11.8") == cuda.parse_arch_list(
        "3.7;5.0;6.0;7.0;7.5;8.0;8.6;9.0"
    )
    assert cuda.arch_covered("3.7", cuda.build_archs("pytorch", "11.8"))
    assert not cuda.arch_covered("3.7", cuda.build_archs("pytorch", "12.1"))


# conda-forge/pytorch-cpu-feedstock: each row's TORCH_CUDA_ARCH_LIST, the file and commit it is
# quoted from, and the `case`/`if` label that selects it there.
CONDA_FORGE_LISTS = [
    (("11.2",), "1.12", None, "3.5;5.0;6.0;6.1;7.0;7.5;8.0;8.6+PTX",
     "f94248a8", "recipe/build_pytorch.sh", "== 11.2 ]]"),
    (("11.8",), "2.0", "2.5", "3.5;5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9+PTX",
     "096a6639", "recipe/build_pytorch.sh", "== 11.8 ]]"),
    (("12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6"), "2.0", "2.7",
     "5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0+PTX", "415a6280", "recipe/build.sh", "12.[0-6])"),
    (("12.8", "12.9"), "2.7.1", None, "5.0;6.0;7.0;7.5;8.0;8.6;9.0;10.0;12.0+PTX",
     "7b937ea1", "recipe/build.sh", "12.[89])"),
    (("13.0",), "2.10", None, "7.5;8.0;8.6;9.0;10.0;11.0;12.0+PTX",
     "5c1be2d5", "recipe/build.sh", "13.0)"),
]  # fmt: skip
FEEDSTOCK = Path("/work/.mirror/conda-forge+pytorch-cpu-feedstock/repo")


def test_conda_forge_rows_are_the_feedstock_lists() -> None:
    rows = cuda.load_cuda_data().conda_forge_archs
    assert [(r.cuda, r.torch_min, r.torch_max, r.arch_list) for r in rows] == [
        row[:4] for row in CONDA_FORGE_LISTS
    ]
    for r, (_, _, _, text, commit, _, _) in zip(rows, CONDA_FORGE_LISTS, strict=True):
        assert r.archs == cuda.parse_arch_list(text)
        keys = _row_source("cuda_archs_conda_forge", r.cuda).split()
        source = cuda.load_cuda_data().sources[keys[0]]
        assert commit in source and text in source, source  # the source quotes the list


@pytest.mark.integration
@pytest.mark.skipif(not FEEDSTOCK.is_dir(), reason="no pytorch-cpu-feedstock snapshot here")
@pytest.mark.parametrize(("cudas", "text", "commit", "path", "label"),
                         [(r[0], r[3], r[4], r[5], r[6]) for r in CONDA_FORGE_LISTS])  # fmt: skip
def test_conda_forge_rows_match_the_feedstock_text(cudas, text, commit, path, label) -> None:
    """The list is the one the feedstock's script sets under that CUDA's label, at that commit."""
    script = subprocess.run(
        ["git", "-C", str(FEEDSTOCK), "show", f"{commit}:{path}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    lines = script.splitlines()
    at = next(i for i, line in enumerate(lines) if label in line)
    assert f'TORCH_CUDA_ARCH_LIST="{text}"' in lines[at + 1], lines[at : at + 2]


def test_the_2_7_1_window_list_covers_the_same_gpus() -> None:
    """216502d8 (2.7.1 build 1, 2025-06-19..22) built 12.8/12.9 with 6.1 and 8.9 as well; that
    machine code runs where sm_60/sm_86 already do, so one row serves both."""
    wider = cuda.parse_arch_list("5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX")
    row = cuda.build_archs("conda-forge", "12.8", "2.7.1")
    caps = [f"{m}.{n}" for m in range(3, 13) for n in range(10)]
    assert [cuda.arch_coverage(c, wider) for c in caps] == [
        cuda.arch_coverage(c, row) for c in caps
    ]


def test_build_archs_answers_per_flavor_and_torch_release() -> None:
    cf126 = cuda.build_archs("conda-forge", "12.6")
    assert cf126 and cf126[-1] == "compute_90"  # 9.0+PTX
    assert cuda.build_archs("pytorch", "12.6") == cuda.build_archs("pypi", "12.6")
    assert "compute_90" not in (cuda.build_archs("pytorch", "12.6") or ())
    # the PTX rule: compute_90 JIT-compiles for any GPU of capability >= 9.0
    assert cuda.arch_coverage("12.0", cf126) == "ptx" and cuda.arch_coverage("9.0", cf126) == "sm"
    assert cuda.arch_coverage("12.0", cuda.build_archs("pytorch", "12.6") or ()) is None
    assert cuda.arch_coverage("3.7", cf126) is None  # Kepler: nothing below sm_50
    # per torch release: a series matches any of its releases
    assert cuda.build_archs("conda-forge", "12.8", "2.7") == cuda.build_archs("conda-forge", "12.9")
    assert cuda.build_archs("conda-forge", "12.6", "2.7.1") == cf126  # 2.7.1 build 0 (2025-06)
    assert cuda.build_archs("conda-forge", "12.8", "2.7.0") is None  # never built
    assert cuda.build_archs("conda-forge", "12.6", "2.8.0") is None  # 12.[0-6] ended with 2.7
    assert cuda.build_archs("conda-forge", "11.8", "2.0.0") == cuda.parse_arch_list(
        "3.5;5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9+PTX"
    )
    assert cuda.build_archs("conda-forge", "11.7") is None  # no row: no evidence either way
    assert cuda.arch_table_cudas("conda-forge")[:2] == ["11.2", "11.8"]


def _row_source(table: str, cudas: tuple[str, ...]) -> str:
    import json
    from importlib import resources

    raw = json.loads(resources.files("envtool.core").joinpath("cuda_data.json").read_text())
    return next(r["source"] for r in raw[table] if tuple(r["cuda"]) == cudas)


def test_arch_coverage_rules() -> None:
    assert cuda.arch_covered("8.9", ["sm_80", "sm_86"])  # same major, lower minor runs
    assert not cuda.arch_covered("8.0", ["sm_86"])  # higher minor does not run on lower
    assert not cuda.arch_covered("9.0", ["sm_80", "sm_86"])  # new major needs PTX
    assert cuda.arch_covered("9.0", ["sm_80", "compute_80"])  # PTX JIT forward
    assert cuda.arch_covered("9.0", ["sm_90a"]) and not cuda.arch_covered("9.1", ["sm_90a"])


def test_parse_arch_list() -> None:
    assert cuda.parse_arch_list(["sm_80", "sm_90"]) == ("sm_80", "sm_90")
    assert cuda.parse_arch_list("7.5;8.0;8.6;9.0;10.0;12.0+PTX") == (
        "sm_75",
        "sm_80",
        "sm_86",
        "sm_90",
        "sm_100",
        "sm_120",
        "compute_120",
    )
    assert cuda.parse_arch_list("sm_50 sm_60 compute_70") == ("sm_50", "sm_60", "compute_70")
    with pytest.raises(ValueError):
        cuda.parse_arch_list("banana")


def test_every_row_has_a_known_source() -> None:
    import json
    from importlib import resources

    raw = json.loads(resources.files("envtool.core").joinpath("cuda_data.json").read_text())
    tables = (
        "min_driver",
        "minor_compat_floor",
        "torch_cuda",
        "pypi_default_cuda",
        "cuda_archs",
        "cuda_archs_conda_forge",
        "gpu_arch",
        "gpu_product_driver",
    )
    for table in tables:
        for row in raw[table]:
            keys = row["source"].split()  # a row may cite several sources
            assert keys and all(k in raw["sources"] for k in keys), row


# The oldest driver that drives each GPU architecture: the driver of the first CUDA toolkit that
# compiles for it (CUDA release notes; design.md's table), or a product's own published floor.
GPU_DRIVER_FLOOR = [
    ("7.0", None, "384.81"),  # Volta, CUDA 9.0
    ("7.5", None, "410.48"),  # Turing, CUDA 10.0
    ("8.0", None, "450.36.06"),  # A100, CUDA 11.0
    ("8.6", None, "455.23"),  # RTX 30xx, CUDA 11.1
    ("8.7", None, "455.23"),  # no own row: the nearest lower minor of its major (sm_86)
    ("8.9", None, "520.61.05"),  # Ada, CUDA 11.8
    ("9.0", "NVIDIA H100 80GB HBM3", "520.61.05"),  # Hopper, CUDA 11.8 (H100 on 520.61.05)
    ("9.0", "NVIDIA H200", "520.61.05"),
    ("10.0", "NVIDIA B200", "570.133.20"),  # HGX B200's own floor is above Blackwell's
    ("10.0", None, "570.26"),  # Blackwell, CUDA 12.8
    ("12.0", "NVIDIA GeForce RTX 5090", "570.26"),
    ("3.5", "Tesla K40", None),  # older than every driver in the table
]


@pytest.mark.parametrize(("cap", "name", "floor"), GPU_DRIVER_FLOOR)
def test_gpu_driver_floor(cap: str, name: str | None, floor: str | None) -> None:
    assert cuda.gpu_min_driver(cap, name) == floor


def test_no_driver_of_the_470_branch_drives_hopper_or_newer() -> None:
    for cap in ("9.0", "10.0", "12.0", "8.9"):
        floor = cuda.gpu_min_driver(cap)
        assert floor and not cuda.driver_at_least("470.57.02", floor)
    assert cuda.driver_at_least("470.57.02", cuda.gpu_min_driver("8.0") or "")


def test_toolkits_that_dropped_an_architecture() -> None:
    # CUDA 12.0 dropped Kepler sm_35/sm_37; CUDA 13.0 dropped Maxwell, Pascal and Volta
    for cap in ("3.5", "3.7"):
        assert cuda.toolkit_supports_gpu("11.8", cap)
        assert not cuda.toolkit_supports_gpu("12.0", cap)
    for cap in ("5.0", "5.2", "6.0", "6.1", "7.0"):
        assert cuda.toolkit_supports_gpu("12.9", cap)
        assert not cuda.toolkit_supports_gpu("13.0", cap)
    for cap in ("7.5", "8.0", "9.0", "12.0"):
        assert cuda.toolkit_supports_gpu("13.0", cap)


def test_version_helpers() -> None:
    assert cuda_from_int(13000) == "13.0" and cuda_from_int(11040) == "11.4"
    assert cuda_from_int(9010) == "9.1"
    assert cuda_from_build_tag("2.1.0+cu121") == "12.1"
    assert cuda_from_build_tag("cuda126_mkl_py312_h1234_300") == "12.6"
    assert cuda_from_build_tag("py3.11_cuda12.1_cudnn8.9.2_0") == "12.1"
    assert cuda_from_build_tag("cu92") == "9.2"
    assert cuda_from_build_tag("cpu_mkl_py312") is None
    assert parse_version("2.3.1+cu121") == (2, 3, 1)


def test_build_tag_globs_name_no_single_cuda() -> None:
    assert cuda_from_build_tag("*cuda12*") is None
    assert cuda_from_build_tag("cuda*") is None
    assert cuda_from_build_tag("*cuda118*") == "11.8"


def _file_cuda(*specs: str) -> str:
    """The CUDA request `create -f` takes from a file of these conda specs (core/inspect.read_ask)."""
    from envtool.core.inspect import read_ask
    from envtool.core.spec import EnvSpec, parse_conda_spec

    return read_ask(EnvSpec(None, dependencies=[parse_conda_spec(s) for s in specs])).cuda


def test_create_reads_a_major_only_build_glob_as_that_major_not_1_2() -> None:
    assert _file_cuda("pytorch=2.5=*cuda12*") == "12"
    assert _file_cuda("pytorch=2.5=*cuda124*") == "12.4"
    assert _file_cuda("pytorch=2.5=*cuda*") == "auto"


def test_create_reads_a_major_only_cuda_pin_as_that_major_not_x_0() -> None:
    """conda reads `cuda-version=12` as 12.*: the plan picks within 12, it does not pin 12.0."""
    assert _file_cuda("cuda-version=12") == "12"
    assert _file_cuda("pytorch-cuda=11") == "11"
    assert _file_cuda("cuda-version=12.6") == "12.6"
    assert _file_cuda("cudatoolkit==11.8.0") == "11.8"


def test_relocking_a_file_that_asks_for_a_major_keeps_the_x_y_the_lock_resolved() -> None:
    """environments/NAME/environment.yml saying `cuda-version=12`, locked on a GPU node (driver
    550 -> 12.4): `envtool lock` elsewhere re-solves 12.4, not whatever 12.x that host would pick."""
    from envtool.workflows.lock import request_from_yml

    text = "dependencies:\n  - pytorch\n  - cuda-version=12\n"
    assert request_from_yml(text, "e.yml", {}, {"cuda": "12.4"}).cuda == "12.4"
    assert request_from_yml(text, "e.yml", {}, {"cuda": "11.8"}).cuda == "12"  # file changed major
    assert request_from_yml(text, "e.yml", {}, None).cuda == "12"
    assert request_from_yml(text, "e.yml", {"cuda": "12"}, {"cuda": "12.4"}).cuda == "12"
