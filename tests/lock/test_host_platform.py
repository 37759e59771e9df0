"""create and lock default to this host's platform (core/request.choose_platforms), not linux-64:
create installs here, so an aarch64 Linux box or a Mac plans, solves and locks for itself. Real
solves (rattler) over a channel channel_builder builds for linux-64, linux-aarch64 and osx-arm64;
the host is faked where rattler answers for it (`Subdir.current`) or as conda users ask for
another platform (`CONDA_SUBDIR`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import channel_builder as cb
import pytest

from envtool.core.request import choose_platforms
from envtool.errors import UsageError

SUBDIRS = ("linux-64", "linux-aarch64", "osx-arm64")


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """python, python_abi, libtorch and pytorch (CPU and cuda126 builds) for each of SUBDIRS."""
    pkgs = [
        replace(p, subdir=sub) if p.subdir != "noarch" else p
        for sub in SUBDIRS
        for p in cb.cuda_graph()
        if p.subdir != "noarch" or sub == SUBDIRS[0]
    ]
    return cb.build_channel(tmp_path_factory.mktemp("multi") / "channel", pkgs)


@pytest.fixture
def project(tmp_path: Path, channel: Path) -> Path:
    (tmp_path / "env.yml").write_text(
        f"channels:\n  - {channel.as_uri()}\ndependencies:\n  - python\n  - pytorch\n"
    )
    return tmp_path


def _on_host(monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    """This machine, as rattler reports it, is `platform`."""
    from rattler.platform import Subdir

    monkeypatch.delenv("CONDA_SUBDIR", raising=False)
    monkeypatch.setattr(Subdir, "current", staticmethod(lambda: Subdir(platform)))


@pytest.mark.integration
@pytest.mark.parametrize("host", ["linux-aarch64", "osx-arm64"])
def test_create_plans_solves_and_locks_for_this_host(
    host, project, run_cli, monkeypatch, env
) -> None:
    monkeypatch.setenv("ENVTOOL_DRIVER_VERSION", env["ENVTOOL_DRIVER_VERSION"])
    _on_host(monkeypatch, host)
    code, out, err = run_cli(["create", "m", "-f", "env.yml", "--no-install", "--json"], project)
    assert code == 0, err
    data = json.loads(out)
    assert [p["platform"] for p in data["plan"]["platforms"]] == [host]
    assert data["plan"]["platforms_from"] == "this host"
    assert f"solving m for {host} (this host) …" in err
    assert list(data["packages"]) == [host]
    from envtool.adapters.lockfile.lock_io import read_lock

    lock = read_lock(project / "environments" / "m" / "conda-lock.yml")
    assert set(lock.platforms) == {host}
    if host == "osx-arm64":  # a driver is no reason to plan CUDA on a Mac: the CPU build
        assert data["plan"]["cuda"] is None
        assert {p.build.split("_")[0] for p in lock.packages if p.name == "pytorch"} == {"cpu"}
    # the platform is recorded in environment.yml: a re-lock anywhere keeps it
    yml = (project / "environments" / "m" / "environment.yml").read_text()
    assert f"platforms:\n  - {host}\n" in yml


@pytest.mark.integration
def test_conda_subdir_asks_for_another_platform_as_conda_does(project, run_cli, monkeypatch):
    _on_host(monkeypatch, "linux-64")
    monkeypatch.setenv("CONDA_SUBDIR", "linux-aarch64")
    code, out, err = run_cli(
        ["create", "m", "-f", "env.yml", "--no-install", "--dry-run", "--cuda", "cpu"], project
    )
    assert code == 0, err
    assert "platforms: linux-aarch64 (this host, by CONDA_SUBDIR)" in out


@pytest.mark.parametrize("cuda", ["12.6", "12"])
def test_a_cuda_build_on_a_mac_is_one_line_naming_cuda_cpu(cuda, project, run_cli, monkeypatch):
    _on_host(monkeypatch, "osx-arm64")
    code, out, err = run_cli(["create", "m", "-f", "env.yml", "--cuda", cuda], project)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"envtool: error: CUDA {cuda} for osx-arm64: macOS has no CUDA builds — pass --cuda cpu, "
        "or lock for a Linux GPU machine (create --platform linux-64, or `platforms: [linux-64]` "
        "in environment.yml)"
    ]
    assert not (project / "environments").exists()


@pytest.mark.integration
def test_lock_takes_the_files_platforms_else_the_last_locks_else_the_hosts(
    project, run_cli, monkeypatch
) -> None:
    """What a conda-lock or pixi user expects: the file's `platforms:` when it has them; a
    project with neither those nor a lock is locked for this host; the line says which."""
    _on_host(monkeypatch, "linux-aarch64")
    code, _, err = run_cli(
        ["create", "m", "-f", "env.yml", "--no-install", "--cuda", "cpu",
         "--platform", "linux-64"],
        project,
    )  # fmt: skip
    assert code == 0, err
    env_dir = project / "environments" / "m"
    yml = env_dir / "environment.yml"
    assert "platforms:" not in yml.read_text()  # linux-64 is not written (the old default)
    code, out, err = run_cli(["lock", "m", "--force"], project)
    assert code == 0, err
    assert "solving m for linux-64 (as last locked) …" in err
    (env_dir / "conda-lock.yml").unlink()
    code, out, err = run_cli(["lock", "m"], project)
    assert code == 0, err
    assert "solving m for linux-aarch64 (this host) …" in err
    assert "platforms: linux-aarch64 (this host)" in out
    yml.write_text(yml.read_text() + "platforms:\n  - linux-64\n  - osx-arm64\n")
    code, out, err = run_cli(["lock", "m"], project)
    assert code == 0, err
    assert "solving m for linux-64, osx-arm64 (environment.yml's platforms:) …" in err


def test_choose_platforms_order_and_hostile_values() -> None:
    host = ("linux-aarch64", "this host")
    assert choose_platforms(["win-64", "win-64"], ["osx-arm64"], ["linux-64"], host) == (
        ("win-64",),
        "--platform",
    )
    assert choose_platforms([], ["osx-arm64"], ["linux-64"], host)[1] == (
        "environment.yml's platforms:"
    )
    assert choose_platforms(None, [], ["linux-64"], host) == (("linux-64",), "as last locked")
    assert choose_platforms(None, None, None, host) == (("linux-aarch64",), "this host")
    assert choose_platforms(None, None, None, ("osx-64", "CONDA_SUBDIR")) == (
        ("osx-64",),
        "this host, by CONDA_SUBDIR",
    )
    with pytest.raises(UsageError) as exc:
        choose_platforms(None, None, None, ("linux-ppc64le", "this host"))
    assert exc.value.message.startswith("this host is linux-ppc64le: not a platform")
    assert "--platform" in exc.value.hint
    for hostile in ("../../etc", "linux-64\n- osx-64", "\x1b]0;owned\x07", "x" * 5000, "noarch"):
        with pytest.raises(UsageError) as exc:
            choose_platforms(None, None, None, (hostile, "CONDA_SUBDIR"))
        assert exc.value.message.startswith("CONDA_SUBDIR=")
        assert "\n" not in exc.value.message and "\x1b" not in exc.value.message
        assert len(exc.value.message) < 200
        assert "unset CONDA_SUBDIR" in exc.value.hint


@pytest.mark.integration
def test_lock_variants_on_a_mac_says_how_to_lock_for_linux(project, run_cli, monkeypatch) -> None:
    """`lock --variants` has no --platform: on a Mac, a CUDA variant of a file without
    `platforms:` is refused naming the file's key; with it, the variants lock for Linux."""
    _on_host(monkeypatch, "osx-arm64")
    code, _, err = run_cli(
        ["create", "m", "-f", "env.yml", "--no-install", "--cuda", "cpu"], project
    )
    assert code == 0, err
    (project / "environments" / "m" / "conda-lock.yml").unlink()
    code, _, err = run_cli(["lock", "m", "--variants", "cpu,cuda12.6"], project)
    assert code == 2 and "macOS has no CUDA builds" in err and "platforms: [linux-64]" in err
    yml = project / "environments" / "m" / "environment.yml"
    yml.write_text(yml.read_text().replace("  - osx-arm64\n", "  - linux-64\n"))
    code, out, err = run_cli(["lock", "m", "--variants", "cpu,cuda12.6"], project)
    assert code == 0, err
    assert (project / "environments" / "m" / "conda-lock.cuda12.6.yml").is_file()
