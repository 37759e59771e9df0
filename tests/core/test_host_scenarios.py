"""Host scenarios: host facts + request -> the plan, refusal, suggestion or doctor verdict a person
would want, each row with its source (keys of cuda_data.json "sources", or a fixture).

Every row goes through the one decision (core/suggest.py: a GPU family's last driver branch,
then the architecture, then the GPU's own driver floor, then driver vs CUDA) by the command's own
entry point: create's plan, install's variant choice, the lock's host check, doctor's checks.
The conda-forge channel is the published table (cuda.published_lines), so a suggestion can only
name a build conda-forge has; tests/lock/test_create_cli.py runs suggestions on real repodata.
"""

from __future__ import annotations

import re

import pytest

from envtool.core import cuda as cu
from envtool.core.checks import check_by_id, headline, overall, run_checks
from envtool.core.facts import EnvFacts, GpuFacts, HostFacts, TorchFacts
from envtool.core.host_check import host_problems
from envtool.core.host_record import render_visible_gpus
from envtool.core.plan import CudaBuild, Request, plan_environment
from envtool.core.suggest import Gpu, suggest_cuda
from envtool.core.variants import HostGpu, PlatformBuild, Variant, VariantIndex, choose_variant
from envtool.errors import UsageError

K80, K40 = ("Tesla K80", "3.7"), ("Tesla K40m", "3.5")
GTX980, M60 = ("NVIDIA GeForce GTX 980", "5.2"), ("Tesla M60", "5.2")
P100, GTX1080 = ("Tesla P100-PCIE-16GB", "6.0"), ("NVIDIA GeForce GTX 1080", "6.1")
V100 = ("Tesla V100-SXM2-16GB", "7.0")
T4, RTX2080 = ("Tesla T4", "7.5"), ("NVIDIA GeForce RTX 2080", "7.5")
A100, A10, RTX3090 = (
    ("NVIDIA A100-SXM4-80GB", "8.0"),
    ("NVIDIA A10", "8.6"),
    ("NVIDIA GeForce RTX 3090", "8.6"),
)
L4, RTX4090 = ("NVIDIA L4", "8.9"), ("NVIDIA GeForce RTX 4090", "8.9")
H100, H200, GH200 = (
    ("NVIDIA H100 80GB HBM3", "9.0"),
    ("NVIDIA H200", "9.0"),
    ("NVIDIA GH200 480GB", "9.0"),
)
B200, RTX5090 = ("NVIDIA B200", "10.0"), ("NVIDIA GeForce RTX 5090", "12.0")
THOR, GB10 = ("NVIDIA Jetson Thor", "11.0"), ("NVIDIA GB10", "12.1")


def channel_builds(flavor: str, platform: str) -> list[CudaBuild]:
    """What a listing of the channel would find: one build per published (torch, CUDA) line."""
    return [CudaBuild(f"{t}.0", c, None, platform) for t, c in cu.published_lines(flavor, platform)]


# (id, gpus, driver, request, expected, source). expected: ("plan", cuda, mode) |
# ("refuse", text in the message, text in the hint) | ("cpu", text in the notes)
CREATE = [
    ("h100-580-auto", [H100], "580.65.06", {}, ("plan", "13.0", "native"), "nv-rn-t3 cf-5c1be2d5"),
    ("h100-575-auto", [H100], "575.51.03", {}, ("plan", "12.9", "native"), "nv-rn-t3 cf-7b937ea1"),
    ("h100-535-auto", [H100], "535.104.05", {}, ("plan", "12.9", "compat"), "nv-rn-t2"),
    ("a100-470-auto", [A100], "470.57.02", {}, ("plan", "11.8", "compat"), "nv-rn-t2 cf-096a6639"),
    ("a100-450.80-auto", [A100], "450.80.02", {}, ("plan", "11.8", "compat"), "nv-rn-t2"),
    (
        "a100-450.36-auto",
        [A100],
        "450.36.06",
        {},
        (
            "refuse",
            "no CUDA build of torch runs on driver 450.36.06",
            "upgrade the NVIDIA driver to ≥ 580.65.06",
        ),
        "nv-rn-t2 nv-rn-t3",
    ),
    (
        "k80-470-auto",
        [K80],
        "470.82.01",
        {},
        ("plan", "11.8", "compat"),
        "nv-eol-kepler cf-096a6639 nv-rn-t2",
    ),
    (
        "k40-470-auto",
        [K40],
        "470.256.02",
        {},
        ("plan", "11.8", "compat"),
        "nv-eol-kepler cf-096a6639",
    ),
    (
        "k80-470-cuda12.6",
        [K80],
        "470.82.01",
        {"cuda": "12.6"},
        ("refuse", "CUDA 12 dropped Kepler", "pass --cuda 11.8, whose builds run on Tesla K80"),
        "nv-drop-kepler cf-096a6639",
    ),
    (
        "k80-535-auto",
        [K80],
        "535.54.03",
        {},
        ("refuse", "R470 is the last driver branch for Kepler", "pass --driver 470 --cuda 11.8"),
        "nv-eol-kepler",
    ),
    (
        "k80-535-cuda11.8",
        [K80],
        "535.104.05",
        {"cuda": "11.8"},
        ("refuse", "no such host exists", "R470"),
        "nv-eol-kepler",
    ),
    (
        "k80-418-auto",
        [K80],
        "418.87.01",
        {},
        ("refuse", "no CUDA build of torch runs on driver 418.87.01", "≥ 450.80.02 (CUDA 11.8)"),
        "nv-rn-t2 nv-eol-kepler",
    ),
    (
        "k80-418-cuda12.1",
        [K80],
        "418.87.01",
        {"cuda": "12.0"},
        (
            "refuse",
            "CUDA 12 dropped Kepler",
            "pass --cuda 11.8, whose builds run on Tesla K80, sm_37; it needs driver ≥ 450.80.02",
        ),
        "nv-drop-kepler nv-rn-t2",
    ),
    (
        "gtx1080-580-auto",
        [GTX1080],
        "580.65.06",
        {},
        ("plan", "12.9", "native"),
        "nv-drop-mpv cf-7b937ea1",
    ),
    (
        "gtx1080-590-auto",
        [GTX1080],
        "590.44.01",
        {},
        ("refuse", "R580 is the last driver branch for Pascal", "pass --driver 580 --cuda 12.9"),
        "nv-eol-mpv",
    ),
    (
        "v100-590-cuda12.9",
        [V100],
        "590.48.01",
        {"cuda": "12.9"},
        ("refuse", "R580 is the last driver branch for Volta", "--cuda 12.9"),
        "nv-eol-mpv",
    ),
    (
        "v100-580-cuda13.0",
        [V100],
        "580.95.05",
        {"cuda": "13.0"},
        ("refuse", "CUDA 13 dropped Volta", "pass --cuda 12.9, whose builds run on Tesla V100"),
        "nv-drop-mpv cf-7b937ea1",
    ),
    ("v100-580-auto", [V100], "580.95.05", {}, ("plan", "12.9", "native"), "cf-7b937ea1"),
    (
        "p100-595-auto",
        [P100],
        "595.45.04",
        {},
        ("refuse", "R580 is the last driver branch for Pascal", "R580"),
        "nv-eol-mpv",
    ),
    ("m60-580-auto", [M60], "580.82.07", {}, ("plan", "12.9", "native"), "cf-7b937ea1 nv-eol-mpv"),
    (
        "rtx5090-570-auto",
        [RTX5090],
        "570.86.16",
        {},
        ("plan", "12.9", "compat"),
        "nv-blackwell-570 nv-rn-t2",
    ),
    (
        "rtx5090-560-auto",
        [RTX5090],
        "560.35.03",
        {},
        ("refuse", "cannot drive NVIDIA GeForce RTX 5090, sm_120", "≥ 570.26"),
        "nv-blackwell-570",
    ),
    (
        "rtx5090-580-cuda12.6-ptx",
        [RTX5090],
        "580.65.06",
        {"cuda": "12.6"},
        ("plan", "12.6", "native"),
        "cf-415a6280",
    ),
    (
        "b200-570.26-auto",
        [B200],
        "570.26",
        {},
        ("refuse", "cannot drive NVIDIA B200, sm_100", "≥ 570.133.20"),
        "nv-hgx-b200",
    ),
    ("b200-580-auto", [B200], "580.65.06", {}, ("plan", "13.0", "native"), "cf-5c1be2d5"),
    (
        "h200-470-auto",
        [H200],
        "470.57.02",
        {},
        ("refuse", "cannot drive NVIDIA H200, sm_90", "≥ 520.61.05 for this GPU"),
        "nv-h100-520",
    ),
    (
        "l4-525-auto",
        [L4],
        "525.60.13",
        {},
        ("plan", "12.9", "compat"),
        "nv-rn-t2 nv-ada-unverified",
    ),
    ("t4+a100-535-auto", [T4, A100], "535.104.05", {}, ("plan", "12.9", "compat"), "nv-rn-t2"),
    ("k80+a100-470-auto", [K80, A100], "470.82.01", {}, ("plan", "11.8", "compat"), "cf-096a6639"),
    (
        "k80+a100-535-auto",
        [K80, A100],
        "535.54.03",
        {},
        ("refuse", "R470 is the last driver branch for Kepler", "R470"),
        "nv-eol-kepler",
    ),
    (
        "k80+h100-470-auto",
        [K80, H100],
        "470.82.01",
        {},
        ("refuse", "no driver drives both Tesla K80, sm_37 (last branch R470)", "--cuda cpu"),
        "nv-eol-kepler nv-h100-520",
    ),
    (
        "gtx1080+rtx3090-580-auto",
        [GTX1080, RTX3090],
        "580.65.06",
        {},
        ("plan", "12.9", "native"),
        "nv-drop-mpv",
    ),
    ("no-driver-auto", [], None, {}, ("cpu", "no NVIDIA driver"), "nv-rn-t3"),
    (
        "bare-535-cuda12.6",
        [A100],
        "535",
        {"cuda": "12.6"},
        ("plan", "12.6", "compat"),
        "nv-rn-t3 nv-rn-t2",
    ),
    ("bare-470-k80-auto", [K80], "470", {}, ("plan", "11.8", "compat"), "nv-eol-kepler"),
    ("bare-580-v100-auto", [V100], "580", {}, ("plan", "12.9", "native"), "nv-eol-mpv"),
    (
        "gh200-aarch64-580-auto",
        [GH200],
        "580.65.06",
        {"platforms": ("linux-aarch64",)},
        ("plan", "13.0", "native"),
        "cf-5c1be2d5",
    ),
    (
        "gb10-aarch64-580-auto",
        [GB10],
        "580.95.05",
        {"platforms": ("linux-aarch64",)},
        ("plan", "13.0", "native"),
        "nv-arch-13 cf-5c1be2d5",
    ),
    (
        "thor-aarch64-cuda12.9",
        [THOR],
        "580.65.06",
        {"platforms": ("linux-aarch64",), "cuda": "12.9"},
        ("refuse", "not GPU capability 11.0", "pass --cuda 13.0"),
        "nv-arch-13 cf-5c1be2d5",
    ),
    (
        "legacy-k80-470-torch2.3",
        [K80],
        "470.82.01",
        {"flavor": "pytorch", "torch": "2.3"},
        ("plan", "11.8", "compat"),
        "pt-build-cuda-118",
    ),
    (
        "legacy-rtx5090-cuda12.4",
        [RTX5090],
        "570.86.16",
        {"flavor": "pytorch", "cuda": "12.4"},
        ("refuse", "not GPU capability 12.0", "download.pytorch.org/whl/cu132"),
        "pt-build-cuda pt-2.15",
    ),
]


@pytest.mark.parametrize(("gpus", "driver", "ask", "expected", "source"),
                         [r[1:] for r in CREATE], ids=[r[0] for r in CREATE])  # fmt: skip
def test_create_plans_refuses_and_suggests(gpus, driver, ask, expected, source) -> None:
    assert all(k in cu.load_cuda_data().sources for k in source.split()), source
    request = Request(driver=driver, **ask)  # the GPUs come from the probed host, with names
    platform = request.platforms[0]
    builds = None if request.flavor == "pytorch" else channel_builds(request.flavor, platform)
    host = HostFacts(platform=platform, gpus=[GpuFacts(i, n, c) for i, (n, c) in enumerate(gpus)])
    if expected[0] == "refuse":
        with pytest.raises(UsageError) as err:
            plan_environment(request, host, builds)
        assert expected[1] in err.value.message, err.value.message
        assert expected[2] in (err.value.hint or ""), err.value.hint
        return
    plan = plan_environment(request, host, builds)
    if expected[0] == "cpu":
        assert plan.cuda is None and any(expected[1] in n for n in plan.notes), plan.notes
        return
    assert (plan.cuda, plan.cuda_mode) == expected[1:], plan.notes
    for _, cap in gpus:  # the planned build runs on every GPU (machine code or PTX)
        assert not plan.archs or cu.arch_covered(cap, plan.archs)


def test_rtx5090_on_cuda126_runs_through_ptx_and_says_so() -> None:
    plan = plan_environment(
        Request(driver="580.65.06", gpus=("12.0",), cuda="12.6"),
        None,
        channel_builds("conda-forge", "linux-64"),
    )
    assert any("compute_90 PTX" in n for n in plan.notes), plan.notes


# (id, capability, flavor, torch, CUDA, platform, covered, source): the arch lists per
# (torch range, CUDA, platform, flavor), PTX forward compatibility included
ARCHS = [
    ("v100-2.8-cu128", "7.0", "pypi", "2.8", "12.8", "linux-64", True, "pt-bcs-2.8 pt-157517"),
    ("v100-2.10-cu128", "7.0", "pypi", "2.10", "12.8", "linux-64", True, "pt-bcs-2.9"),
    ("v100-2.7-cu128", "7.0", "pypi", "2.7", "12.8", "linux-64", False, "pt-157517"),
    ("v100-2.11-cu128", "7.0", "pypi", "2.11", "12.8", "linux-64", False, "pt-2.11-volta"),
    ("v100-2.8-cu129", "7.0", "pypi", "2.8", "12.9", "linux-64", True, "pt-bcs-2.8"),
    ("v100-2.14-cu126", "7.0", "pypi", "2.14", "12.6", "linux-64", True, "pt-2.14"),
    ("v100-2.14-cu132", "7.0", "pypi", "2.14", "13.2", "linux-64", False, "pt-2.14"),
    ("t4-2.14-cu132", "7.5", "pypi", "2.14", "13.2", "linux-64", True, "pt-2.14"),
    ("gtx1080-2.14-cu126", "6.1", "pypi", "2.14", "12.6", "linux-64", True, "pt-2.14"),
    ("k80-2.7-cu118", "3.7", "pypi", "2.7", "11.8", "linux-64", True, "pt-build-cuda-118"),
    ("rtx5090-2.7-cu128", "12.0", "pypi", "2.7", "12.8", "linux-64", True, "pt-157517"),
    ("rtx5090-2.9-cu126", "12.0", "pypi", "2.9", "12.6", "linux-64", False, "pt-bcs-2.9"),
    ("gb10-2.11-cu130", "12.1", "pypi", "2.11", "13.0", "linux-64", True, "pt-bcs-2.9"),
    ("l4-2.0-cu118", "8.9", "pypi", "2.0", "11.8", "linux-64", True, "pt-build-cuda-118"),
    ("thor-x86-cu130", "11.0", "pypi", "2.11", "13.0", "linux-64", False, "pt-bcs-2.9"),
    ("thor-aarch64-cu130", "11.0", "pypi", "2.11", "13.0", "linux-aarch64", True, "pt-bcs-2.9"),
    ("a10-aarch64-cu126", "8.6", "pypi", "2.10", "12.6", "linux-aarch64", True, "pt-bcs-2.9"),
    ("t4-aarch64-cu130", "7.5", "pypi", "2.12", "13.0", "linux-aarch64", False, "pt-2.12"),
    ("gh200-aarch64-cu126", "9.0", "pypi", "2.14", "12.6", "linux-aarch64", True, "pt-2.12"),
    ("v100-cf-2.13-cu129", "7.0", "conda-forge", "2.13", "12.9", "linux-64", True, "cf-head-2.13"),
    ("v100-cf-2.13-cu130", "7.0", "conda-forge", "2.13", "13.0", "linux-64", False, "cf-head-2.13"),
    ("rtx5090-cf-2.5-cu120", "12.0", "conda-forge", "2.5", "12.0", "linux-64", True, "cf-415a6280"),
    ("k80-cf-2.1-cu112", "3.7", "conda-forge", "2.1", "11.2", "linux-64", True, "cf-f94248a8"),
]


@pytest.mark.parametrize(("cap", "flavor", "torch", "cuda", "platform", "covered", "source"),
                         [r[1:] for r in ARCHS], ids=[r[0] for r in ARCHS])  # fmt: skip
def test_build_arch_lists_per_torch_platform_and_flavor(
    cap, flavor, torch, cuda, platform, covered, source
) -> None:
    assert all(k in cu.load_cuda_data().sources for k in source.split()), source
    archs = cu.build_archs(flavor, cuda, torch, platform)
    assert archs, (flavor, cuda, torch, platform)
    assert cu.arch_covered(cap, archs) is covered


# The last torch that runs on a GPU, and where to get it
LAST = [
    ("pascal-wheels", "6.1", "pypi", ("2.14", "12.6"), "pt-2.14 pt-2.15"),
    ("volta-wheels", "7.0", "pypi", ("2.14", "12.6"), "pt-2.14 pt-2.15"),
    ("maxwell-wheels", "5.2", "pypi", ("2.14", "12.6"), "pt-2.15"),
    ("kepler-wheels", "3.7", "pypi", ("2.7", "11.8"), "pt-build-cuda-118"),
    ("pascal-conda-forge", "6.1", "conda-forge", ("2.13", "12.9"), "cf-head-2.13"),
    ("kepler-conda-forge", "3.5", "conda-forge", ("2.5", "11.8"), "cf-096a6639"),
]


@pytest.mark.parametrize(
    ("cap", "flavor", "last", "source"), [r[1:] for r in LAST], ids=[r[0] for r in LAST]
)
def test_last_torch_for_a_gpu(cap, flavor, last, source) -> None:
    assert cu.last_torch_for_gpu(cap, flavor) == last


def test_a_pascal_user_on_torch_2_15_is_told_the_last_torch_and_where() -> None:
    # torch 2.15 has no CUDA 12 build (pytorch#190385): no CUDA build runs on a GTX 1080
    s = suggest_cuda("580.95.05", [Gpu("6.1", "NVIDIA GeForce GTX 1080")], ["13.0", "13.2"],
                     flavor="pypi", torch={"13.0": "2.15", "13.2": "2.15"})  # fmt: skip
    assert s.kind == "cpu"
    assert "torch 2.14 with CUDA 12.6 wheels" in s.advice()
    assert "https://download.pytorch.org/whl/cu126" in s.advice()
    cf = suggest_cuda("580.95.05", [Gpu("6.1")], [], flavor="conda-forge")
    assert "conda-forge pytorch 2.13 cuda129 builds" in (cf.last or "")


def cuda_env(version: str, cuda: str | None, **kw) -> EnvFacts:
    return EnvFacts(
        python_exe="/env/bin/python",
        prefix="/env",
        torch=TorchFacts(version=version, cuda=cuda, **kw),
    )


# (id, gpus, driver, torch version, CUDA, extra host facts, failing check that heads, fix text,
# source)
DOCTOR = [
    (
        "k80-470-cu121",
        [K80],
        "470.82.01",
        "2.1.0+cu121",
        "12.1",
        {},
        "gpu-arch-covered",
        "--cuda 11.8",
        "nv-drop-kepler",
    ),
    (
        "v100-580-2.8cu128-fast",
        [V100],
        "580.95.05",
        "2.8.0+cu128",
        "12.8",
        {},
        None,
        None,
        "pt-bcs-2.8 pt-157517",
    ),
    (
        "v100-580-2.7cu128",
        [V100],
        "580.95.05",
        "2.7.1+cu128",
        "12.8",
        {},
        "gpu-arch-covered",
        "--cuda 12.9",
        "pt-157517 cf-7b937ea1",
    ),
    (
        "gtx1080-590-cu130",
        [GTX1080],
        "590.44.01",
        "2.11.0+cu130",
        "13.0",
        {},
        "driver-vs-gpu",
        "install an R580 driver",
        "nv-eol-mpv",
    ),
    (
        "h200-470-cu130",
        [H200],
        "470.182.03",
        "2.11.0+cu130",
        "13.0",
        {},
        "driver-vs-gpu",
        "≥ 520.61.05 for this GPU",
        "nv-h100-520",
    ),
    (
        "rtx5090-580-cu126",
        [RTX5090],
        "580.65.06",
        "2.6.0+cu126",
        "12.6",
        {},
        "gpu-arch-covered",
        "--cuda 13.0",
        "pt-bcs-2.9 cf-5c1be2d5",
    ),
    (
        "rtx4090-wsl-560.94-cu126",
        [RTX4090],
        "560.94",
        "2.6.0+cu126",
        "12.6",
        {},
        None,
        None,
        "nv-rn-t3",
    ),
    # MIG: the capability is the parent GPU's; two MIG slices change no CUDA verdict
    (
        "mig-h100-580-cu130",
        [H100],
        "580.65.06",
        "2.11.0+cu130",
        "13.0",
        {"mig": 2},
        "mig",
        "MIG UUID",
        "nv-rn-t3",
    ),
    (
        "a100-535-cu124",
        [A100],
        "535.104.05",
        "2.4.1+cu124",
        "12.4",
        {},
        "minor-version-compat",
        "≥ 550.54.14",
        "nv-rn-t2",
    ),
    (
        "gh200-aarch64-580-cu130",
        [GH200],
        "580.65.06",
        "2.11.0+cu130",
        "13.0",
        {"platform": "linux-aarch64"},
        None,
        None,
        "pt-bcs-2.9",
    ),
    (
        "t4-aarch64-cu130",
        [T4],
        "580.65.06",
        "2.11.0+cu130",
        "13.0",
        {"platform": "linux-aarch64"},
        "gpu-arch-covered",
        None,
        "pt-bcs-2.9",
    ),
]


@pytest.mark.parametrize(("gpus", "driver", "version", "cuda", "extra", "heads", "fix", "source"),
                         [r[1:] for r in DOCTOR], ids=[r[0] for r in DOCTOR])  # fmt: skip
def test_doctor_verdicts(gpus, driver, version, cuda, extra, heads, fix, source) -> None:
    assert all(k in cu.load_cuda_data().sources for k in source.split()), source
    extra = dict(extra)
    mig = extra.pop("mig", 0)
    host = HostFacts(
        driver_version=driver,
        source="nvml",
        gpus=[
            GpuFacts(i, n, c, mig_enabled=bool(mig), mig_devices=mig)
            for i, (n, c) in enumerate(gpus)
        ],
        **extra,
    )
    checks = run_checks(host, cuda_env(version, cuda))  # --fast: torch's arch list not read
    if heads is None:
        assert overall(checks) == "ok", [(c.id, c.summary) for c in checks if c.status != "ok"]
        return
    lead = next(c for c in checks if c.status in ("fail", "warn"))
    assert lead.id == heads, (lead.id, lead.summary)
    assert headline(checks) == lead.summary
    if fix:
        assert fix in (lead.fix or ""), lead.fix
        assert "upgrade" not in (lead.fix or "") or heads != "gpu-arch-covered"


def test_a_container_without_nvidia_smi_judges_by_torchs_message() -> None:
    # torch: "The NVIDIA driver on your system is too old (found version 11040)"
    env = cuda_env("2.1.0+cu121", "12.1", is_available=False,
                   available_message="The NVIDIA driver on your system is too old (found version 11040).")  # fmt: skip
    checks = run_checks(HostFacts(), env)
    c = check_by_id(checks, "driver-vs-torch-cuda")
    assert c.status == "fail" and "CUDA ≤ 11.4" in c.summary


def test_headline_names_the_visible_gpus_and_what_is_hidden() -> None:
    host = HostFacts(
        driver_version="535.104.05",
        gpus=[GpuFacts(0, "Tesla T4", "7.5"), GpuFacts(1, "NVIDIA A100-SXM4-80GB", "8.0")],
        cuda_visible_devices="1",
    )
    assert (
        render_visible_gpus(host)
        == "1× NVIDIA A100-SXM4-80GB (CUDA_VISIBLE_DEVICES hides 1× Tesla T4)"
    )
    host.cuda_visible_devices = None
    assert render_visible_gpus(host) == "1× Tesla T4, 1× NVIDIA A100-SXM4-80GB"
    host.cuda_visible_devices = "-1"
    assert render_visible_gpus(host).startswith("no visible GPU")


def _variant(cuda: str | None, torch: str = "2.14.0") -> Variant:
    name = "cpu" if cuda is None else f"cuda{cuda}"
    return Variant(
        name, f"conda-lock.{name}.yml", "ab" * 32,
        cu.min_driver(cuda) if cuda else None,
        tuple(cu.build_archs("pypi", cuda, torch) or ()) if cuda else (),
        (PlatformBuild("linux-64", torch, f"{name}_build"),),
    )  # fmt: skip


INDEX = VariantIndex("demo", ("cpu", "cuda12.6", "cuda13.0", "cuda13.2"), "2.14.0",
                     tuple(_variant(c) for c in (None, "12.6", "13.0", "13.2")))  # fmt: skip

VARIANTS = [
    ("gtx1080-580", [GTX1080], "580.95.05", "cuda12.6", "pt-2.14"),
    ("v100-580", [V100], "580.95.05", "cuda12.6", "pt-2.14"),
    ("t4-595", [T4], "595.45.04", "cuda13.2", "pt-2.14 nv-rn-t3"),
    ("h100-580", [H100], "580.65.06", "cuda13.0", "nv-rn-t3"),
    ("v100-590", [V100], "590.44.01", "R580 is the last driver branch for Volta", "nv-eol-mpv"),
    ("k80-470", [K80], "470.82.01", "none of demo's variants runs here", "nv-drop-kepler"),
]


@pytest.mark.parametrize(("gpus", "driver", "expected", "source"), [r[1:] for r in VARIANTS],
                         ids=[r[0] for r in VARIANTS])  # fmt: skip
def test_install_variant_choice(gpus, driver, expected, source) -> None:
    hg = [HostGpu(c, n) for n, c in gpus]
    if expected.startswith("cuda"):
        assert choose_variant(driver, hg, INDEX).variant.name == expected
        return
    with pytest.raises(UsageError) as err:
        choose_variant(driver, hg, INDEX)
    assert expected in err.value.message


def test_lock_host_check_puts_the_architecture_first() -> None:
    meta = {"envtool_cuda": "12.6", "envtool_gpu_archs": "5.0;6.0;7.0;7.5;8.0;8.6;9.0"}
    k80 = HostFacts(driver_version="470.82.01", gpus=[GpuFacts(0, *K80)])
    problem, fix = host_problems(meta, "linux-64", k80)[0]
    assert "no kernels for this GPU" in problem and "Tesla K80, sm_37" in problem
    assert fix.startswith("re-create with `--cuda 11.8`")
    v100 = HostFacts(driver_version="590.44.01", gpus=[GpuFacts(0, *V100)])
    problem, fix = host_problems(meta, "linux-64", v100)[0]
    assert "R580 is the last driver branch for Volta" in problem
    assert "install an R580 driver" in fix and fix.endswith("--force")


SUGGESTED_ON_BRANCH = re.compile(r"pass (--driver \d+ --cuda [0-9.]+)")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "suggested"),
    [
        # a K80 on R535 cannot be: on R470, conda-forge's 11.8 builds (sm_35) run it
        (["--driver", "535.54.03", "--gpu", "3.7"], "--driver 470 --cuda 11.8"),
        # a V100 on R590 cannot be: on R580, conda-forge's 12.9 builds (sm_70) run it
        (["--driver", "590.44.01", "--gpu", "7.0", "--cuda", "12.9"], "--driver 580 --cuda 12.9"),
    ],
)
def test_a_host_that_cannot_exist_is_refused_and_its_suggestion_solves(
    args, suggested, fixtures, run_cli, tmp_path
) -> None:
    """The suggested command is run against the fixture channel (real conda-forge repodata) and
    plans and solves (torch alone: the default profile's torchvision has no 11.8 build there)."""
    channel = str(fixtures / "repodata" / "harvested-from-pixi-locks" / "conda-forge")
    (tmp_path / "env.yml").write_text("name: x\ndependencies:\n  - python\n  - pytorch\n")
    base = ["create", "x", "--channel", channel, "-f", "env.yml"]
    rc, _, err = run_cli([*base, "--dry-run", *args], tmp_path)
    assert rc == 2 and "is the last driver branch for" in err, err
    assert SUGGESTED_ON_BRANCH.findall(err) == [suggested], err
    gpu = args[args.index("--gpu") + 1]
    rc, out, err2 = run_cli([*base, "--dry-run", "--gpu", gpu, *suggested.split()], tmp_path)
    assert rc == 0, err2
    assert f"CUDA {suggested.split()[-1]}" in out


def test_an_arch_refusal_on_a_driver_too_old_for_the_gpu_names_both() -> None:
    # an RTX 5090 on R560 with a lock built without sm_120 or PTX: the fix is the CUDA whose
    # builds carry sm_120, on the driver Blackwell needs (nv-blackwell-570)
    meta = {"envtool_cuda": "12.6", "envtool_gpu_archs": "sm_80 sm_90"}
    host = HostFacts(driver_version="560.35.03", gpus=[GpuFacts(0, *RTX5090)])
    problem, fix = host_problems(meta, "linux-64", host)[0]
    assert "no kernels for this GPU" in problem
    assert fix.startswith("re-create with `--cuda 13.0`") and "on a driver ≥ 570.26" in fix


def test_a_bare_driver_branch_means_its_released_versions() -> None:
    """`--driver 535`: every released R535 runs CUDA 12.2 (its first production release in
    NVIDIA's table 3 is 535.54.03), not "535.0.0 < 535.54.03, so CUDA ≤ 12.1"."""
    from envtool.core.host_record import apply_overrides

    assert cu.driver_release("535") == "535.54.03"
    assert cu.driver_supports("535", "12.2").mode == "native"
    assert cu.newest_cuda_native("580") == "13.0" and cu.newest_cuda_native("470") == "11.4"
    assert cu.driver_release("565") == "565"  # no table row in R565: compared as given
    assert cu.newest_cuda_native("565") == "12.6"
    assert cu.driver_release("535.104.05") == "535.104.05"
    facts = apply_overrides(HostFacts(), driver="535")
    assert facts.driver_cuda == "12.2"
    plan = plan_environment(Request(driver="535", gpus=("8.0",), cuda="12.2"), None)
    assert plan.cuda_mode == "native"
    assert any("read as branch R535" in n for n in plan.notes)


def h200_host_with_a_p2000(fixtures_root) -> str:
    """The 2 × H200 host's real `nvidia-smi -q -x` (driver 580.159.04) with a real Quadro P2000's
    <gpu> element (telegraf's capture) added as GPU 2: an H200 box with an old Pascal card in it,
    on R580, Pascal's last branch (a host that exists)."""
    h200 = (fixtures_root / "h200-x2-host" / "nvidia-smi-q.xml").read_text()
    p2000 = (fixtures_root / "nvidia-smi" / "xml" / "quadro-p2000-v12.xml").read_text()
    gpu = p2000[p2000.index("<gpu id=") : p2000.index("</gpu>") + len("</gpu>")]
    return h200.replace("</nvidia_smi_log>", gpu + "\n</nvidia_smi_log>").replace(
        "<attached_gpus>2</attached_gpus>", "<attached_gpus>3</attached_gpus>"
    )


@pytest.mark.parametrize(
    ("visible", "cuda", "arch", "says"),
    [
        (None, "12.9", "6.1", "CUDA 13 dropped Pascal"),  # every GPU: the P2000 holds CUDA at 12.x
        ("0,1", "13.0", "9.0", "planning for 2× NVIDIA H200 (CUDA_VISIBLE_DEVICES hides 1× Quadro P2000)"),
        ("2", "12.9", "6.1", "CUDA_VISIBLE_DEVICES hides 2× NVIDIA H200"),
        ("", "13.0", None, "planning for no visible GPU"),
    ],
)  # fmt: skip
def test_create_plans_for_the_gpus_cuda_visible_devices_leaves(
    fixtures, visible, cuda, arch, says
) -> None:
    """create/lock --cuda auto plan for the GPUs the job will see (core/host_record.visible_gpus,
    as doctor's headline and install's choice count them), and the lock host check of create's
    install agrees: the 13.0 build planned with the P2000 hidden installs, and is refused with it
    visible (it has no sm_61 kernels)."""
    import json

    from envtool.core.host_record import ENV_JSON, SMI_XML, facts_from_record

    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    host = facts_from_record({SMI_XML: h200_host_with_a_p2000(fixtures), ENV_JSON: json.dumps(env)})
    assert [g.name for g in host.gpus] == ["NVIDIA H200", "NVIDIA H200", "Quadro P2000"]
    plan = plan_environment(Request(), host, channel_builds("conda-forge", "linux-64"))
    assert (plan.cuda, plan.cuda_arch) == (cuda, arch)
    assert any(says in n for n in plan.notes), plan.notes
    meta = {
        "envtool_cuda": plan.cuda,
        "envtool_gpu_archs": " ".join(plan.archs),
        "envtool_flavor": "conda-forge",
    }
    assert host_problems(meta, "linux-64", host) == []  # create's install step takes its plan
    if visible == "0,1":
        host.cuda_visible_devices = None  # the P2000 back in view: the 13.0 lock cannot run on it
        (problem, _), *_ = host_problems(meta, "linux-64", host)
        assert "no kernels for this GPU" in problem and "P2000" in problem


def test_doctors_suggested_create_is_the_cuda_create_plans(fixtures) -> None:
    """One answer: on the H200 + P2000 host, doctor's `envtool create --cuda` suggestion is the
    CUDA create's plan picks, with the P2000 visible (12.9) and hidden (13.0)."""
    import json

    from envtool.core.checks import suggestion_for
    from envtool.core.host_record import ENV_JSON, SMI_XML, facts_from_record

    for visible, cuda in ((None, "12.9"), ("0,1", "13.0")):
        env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
        host = facts_from_record(
            {SMI_XML: h200_host_with_a_p2000(fixtures), ENV_JSON: json.dumps(env)}
        )
        s = suggestion_for(host, EnvFacts())
        assert s is not None and s.cuda == cuda
        assert (
            plan_environment(Request(), host, channel_builds("conda-forge", "linux-64")).cuda
            == cuda
        )
