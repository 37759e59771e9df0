"""Air-gapped installs: `envtool bundle` then `envtool install --from DIR` with the source gone."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool

from envtool.adapters.lockfile.lock_io import read_lock


@pytest.fixture
def private_lock(setup: cb.CudaSetup, tmp_path: Path) -> Path:
    """A lock over a channel this test owns (it deletes the channel to prove offline installs)."""
    channel = tmp_path / "origin" / "channel"
    shutil.copytree(setup.channel, channel)
    wheel = shutil.copy(setup.wheel, tmp_path / "origin" / setup.wheel.name)
    records = cb.solve_records(channel, ["pytorch * cuda*", "cuda-version 12.6.*"])
    return cb.write_lock(
        tmp_path / "project" / "conda-lock.yml",
        records,
        channel.as_uri(),
        {"envtool_cuda": "12.6"},
        pip=[("envtool-demo", "0.1.0", Path(wheel))],
    )


def _env(tmp_path: Path, tag: str) -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        ENVTOOL_ENVS_DIR=str(tmp_path / f"envs-{tag}"),
        ENVTOOL_CACHE_DIR=str(tmp_path / f"cache-{tag}"),
        ENVTOOL_DRIVER_VERSION="570.86.10",
    )
    return e


@pytest.mark.integration
def test_bundle_installs_offline_with_the_original_channel_gone(
    private_lock: Path, tmp_path: Path
) -> None:
    online = _env(tmp_path, "online")
    out = run_envtool(
        "bundle", "--lock", str(private_lock), "-o", str(tmp_path / "bundle"), "--json", env=online
    )
    assert out.returncode == 0, out.stderr
    files = json.loads(out.stdout)["files"]
    locked_files = {p.file_name for p in read_lock(private_lock).packages}
    assert {Path(f).name for f in files} == locked_files  # exactly the locked packages
    assert (tmp_path / "bundle/channel/linux-64/repodata.json").is_file()  # a real, indexed channel
    assert (tmp_path / "bundle/conda-lock.yml").read_bytes() == private_lock.read_bytes()

    shutil.rmtree(tmp_path / "origin")  # the "internet" is gone; a fresh cache on the other side
    offline = _env(tmp_path, "offline")
    inst = run_envtool("install", "demo", "--from", str(tmp_path / "bundle"), env=offline)
    assert inst.returncode == 0, inst.stderr
    verify = run_envtool("verify", "demo", "--json", env=offline)
    assert verify.returncode == 0 and json.loads(verify.stdout)["clean"]
    record = next((tmp_path / "envs-offline/demo/conda-meta").glob("pytorch-*.json"))
    assert (
        "/origin/channel/" in json.loads(record.read_text())["url"]
    )  # provenance kept from the lock


@pytest.mark.integration
def test_install_from_a_bundle_takes_the_name_it_was_bundled_as(
    private_lock: Path, tmp_path: Path
) -> None:
    """`envtool bundle trainer -o B` then `envtool install --from B` makes `trainer`, not `B`."""
    project = tmp_path / "proj"
    (project / "environments" / "trainer").mkdir(parents=True)
    shutil.copy(private_lock, project / "environments" / "trainer" / "conda-lock.yml")
    online = _env(tmp_path, "online")
    out = run_envtool("bundle", "trainer", "-o", str(tmp_path / "b"), env=online, cwd=project)
    assert out.returncode == 0, out.stderr
    assert f"envtool install --from {tmp_path / 'b'}" in out.stdout
    assert json.loads((tmp_path / "b" / "bundle.json").read_text())["name"] == "trainer"
    offline = _env(tmp_path, "offline")
    inst = run_envtool("install", "--from", str(tmp_path / "b"), "--json", env=offline)
    assert inst.returncode == 0, inst.stderr
    assert (tmp_path / "envs-offline" / "trainer" / "conda-meta").is_dir()
    # a name that would leave the envs dir is not taken from the manifest
    manifest = tmp_path / "b" / "bundle.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "name": "../evil"}))
    again = run_envtool("install", "--from", str(tmp_path / "b"), "--json", env=offline)
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "evil").exists() and (tmp_path / "envs-offline" / "b").is_dir()


@pytest.mark.integration
def test_tampered_bundle_is_refused(private_lock: Path, tmp_path: Path) -> None:
    online = _env(tmp_path, "online")
    assert (
        run_envtool(
            "bundle", "--lock", str(private_lock), "-o", str(tmp_path / "bundle"), env=online
        ).returncode
        == 0
    )
    cb.flip_byte(next((tmp_path / "bundle/channel/noarch").glob("cuda-version-*.conda")))
    offline = _env(tmp_path, "offline")
    inst = run_envtool("install", "demo", "--from", str(tmp_path / "bundle"), env=offline)
    assert inst.returncode == 1
    assert "cuda-version 12.6" in inst.stderr and "hash mismatch" in inst.stderr
    assert not list((tmp_path / "envs-offline/demo/conda-meta").glob("*.json"))


@pytest.mark.parametrize(
    "command",
    [
        ["install", "--force", "--dry-run"],
        ["bundle", "-o", "out", "--dry-run"],
        ["bundle", "-o", "out"],
    ],
)
def test_a_platform_the_lock_lacks_is_a_usage_error(command, fixtures, run_cli, tmp_path) -> None:
    lock = fixtures / "locks" / "konstantinjdobler__nlp-research-template__conda-lock.yml"
    rc, out, err = run_cli([*command, "--lock", str(lock), "--platform", "bogus"], tmp_path)
    assert rc == 2 and "the lock has no bogus solution (it has linux-64, osx-arm64, win-64)" in err
    assert out == "" and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("platform", "fix"),
    [
        ("linux64", "did you mean --platform linux-64?"),  # the fix was `--platform linux64`
        ("linux-aarch64", "re-lock with `--platform linux-aarch64` or install on a linux-64 host"),
        ("bogus", "'bogus' is not a platform: pick one of linux-64, osx-arm64, win-64"),
        # conda's, not envtool's (it was "did you mean --platform linux-64?")
        ("linux-ppc64le", "install on a host of one of: linux-64, osx-arm64, win-64"),
    ],
)
def test_the_fix_for_a_platform_the_lock_lacks_never_repeats_a_typo(
    platform, fix, fixtures, run_cli, tmp_path
) -> None:
    lock = fixtures / "locks" / "konstantinjdobler__nlp-research-template__conda-lock.yml"
    rc, _, err = run_cli(["install", "--dry-run", "--lock", str(lock), "--platform", platform])
    assert rc == 2 and err.rstrip().endswith(f" — {fix}"), err


def test_an_output_that_is_a_file_is_a_usage_error(fixtures, run_cli, tmp_path) -> None:
    lock = fixtures / "locks" / "konstantinjdobler__nlp-research-template__conda-lock.yml"
    (tmp_path / "out").touch()
    rc, _, err = run_cli(["bundle", "--lock", str(lock), "-o", "out"], tmp_path)
    assert rc == 2 and "-o out: not a directory" in err


@pytest.mark.integration
def test_a_lock_changed_while_it_is_bundled_leaves_no_bundle(
    private_lock: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle's lock was copied from disk after the archives were fetched for the lock as
    read: an edit in between gave a bundle whose conda-lock.yml was not the lock bundle.json's
    sha256 and archives describe."""
    from envtool.adapters.install import bundle

    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    real = bundle.fetch_verified

    def fetch_then_edit(*args, **kwargs):
        out = real(*args, **kwargs)
        private_lock.write_text(private_lock.read_text() + "# edited meanwhile\n")
        return out

    monkeypatch.setattr(bundle, "fetch_verified", fetch_then_edit)
    from envtool.errors import DiagnosedFailure

    with pytest.raises(DiagnosedFailure, match="changed while it was being bundled"):
        bundle.write_bundle(private_lock, tmp_path / "b", None)
    assert not (tmp_path / "b").exists()
