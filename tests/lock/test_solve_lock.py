"""Real rattler solves on real harvested repodata, locked through conda-lock's writer.

The fixture channels are solve-only (no package files): everything here plans, solves, verifies
and locks; nothing installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import envtool_argv
from solve_scenarios import LEGACY_CHANNELS, channel_flags, scenarios

from envtool.core.plan import PlatformPlan
from envtool.core.verify_solution import verify_solution

pytestmark = pytest.mark.integration

LINUX_VP = (
    ("__archspec", "1", "x86_64"),
    ("__glibc", "2.28", "0"),
    ("__linux", "5.10", "0"),
    ("__unix", "0", "0"),
)


@pytest.fixture
def create(harvested, run_cli, tmp_path):
    """`envtool create NAME --no-install` with a scenario's flags (solve_scenarios.py), in cwd."""

    def run(name: str, scenario: str, *extra: str, cwd: Path | None = None):
        args = ["create", name, "--no-install", *scenarios(harvested)[scenario], *extra]
        return run_cli(args, cwd or tmp_path)

    return run


def naive_plan(cuda: str, *specs: str) -> PlatformPlan:
    """A linux-64 GPU request as a plain solver sees it: the specs, none of envtool's pins."""
    return PlatformPlan("linux-64", cuda, specs, (), (*LINUX_VP, ("__cuda", cuda, "0")))


def read_lock(env_dir: Path) -> dict:
    return yaml.safe_load((env_dir / "conda-lock.yml").read_text())


def pkgs(lock: dict, platform: str = "linux-64") -> dict[str, dict]:
    return {
        p["name"]: p
        for p in lock["package"]
        if p["platform"] == platform and p["manager"] == "conda"
    }


def test_bare_pytorch_plus_cuda_version_silently_falls_back_to_cpu(harvested) -> None:
    """The solver trap envtool exists to avoid, reproduced on real metadata — and caught."""
    from envtool.adapters.solve.rattler_solve import solve_platforms

    naive = naive_plan("12.6", "pytorch", "cuda-version 12.6.*")
    solved = solve_platforms([str(harvested / "conda-forge")], [naive])["linux-64"]
    torch = next(p for p in solved if p.name == "pytorch")
    assert torch.version == "2.10.0" and torch.build.startswith("cpu_")
    problems = verify_solution(naive, solved)
    assert [p.check for p in problems] == ["cuda-build"]
    assert "not a CUDA build" in problems[0].message


def test_conda_forge_cuda_126_locks_a_cuda126_build(create, tmp_path) -> None:
    rc, out, err = create("gpu", "conda-forge-cuda12.6")
    assert rc == 0, err
    lock = read_lock(tmp_path / "environments" / "gpu")
    got = pkgs(lock)
    assert got["pytorch"]["build"].startswith("cuda126")
    assert got["cuda-version"]["version"] == "12.6"
    meta = lock["metadata"]["custom_metadata"]
    assert meta["envtool_cuda"] == "12.6" and meta["envtool_min_driver"] == "560.28.03"
    assert meta["envtool_torch"] == got["pytorch"]["version"]
    assert "sm_90" in meta["envtool_gpu_archs"]
    assert meta["envtool_flavor"] == "conda-forge"
    assert lock["version"] == 1 and "time_metadata" not in lock["metadata"]
    yml = (tmp_path / "environments" / "gpu" / "environment.yml").read_text()
    assert "pytorch=*=cuda126*" in yml and "cuda-version=12.6.*" in yml


def test_conda_forge_cpu_locks_the_cpu_build(create, tmp_path) -> None:
    rc, _, err = create("cpu", "conda-forge-cpu")
    assert rc == 0, err
    got = pkgs(read_lock(tmp_path / "environments" / "cpu"))
    assert got["pytorch"]["build"].startswith("cpu_")
    assert not {"cuda-version", "cudatoolkit", "cuda-cudart"} & set(got)


def test_driver_470_auto_gets_cuda118_with_cudatoolkit_and_a_warning(
    harvested, run_cli, tmp_path
) -> None:
    rc, _, err = run_cli(
        [
            "create",
            "old",
            "--no-install",
            "--driver",
            "470.182.03",
            "--gpu",
            "8.0",
            *channel_flags(harvested),
            "--profile",
            "ddp",
        ],
        tmp_path,
    )
    assert rc == 0, err
    assert "minor-version compatibility" in err
    got = pkgs(read_lock(tmp_path / "environments" / "old"))
    assert got["pytorch"]["version"] == "2.0.0" and got["pytorch"]["build"].startswith("cuda118")
    assert got["cudatoolkit"]["version"].startswith("11.8")


def test_legacy_pytorch_cuda_121_locks_one_cuda_version(create, tmp_path) -> None:
    rc, _, err = create("legacy", "legacy-pytorch-cuda12.1")
    assert rc == 0, err
    got = pkgs(read_lock(tmp_path / "environments" / "legacy"))
    assert got["pytorch"]["version"] == "2.3.1" and "cuda12.1" in got["pytorch"]["build"]
    assert got["pytorch-cuda"]["version"] == "12.1"
    names = ("cuda-version", "cuda-cudart", "cuda-runtime", "cuda-nvrtc")
    cuda_parts = {name: got[name]["version"] for name in names if name in got}
    assert cuda_parts, "the lock holds none of the CUDA runtime packages"
    for name, version in cuda_parts.items():
        assert version.startswith("12.1"), (name, version)


def test_legacy_solve_without_envtool_pins_mixes_cuda_and_verifier_catches_it(harvested) -> None:
    from envtool.adapters.solve.rattler_solve import solve_platforms

    naive = naive_plan("12.1", "pytorch", "pytorch-cuda 12.1.*")
    channels = [str(harvested / c) for c in LEGACY_CHANNELS]
    solved = solve_platforms(channels, [naive])["linux-64"]
    by = {p.name: p for p in solved}
    assert by["cuda-version"].version == "12.6" and by["pytorch-cuda"].version == "12.1"
    problems = verify_solution(naive, solved)
    assert [p.check for p in problems] == ["one-cuda"]
    assert "CUDA 12.1" in problems[0].message and "cuda-version 12.6" in problems[0].message


def test_lock_is_deterministic(create, run_cli, tmp_path) -> None:
    platforms = ("--platform", "linux-64", "--platform", "osx-arm64")
    assert create("det", "conda-forge-cuda12.6", *platforms)[0] == 0
    lock = tmp_path / "environments" / "det" / "conda-lock.yml"
    first = lock.read_bytes()
    assert run_cli(["lock", "det", "--force"], tmp_path)[0] == 0
    assert lock.read_bytes() == first
    other = tmp_path / "again"
    other.mkdir()
    assert create("det", "conda-forge-cuda12.6", *platforms, cwd=other)[0] == 0
    assert (other / "environments" / "det" / "conda-lock.yml").read_bytes() == first
    data = yaml.safe_load(first)
    assert sorted(data["metadata"]["platforms"]) == ["linux-64", "osx-arm64"]
    assert pkgs(data, "osx-arm64")["pytorch"]["build"].startswith("cpu")


def test_relock_is_a_noop_until_an_input_changes(create, run_cli, tmp_path) -> None:
    assert create("n", "conda-forge-cpu")[0] == 0
    env_dir = tmp_path / "environments" / "n"
    lock = env_dir / "conda-lock.yml"
    before = lock.stat().st_mtime_ns
    rc, out, _ = run_cli(["lock", "n"], tmp_path)
    assert rc == 0 and "up to date" in out and lock.stat().st_mtime_ns == before
    assert run_cli(["lock", "n", "--check"], tmp_path)[0] == 0
    yml = env_dir / "environment.yml"
    yml.write_text(yml.read_text().replace("  - pip\n", "  - pip\n  - numpy\n", 1))
    rc, _, err = run_cli(["lock", "n", "--check"], tmp_path)
    assert rc == 1 and "stale" in err
    edited = yml.read_bytes()
    rc, out, _ = run_cli(["lock", "n"], tmp_path)
    assert rc == 0 and "wrote" in out
    # lock re-solves the request and says so: it never rewrites the user's environment.yml
    assert "environment.yml" not in out.splitlines()[-1] and yml.read_bytes() == edited
    assert "numpy" in pkgs(read_lock(env_dir))
    assert run_cli(["lock", "n", "--check"], tmp_path)[0] == 0


def test_noop_relock_does_not_import_the_solver(create, tmp_path) -> None:
    """The no-op answers from the stored digest: no solver, no YAML parser, not the lock
    workflow nor the plan model, nor click: a plain `envtool lock NAME` is answered before the
    CLI is built (each import is paid by every `envtool lock` that finds nothing to do)."""
    assert create("q", "conda-forge-cpu")[0] == 0
    heavy = (
        "click",
        "rattler",
        "conda_lock",
        "yaml",
        "envtool.workflows.lock",
        "envtool.core.plan",
        "envtool.core.request",
    )
    code = (
        "import sys\nfrom envtool.cli import main\n"
        "try:\n    main(['lock', 'q'])\nexcept SystemExit as e:\n    rc = e.code\n"
        f"print('HEAVY', [m for m in {heavy!r} if m in sys.modules], rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert "HEAVY [] 0" in out.stdout, out.stdout + out.stderr


def test_the_noop_answered_before_click_says_what_the_lock_command_says(create, tmp_path) -> None:
    """The same Result through the same renderer: `envtool lock q` (answered before click) and
    `envtool --no-color lock q` (the click command: a flag makes it the long way)."""
    assert create("q", "conda-forge-cpu")[0] == 0
    env = {**os.environ, "NO_COLOR": "1"}
    fast, slow = (
        subprocess.run(
            [*envtool_argv(), *args], cwd=tmp_path, capture_output=True, text=True, env=env
        )
        for args in (["lock", "q"], ["--no-color", "lock", "q"])
    )
    assert fast.returncode == slow.returncode == 0, fast.stderr + slow.stderr
    assert (fast.stdout, fast.stderr) == (slow.stdout, slow.stderr)
    assert fast.stdout == f"q: lock is up to date ({Path('environments/q/conda-lock.yml')})\n"
    # a stale or edited lock, or a bad name, is the lock command's to handle, as before
    lock = tmp_path / "environments" / "q" / "conda-lock.yml"
    lock.write_text(lock.read_text() + "# edited by hand\n")
    edited = subprocess.run(
        [*envtool_argv(), "lock", "q"], cwd=tmp_path, capture_output=True, text=True
    )
    assert edited.returncode == 0 and "wrote" in edited.stdout, edited.stderr
    bad = subprocess.run(
        [*envtool_argv(), "lock", "../q"], cwd=tmp_path, capture_output=True, text=True
    )
    assert (
        bad.returncode == 2
        and bad.stderr.startswith("envtool: error:")
        and "Traceback" not in bad.stderr
    )


def test_a_gone_reader_or_a_closed_stdout_is_no_traceback_on_either_path(create, tmp_path) -> None:
    """`envtool lock q | head -0` (the reader gone: exit 1, quietly, as click does) and a
    process started with stdout closed (`>&-`, a daemon: exit 0), answered before click or by
    the click command alike."""
    assert create("q", "conda-forge-cpu")[0] == 0
    for args in (["lock", "q"], ["--no-color", "lock", "q"]):
        read, write = os.pipe()
        os.close(read)
        gone = subprocess.run(
            [*envtool_argv(), *args], cwd=tmp_path, stdout=write, stderr=subprocess.PIPE, text=True
        )
        os.close(write)
        assert (gone.returncode, gone.stderr) == (1, ""), args
        closed = subprocess.run(
            [*envtool_argv(), *args],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: os.close(1),  # noqa: PLW1509 (the test's own child, no threads)
        )
        assert (closed.returncode, closed.stderr) == (0, ""), args


def test_failed_solve_leaves_previous_files_untouched(create, tmp_path) -> None:
    assert create("keep", "conda-forge-cpu")[0] == 0
    env_dir = tmp_path / "environments" / "keep"
    before = {p.name: p.read_bytes() for p in env_dir.iterdir()}
    rc, _, err = create("keep", "conda-forge-cpu", "--python", "3.5")
    assert rc == 2 and "no solution for linux-64" in err
    assert {p.name: p.read_bytes() for p in env_dir.iterdir()} == before


def test_lock_reads_back_with_conda_lock_render_and_rattler(create, tmp_path) -> None:
    assert create("rb", "legacy-pytorch-cuda12.1")[0] == 0
    lock_path = tmp_path / "environments" / "rb" / "conda-lock.yml"

    from conda_lock.lockfile import parse_conda_lock_file

    parsed = parse_conda_lock_file(lock_path)
    assert any(p.name == "pytorch" and "cuda12.1" in (p.build or "") for p in parsed.package)

    conda_lock = Path(sys.executable).parent / "conda-lock"
    if not conda_lock.exists():
        conda_lock = Path(shutil.which("conda-lock") or "conda-lock")
    proc = subprocess.run(
        [str(conda_lock), "render", "-k", "explicit", "--platform", "linux-64", str(lock_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    explicit = (tmp_path / "conda-linux-64.lock").read_text()
    assert "@EXPLICIT" in explicit
    assert "pytorch/linux-64/pytorch-2.3.1-py3.11_cuda12.1_cudnn8.9.2_0.tar.bz2#" in explicit

    from rattler import LockFile

    env = LockFile.from_path(lock_path).default_environment()
    (platform,) = env.platforms()
    records = env.conda_repodata_records_for_platform(platform)
    assert any(r.name.normalized == "pytorch" and str(r.version) == "2.3.1" for r in records)


def test_legacy_cpu_with_torch_pin_locks_the_cpu_mutex(harvested, run_cli, tmp_path) -> None:
    rc, _, err = run_cli(
        [
            "create",
            "lcpu",
            "--no-install",
            "--flavor",
            "pytorch",
            "--cuda",
            "cpu",
            "--torch",
            "2.2",
            "--python",
            "3.11",
            *channel_flags(harvested, LEGACY_CHANNELS),
            "--profile",
            "ddp",
        ],
        tmp_path,
    )
    assert rc == 0, err
    got = pkgs(read_lock(tmp_path / "environments" / "lcpu"))
    assert got["pytorch"]["version"] == "2.2.0" and "cpu" in got["pytorch"]["build"]
    assert got["pytorch-mutex"]["build"] == "cpu"
    assert got["python"]["version"].startswith("3.11")
    assert not {"pytorch-cuda", "cuda-cudart", "cuda-version"} & set(got)


def test_relock_honours_a_torch_pin_edited_into_environment_yml(create, run_cli, tmp_path) -> None:
    assert create("ed", "conda-forge-cuda12.6")[0] == 0
    env_dir = tmp_path / "environments" / "ed"
    assert pkgs(read_lock(env_dir))["pytorch"]["version"] == "2.7.1"
    yml = env_dir / "environment.yml"
    yml.write_text(yml.read_text().replace("pytorch=*=cuda126*", "pytorch=2.6.*=cuda126*"))
    rc, _, err = run_cli(["lock", "ed"], tmp_path)
    assert rc == 0, err
    lock = read_lock(env_dir)
    assert pkgs(lock)["pytorch"]["version"] == "2.6.0"
    assert pkgs(lock)["pytorch"]["build"].startswith("cuda126")
    assert lock["metadata"]["custom_metadata"]["envtool_torch"] == "2.6.0"
    assert "pytorch=2.6.*=cuda126*" in yml.read_text()  # lock never rewrites the request
