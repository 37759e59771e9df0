"""`envtool lock NAME --variants …` for real: solves over the harvested conda-forge repodata
(fixtures), standard conda-lock v1 files that conda-lock's own parser reads, deterministic bytes,
a no-op re-lock, `lock --check` over every variant — and each variant file installed by rattler
alone (PyYAML reads the lock, rattler links the packages) from a channel channel_builder builds."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import channel_builder as cb
import pytest
import yaml

from envtool.core.variants import parse_index
from envtool.core.versions import major_minor

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))

    def make(channel: str | Path, deps: list[str]) -> Path:
        env_dir = tmp_path / "environments" / "demo"
        env_dir.mkdir(parents=True)
        (env_dir / "environment.yml").write_text(
            "name: demo\nchannels:\n  - "
            + str(channel)
            + "\ndependencies:\n"
            + "".join(f"  - {d}\n" for d in deps)
        )
        return env_dir

    return make


def test_auto_over_real_conda_forge_repodata(harvested, project, run_cli, tmp_path) -> None:
    env_dir = project(harvested / "conda-forge", ["python=3.12", "pytorch"])
    rc, out, err = run_cli(["lock", "demo", "--variants", "auto"], tmp_path)
    assert rc == 0, err
    # torch 2.7.1 is the newest release with CPU and CUDA builds there (2.8.0: cuda129 only)
    assert "auto: torch 2.7.1 has builds for cpu, cuda12.6, cuda12.9" in out
    index = parse_index((env_dir / "variants.yml").read_text(), "variants.yml")
    assert index.names() == ["cpu", "cuda12.6", "cuda12.9"]
    assert index.torch == "2.7.1"
    builds = {v.name: v.builds[0].build for v in index.variants}
    assert builds["cpu"].startswith("cpu_mkl_py312")
    assert builds["cuda12.6"].startswith("cuda126_mkl_py312")
    assert builds["cuda12.9"].startswith("cuda129_mkl_py312")
    v126 = index.get("cuda12.6")
    assert (v126.min_driver, v126.sm[-1]) == ("560.28.03", "sm_90")
    assert index.get("cuda12.9").min_driver == "575.51.03"

    from conda_lock.lockfile import parse_conda_lock_file

    for v in index.variants:
        path = env_dir / v.lock
        assert hashlib.sha256(path.read_bytes()).hexdigest() == v.sha256
        lock = parse_conda_lock_file(path)  # conda-lock's own reader
        torch = [p for p in lock.package if p.name == "pytorch"]
        assert [p.build for p in torch] == [v.builds[0].build]
        cuda = {major_minor(p.version) for p in lock.package if p.name == "cuda-version"}
        assert cuda == (set() if v.cuda is None else {v.cuda})  # one CUDA per variant
        assert f"conda-lock install -n YOURENV {v.lock}" in path.read_text()

    # no-op re-lock: nothing solved, nothing rewritten
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in env_dir.iterdir()}
    rc, out, _ = run_cli(["lock", "demo", "--variants", "auto"], tmp_path)
    assert rc == 0 and "variant locks are up to date (cpu, cuda12.6, cuda12.9)" in out
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in env_dir.iterdir()} == before
    # deterministic: a forced re-solve writes the same bytes
    rc, _, err = run_cli(["lock", "demo", "--variants", "auto", "--force"], tmp_path)
    assert rc == 0, err
    assert {p.name: p.read_bytes() for p in env_dir.iterdir()} == {
        k: b for k, (b, _) in before.items()
    }

    # --check covers every variant
    rc, out, _ = run_cli(["lock", "demo", "--check"], tmp_path)
    assert rc == 0 and out.count("is fresh") == 3
    cuda129 = env_dir / "conda-lock.cuda12.9.yml"
    cuda129.write_text(cuda129.read_text().replace("575.51.03", "470.42.01"))
    rc, _, err = run_cli(["lock", "demo", "--check"], tmp_path)
    assert rc == 1
    assert "conda-lock.cuda12.9.yml: changed since it was indexed" in err
    assert "run `envtool lock demo --variants auto`" in err
    rc, _, err = run_cli(["lock", "demo", "--variants", "auto"], tmp_path)
    assert rc == 0, err
    assert cuda129.read_bytes() == before["conda-lock.cuda12.9.yml"][0]  # re-locked
    (env_dir / "environment.yml").write_text(
        (env_dir / "environment.yml").read_text() + "  - numpy\n"
    )
    rc, _, err = run_cli(["lock", "demo", "--check"], tmp_path)
    assert rc == 1 and "conda-lock.cpu.yml: stale (+2 more)" in err


def test_listed_variants_without_a_shared_torch_each_take_their_newest(
    harvested, project, run_cli, tmp_path
) -> None:
    env_dir = project(harvested / "conda-forge", ["pytorch"])
    rc, out, err = run_cli(["lock", "demo", "--variants", "cuda12.6,cpu,cuda11.8"], tmp_path)
    assert rc == 0, err
    assert "warning: no torch release has builds for all of cpu, cuda11.8, cuda12.6" in out
    index = parse_index((env_dir / "variants.yml").read_text(), "variants.yml")
    assert index.torch is None
    got = {v.name: (v.builds[0].torch, v.builds[0].build[:8]) for v in index.variants}
    assert got == {
        "cpu": ("2.10.0", "cpu_mkl_"),
        "cuda11.8": ("2.0.0", "cuda118p"),  # cudatoolkit-era build
        "cuda12.6": ("2.7.1", "cuda126_"),
    }
    # fewer variants next time: the dropped variant's lock goes with it
    rc, _, err = run_cli(["lock", "demo", "--variants", "cpu,cuda12.6"], tmp_path)
    assert rc == 0, err
    assert not (env_dir / "conda-lock.cuda11.8.yml").exists()
    assert parse_index((env_dir / "variants.yml").read_text(), "x").torch == "2.7.1"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("cuda12", "--variants cuda12: not a variant name"),
        ("cpu,cuda12.7", "--variants cuda12.7: CUDA 12.7 is not a known CUDA version"),
        ("auto,cpu", "--variants auto,cpu: auto stands alone"),
    ],
)
def test_bad_variants_exit_2_with_one_line(
    value, message, harvested, project, run_cli, tmp_path
) -> None:
    env_dir = project(harvested / "conda-forge", ["pytorch"])
    rc, _, err = run_cli(["lock", "demo", "--variants", value], tmp_path)
    assert rc == 2 and message in err and "Traceback" not in err
    assert sorted(p.name for p in env_dir.iterdir()) == ["environment.yml"]


def test_a_variant_that_does_not_exist_writes_nothing(
    harvested, project, run_cli, tmp_path
) -> None:
    env_dir = project(harvested / "conda-forge", ["python=3.12", "pytorch"])
    rc, _, err = run_cli(["lock", "demo", "--variants", "cpu,cuda11.8"], tmp_path)
    assert rc == 2
    assert "envtool: error: variant cuda11.8: torch was never built for CUDA 11.8" in err
    assert sorted(p.name for p in env_dir.iterdir()) == ["environment.yml"]  # cpu not kept


# ---------------------------------------------------------------- installable by rattler alone


def rattler_install(lock_path: Path, channel: Path, prefix: Path) -> None:
    """Install a conda-lock v1 file's linux-64 packages with rattler and PyYAML only: the lock's
    URLs and sha256 pick the channel's records; rattler fetches, checks and links them."""
    import rattler

    doc = yaml.safe_load(lock_path.read_text())
    assert doc["version"] == 1
    conda = [p for p in doc["package"] if p["platform"] == "linux-64" and p["manager"] == "conda"]
    wanted = {p["url"]: p["hash"]["sha256"] for p in conda}

    async def run() -> None:
        gateway = rattler.Gateway()
        found = await gateway.query(
            [rattler.Channel(channel.as_uri())],
            ["linux-64", "noarch"],
            [rattler.MatchSpec(p["name"]) for p in conda],
            recursive=False,
        )
        records = [r for recs in found for r in recs if str(r.url) in wanted]
        assert sorted(str(r.url) for r in records) == sorted(wanted)
        assert all(r.sha256.hex() == wanted[str(r.url)] for r in records)
        await rattler.install(records, prefix)
        await asyncio.sleep(0.05)

    asyncio.run(run())


def test_each_variant_lock_installs_with_rattler_alone(project, run_cli, tmp_path) -> None:
    channel = cb.build_channel(tmp_path / "channel", cb.cuda_graph() + cb.cuda118_pkgs())
    env_dir = project(channel, ["python", "pytorch"])
    rc, out, err = run_cli(["lock", "demo", "--variants", "cpu,cuda11.8,cuda12.6"], tmp_path)
    assert rc == 0, err
    index = parse_index((env_dir / "variants.yml").read_text(), "variants.yml")
    assert index.torch == "2.7.1"
    for v in index.variants:
        prefix = tmp_path / "prefixes" / v.name
        rattler_install(env_dir / v.lock, channel, prefix)
        stub = (
            prefix / "lib" / f"python{cb.PY_VER}" / "site-packages" / "torch_stub" / "__init__.py"
        )
        tag = "cpu" if v.cuda is None else "cuda" + v.cuda.replace(".", "")
        assert stub.read_text() == f"BUILD = '{tag}'\n"
        versions = list((prefix / "share" / "cuda-version").glob("VERSION"))
        assert [p.read_text().strip() for p in versions] == ([v.cuda] if v.cuda else [])


def test_dry_run_writes_nothing_and_plain_lock_relocks_the_variants(
    harvested, project, run_cli, tmp_path
) -> None:
    env_dir = project(harvested / "conda-forge", ["python=3.12", "pytorch"])
    rc, out, err = run_cli(["lock", "demo", "--variants", "cpu,cuda12.6", "--dry-run"], tmp_path)
    assert rc == 0, err
    assert "plan: conda-forge flavor, CUDA 12.6 (target), needs driver ≥ 560.28.03" in out
    assert "dry run: nothing written" in out
    assert sorted(p.name for p in env_dir.iterdir()) == ["environment.yml"]
    rc, _, err = run_cli(["lock", "demo", "--variants", "cpu,cuda12.6"], tmp_path)
    assert rc == 0, err
    # a project with variant locks only: `envtool lock NAME` re-locks them (not this host's pick)
    rc, out, _ = run_cli(["lock", "demo"], tmp_path)
    assert rc == 0 and "variant locks are up to date (cpu, cuda12.6)" in out
    assert not (env_dir / "conda-lock.yml").exists()
    rc, out, _ = run_cli(["lock", "demo", "--json"], tmp_path)
    assert rc == 0 and '"requested": [' in out


def test_a_killed_runs_staging_folder_is_swept_and_a_live_one_kept(
    harvested, project, run_cli, tmp_path
) -> None:
    """SIGKILL of `lock --variants` runs no cleanup: its staging folder (half-written variant
    locks) would stay in environments/NAME forever. The next run removes one nobody has written
    for an hour, keeps a fresh one (another run may be filling it) and never follows a link."""
    import os

    env_dir = project(harvested / "conda-forge", ["python=3.12", "pytorch"])
    stale = env_dir / ".envtool-variants-killed"
    (stale / "sub").mkdir(parents=True)
    (stale / "conda-lock.cpu.yml").write_text("half a lock")
    old = os.stat(stale).st_mtime - 2 * 3600
    os.utime(stale, (old, old))
    fresh = env_dir / ".envtool-variants-live"
    fresh.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not envtool's")
    link = env_dir / ".envtool-variants-link"
    link.symlink_to(outside, target_is_directory=True)
    os.utime(link, (old, old), follow_symlinks=False)
    rc, _, err = run_cli(["lock", "demo", "--variants", "cpu"], tmp_path)
    assert rc == 0, err
    assert not stale.exists() and fresh.is_dir()
    assert link.is_symlink() and (outside / "keep.txt").read_text() == "not envtool's"
    assert (env_dir / "conda-lock.cpu.yml").is_file()
