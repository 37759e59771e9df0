"""pixi.lock in: `inspect` over real pixi.lock files from public repositories (tests/fixtures/pixi,
SOURCES.md), and `install --lock pixi.lock --environment NAME` of a pixi.lock written by
py-rattler's own LockFile (the library pixi writes them with) over a channel channel_builder
builds: the host check, the hash-verified install, verify and doctor's drift against it."""

from __future__ import annotations

import json
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import REPO, run_envtool

from envtool.adapters.lockfile.pixi_lock import read_pixi_lock
from envtool.errors import UsageError

PIXI = REPO / "tests" / "fixtures" / "pixi"


def test_inspect_lists_every_environment_and_platform_of_a_real_lock(run_cli) -> None:
    code, out, err = run_cli(
        ["inspect", str(PIXI / "nvidia-gpu-ml-library-test.pixi.lock"), "--json"]
    )
    assert code == 0, err
    rows = {(t["environment"], t["platform"]): t for t in json.loads(out)["targets"]}
    assert len(rows) == 12  # 6 environments × linux-64, osx-arm64
    gpu = rows[("gpu", "linux-64")]
    assert (gpu["torch"], gpu["cuda"], gpu["min_driver"]) == ("2.7.1", "12.9", "575.51.03")
    assert gpu["torch_build"].startswith("cuda129_")
    assert "sm_90" in gpu["gpu_archs"]
    cpu = rows[("cpu", "linux-64")]
    assert (cpu["cuda"], cpu["min_driver"]) == (None, None)
    assert rows[("gpu-jax", "linux-64")]["cuda"] == "12.9"  # no torch: its cuda-version
    assert rows[("gpu-jax", "osx-arm64")]["cuda"] is None  # macOS runs no CUDA


def test_inspect_names_the_cuda_per_platform(run_cli) -> None:
    code, out, err = run_cli(["inspect", str(PIXI / "pytorch-gpu-pixi-example.pixi.lock")])
    assert code == 0, err
    assert "default linux-64: pytorch 2.8.0 cuda129_mkl_py313_h7947483_302 — CUDA 12.9" in out
    assert "default win-64: pytorch 2.8.0 cuda128_mkl_py313_hd1c3b22_302 — CUDA 12.8" in out
    assert "default osx-arm64: pytorch 2.8.0 cpu_generic" in out and "no driver needed" in out


def test_inspect_reads_a_conda_lock_as_a_lock_not_as_an_environment_yml(
    run_cli, fixtures, tmp_path
) -> None:
    """It said "asks for no torch with no CUDA request" of a lock holding a CUDA pytorch (the
    file went to the environment.yml reader, which found no dependencies)."""
    real = fixtures / "locks" / "konstantinjdobler__nlp-research-template__conda-lock.yml"
    renamed = tmp_path / "locked.yml"  # found by its first keys, not only by its name
    renamed.write_bytes(real.read_bytes())
    for path in (real, renamed):
        code, out, err = run_cli(["inspect", str(path), "--json"])
        assert code == 0, err
        data = json.loads(out)
        rows = {t["platform"]: t for t in data["targets"]}
        assert data["kind"] == "conda-lock" and set(rows) == {"linux-64", "osx-arm64", "win-64"}
        assert (rows["linux-64"]["torch"], rows["linux-64"]["cuda"]) == ("2.3.1", "11.8")
        assert rows["osx-arm64"]["cuda"] is None
    code, out, _ = run_cli(["inspect", str(real)])
    assert "linux-64: pytorch 2.3.1 py3.10_cuda11.8_cudnn8.7.0_0 — CUDA 11.8, driver >=" in out


def test_a_real_lock_becomes_envtools_lock_model() -> None:
    pixi = read_pixi_lock(PIXI / "pytorch-gpu-pixi-example.pixi.lock")
    lock = pixi.as_lock("default", "linux-64")
    torch = lock.conda("linux-64")["pytorch"]
    assert torch.version == "2.8.0" and torch.sha256 and len(torch.sha256) == 64
    assert torch.file_name == "pytorch-2.8.0-cuda129_mkl_py313_h7947483_302.conda"
    assert lock.custom_metadata["envtool_cuda"] == "12.9"
    assert str(lock.path).endswith("pytorch-gpu-pixi-example.pixi.lock#environment=default")
    with pytest.raises(UsageError, match="no environment 'gpu'"):
        pixi.as_lock("gpu", "linux-64")
    with pytest.raises(UsageError, match="has no linux-aarch64 solution"):
        pixi.as_lock("default", "linux-aarch64")


def test_hostile_pixi_locks_are_refused_in_one_line(tmp_path: Path) -> None:
    real = (PIXI / "nvidia-gpu-ml-library-test.pixi.lock").read_text()
    cases = {
        "escape.pixi.lock": real.replace("\n  cpu:\n", '\n  "cpu\\e[31m":\n', 1),
        "alias.pixi.lock": "version: 6\nenvironments: &a\n  x: *a\npackages: []\n",
        "conda-lock.pixi.lock": "version: 1\nmetadata: {}\npackage: []\n",
        "dupe.pixi.lock": real.replace("\n  cpu-jax:\n", "\n  cpu:\n", 1),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(UsageError) as exc:
            read_pixi_lock(path)
        assert str(path) in exc.value.message and "\n" not in exc.value.message, name


@pytest.fixture
def pixi_lock(setup: cb.CudaSetup, tmp_path: Path) -> Path:
    """A pixi.lock (py-rattler's writer) with a CUDA 12.6 env `gpu` and a CPU env `cpu`."""
    from rattler import LockFile
    from rattler.lock import LockChannel, LockPlatform

    cpu = cb.solve_records(setup.channel, ["pytorch * cpu*"], cuda=None)
    linux = LockPlatform("linux-64")
    lock = LockFile([linux])
    for env_name, records in (("gpu", setup.records), ("cpu", cpu)):
        lock.set_channels(env_name, [LockChannel(setup.channel.as_uri())])
        for record in records:
            lock.add_conda_package(env_name, linux, record)
    path = tmp_path / "project" / "pixi.lock"
    path.parent.mkdir()
    lock.to_path(str(path))
    return path


@pytest.mark.integration
def test_install_a_pixi_environment_with_the_host_check_verify_and_doctor(
    pixi_lock: Path, env: dict[str, str], tmp_path: Path
) -> None:
    prefix = tmp_path / "envs" / "gpu"
    env["ENVTOOL_DRIVER_VERSION"] = "470.57.02"  # CUDA 11.4's driver: the CUDA 12.6 env refused
    refused = run_envtool(
        "install", "--lock", str(pixi_lock), "--environment", "gpu", "--prefix", str(prefix),
        "--platform", "linux-64", env=env,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "cannot run the locked CUDA 12.6 build" in refused.stderr
    assert not prefix.exists()

    env["ENVTOOL_DRIVER_VERSION"] = "570.86.10"
    out = run_envtool(
        "install", "--lock", str(pixi_lock), "--environment", "gpu", "--prefix", str(prefix),
        "--platform", "linux-64", "--json", env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (prefix / "lib" / "libtorch_cuda.so").read_text() == "stub cuda126 library\n"
    verify = run_envtool("verify", "--prefix", str(prefix), env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    doctor = run_envtool("doctor", "--prefix", str(prefix), "--json", env=env)
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["lock-drift"]["status"] == "ok", checks["lock-drift"]

    # a package deleted from the env: doctor compares it against the pixi.lock environment
    (prefix / "conda-meta").joinpath(
        next(p.name for p in (prefix / "conda-meta").glob("libtorch-*.json"))
    ).unlink()
    doctor = run_envtool("doctor", "--prefix", str(prefix), "--json", env=env)
    drift = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}["lock-drift"]
    assert drift["status"] != "ok" and "libtorch" in json.dumps(drift)

    cpu = run_envtool(
        "install", "--lock", str(pixi_lock), "--environment", "cpu",
        "--prefix", str(tmp_path / "envs" / "cpu"), "--platform", "linux-64", env=env,
    )  # fmt: skip
    assert cpu.returncode == 0, cpu.stderr
    assert (tmp_path / "envs" / "cpu" / "lib" / "libtorch_cpu.so").is_file()

    missing = run_envtool(
        "install", "--lock", str(pixi_lock), "--environment", "jax", "--prefix", str(prefix),
        env=env,
    )  # fmt: skip
    assert missing.returncode == 2 and "pick one of: cpu, gpu" in missing.stderr


@pytest.mark.integration
def test_a_real_pixi_lock_plans_and_is_host_checked(env: dict[str, str], tmp_path: Path) -> None:
    """The real lock's gpu env (pytorch 2.7.1 cuda129): refused on a CUDA 11.4 driver before
    anything is fetched (a 12.x driver runs it: minor-version compatibility); planned
    (--dry-run: no network) on a CUDA 13.0 driver."""
    real = PIXI / "nvidia-gpu-ml-library-test.pixi.lock"
    args = ("install", "--lock", str(real), "--environment", "gpu", "--platform", "linux-64")
    target = ("--prefix", str(tmp_path / "envs" / "gpu"), "--dry-run", "--json")
    env["ENVTOOL_DRIVER_VERSION"] = "470.57.02"
    refused = run_envtool(*args, *target, env=env)
    assert refused.returncode == 2, refused.stderr
    assert "cannot run the locked CUDA 12.9 build" in refused.stderr
    env["ENVTOOL_DRIVER_VERSION"] = "580.65.06"
    planned = run_envtool(*args, *target, env=env)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    rows = {p["name"]: p for p in plan["packages"]}
    assert len(rows) == 120 and rows["pytorch"]["version"] == "2.7.1"
    assert plan["lock_path"].endswith("nvidia-gpu-ml-library-test.pixi.lock#environment=gpu")
    assert not (tmp_path / "envs" / "gpu").exists()
