"""GPU architecture in every plan (issue 14 item 3): `--gpu` and the probed GPUs become the
`__cuda_arch` virtual package (conda CEP 46, as py-rattler detects it: the lowest compute capability,
`{major}.{minor}`, build 0, only beside `__cuda`), the lock records it, the input hash changes with
the GPUs only when the plan does, and a solution whose CUDA build has no kernels for a GPU is
refused with the GPU's arch, the build and the --cuda to pass. Real solves on the harvested
conda-forge repodata."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envtool.core import cuda as cu
from envtool.core.facts import GpuFacts, HostFacts
from envtool.core.plan import Request, parse_cuda_builds, plan_environment
from envtool.core.request import resolved_request
from envtool.core.verify_solution import verify_solution
from envtool.errors import UsageError

DRIVER = "580.65.06"


@pytest.fixture(scope="module")
def conda_forge(harvested: Path) -> str:
    return str(harvested / "conda-forge")


@pytest.fixture(scope="module")
def cuda_lines(conda_forge: str) -> set[str]:
    """The CUDA lines the fixture channel has torch builds for (linux-64)."""
    data = json.loads((Path(conda_forge) / "linux-64" / "repodata.json").read_text())
    rows = [
        (r["version"], r["build"], r.get("depends", []))
        for key in ("packages", "packages.conda")
        for r in data.get(key, {}).values()
        if r["name"] == "pytorch"
    ]
    return {b.cuda for b in parse_cuda_builds(rows) if b.cuda}


def _virtual(plan, platform: str = "linux-64") -> dict[str, tuple[str, str]]:
    pp = next(p for p in plan.platforms if p.platform == platform)
    return {n: (v, b) for n, v, b in pp.virtual_packages}


# -- the value ---------------------------------------------------------------------------------


def test_cuda_arch_is_the_lowest_capability_without_subarch_letters() -> None:
    assert cu.cuda_arch_version(["9.0", "sm_86", "12.0"]) == "8.6"
    assert cu.cuda_arch_version(["10.0", "9.0"]) == "9.0"  # numeric, not text order
    assert cu.cuda_arch_version(["sm_90a"]) == "9.0"
    assert cu.cuda_arch_version([(12, 0)]) == "12.0"
    assert cu.cuda_arch_version([]) is None


@pytest.mark.integration
def test_plan_value_is_what_py_rattler_reports_for_the_same_gpu() -> None:
    """py-rattler's own detection (CEP 46 override variables, so any host reports the same) gives
    `__cuda_arch` the version and build string the plan writes."""
    code = (
        "from rattler import VirtualPackage\n"
        "from rattler.virtual_package.virtual_package import VirtualPackageOverrides\n"
        "for v in VirtualPackage.detect(VirtualPackageOverrides.from_env()):\n"
        "    g = v.into_generic()\n"
        "    print(g.name.normalized, g.version, g.build_string)\n"
    )
    env = {"CONDA_OVERRIDE_CUDA": "12.6", "CONDA_OVERRIDE_CUDA_ARCH": "9.0", "PATH": "/usr/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    detected = {line.split()[0]: tuple(line.split()[1:]) for line in out.splitlines()}
    plan = plan_environment(Request(cuda="12.6", driver=DRIVER, gpus=("9.0",)), None, None)
    assert detected["__cuda_arch"] == _virtual(plan)["__cuda_arch"] == ("9.0", "0")


# -- plans -------------------------------------------------------------------------------------


def test_gpu_flag_and_probed_gpus_become_cuda_arch(cuda_lines: set[str]) -> None:
    """The channel's CUDA lines as torch 2.7.1 builds (the planner reads only the CUDA tag)."""
    builds = parse_cuda_builds([("2.7.1", f"cuda{c.replace('.', '')}_x", []) for c in cuda_lines])
    plan = plan_environment(Request(cuda="12.6", driver=DRIVER, gpus=("9.0",)), None, builds)
    assert _virtual(plan)["__cuda_arch"] == ("9.0", "0")
    assert plan.cuda_arch == "9.0" and plan.to_dict()["cuda_arch"] == "9.0"
    assert "__cuda_arch=9.0" in plan.to_dict()["platforms"][0]["virtual_packages"]
    # probed: an A100 beside an H200 -> the lowest, 8.0
    host = HostFacts(
        driver_version=DRIVER,
        gpus=[GpuFacts(0, "NVIDIA H200", "9.0"), GpuFacts(1, "NVIDIA A100-SXM4-80GB", "8.0")],
    )
    auto = plan_environment(Request(), host, builds)
    assert auto.cuda and _virtual(auto)["__cuda_arch"] == ("8.0", "0")


def test_cpu_plans_and_plans_without_gpus_have_no_cuda_arch() -> None:
    host = HostFacts(driver_version=DRIVER, gpus=[GpuFacts(0, "NVIDIA H200", "9.0")])
    cpu = plan_environment(Request(cuda="cpu", gpus=("9.0",)), host, None)
    assert "__cuda_arch" not in _virtual(cpu) and cpu.cuda_arch is None
    target = plan_environment(Request(cuda="12.6"), None, None)  # no GPU known: no assumption
    assert "__cuda" in _virtual(target) and "__cuda_arch" not in _virtual(target)
    # CEP 46: never without __cuda (Apple silicon gets the CPU build beside a CUDA linux-64)
    mixed = plan_environment(
        Request(cuda="12.6", driver=DRIVER, gpus=("9.0",), platforms=("linux-64", "osx-arm64")),
        None,
        None,
    )
    assert _virtual(mixed, "linux-64")["__cuda_arch"] == ("9.0", "0")
    assert "__cuda_arch" not in _virtual(mixed, "osx-arm64")


def test_virtual_package_override_wins() -> None:
    plan = plan_environment(
        Request(cuda="12.6", gpus=("9.0",), virtual_overrides=(("__cuda_arch", "8.0"),)),
        None,
        None,
    )
    assert _virtual(plan)["__cuda_arch"] == ("8.0", "0")


@pytest.mark.integration
def test_a_kepler_refusal_names_each_reason_once(conda_forge: str, run_cli, tmp_path) -> None:
    """--gpu 3.5 is never planned as CUDA 12 (done in 3c1c77b); the refusal said 'CUDA 12 dropped
    Kepler' once per CUDA 12 line the channel has (three times on this fixture)."""
    rc, _, err = run_cli(
        ["create", "k", "--no-install", "--dry-run", "--gpu", "3.5", "--driver", "470.82.01",
         "--channel", conda_forge],
        tmp_path,
    )  # fmt: skip
    assert rc == 2
    line = err.strip().splitlines()[-1]
    assert line.count("CUDA 12 dropped Kepler (sm_35): the last CUDA for it is 11.x;") == 1, line
    assert "--cuda cpu" in line and "--cuda 12" not in line


# -- real solves, the lock, the hash -------------------------------------------------------------


def _dry_json(run_cli, tmp_path: Path, conda_forge: str, *args: str) -> dict:
    rc, out, err = run_cli(
        ["create", "a", "--no-install", "--dry-run", "--json", "--channel", conda_forge, *args],
        tmp_path,
    )
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.integration
def test_a_blackwell_gpu_runs_conda_forge_cuda_12_6_through_ptx(
    conda_forge: str, run_cli, tmp_path
) -> None:
    """conda-forge builds its own arch lists: every CUDA 12.0-12.6 build carries 9.0+PTX
    (pytorch-cpu-feedstock recipe/build.sh `12.[0-6]`), and compute_90 PTX JIT-compiles on
    sm_120. So --gpu 12.0 --cuda 12.6 plans, solves (torch 2.7.1 cuda126, built 2025-06-18, before
    that case was dropped) and locks, with a note on the first-launch JIT; the lock records the
    solved build's list. A line with sm_120 machine code (12.9) has no such note."""
    rc, out, err = run_cli(
        ["create", "b", "--no-install", "--gpu", "12.0", "--driver", DRIVER,
         "--cuda", "12.6", "--channel", conda_forge],
        tmp_path,
    )  # fmt: skip
    assert rc == 0, err
    assert (
        "note: sm_120: conda-forge CUDA 12.6 builds carry no machine code for it; it runs their "
        "compute_90 PTX, JIT-compiled by the driver on first launch"
    ) in out + err, out + err
    text = (tmp_path / "environments" / "b" / "conda-lock.yml").read_text()
    assert "envtool_cuda_arch: '12.0'" in text
    archs = re.search(r"envtool_gpu_archs: (.*)", text).group(1).strip("'")
    assert archs.split() == list(cu.parse_arch_list("5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0+PTX"))
    assert re.search(r"envtool_torch: '?2\.7\.1", text)
    data = _dry_json(
        run_cli, tmp_path, conda_forge, "--gpu", "12.0", "--driver", DRIVER, "--cuda", "12.9"
    )
    assert data["plan"]["cuda_arch"] == "12.0" and "sm_120" in data["plan"]["archs"]
    assert not any("PTX" in n for n in data["plan"]["notes"])
    assert "__cuda_arch=12.0" in data["plan"]["platforms"][0]["virtual_packages"]


def test_plan_notes_ptx_only_gpus_and_keeps_official_lists_for_the_pytorch_flavor() -> None:
    """The same request, two flavors: conda-forge's cu126 builds run sm_120 through PTX (a note),
    PyTorch's official cu121 builds carry no PTX and are refused naming the arch."""
    cf = plan_environment(Request(cuda="12.6", driver=DRIVER, gpus=("12.0", "9.0")), None, None)
    assert cf.cuda == "12.6" and cf.archs[-1] == "compute_90"
    assert [n for n in cf.notes if "PTX" in n] == [
        "sm_120: conda-forge CUDA 12.6 builds carry no machine code for it; it runs their "
        "compute_90 PTX, JIT-compiled by the driver on first launch (a one-time compile cost, "
        "then cached)"
    ]  # sm_90 has machine code: no note for it
    with pytest.raises(UsageError) as err:
        plan_environment(
            Request(cuda="12.1", flavor="pytorch", driver=DRIVER, gpus=("12.0",)), None, None
        )
    assert err.value.message == (
        "CUDA 12.1 builds carry sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90, "
        "not GPU capability 12.0 (sm_120)"
    )


@pytest.mark.integration
def test_the_pytorch_channel_keeps_the_official_lists(harvested: Path, run_cli, tmp_path) -> None:
    """A real create on the harvested pytorch channel: its cu121 builds are PyTorch's own (no
    PTX), so --gpu 12.0 --cuda 12.1 is still refused; a Hopper GPU plans."""
    flags = [
        a for c in ("pytorch", "nvidia", "conda-forge") for a in ("--channel", str(harvested / c))
    ]
    base = ["create", "p", "--no-install", "--dry-run", "--flavor", "pytorch", "--cuda", "12.1",
            "--driver", DRIVER, *flags]  # fmt: skip
    rc, _, err = run_cli([*base, "--gpu", "12.0"], tmp_path)
    assert rc == 2
    assert "CUDA 12.1 builds carry sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90, not GPU capability" \
        " 12.0 (sm_120)" in err, err  # fmt: skip
    rc, _, err = run_cli([*base, "--gpu", "9.0"], tmp_path)
    assert rc == 0, err


def test_a_kepler_gpu_with_cuda_12_stays_refused_on_conda_forge() -> None:
    """conda-forge's lists do not rescue Kepler: CUDA 12 dropped it, and no 12.x list has sm_3x."""
    for cuda in ("12.6", "12.9"):
        with pytest.raises(UsageError) as err:  # on R470, Kepler's last branch
            plan_environment(Request(cuda=cuda, driver="470.82.01", gpus=("3.7",)), None, None)
        assert "CUDA 12 dropped Kepler (sm_37)" in err.value.message
        assert (err.value.hint or "").startswith("pass --cuda 11.8")  # never "upgrade the driver"
        with pytest.raises(UsageError) as err:  # a K80 on R580 cannot exist
            plan_environment(Request(cuda=cuda, driver=DRIVER, gpus=("3.7",)), None, None)
        assert "R470 is the last driver branch for Kepler" in err.value.message
        assert not cu.arch_covered("3.7", cu.build_archs("conda-forge", cuda) or ())


@pytest.mark.integration
def test_the_lock_records_cuda_arch_and_relocks_as_a_no_op(
    conda_forge: str, run_cli, tmp_path
) -> None:
    rc, _, err = run_cli(
        ["create", "h", "--no-install", "--cuda", "12.6", "--driver", DRIVER, "--gpu", "sm_90",
         "--gpu", "9.0", "--channel", conda_forge],
        tmp_path,
    )  # fmt: skip
    assert rc == 0, err
    text = (tmp_path / "environments" / "h" / "conda-lock.yml").read_text()
    assert "envtool_cuda_arch: '9.0'" in text
    request = json.loads(re.search(r"envtool_request: '(.*)'", text).group(1))
    assert request["gpus"] == ["9.0"]  # two spellings of one GPU: one capability
    rc, out, err = run_cli(["lock", "h"], tmp_path)
    assert rc == 0 and "lock is up to date" in out, err
    rc, _, err = run_cli(["lock", "h", "--check"], tmp_path)
    assert rc == 0, err
    # a forced re-lock on this GPU-less host keeps the recorded GPU target
    rc, out, err = run_cli(["lock", "h", "--force", "--dry-run", "--json"], tmp_path)
    assert rc == 0, err
    assert json.loads(out)["plan"]["cuda_arch"] == "9.0"
    # a CPU lock records no GPU assumption
    rc, _, err = run_cli(
        ["create", "c", "--no-install", "--cuda", "cpu", "--gpu", "9.0", "--channel", conda_forge],
        tmp_path,
    )
    assert rc == 0, err
    cpu_text = (tmp_path / "environments" / "c" / "conda-lock.yml").read_text()
    assert "envtool_cuda_arch" not in cpu_text and '"gpus":[]' in cpu_text


@pytest.mark.integration
def test_the_input_hash_changes_with_the_gpus_only_when_the_plan_does(
    conda_forge: str, run_cli, tmp_path
) -> None:
    base = ("--cuda", "12.6", "--driver", DRIVER)
    h90 = _dry_json(run_cli, tmp_path, conda_forge, *base, "--gpu", "9.0")
    same = [
        _dry_json(run_cli, tmp_path, conda_forge, *base, *gpus)["input_hash"]
        for gpus in (("--gpu", "sm_90"), ("--gpu", "9.0", "--gpu", "9.0"))
    ]
    assert same == [h90["input_hash"]] * 2
    h80 = _dry_json(run_cli, tmp_path, conda_forge, *base, "--gpu", "8.0")
    assert h80["plan"]["cuda_arch"] == "8.0" and h80["input_hash"] != h90["input_hash"]
    cpu = [
        _dry_json(run_cli, tmp_path, conda_forge, "--cuda", "cpu", "--gpu", g)["input_hash"]
        for g in ("9.0", "8.0")
    ]
    assert cpu[0] == cpu[1]


def test_probed_gpus_are_recorded_for_the_relock() -> None:
    """The GPUs a plan was made for, probed or --gpu, go into the stored request as distinct
    capabilities, so `envtool lock` on a login node re-plans the same __cuda_arch."""
    host = HostFacts(
        driver_version=DRIVER,
        gpus=[GpuFacts(i, "NVIDIA H200", "9.0") for i in range(8)] + [GpuFacts(8, "A100", "8.0")],
    )
    request = Request(cuda="12.6")
    plan = plan_environment(request, host, None)
    stored = resolved_request(request, plan)
    assert stored.gpus == ("8.0", "9.0")
    again = plan_environment(stored, None, None)  # the re-lock: no host
    assert _virtual(again)["__cuda_arch"] == _virtual(plan)["__cuda_arch"] == ("8.0", "0")
    cpu = resolved_request(Request(cuda="cpu"), plan_environment(Request(cuda="cpu"), host, None))
    assert cpu.gpus == ()


# -- the verifier ------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_solution_without_the_gpus_arch_is_refused(conda_forge: str, cuda_lines) -> None:
    """A real conda-forge CUDA 12.6 solution (sm_50…sm_90 + compute_90 PTX) checked against a
    Kepler GPU (sm_37: nothing below sm_50 runs it): one problem naming the GPU arch and the build,
    and the --cuda to pass among the channel's CUDA lines (conda-forge's 11.8 builds carry sm_35);
    Hopper and Ampere pass, and so does a Blackwell GPU (the PTX JIT-compiles on sm_120); a driver
    too old for a GPU is told to upgrade."""
    from envtool.adapters.solve.rattler_solve import solve_platforms

    plan = plan_environment(Request(cuda="12.6", channels=(conda_forge,)), None, None)
    pp = plan.platforms[0]
    solved = solve_platforms([conda_forge], [pp])[pp.platform]
    torch = next(p for p in solved if p.name == "pytorch")
    assert verify_solution(pp, solved, gpus=("9.0", "8.6"), driver=DRIVER) == []
    assert verify_solution(pp, solved, gpus=("12.0",), driver=DRIVER) == []  # via compute_90
    assert verify_solution(pp, solved) == []  # no GPU known: nothing to judge
    # a K80 beside an A10, on R470 (Kepler's last branch)
    problems = verify_solution(
        pp, solved, gpus=("8.6", "3.7"), driver="470.82.01", available=cuda_lines
    )
    assert [p.check for p in problems] == ["gpu-arch"]
    (p,) = problems
    assert p.message == (
        f"pytorch {torch.version} {torch.build} (CUDA 12.6: sm_50 sm_60 sm_61 sm_70 sm_75 sm_80 "
        "sm_86 sm_89 sm_90 compute_90) has no kernels for GPU sm_37"
    )
    assert p.hint == "pass --cuda 11.8 (its builds cover sm_37)"
    # a K80 beside an RTX 5090: R470 is Kepler's last branch, Blackwell needs R570 or newer
    old = verify_solution(
        pp, solved, gpus=("3.7", "12.0"), driver="560.28.03", available=cuda_lines
    )
    assert "no driver drives both sm_37 (last branch R470) and sm_120 (needs ≥ 570.26)" in (
        old[0].hint or ""
    )
