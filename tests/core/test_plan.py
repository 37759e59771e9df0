"""The plan (pure): which CUDA, which specs, which virtual packages — and refusals before solving."""

from __future__ import annotations

import json

import pytest

from envtool.core.facts import GpuFacts, HostFacts
from envtool.core.plan import Request, parse_cuda_builds, plan_environment, render_plan
from envtool.core.versions import parse_version
from envtool.errors import UsageError


def _builds_from_fixture(fixtures, channel: str = "conda-forge") -> list:
    """The pytorch records of the real harvested conda-forge linux-64 repodata."""
    path = (
        fixtures / "repodata" / "harvested-from-pixi-locks" / channel / "linux-64" / "repodata.json"
    )
    data = json.loads(path.read_text())
    rows = [
        (r["version"], r["build"], r.get("depends", []))
        for key in ("packages", "packages.conda")
        for r in data.get(key, {}).values()
        if r["name"] == "pytorch"
    ]
    return parse_cuda_builds(rows)


def test_parse_cuda_builds_reads_conda_forge_and_legacy_build_strings() -> None:
    builds = parse_cuda_builds(
        [
            ("2.7.1", "cuda126_mkl_py312_h30b5a27_300", []),
            ("2.0.0", "cuda118py39h06e0762_304", []),
            ("2.10.0", "cpu_mkl_py314_hf472749_104", []),
            ("2.3.1", "py3.11_cuda12.1_cudnn8.9.2_0", []),
            ("2.3.1", "py3.11_cpu_0", []),
        ]
    )
    got = {(b.torch, b.cuda, b.python) for b in builds}
    assert ("2.7.1", "12.6", "3.12") in got
    assert ("2.0.0", "11.8", "3.9") in got
    assert ("2.10.0", None, "3.14") in got
    assert ("2.3.1", "12.1", "3.11") in got
    assert ("2.3.1", None, "3.11") in got


def test_fixture_conda_forge_cuda_builds_are_discovered(fixtures) -> None:
    cudas = {b.cuda for b in _builds_from_fixture(fixtures) if b.cuda}
    assert {"11.8", "12.0", "12.6", "12.9"} <= cudas


def test_no_driver_plans_cpu_with_a_note() -> None:
    plan = plan_environment(Request(), HostFacts(no_driver_reason="no NVIDIA driver loaded"), [])
    assert plan.cuda is None and plan.cuda_mode == "cpu"
    assert any("no NVIDIA driver loaded" in n for n in plan.notes)
    assert "pytorch * cpu*" in plan.platforms[0].specs
    assert all(name != "__cuda" for name, _, _ in plan.platforms[0].virtual_packages)


def test_cuda_cpu_with_gpu_or_driver_flags_says_they_plan_nothing() -> None:
    plan = plan_environment(Request(cuda="cpu", gpus=("8.0",), driver="570.86.10"), HostFacts(), [])
    assert plan.cuda is None
    assert "--gpu and --driver plan for a GPU machine; --cuda cpu plans the CPU build" in plan.notes
    assert not any(
        "--gpu" in n for n in plan_environment(Request(cuda="cpu"), HostFacts(), []).notes
    )


def test_driver_470_auto_picks_cuda11_with_minor_compat_warning(fixtures) -> None:
    plan = plan_environment(
        Request(driver="470.182.03"), HostFacts(), _builds_from_fixture(fixtures)
    )
    assert plan.cuda == "11.8" and plan.cuda_mode == "compat"
    warning = " ".join(plan.warnings)
    assert (
        "minor-version compatibility" in warning
        and "driver ≥ 520.61.05 runs it natively" in warning
    )
    # no other --cuda in the warning: the fixture's 11.2 build does not solve with torchvision
    assert "--cuda" not in warning
    assert ("__cuda", "11.8", "0") in plan.platforms[0].virtual_packages


def test_auto_uses_host_driver_and_skips_builds_that_miss_the_gpu_arch() -> None:
    builds = parse_cuda_builds(
        [
            ("2.9.0", "cuda130_mkl_py312_h0", []),
            ("2.8.0", "cuda129_mkl_py312_h0", []),
            ("2.7.1", "cuda126_mkl_py312_h0", []),
        ]
    )
    v100 = HostFacts(driver_version="580.65.06", gpus=[GpuFacts(0, "Tesla V100", "7.0")])
    plan = plan_environment(Request(), v100, builds)
    # CUDA 13 dropped Volta; conda-forge's 12.9 builds still carry sm_70: a V100 gets 12.9
    assert plan.cuda == "12.9" and plan.cuda_mode == "native"
    assert "CUDA 13 dropped Volta" in " ".join(plan.notes)
    h200 = HostFacts(driver_version="580.65.06", gpus=[GpuFacts(0, "H200", "9.0")])
    assert plan_environment(Request(), h200, builds).cuda == "13.0"


def test_a_cuda_major_alone_picks_the_newest_of_that_major_the_driver_runs() -> None:
    """`--cuda 12` (or `cuda-version=12` in a file, conda's 12.*) on a driver that runs 13.0."""
    builds = parse_cuda_builds(
        [
            ("2.9.0", "cuda130_mkl_py312_h0", []),
            ("2.8.0", "cuda129_mkl_py312_h0", []),
            ("2.7.1", "cuda126_mkl_py312_h0", []),
            ("2.0.0", "cuda118_py311_h0", []),
        ]
    )
    h200 = HostFacts(driver_version="580.65.06", gpus=[GpuFacts(0, "H200", "9.0")])
    plan = plan_environment(Request(cuda="12"), h200, builds)
    assert plan.cuda == "12.9" and plan.cuda_mode == "native"
    assert plan_environment(Request(cuda="11"), h200, builds).cuda == "11.8"
    # a driver that runs no CUDA 13: same answer, and no "needs driver" refusal for the major
    assert plan_environment(Request(cuda="12", driver="550.54.14"), None, builds).cuda == "12.9"
    with pytest.raises(UsageError) as err:
        plan_environment(Request(cuda="10"), h200, builds)
    assert "for CUDA 10.x" in err.value.message
    with pytest.raises(UsageError) as err:
        plan_environment(Request(cuda="99"), h200, builds)
    assert "no CUDA 99.x is known" in err.value.message and "12, 13" in (err.value.hint or "")


def test_a_cuda_major_alone_without_a_driver_is_still_a_cuda_build() -> None:
    """A login node (no driver): `--cuda 12`, or `cuda-version=12` in a file, asked for CUDA; the
    plan is the newest 12.x build for the target, as `--cuda 12.9` would be, never the CPU build."""
    builds = parse_cuda_builds(
        [
            ("2.9.0", "cuda130_mkl_py312_h0", []),
            ("2.8.0", "cuda129_mkl_py312_h0", []),
            ("2.7.1", "cuda126_mkl_py312_h0", []),
        ]
    )
    no_driver = HostFacts(no_driver_reason="no NVIDIA driver loaded")
    plan = plan_environment(Request(cuda="12"), no_driver, builds)
    assert (plan.cuda, plan.cuda_mode) == ("12.9", "target")
    assert "cuda129*" in " ".join(plan.platforms[0].specs)
    assert any("planning CUDA 12.9" in n for n in plan.notes)
    # a V100 (sm_70): conda-forge's 12.8/12.9 builds carry sm_70 (pytorch-cpu-feedstock
    # `12.[89]`: 5.0;6.0;7.0;…;12.0+PTX; PyTorch's own cu128 wheels start at sm_75)
    assert plan_environment(Request(cuda="12", gpus=("7.0",)), None, builds).cuda == "12.9"
    with pytest.raises(UsageError) as err:  # CUDA 13 dropped Volta
        plan_environment(Request(cuda="13", gpus=("7.0",)), None, builds)
    assert "no CUDA 13.x build of torch" in err.value.message
    assert plan_environment(Request(cuda="auto"), no_driver, builds).cuda is None  # auto: CPU


def test_explicit_cuda_too_new_for_driver_is_refused_with_the_way_out(fixtures) -> None:
    builds = _builds_from_fixture(fixtures)
    with pytest.raises(UsageError) as err:
        plan_environment(Request(cuda="12.4", driver="470.182.03"), None, builds)
    assert "needs driver ≥ 550.54.14" in err.value.message
    assert "CUDA ≤ 11.4" in err.value.message
    # the channel has no 11.4 build: the way out is the newest build the driver runs (11.8, via
    # minor-version compatibility), as --cuda auto would pick, never "--cuda 11.4"
    assert "pass --cuda 11.8" in (err.value.hint or "")
    assert plan_environment(Request(driver="470.182.03"), None, builds).cuda == "11.8"
    with pytest.raises(UsageError) as err:  # a channel without CUDA builds: the CPU build
        plan_environment(Request(cuda="12.4", driver="470.182.03"), None, [])
    assert "pass --cuda cpu (no CUDA build of torch on conda-forge)" in (err.value.hint or "")


H200_HOST = HostFacts(
    driver_version="470.57.02",
    gpus=[GpuFacts(0, "NVIDIA H200", "9.0"), GpuFacts(1, "NVIDIA H200", "9.0")],
)


def test_a_driver_that_cannot_drive_the_gpu_is_told_to_upgrade_not_given_a_cuda(fixtures) -> None:
    """No driver of the 470 branch drives a Hopper GPU (sm_90 needs ≥ 520.61.05), whatever the CUDA:
    auto and an explicit --cuda both say so instead of suggesting CUDA 11.8."""
    builds = _builds_from_fixture(fixtures)
    for request in (Request(), Request(cuda="12.6"), Request(cuda="11.8")):
        with pytest.raises(UsageError) as err:
            plan_environment(request, H200_HOST, builds)
        assert err.value.message == (
            "driver 470.57.02 cannot drive NVIDIA H200, sm_90: it needs ≥ 520.61.05"
        )
        hint = err.value.hint or ""
        assert "upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (NVIDIA H200, sm_90)" in hint
        assert "--cuda 11" not in hint
    # --gpu 9.0 without a name: the architecture's floor still applies
    with pytest.raises(UsageError) as err:
        plan_environment(Request(driver="470.57.02", gpus=("9.0",)), None, builds)
    assert "for this GPU (sm_90)" in (err.value.hint or "")
    # at the floor, Hopper runs: CUDA 11.8 natively
    ok = plan_environment(Request(driver="520.61.05", gpus=("9.0",)), None, builds)
    assert (ok.cuda, ok.cuda_mode) == ("11.8", "native")


def test_a_kepler_gpu_is_never_planned_with_cuda_12(fixtures) -> None:
    """CUDA 12.0 dropped sm_35/sm_37: --gpu 3.5 plans a CUDA 11 build and says why, and an
    explicit --cuda 12.x is refused with that reason."""
    builds = _builds_from_fixture(fixtures)
    plan = plan_environment(Request(driver="470.57.02", gpus=("3.5",)), None, builds)
    assert plan.cuda is not None and parse_version(plan.cuda) < parse_version("12")
    assert any("CUDA 12 dropped Kepler (sm_35)" in n for n in plan.notes), plan.notes
    with pytest.raises(UsageError) as err:
        plan_environment(Request(cuda="12.6", driver="470.57.02", gpus=("3.5",)), None, builds)
    assert "CUDA 12 dropped Kepler (sm_35): the last CUDA for it is 11.x" in err.value.message
    assert f"pass --cuda {plan.cuda}" in (err.value.hint or "")
    with pytest.raises(UsageError) as err:  # only CUDA 12 builds: no CUDA build at all
        plan_environment(Request(cuda="12", driver="470.57.02", gpus=("3.7",)), None, builds)
    assert "CUDA 12 dropped Kepler" in err.value.message
    assert "--cuda cpu" in (err.value.hint or "")


def test_pytorch_channel_refuses_torch_after_2_5() -> None:
    with pytest.raises(UsageError) as err:
        plan_environment(Request(torch="2.7", flavor="pytorch", cuda="12.6"), None, None)
    assert "stopped at 2.5" in err.value.message
    assert "--flavor conda-forge" in (err.value.hint or "")


def test_torch_cuda_pair_never_built_lists_the_builds_that_exist(fixtures) -> None:
    with pytest.raises(UsageError) as err:
        plan_environment(Request(torch="2.7", cuda="12.8"), None, _builds_from_fixture(fixtures))
    assert "never built for CUDA 12.8" in err.value.message
    assert "2.7.1: 12.6, 12.9" in (err.value.hint or "")


def test_pytorch_flavor_pair_never_built_uses_pytorch_release_table() -> None:
    with pytest.raises(UsageError) as err:
        plan_environment(Request(torch="2.3", cuda="12.4", flavor="pytorch"), None, None)
    assert "never built for CUDA 12.4" in err.value.message
    assert "2.3: 11.8, 12.1" in (err.value.hint or "")


def test_unknown_cuda_version_lists_known_ones() -> None:
    with pytest.raises(UsageError) as err:
        plan_environment(Request(cuda="12.7"), None, [])
    assert "12.7" in err.value.message and "12.6, 12.8" in (err.value.hint or "")


@pytest.mark.parametrize(
    ("field", "flag", "example"), [("driver", "--driver", "535.54.03"), ("torch", "--torch", "2.5")]
)
def test_bad_driver_or_torch_version_hint_names_a_value_of_that_kind(field, flag, example) -> None:
    with pytest.raises(UsageError) as err:
        plan_environment(Request(cuda="12.6", **{field: "abc"}), None)
    assert err.value.message == f"{flag} abc: not a version"
    assert err.value.hint == f"e.g. {flag} {example}"


@pytest.mark.parametrize("gpu", ["99", "sm_990", "21.0"])
def test_a_gpu_that_is_no_compute_capability_is_refused_before_solving(gpu: str) -> None:
    """`--gpu 99` (meant 9.0) ruled out every build whose architecture list envtool knows, left
    the one it does not (conda-forge's CUDA 12.0), and failed later in the solver."""
    with pytest.raises(UsageError) as err:
        plan_environment(Request(cuda="auto", driver="580.65.06", gpus=(gpu,)), None, [])
    assert err.value.message == f"--gpu {gpu}: not a compute capability (NVIDIA's reach 12.x)"
    assert "--gpu 9.0" in (err.value.hint or "")


def test_conda_forge_cuda_plan_forces_a_cuda_build() -> None:
    plan = plan_environment(Request(cuda="12.6", torch="2.7"), None, None)
    specs = plan.platforms[0].specs
    assert "pytorch 2.7.* cuda126*" in specs and "cuda-version 12.6.*" in specs
    assert "pytorch" not in specs  # the bare spec that lets the newer CPU build win
    assert plan.min_driver == "560.28.03" and "sm_90" in plan.archs


def test_legacy_cuda_plan_pins_runtime_packages_to_one_cuda() -> None:
    plan = plan_environment(Request(cuda="12.1", flavor="pytorch"), None, None)
    pp = plan.platforms[0]
    assert "pytorch-cuda 12.1.*" in pp.specs and "pytorch-mutex * cuda" in pp.specs
    # CUDA 12: cuda-version is a spec, so the written environment.yml pins it too
    assert "cuda-version 12.1.*" in pp.specs and "cuda-cudart 12.1.*" in pp.constraints
    assert plan.channels == ("pytorch", "nvidia", "conda-forge")
    # CUDA 11: a constraint only (the nvidia channel's 11.x packages do not depend on it)
    pp = plan_environment(Request(cuda="11.7", flavor="pytorch"), None, None).platforms[0]
    assert "cuda-version 11.7.*" in pp.constraints and "cuda-version 11.7.*" not in pp.specs


def test_legacy_cpu_plan_selects_the_cpu_mutex() -> None:
    pp = plan_environment(Request(cuda="cpu", flavor="pytorch"), None, None).platforms[0]
    assert "pytorch-mutex * cpu" in pp.specs


def test_osx_arm64_in_a_cuda_plan_gets_the_cpu_build_with_a_warning() -> None:
    plan = plan_environment(Request(cuda="12.6", platforms=("linux-64", "osx-arm64")), None, None)
    by = {p.platform: p for p in plan.platforms}
    assert by["linux-64"].cuda == "12.6" and by["osx-arm64"].cuda is None
    assert "pytorch * cpu*" in by["osx-arm64"].specs
    assert any("osx-arm64 has no CUDA builds" in w for w in plan.warnings)
    assert ("__osx", "11.0", "0") in by["osx-arm64"].virtual_packages


def test_virtual_package_override_and_user_specs_are_kept() -> None:
    req = Request(
        conda_specs=("python", "pytorch=2.1", "cuda-version=11.8", "numpy>=1.26"),
        cuda="12.6",
        virtual_overrides=(("__glibc", "2.17"),),
    )
    pp = plan_environment(req, None, None).platforms[0]
    assert ("__glibc", "2.17", "0") in pp.virtual_packages
    assert "numpy>=1.26" in pp.specs
    # plan-owned names are replaced, never duplicated with a contradicting pin
    assert "cuda-version=11.8" not in pp.specs and "pytorch=2.1" not in pp.specs


def test_replanning_the_planned_specs_is_idempotent() -> None:
    first = plan_environment(Request(cuda="12.6", python="3.11"), None, None)
    again = plan_environment(
        Request(conda_specs=first.platforms[0].specs, cuda="12.6", python="3.11"), None, None
    )
    assert again.platforms == first.platforms


def test_render_plan_says_cuda_driver_and_specs() -> None:
    text = "\n".join(render_plan(plan_environment(Request(cuda="12.6"), None, None)))
    assert "CUDA 12.6" in text and "560.28.03" in text and "cuda126*" in text


def test_lock_options_round_trip_without_yaml() -> None:
    from envtool.core.lockfile import parse_lock_options, parse_lock_stamp, render_options

    options = Request(channels=("/data/it's here",), gpus=("8.0",)).options()
    quoted = render_options(options).replace("'", "''")  # YAML single-quoted scalar
    text = f"metadata:\n  custom_metadata:\n    envtool_input_hash: {'a' * 64}\n    envtool_request: '{quoted}'\n"
    assert parse_lock_options(text) == options
    assert parse_lock_stamp(text) == "a" * 64
    assert parse_lock_options("metadata: {}\n") is None


def test_one_cuda_must_exist_on_every_cuda_platform() -> None:
    builds = [
        *parse_cuda_builds([("2.8.0", "cuda129_mkl_py313_h0", [])], "linux-64"),
        *parse_cuda_builds([("2.8.0", "cuda128_mkl_py313_h0", [])], "win-64"),
        *parse_cuda_builds([("2.7.1", "cuda126_mkl_py312_h0", [])], "linux-64"),
        *parse_cuda_builds([("2.7.1", "cuda126_mkl_py312_h0", [])], "win-64"),
    ]
    host = HostFacts(driver_version="580.65.06")
    both = Request(platforms=("linux-64", "win-64"))
    assert plan_environment(both, host, builds).cuda == "12.6"
    assert plan_environment(Request(), host, builds).cuda == "12.9"
    with pytest.raises(UsageError) as err:
        plan_environment(Request(platforms=("linux-64", "win-64"), torch="2.8"), host, builds)
    assert "for all of linux-64, win-64" in err.value.message
    assert "12.8 (win-64)" in (err.value.hint or "")
