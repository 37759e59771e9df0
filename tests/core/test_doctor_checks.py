"""Unit tests of the pure doctor checks: each check's verdict and fix on the facts that trigger it."""

from __future__ import annotations

import pytest

from envtool.core.checks import (
    Check,
    check_by_id,
    check_cuda_available,
    check_cuda_visible_devices,
    check_deep_allreduce,
    check_deep_matmul,
    check_dev_shm,
    check_driver_vs_gpu,
    check_gpu_arch_covered,
    check_install_state,
    check_ld_library_path,
    check_lock_drift,
    check_mig,
    check_minor_version_compat,
    check_nvcc_vs_torch,
    check_nvidia_driver,
    check_torch_present,
    headline,
    overall,
    pick_cuda_for_driver,
    run_checks,
    run_deep_checks,
    torch_cuda,
    torch_is_cpu_build,
)
from envtool.core.facts import EnvFacts, GpuFacts, HostFacts, TorchFacts


def gpus(n: int, name: str = "NVIDIA H100 80GB HBM3", cap: str = "9.0", **kw) -> list[GpuFacts]:
    return [
        GpuFacts(index=i, name=name, capability=cap, uuid=f"GPU-{i:08x}", **kw) for i in range(n)
    ]


def cuda_env(version="2.5.1+cu124", cuda="12.4", **kw) -> EnvFacts:
    return EnvFacts(
        python_exe="/envs/x/bin/python",
        prefix="/envs/x",
        torch=TorchFacts(version=version, cuda=cuda, **kw),
    )


H100 = HostFacts(driver_version="550.54.14", driver_cuda="12.4", gpus=gpus(2))


# ----------------------------------------------------------------- derived facts


@pytest.mark.parametrize(
    ("torch", "conda", "cpu", "cuda"),
    [
        (TorchFacts(version="2.3.1+cu121", cuda="12.1"), {}, False, "12.1"),
        (TorchFacts(version="2.13.0+cpu", cuda=None), {}, True, None),
        (TorchFacts(version="2.2.2", cuda=None), {}, True, None),  # Windows CPU wheel
        (
            None,
            {"pytorch": {"version": "2.7.1", "build": "cuda126_mkl_py312_h1a2b3c_300"}},
            False,
            "12.6",
        ),
        (None, {"pytorch": {"version": "2.10.0", "build": "cpu_mkl_py312_h0_100"}}, True, None),
        (None, {"pytorch": {"version": "1.4.0", "build": "py3.7_cpu_0"}}, True, None),
        (None, {"pytorch": {"version": "1.3.1", "build": "cuda100py37h53c1284_0"}}, False, "10.0"),
        (None, {}, None, None),
    ],
)
def test_cpu_build_and_cuda_detection(torch, conda, cpu, cuda):
    env = EnvFacts(torch=torch, conda_packages=conda)
    assert torch_is_cpu_build(env) is cpu
    assert torch_cuda(env) == cuda


def test_pick_cuda_for_driver_uses_minor_version_compat_and_torch_builds():
    env = cuda_env()
    assert pick_cuda_for_driver(HostFacts(driver_version="470.182.03"), env) == "11.8"
    assert pick_cuda_for_driver(HostFacts(driver_version="535.54.03"), env) == "12.9"
    # CUDA 10.0 is the best a 410 driver runs, and no torch in the table was built for it
    assert pick_cuda_for_driver(HostFacts(driver_version="410.104"), env) is None


# ----------------------------------------------------------------- single checks


def test_torch_present_reports_probe_timeout_and_import_error():
    timeout = EnvFacts(python_exe="/p/bin/python", status="timeout", error="did not finish in 120s")
    c = check_torch_present(HostFacts(), timeout)
    assert c.status == "fail" and "timed out" in c.summary
    assert "did not finish in 120s" in c.evidence
    broken = EnvFacts(torch_import_error="ImportError: libcudnn.so.9: cannot open shared object")
    c = check_torch_present(HostFacts(), broken)
    assert c.status == "fail" and "not importable" in c.summary
    assert any("libcudnn" in e for e in c.evidence)
    assert "envtool create" in c.fix


def test_a_broken_env_envtool_installed_is_repaired_from_its_lock_not_created_anew():
    """A file deleted from an installed package: the fix was `create --cuda auto`, which plans
    anew and rewrites environment.yml; installing the recorded lock again relinks it."""
    lock = "/p/environments/o1/conda-lock.yml"
    broken = EnvFacts(
        name="o1",
        torch_import_error="ModuleNotFoundError: No module named 'torch'",
        install_state="complete",
        install_lock=lock,
    )
    c = check_torch_present(HostFacts(), broken)
    assert c.status == "fail" and c.fix.startswith(f"envtool install o1 --lock {lock}")
    assert "envtool verify o1" in c.fix and "create" not in c.fix
    gone = EnvFacts(name="o2", status="no-python", install_state="complete", install_lock=lock)
    assert check_torch_present(HostFacts(), gone).fix.startswith("envtool install o2 --lock")
    # an import error a reinstall does not fix (a missing driver library): the old hint stays
    lib = EnvFacts(
        name="o1",
        torch_import_error="ImportError: libcuda.so.1: cannot open shared object file",
        install_state="complete",
        install_lock=lock,
    )
    assert "envtool install" not in check_torch_present(HostFacts(), lib).fix
    nothing = EnvFacts(prefix="/tmp", status="no-python")
    assert (
        "/tmp holds no python (is it an environment?)"
        == check_torch_present(HostFacts(), nothing).summary
    )


def test_minor_version_compat_warns_with_the_native_floor():
    host = HostFacts(driver_version="530.30.02", gpus=gpus(1))
    c = check_minor_version_compat(host, cuda_env("2.6.0+cu126", "12.6"))
    assert c.status == "warn" and "minor-version compatibility" in c.summary
    assert c.fix == "upgrade the NVIDIA driver to ≥ 560.28.03"
    assert check_minor_version_compat(H100, cuda_env()).status == "ok"


def test_blackwell_gpu_on_cu124_build_has_no_kernels():
    host = HostFacts(
        driver_version="575.51.03",
        gpus=[GpuFacts(index=0, name="NVIDIA GeForce RTX 5090", capability="12.0")],
    )
    c = check_gpu_arch_covered(host, cuda_env("2.5.1+cu124", "12.4"))
    assert c.status == "fail"
    assert "RTX 5090" in c.summary and "no kernel image" in c.summary
    assert c.fix == "envtool create NAME --cuda 12.9"


def test_the_table_fallback_asks_for_the_envs_own_flavor():
    """Without torch's own arch list: a conda-forge pytorch is judged by conda-forge's list (CUDA
    12.6: 9.0+PTX, so an RTX 5090 runs it through PTX), a PyPI wheel by PyTorch's (no PTX)."""
    host = HostFacts(
        driver_version="575.51.03",
        gpus=[GpuFacts(index=0, name="NVIDIA GeForce RTX 5090", capability="12.0")],
    )
    build = {"version": "2.7.1", "build": "cuda126_mkl_py312_h30b5a27_300"}
    cf = EnvFacts(
        python_exe="/envs/x/bin/python",
        prefix="/envs/x",
        torch=TorchFacts(version="2.7.1", cuda="12.6"),
        conda_packages={"pytorch": {**build, "channel": "conda-forge"}},
    )
    c = check_gpu_arch_covered(host, cf)
    assert c.status == "ok" and "conda-forge CUDA 12.6 builds" in c.evidence[0], c
    assert "compute_90" in c.evidence[0]
    wheel = cuda_env("2.7.1+cu126", "12.6")
    c = check_gpu_arch_covered(host, wheel)
    assert c.status == "fail" and "official CUDA 12.6 builds" in c.evidence[0]


def test_arch_list_from_probe_beats_the_table():
    # a source build for sm_80 only, on an H100: the probe's arch list is what counts
    env = cuda_env("2.5.0a0+git", "12.4", arch_list=["sm_80"])
    c = check_gpu_arch_covered(H100, env)
    assert c.status == "fail" and "torch.cuda.get_arch_list()" in c.evidence[0]
    env.torch.arch_list = ["sm_80", "compute_80"]  # PTX JIT covers newer GPUs
    assert check_gpu_arch_covered(H100, env).status == "ok"


@pytest.mark.parametrize(
    ("cvd", "status", "needle"),
    [
        (None, "ok", "not set"),
        ("", "fail", "hides all 2"),
        ("-1", "fail", "hides all 2"),
        ("7", "fail", "do not exist: 7"),
        ("0,1", "ok", "selects 2 of 2"),
        ("GPU-00000001", "ok", "selects 1"),
        ("GPU-deadbeef", "fail", "GPU-deadbeef"),
    ],
)
def test_cuda_visible_devices(cvd, status, needle):
    host = HostFacts(driver_version="550.54.14", gpus=gpus(2), cuda_visible_devices=cvd)
    c = check_cuda_visible_devices(host, cuda_env())
    assert c.status == status and needle in c.summary
    if status == "fail":
        assert "unset CUDA_VISIBLE_DEVICES" in c.fix


def test_ld_library_path_shadowing_warns_and_fails_when_cuda_is_broken():
    host = HostFacts(
        driver_version="550.54.14",
        gpus=gpus(1),
        ld_library_hits=["/usr/local/cuda-11.8/lib64/libcudart.so.11.0"],
    )
    env = cuda_env(is_available=True)
    c = check_ld_library_path(host, env)
    assert c.status == "warn" and "/usr/local/cuda-11.8/lib64" in c.summary
    assert "unset LD_LIBRARY_PATH" in c.fix
    env.torch.is_available = False
    assert check_ld_library_path(host, env).status == "fail"
    # the environment's own lib dir on LD_LIBRARY_PATH is fine, and so is the driver's libcuda
    # (NVIDIA's container images set LD_LIBRARY_PATH=/usr/local/nvidia/lib64 for it)
    fine = HostFacts(
        ld_library_hits=["/envs/x/lib/libcudart.so.12", "/usr/local/nvidia/lib64/libcuda.so.1"]
    )
    assert check_ld_library_path(fine, cuda_env()).status == "ok"


def test_nvcc_major_mismatch_breaks_extension_builds():
    host = HostFacts(nvcc_version="11.8", cuda_home="/usr/local/cuda-11.8")
    c = check_nvcc_vs_torch(host, cuda_env("2.5.1+cu124", "12.4"))
    assert c.status == "warn" and "11.8" in c.summary and "12.4" in c.summary
    assert "cuda-nvcc=12.4" in c.fix
    assert check_nvcc_vs_torch(HostFacts(nvcc_version="12.6"), cuda_env()).status == "ok"


def test_small_dev_shm_on_multi_gpu_host():
    host = HostFacts(gpus=gpus(4), shm_bytes=64 << 20)  # Docker's default 64 MiB
    c = check_dev_shm(host, cuda_env())
    assert c.status == "warn" and "64 MiB" in c.summary and "--ipc=host" in c.fix
    assert check_dev_shm(HostFacts(gpus=gpus(1), shm_bytes=64 << 20), cuda_env()).status == "ok"


def test_mig_enabled():
    host = HostFacts(gpus=gpus(1, mig_enabled=True, mig_devices=7))
    c = check_mig(host, cuda_env())
    assert c.status == "warn" and "one MIG instance" in c.summary and "MIG UUID" in c.fix


def test_install_state_and_lock_drift_skip_when_unknown():
    env = cuda_env()
    assert check_install_state(H100, env).status == "skip"
    assert check_lock_drift(H100, env).status == "skip"
    env.install_state = "incomplete"
    # the shape envtool.adapters.install.installed.compute_drift returns
    env.drift = {
        "clean": False,
        "missing": [],
        "extra": [{"name": "torch", "manager": "pip", "installed": "torch 2.4.0"}],
        "changed": [
            {
                "name": "pytorch",
                "manager": "conda",
                "locked": "2.5.1 cuda124_h0",
                "installed": "2.5.0 cuda124_h0",
            }
        ],
        "lock_path": "/envs/x/conda-lock.yml",
    }
    env.install_lock = "/envs/x/conda-lock.yml"
    c = check_install_state(H100, env)
    # the env is known by its prefix here: the fix installs the recorded lock into it
    assert c.status == "fail"
    assert c.fix == f"envtool install --lock /envs/x/conda-lock.yml --prefix {env.prefix}"
    env.name = "x"  # `doctor x`: by name
    assert check_install_state(H100, env).fix == "envtool install x --lock /envs/x/conda-lock.yml"
    c = check_lock_drift(H100, env)
    assert c.status == "fail" and "envtool verify x" in c.fix
    assert c.fix.startswith("envtool install x --lock /envs/x/conda-lock.yml")
    assert "1 changed, 1 extra" in c.summary
    assert (
        "changed: conda pytorch (locked 2.5.1 cuda124_h0) (installed 2.5.0 cuda124_h0)"
        in c.evidence
    )
    env.install_state, env.drift = (
        "complete",
        {"clean": True, "missing": [], "extra": [], "changed": []},
    )
    assert check_install_state(H100, env).status == "ok"
    assert check_lock_drift(H100, env).status == "ok"


def test_cuda_unavailable_with_a_good_driver_fails_with_torchs_message():
    env = cuda_env(
        is_available=False,
        available_message="CUDA unknown error - this may be due to an incorrectly set up environment",
    )
    c = check_cuda_available(H100, env)
    assert c.status == "fail" and "CUDA unknown error" in c.summary


def test_cuda_unavailable_explained_by_hidden_gpus_is_not_a_second_failure():
    host = HostFacts(driver_version="550.54.14", gpus=gpus(2), cuda_visible_devices="")
    env = cuda_env(is_available=False, device_count=0)
    checks = run_checks(host, env)
    assert [c.id for c in checks if c.status == "fail"] == ["cuda-visible-devices"]
    assert headline(checks).startswith('CUDA_VISIBLE_DEVICES=""')


def test_hung_driver_is_the_verdict_with_the_fix_and_the_torch_time_out_is_its_symptom():
    # What the probe records when NVML never answers: /proc named the version, nvidia-smi skipped.
    host = HostFacts(
        driver_version="580.159.04",
        driver_cuda="13.0",
        source="proc",
        driver_hung=True,
        probe_errors=[
            "NVML: no answer in 10 s — the driver looks hung",
            "nvidia-smi: not run (it would block on the same hung driver)",
        ],
    )
    # torch's CUDA init blocks on the same driver, so the env probe times out too.
    env = EnvFacts(
        python_exe="/envs/x/bin/python",
        prefix="/envs/x",
        status="timeout",
        error="/envs/x/bin/python did not finish the probe in 120s",
    )
    checks = run_checks(host, env)
    assert [c.id for c in checks if c.status == "fail"] == ["nvidia-driver"]
    assert headline(checks) == check_by_id(checks, "nvidia-driver").summary
    driver = check_nvidia_driver(host, env)
    assert "not answering" in driver.summary
    assert "NVML: no answer in 10 s — the driver looks hung" in driver.evidence
    assert "dmesg | grep -i xid" in driver.fix and "nvidia-smi -r" in driver.fix
    assert "reboot" in driver.fix
    assert check_by_id(checks, "torch-present").status == "skip"
    # The same driver answering: the time-out is torch-present's own failure, as before.
    healthy = HostFacts(driver_version="580.159.04", driver_cuda="13.0", source="nvml")
    assert check_nvidia_driver(healthy, env).status == "ok"
    assert check_torch_present(healthy, env).status == "fail"


# ----------------------------------------------------------------- run_checks / overall


def test_checks_never_raise_on_odd_facts():
    host = HostFacts(driver_version="garbage", driver_cuda="x", gpus=[GpuFacts(0, "?", "weird")])
    env = EnvFacts(torch=TorchFacts(version="not-a-version", cuda="??", arch_list=["bogus"]))
    checks = run_checks(host, env)
    assert all(isinstance(c, Check) for c in checks)
    assert len({c.id for c in checks}) == len(checks)
    assert {c.status for c in checks} <= {"ok", "warn", "fail", "skip"}


def test_overall_and_ids_are_stable():
    checks = run_checks(H100, cuda_env(is_available=True, device_count=2))
    assert overall(checks) == "ok"
    # causes before symptoms: the GPU's own driver limits and its architecture come before the
    # driver-vs-CUDA check (no driver adds kernels to a build)
    assert [c.id for c in checks][:6] == [
        "install-state",
        "torch-present",
        "nvidia-driver",
        "driver-vs-gpu",
        "gpu-arch-covered",
        "driver-vs-torch-cuda",
    ]
    assert all(c.id == c.id.lower() and " " not in c.id for c in checks)
    assert overall([Check("a", "warn", "", []), Check("b", "skip", "", [])]) == "warn"
    assert overall([Check("a", "warn", "", []), Check("b", "fail", "", [])]) == "fail"
    assert check_by_id(checks, "nope") is None


# ----------------------------------------------------------------- --deep results

ALLREDUCE_OK = {
    "world_size": 2,
    "backend": "nccl",
    "nccl": "2.28.9",
    "sum_exact": True,
    "sizes": [
        {"size_mib": 1, "exact": True, "time_us": 30.0, "algbw_gbps": 35.0, "busbw_gbps": 35.0},
        {
            "size_mib": 256,
            "exact": True,
            "time_us": 900.0,
            "algbw_gbps": 298.3,
            "busbw_gbps": 298.3,
        },
    ],
}


def test_deep_checks_report_busbw_and_catch_wrong_sums():
    deep = {
        "matmul": {
            "results": [
                {
                    "device": "cuda:0",
                    "dtype": "float32",
                    "rel_error": 1e-6,
                    "ok": True,
                    "tflops": 50.1,
                }
            ]
        },
        "allreduce": ALLREDUCE_OK,
    }
    mm, ar = run_deep_checks(deep)
    assert mm.status == "ok" and "50.1 TFLOP/s" in mm.evidence[0]
    assert ar.status == "ok" and "298.3 GB/s at 256 MiB" in ar.summary
    assert ar.evidence["busbw_gbps"] == {"1 MiB": 35.0, "256 MiB": 298.3}
    bad = dict(ALLREDUCE_OK, sum_exact=False, sizes=[dict(ALLREDUCE_OK["sizes"][0], exact=False)])
    c = check_deep_allreduce({"allreduce": bad})
    assert c.status == "fail" and "wrong sums at 1 MiB" in c.summary


def test_deep_matmul_catches_wrong_results_and_crashes():
    rows = [
        {"device": "cuda:1", "dtype": "bfloat16", "rel_error": 0.7, "tolerance": 0.01, "ok": False}
    ]
    c = check_deep_matmul({"matmul": {"results": rows}})
    assert c.status == "fail" and "cuda:1" in c.summary and "7.00e-01" in c.summary
    c = check_deep_matmul(
        {"matmul": {"error": "matmul exited 1: RuntimeError: CUDA error: an illegal memory access"}}
    )
    assert c.status == "fail" and "illegal memory access" in c.summary
    c = check_deep_allreduce(
        {"allreduce": {"error": "all-reduce timed out (a hang in NCCL init or a collective)"}}
    )
    assert c.status == "fail" and "timed out" in c.summary


def test_deep_matmul_reports_a_gpu_whose_matmul_raised():
    """deep_script records a GPU whose matmul raised as {device, dtype, ok: False, error} with no
    rel_error: the check must report it, not crash formatting the missing number."""
    rows = [
        {"device": "cuda:0", "dtype": "bfloat16", "rel_error": 1e-3, "ok": True, "tflops": 700.0},
        {
            "device": "cuda:1",
            "dtype": "bfloat16",
            "ok": False,
            "error": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        },
    ]
    c = check_deep_matmul({"matmul": {"results": rows}})
    assert c.status == "fail" and "cuda:1" in c.summary and "ECC" in c.summary
    assert any("cuda:1 bfloat16: RuntimeError" in line for line in c.evidence)


def test_deep_skips_without_gpus():
    checks = run_deep_checks(
        {"matmul": None, "allreduce": None, "skipped": "no GPU visible to torch"}
    )
    assert [c.status for c in checks] == ["skip", "skip"]
    assert run_deep_checks(None) == []


def test_kepler_gpu_gets_the_newest_cuda_that_still_builds_sm_37():
    host = HostFacts(
        driver_version="470.82.01", gpus=[GpuFacts(index=0, name="Tesla K80", capability="3.7")]
    )
    env = cuda_env("2.1.0+cu121", "12.1")
    c = check_gpu_arch_covered(host, env)
    assert c.status == "fail" and "Tesla K80" in c.summary
    # 11.8 builds still run a K80 (R470 runs 11.8 through minor-version compatibility):
    # PyTorch's cu118 wheels carry sm_37, conda-forge's sm_35
    assert c.fix == "envtool create NAME --cuda 11.8"
    assert pick_cuda_for_driver(host, env) == "11.8"
    # architecture before driver: the headline is the missing kernels, and the driver check's
    # fix is the same CUDA, never "upgrade the driver" (no driver runs cu121 on a K80)
    checks = run_checks(host, env)
    assert headline(checks) == c.summary
    drv = check_by_id(checks, "driver-vs-torch-cuda")
    assert drv.status == "fail" and "--cuda 11.8" in drv.fix
    assert not drv.fix.startswith("upgrade")
    # a K80 on R535 cannot be: R470 is Kepler's last branch
    impossible = HostFacts(driver_version="535.54.03", gpus=host.gpus)
    ceiling = check_driver_vs_gpu(impossible, env)
    assert (
        ceiling.status == "fail" and "R470 is the last driver branch for Kepler" in ceiling.summary
    )
    assert "install an R470 driver" in ceiling.fix and "--cuda 11.8" in ceiling.fix


def test_pip_cuda_wheel_over_conda_cpu_build_is_judged_by_what_python_imports():
    env = cuda_env(
        "2.4.1+cu121",
        "12.1",
        is_available=True,
        path="/envs/x/lib/python3.11/site-packages/torch/__init__.py",
    )
    env.conda_packages = {
        "pytorch": {"version": "2.4.1", "build": "py3.11_cpu_0"},
        "cpuonly": {"version": "2.0", "build": "0"},
    }
    env.pip_torch = [
        {
            "name": "torch",
            "version": "2.4.1+cu121",
            "installer": "pip",
            "location": "/envs/x/lib/python3.11/site-packages",
        }
    ]
    checks = run_checks(HostFacts(driver_version="550.54.14", gpus=gpus(1)), env)
    assert check_by_id(checks, "cpu-torch-on-gpu-host").status == "ok"
    two = check_by_id(checks, "two-torch-installs")
    assert two.status == "fail" and "python imports 2.4.1+cu121" in two.summary
    assert "conda remove --force pytorch" in two.fix and "pip uninstall" not in two.fix
