"""Doctor verdicts on real broken and healthy setups.

Each case rebuilds, by hand, the facts a probe would have seen on the machine behind one
`python -m torch.utils.collect_env` report in fixtures/collect_env/ (cited per test), then asserts
the verdict a person would want: which check fails, the overall status and the key part of the fix.
"""

from __future__ import annotations

import pytest

from envtool.core.checks import check_by_id, headline, overall, run_checks
from envtool.core.facts import EnvFacts, GpuFacts, HostFacts, TorchFacts

NO_DRIVER_MSG = (
    "CUDA initialization: Found no NVIDIA driver on your system. Please check that you have an "
    "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx"
)


def too_old_msg(found: int) -> str:
    return (
        f"CUDA initialization: The NVIDIA driver on your system is too old (found version {found}). "
        "Please update your GPU driver by downloading and installing a new version"
    )


def host(driver=None, gpus=(), cap=None, platform="linux-64", **kw) -> HostFacts:
    return HostFacts(
        platform=platform,
        driver_version=driver,
        source="nvidia-smi" if driver else None,
        gpus=[GpuFacts(index=i, name=n, capability=cap) for i, n in enumerate(gpus)],
        **kw,
    )


def env(version, cuda=None, available=None, message=None, conda=None, pip=None, **kw) -> EnvFacts:
    return EnvFacts(
        python_exe="/env/bin/python",
        prefix="/env",
        torch=TorchFacts(
            version=version, cuda=cuda, is_available=available, available_message=message, **kw
        ),
        conda_packages=conda or {},
        pip_torch=pip or [],
    )


def statuses(checks) -> dict[str, str]:
    return {c.id: c.status for c in checks}


def failing(checks) -> list[str]:
    return [c.id for c in checks if c.status == "fail"]


def test_01_cu121_wheel_on_driver_470():
    # 01_driver-too-old__torch-2.1.0+cu121__driver-470.182.03__pytorch-112553.txt
    # GPU model is cut from the excerpt; GKE node with driver 470.182.03 (T4-class, cap 7.5 assumed
    # absent: no GPU line in the capture, so only the driver is given).
    h = host("470.182.03", driver_cuda="11.4")
    e = env("2.1.0+cu121", "12.1", False, too_old_msg(11040))
    checks = run_checks(h, e)
    assert overall(checks) == "fail"
    c = check_by_id(checks, "driver-vs-torch-cuda")
    assert c.status == "fail"
    assert "530.30.02" in c.summary and "470.182.03" in c.summary
    assert "11.4 natively" in c.summary and "11.8 with minor-version compatibility" in c.summary
    assert "≥ 530.30.02" in c.fix and "--cuda 11.8" in c.fix
    assert any("found version 11040" in e for e in c.evidence)
    # the symptom (is_available False) is not reported as a second cause
    assert failing(checks) == ["driver-vs-torch-cuda"]
    assert headline(checks) == c.summary


def test_02_cu102_on_driver_reporting_cuda_9_1():
    # 02_driver-too-old__torch-1.12.1+cu102__found-9010__conda-env__lhotse-793.txt
    # No driver version in the excerpt (cut off); torch's own message says the driver runs CUDA 9.1,
    # which is what envtool sees when nvidia-smi is missing (a container): only the message.
    h = host(None)
    e = env("1.12.1+cu102", "10.2", False, too_old_msg(9010))
    checks = run_checks(h, e)
    assert check_by_id(checks, "nvidia-driver").status == "ok"  # a driver exists, it is old
    c = check_by_id(checks, "driver-vs-torch-cuda")
    assert c.status == "fail"
    assert "440.33" in c.summary and "CUDA ≤ 9.1" in c.summary
    assert "440.33" in c.fix
    assert overall(checks) == "fail"


def test_03_cpu_torch_on_rtx4080_with_conda_cudatoolkit():
    # 03_cpu-only-torch-on-gpu__torch-2.2.2__rtx4080__conda-cudatoolkit-11.8__pytorch-122924.txt
    # torch 2.2.2 with "CUDA used to build PyTorch: Could not collect" -> torch.version.cuda None.
    h = host("551.86", ["NVIDIA GeForce RTX 4080 Laptop GPU"], "8.9", platform="win-64")
    e = env("2.2.2", None, False, conda={"cudatoolkit": {"version": "11.8.0", "build": ""}})
    checks = run_checks(h, e)
    c = check_by_id(checks, "cpu-torch-on-gpu-host")
    assert c.status == "fail"
    assert "CPU-only build" in c.summary and "RTX 4080" in c.summary
    # driver 551.86 runs CUDA 12.4 natively: torch 2.2 has cu118 and cu121 wheels -> cu121
    assert "--index-url https://download.pytorch.org/whl/cu121" in c.fix
    assert "torch==2.2.2" in c.fix
    assert "envtool create NAME --cuda" in c.fix
    assert any("cudatoolkit 11.8.0 is installed but unused" in x for x in c.evidence)
    assert failing(checks) == ["cpu-torch-on-gpu-host"]


def test_04_cpu_torch_on_rtx3060_with_orphan_cudatoolkit():
    # 04_cpu-only-torch-on-gpu__torch-1.12.1__rtx3060__conda-cudatoolkit-11.3.1__pytorch-51858.txt
    h = host("512.78", ["NVIDIA GeForce RTX 3060 Laptop GPU"], "8.6", platform="win-64")
    e = env(
        "1.12.1",
        None,
        False,
        conda={"cudatoolkit": {"version": "11.3.1", "build": "h59b6b97_2"}},
    )
    checks = run_checks(h, e)
    c = check_by_id(checks, "cpu-torch-on-gpu-host")
    assert c.status == "fail" and "1.12.1" in c.summary
    # torch 1.12 has cu102/cu113/cu116 wheels; driver 512.78 runs 11.6 -> cu116
    assert "whl/cu116" in c.fix
    assert overall(checks) == "fail"


def test_05_healthy_cu117_on_535():
    # 05_working__torch-2.0.1+cu117__win11__driver-535.98__pytorch-51858.txt (control)
    h = host("535.98", ["NVIDIA GeForce GTX 1050 Ti"], "6.1", platform="win-64")
    e = env("2.0.1+cu117", "11.7", True, device_count=1)
    checks = run_checks(h, e)
    assert failing(checks) == []
    assert overall(checks) == "ok"
    assert check_by_id(checks, "gpu-arch-covered").status == "ok"  # sm_60 runs on 6.1


def test_06_conda_cuda101_on_driver_410_plus_stray_pip_torch():
    # 06_cuda-unavailable__conda-pytorch-1.3.0-cuda10.1__driver-410.104__pytorch-28321.txt
    h = host("410.104", ["Tesla T4"], "7.5")
    e = env(
        "1.3.0",
        "10.1.243",
        False,
        conda={
            "pytorch": {"version": "1.3.0", "build": "py3.7_cuda10.1.243_cudnn7.6.3_0"},
            "torchvision": {"version": "0.4.1", "build": "py37_cu101"},
        },
        pip=[{"name": "torch", "version": "1.2.0", "installer": "pip", "location": "/env/lib"}],
        path="/env/lib/python3.7/site-packages/torch",
    )
    checks = run_checks(h, e)
    drv = check_by_id(checks, "driver-vs-torch-cuda")
    assert drv.status == "fail" and "418.39" in drv.summary and "10.0 natively" in drv.summary
    two = check_by_id(checks, "two-torch-installs")
    assert two.status == "fail" and "1.3.0" in two.summary
    assert "pip uninstall torch" in two.fix
    # the headline is the cause (driver), listed before the second problem
    assert headline(checks) == drv.summary
    assert set(failing(checks)) == {"driver-vs-torch-cuda", "two-torch-installs"}


def test_07_pip_cu102_on_driver_410_four_p100():
    # 07_cuda-unavailable__pip-torch-1.5.0-cu102__driver-410.104__4xP100__pytorch-37320.txt
    h = host("410.104", ["Tesla P100-PCIE-16GB"] * 4, "6.0")
    e = env("1.5.0", "10.2", False)
    checks = run_checks(h, e)
    c = check_by_id(checks, "driver-vs-torch-cuda")
    assert c.status == "fail" and "440.33" in c.summary
    assert "≥ 440.33" in c.fix
    assert failing(checks) == ["driver-vs-torch-cuda"]


def test_08_cuda_wheel_without_driver():
    # 08_no-driver__torch-1.7.0+cu110__centos7__pytorch-74733.txt
    h = host(None, no_driver_reason="nvidia-smi not found; /proc/driver/nvidia/version missing")
    e = env("1.7.0+cu110", "11.0", False, NO_DRIVER_MSG)
    checks = run_checks(h, e)
    c = check_by_id(checks, "nvidia-driver")
    assert c.status == "fail" and c.summary.startswith("no NVIDIA driver")
    assert "450.36.06" in c.fix
    assert failing(checks) == ["nvidia-driver"]
    assert overall(checks) == "fail"


def test_09_cpu_wheel_with_cuda_toolkit_installed():
    # 09_cpu-only-wheel__torch-1.7.1+cpu__win10__pytorch-49325.txt (cut before GPU lines; a CUDA
    # 10.2 toolkit is installed; no driver was seen)
    h = host(None, platform="win-64", nvcc_version="10.2")
    e = env("1.7.1+cpu", None, False)
    checks = run_checks(h, e)
    # Without a driver a CPU torch is a valid setup, so no failure; the verdict still names both
    # facts the user needs: no driver, and the torch is a CPU build (the toolkit does not help).
    assert failing(checks) == []
    assert overall(checks) == "ok"
    line = headline(checks)
    assert line.startswith("no NVIDIA driver — CPU only")
    assert "1.7.1+cpu is a CPU build" in line and "CUDA 10.2 toolkit" in line


def test_10_conda_picked_cpuonly_variant():
    # 10_conda-cpuonly-obtained__pytorch-1.4.0-py3.7_cpu_0__pytorch-32369.txt: the same machine
    # ran pytorch 1.3.1 cuda100 with is_available True (env1), so a driver for CUDA 10.0 and a GPU
    # exist; env2 got pytorch 1.4.0 py3.7_cpu_0 with cpuonly.
    h = host("410.48", ["GPU"], None, driver_cuda="10.0")
    e = env(
        "1.4.0",
        None,
        False,
        conda={
            "pytorch": {"version": "1.4.0", "build": "py3.7_cpu_0"},
            "cpuonly": {"version": "1.0", "build": "0"},
            "pytorch-mutex": {"version": "1.0", "build": "cpu"},
        },
    )
    checks = run_checks(h, e)
    c = check_by_id(checks, "cpu-torch-on-gpu-host")
    assert c.status == "fail"
    assert any("cpuonly" in x for x in c.evidence)
    assert "conda remove cpuonly" in c.fix
    assert failing(checks) == ["cpu-torch-on-gpu-host"]


def test_11_cu101_on_driver_410_48_eight_titan_xp():
    # 11_cuda-unavailable__torch-1.3.1-cu101__driver-410.48__8xTITANXp__pytorch-30071.txt
    h = host("410.48", ["TITAN Xp"] * 8, "6.1")
    e = env("1.3.1", "10.1.243", False)
    checks = run_checks(h, e)
    c = check_by_id(checks, "driver-vs-torch-cuda")
    assert c.status == "fail" and "418.39" in c.summary and "410.48" in c.summary
    assert failing(checks) == ["driver-vs-torch-cuda"]


def test_12_healthy_cu101_two_titan_rtx():
    # 12_working__torch-1.5.0+cu101__winserver2019__2xTITANRTX__pytorch-40682.txt (control)
    h = host("442.92", ["TITAN RTX"] * 2, "7.5", platform="win-64")
    e = env("1.5.0+cu101", "10.1", True, device_count=2)
    checks = run_checks(h, e)
    assert failing(checks) == []
    assert overall(checks) == "ok"


def test_h200_x2_host_healthy(fake_h200):
    # h200-x2-host/collect_env.txt + nvidia-smi.txt + topo.txt: torch 2.11.0+cu130, driver
    # 580.159.04 (CUDA 13.0), 2x H200 (cap 9.0, query.csv), NV18 between them.
    h = fake_h200.facts()
    h.shm_bytes = 64 << 30
    e = env("2.11.0+cu130", "13.0", True, device_count=2, capabilities=["9.0", "9.0"])
    checks = run_checks(h, e)
    assert overall(checks) == "ok", [c for c in checks if c.status != "ok"]
    st = statuses(checks)
    assert st["driver-vs-torch-cuda"] == "ok"
    assert st["gpu-arch-covered"] == "ok"
    assert st["minor-version-compat"] == "ok"
    assert headline(checks) == "no problems found"


@pytest.mark.parametrize(
    ("conda", "status", "pin"),
    [
        # locks/konstantinjdobler__nlp-research-template__conda-lock.yml (linux-64)
        (
            {
                "pytorch": {"version": "2.3.1", "build": "py3.10_cuda11.8_cudnn8.7.0_0"},
                "pytorch-cuda": {"version": "11.8", "build": "h7e8668a_5"},
                "cuda-version": {"version": "12.5", "build": "hd4f0392_3"},
                "pytorch-mutex": {"version": "1.0", "build": "cuda"},
            },
            "fail",
            "cuda-version=11.8",
        ),
        # repodata harvested-from-pixi-locks: pytorch 2.3.1 cuda12.1 + nvidia cuda-version 12.6
        (
            {
                "pytorch": {"version": "2.3.1", "build": "py3.11_cuda12.1_cudnn8.9.2_0"},
                "pytorch-cuda": {"version": "12.1", "build": "ha16c6d3_6"},
                "cuda-version": {"version": "12.6", "build": "3"},
            },
            "warn",
            "cuda-version=12.1",
        ),
        # locks/pangeo...@74629d5b: healthy conda-forge cudatoolkit era
        (
            {
                "pytorch": {"version": "2.1.2", "build": "cuda118_py311hde743b7_303"},
                "cudatoolkit": {"version": "11.8.0", "build": "h4ba93d1_13"},
                "cuda-version": {"version": "11.8", "build": "h70ddcb2_3"},
            },
            "ok",
            None,
        ),
    ],
)
def test_conda_cuda_consistency_on_real_locks(conda, status, pin):
    h = host("550.54.14", ["NVIDIA A100-SXM4-80GB"], "8.0")
    e = env(conda["pytorch"]["version"], None, None, conda=conda)
    e.torch = None  # facts from conda-meta only (as --fast on an env that was never imported)
    c = check_by_id(run_checks(h, e), "conda-cuda-consistent")
    assert c.status == status, c
    if pin:
        assert pin in c.fix


def test_broken_lock_cpu_pytorch_next_to_pytorch_cuda():
    # locks/konstantinjdobler__nlp-research-template__conda-lock@98462a29.yml (linux-64):
    # pytorch 2.1.0.dev20230310 py3.10_cpu_0 + pytorch-mutex cpu + pytorch-cuda 11.8
    h = host("535.54.03", ["NVIDIA A100-SXM4-80GB"], "8.0")
    e = EnvFacts(
        conda_packages={
            "pytorch": {"version": "2.1.0.dev20230310", "build": "py3.10_cpu_0"},
            "pytorch-mutex": {"version": "1.0", "build": "cpu"},
            "pytorch-cuda": {"version": "11.8", "build": "h7e8668a_3"},
        },
        status="not-probed",
    )
    checks = run_checks(h, e)
    c = check_by_id(checks, "cpu-torch-on-gpu-host")
    assert c.status == "fail"
    assert any("pytorch-cuda 11.8 is installed but unused" in x for x in c.evidence)


# ----------------------------------------------------------------- replays of real nvidia-smi captures


def _replay_dir(tmp_path, files: dict[str, str], env: EnvFacts):
    """A `doctor --record` layout: raw host outputs under host/, EnvFacts in env.json."""
    import json
    import shutil

    (tmp_path / "host").mkdir()
    for name, src in files.items():
        shutil.copy(src, tmp_path / "host" / name)
    (tmp_path / "env.json").write_text(json.dumps(env.to_dict()))
    return tmp_path


def test_replay_t4_driver_515_with_cu121_torch(fixtures, tmp_path):
    # nvidia-smi/xml/tesla-t4.xml: driver 515.105.01 (CUDA 11.7), Tesla T4
    from envtool.adapters.host.doctor_probe import read_replay

    rec = _replay_dir(
        tmp_path,
        {"nvidia-smi-q.xml": fixtures / "nvidia-smi" / "xml" / "tesla-t4.xml"},
        env("2.1.0+cu121", "12.1", False, too_old_msg(11070)),
    )
    h, e = read_replay(rec)
    assert (h.driver_version, h.gpus[0].capability) == ("515.105.01", "7.5")
    checks = run_checks(h, e)
    c = check_by_id(checks, "driver-vs-torch-cuda")
    assert c.status == "fail" and "530.30.02" in c.summary and "11.7 natively" in c.summary
    assert "--cuda 11.8" in c.fix
    assert failing(checks) == ["driver-vs-torch-cuda"]


@pytest.mark.parametrize(
    ("env_json", "host_json"),
    [("[]", "{}"), ('{"torch": "2.1.0"}', "{}"), ("{}", "[]"), ("{}", '{"gpus": ["H100"]}')],
)
def test_replay_of_json_that_is_not_facts_is_a_usage_error(tmp_path, env_json, host_json):
    """env.json/host.json holding valid JSON of the wrong shape: exit 2 naming the file."""
    from envtool.adapters.host.doctor_probe import read_replay
    from envtool.errors import UsageError

    (tmp_path / "env.json").write_text(env_json)
    (tmp_path / "host.json").write_text(host_json)
    with pytest.raises(UsageError) as err:
        read_replay(tmp_path)
    assert "--replay" in err.value.message and "re-record" in (err.value.hint or "")


def test_replay_mig_h100_warns_about_mig(fixtures, tmp_path):
    # nvidia-smi/extracted/linux-x86_64__nvidia-h100-mig__590.48.01/idle__q.txt: MIG on, 4 instances
    from envtool.adapters.host.doctor_probe import read_replay

    src = fixtures / "nvidia-smi" / "extracted" / "linux-x86_64__nvidia-h100-mig__590.48.01"
    rec = _replay_dir(
        tmp_path, {"nvidia-smi-q.txt": src / "idle__q.txt"}, env("2.9.1+cu128", "12.8", True)
    )
    checks = run_checks(*read_replay(rec))
    c = check_by_id(checks, "mig")
    assert c.status == "warn" and "4 instance(s)" in c.evidence[0]
    assert overall(checks) == "warn"


def test_replay_driver_610_renamed_fields_is_healthy(fixtures, tmp_path):
    # driver 610 prints "KMD Version" / "CUDA UMD Version"; RTX 2080 SUPER (sm_75) with cu130 wheels
    from envtool.adapters.host.doctor_probe import read_replay

    src = (
        fixtures
        / "nvidia-smi"
        / "extracted"
        / "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04"
    )
    rec = _replay_dir(
        tmp_path,
        {"nvidia-smi.txt": src / "idle__plain.txt", "query.csv": src / "idle__query-gpu.csv"},
        env("2.11.0+cu130", "13.0", True, device_count=1),
    )
    h, e = read_replay(rec)
    assert h.driver_version == "610.57.04"
    checks = run_checks(h, e)
    assert overall(checks) == "ok", [c for c in checks if c.status != "ok"]
    assert check_by_id(checks, "gpu-arch-covered").status == "ok"  # CUDA 13 keeps sm_75


def test_h200_on_a_470_driver_is_told_to_upgrade_never_given_a_cuda(fake_h200):
    # h200-x2-host replayed with --driver 470.57.02 (issue 12): no 470 driver drives Hopper
    # (sm_90 needs ≥ 520.61.05), so no `--cuda 11.8` — whatever torch is installed
    h = fake_h200.facts(driver="470.57.02")
    cuda_env = env("2.11.0+cu130", "13.0", False, capabilities=["9.0", "9.0"])
    cpu_env = env("2.11.0+cpu", None, False)
    for e in (cuda_env, cpu_env):
        checks = run_checks(h, e)
        gpu = check_by_id(checks, "driver-vs-gpu")
        assert gpu.status == "fail"
        assert (
            gpu.summary == "driver 470.57.02 cannot drive NVIDIA H200, sm_90: it needs ≥ 520.61.05"
        )
        assert (
            gpu.fix == "upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (NVIDIA H200, sm_90)"
        )
        assert not any("--cuda 11" in (c.fix or "") for c in checks), [c.fix for c in checks]
    cpu = check_by_id(run_checks(h, cpu_env), "cpu-torch-on-gpu-host")
    assert cpu.fix.startswith("upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU")
    assert "pip install" not in cpu.fix
    # an A100 on the same driver is driven: the fix is the CUDA the driver runs
    a100 = host("470.57.02", ["NVIDIA A100-SXM4-80GB"], "8.0")
    checks = run_checks(a100, cuda_env)
    assert check_by_id(checks, "driver-vs-gpu").status == "ok"
    assert "--cuda 11.8" in check_by_id(checks, "driver-vs-torch-cuda").fix
