"""The files envtool hands to other tools keep the CUDA of the lock (issue 12 item 3): the
environment.yml `create` writes and the one `export` prints are re-solved with rattler at the
lock's `__cuda`, over the same (harvested, real) channels, and their CUDA packages compared to
the lock's. README promises that plain `conda env create -f` asks for the same thing."""

from __future__ import annotations

from pathlib import Path

import pytest
from solve_scenarios import H200, LEGACY_CHANNELS, channel_flags

from envtool.adapters.lockfile.lock_io import read_lock
from envtool.adapters.solve.rattler_solve import solve_platforms
from envtool.core.plan import TOOLKIT_VERSIONED, PlatformPlan
from envtool.core.spec import parse_environment_yml
from envtool.core.versions import cuda_from_build_tag, major_minor

pytestmark = pytest.mark.integration

VIRTUAL = (("__glibc", "2.28", "0"), ("__linux", "5.10", "0"), ("__unix", "0", "0"))


def resolve(text: str, source: str, cuda: str) -> dict[str, tuple[str, str]]:
    """A written/exported environment.yml solved for linux-64 at __cuda=`cuda`, as a solver
    that knows nothing of envtool would: its specs, its channels, nothing else."""
    spec = parse_environment_yml(text, source)
    vps = (*VIRTUAL, ("__archspec", "1", "x86_64"), ("__cuda", cuda, "0"))
    plan = PlatformPlan("linux-64", cuda, tuple(d.render() for d in spec.dependencies), (), vps)
    solved = solve_platforms(spec.channels, [plan])["linux-64"]
    return {p.name: (p.version, p.build) for p in solved}


def cuda_of(packages: dict[str, tuple[str, str]]) -> dict[str, str]:
    """The CUDA each toolkit-versioned package and the pytorch build stand for."""
    out = {n: major_minor(v) for n, (v, _) in packages.items() if n in TOOLKIT_VERSIONED}
    if "pytorch" in packages:
        out["pytorch"] = cuda_from_build_tag(packages["pytorch"][1]) or "cpu"
    return out


def assert_same_cuda(lock_path: Path, files: dict[str, str], cuda: str) -> None:
    lock = read_lock(lock_path).conda("linux-64")
    locked = cuda_of({n: (p.version, p.build) for n, p in lock.items()})
    assert locked["pytorch"] == cuda and set(locked.values()) == {cuda}, locked
    for source, text in files.items():
        got = cuda_of(resolve(text, source, cuda))
        assert set(got.values()) == {cuda}, (source, got)  # no 12.6 next to 12.1, no CPU torch
        for name, value in locked.items():
            assert got.get(name, value) == value, (source, name)


@pytest.mark.parametrize(
    ("name", "flags", "cuda"),
    [
        # legacy pytorch channel: pytorch-cuda=12.1 pulls nvidia-channel 12.x packages; without a
        # cuda-version pin in the written file a re-solve brought cuda-version 12.6 in
        (
            "legacy",
            ["--flavor", "pytorch", "--cuda", "12.1", "--profile", "ddp", *H200],
            "12.1",
        ),
        # two platforms (linux-64 CUDA, osx-arm64 CPU): the default export dropped the cuda126
        # glob and cuda-version (one file cannot say both), so a re-solve took any pytorch
        (
            "two-platforms",
            ["--cuda", "12.6", "--platform", "linux-64", "--platform", "osx-arm64", *H200],
            "12.6",
        ),
    ],
)
def test_written_and_exported_files_resolve_to_the_locked_cuda(
    name, flags, cuda, harvested, run_cli, tmp_path
) -> None:
    channels = LEGACY_CHANNELS if name == "legacy" else ("conda-forge",)
    extra = []
    if name == "two-platforms":  # torch alone: the harvested osx-arm64 has no torchvision here
        (tmp_path / "env.yml").write_text("name: x\ndependencies:\n  - python\n  - pytorch\n")
        extra = ["-f", "env.yml"]
    args = ["create", name, "--no-install", *channel_flags(harvested, channels), *flags, *extra]
    rc, _, err = run_cli(args, tmp_path)
    assert rc == 0, err
    env_dir = tmp_path / "environments" / name
    rc, exported, err = run_cli(["export", name], tmp_path)
    assert rc == 0, err
    files = {
        "environment.yml": (env_dir / "environment.yml").read_text(),
        "export": exported,
    }
    if name == "two-platforms":
        assert "export --platform osx-arm64 for the others" in err
        assert f"pytorch=2.7.1=*cuda{cuda.replace('.', '')}*" in exported
    assert_same_cuda(env_dir / "conda-lock.yml", files, cuda)
