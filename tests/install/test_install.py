"""Installing from a conda-lock v1 with py-rattler: real packages from a real local channel."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import channel_builder as cb
import pytest
import yaml
from conftest import FakeHost

from envtool.adapters.install import install_state
from envtool.adapters.install.installed import compute_drift, describe_env, read_conda_meta
from envtool.adapters.install.installer import install_from_lock
from envtool.adapters.lockfile.lock_io import read_lock
from envtool.core.drift import PackageId, diff_packages
from envtool.core.facts import GpuFacts, HostFacts
from envtool.core.lockfile import parse_build_from_file_name
from envtool.errors import DiagnosedFailure, UsageError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    return tmp_path / "cache"


@pytest.fixture
def demo(setup: cb.CudaSetup, cache: Path, tmp_path: Path) -> Path:
    """setup's lock installed (linux-64) into envs/demo: the prefix."""
    prefix = tmp_path / "envs" / "demo"
    install_from_lock(setup.lock, prefix, platform="linux-64", progress=False)
    return prefix


# ------------------------------------------------------------------ pure parts


def test_build_string_comes_from_the_archive_name() -> None:
    assert (
        parse_build_from_file_name(
            "pytorch-2.7.1-cuda126_mkl_py312_h30b5a27_300.conda", "pytorch", "2.7.1"
        )
        == "cuda126_mkl_py312_h30b5a27_300"
    )
    assert (
        parse_build_from_file_name("cuda-version-12.6-h7480c83_3.tar.bz2", "cuda-version", "12.6")
        == "h7480c83_3"
    )
    assert (
        parse_build_from_file_name("torch-2.3.1-cp311-none-linux_x86_64.whl", "torch", "2.3.1")
        is None
    )


def test_drift_reports_missing_extra_and_changed_builds() -> None:
    locked = [
        PackageId("pytorch", "2.7.1", "conda", "cuda126_mkl_py311_h30b5a27_300"),
        PackageId("cuda-version", "12.6", "conda", "h7480c83_3"),
        PackageId("Typing_Extensions", "4.12.2", "pip"),
    ]
    installed = [
        # the silent CPU fallback: same version, CPU build
        PackageId("pytorch", "2.7.1", "conda", "cpu_mkl_py311_hea9ba1b_100"),
        PackageId("typing-extensions", "4.12.2", "pip"),  # PEP 503 name: same package
        PackageId("torch", "2.3.1+cu121", "pip"),  # a pip torch shadowing conda's
    ]
    drift = diff_packages(installed, locked)
    assert not drift["clean"]
    assert [m["name"] for m in drift["missing"]] == ["cuda-version"]
    assert [(e["name"], e["manager"]) for e in drift["extra"]] == [("torch", "pip")]
    assert drift["changed"] == [
        {
            "name": "pytorch",
            "manager": "conda",
            "locked": "2.7.1 cuda126_mkl_py311_h30b5a27_300",
            "installed": "2.7.1 cpu_mkl_py311_hea9ba1b_100",
        }
    ]
    assert diff_packages(locked, locked)["clean"]


def test_host_check_refuses_a_driver_too_old_for_the_locked_cuda(fake_h200: FakeHost) -> None:
    from envtool.core.host_check import host_problems

    meta = {"envtool_cuda": "12.6", "envtool_gpu_archs": "sm_80 sm_90"}
    # the real 2 x H200 capture (driver 580.159.04): can run CUDA 12.6
    assert host_problems(meta, "linux-64", fake_h200.facts()) == []
    old = HostFacts(driver_version="470.57.02", gpus=[GpuFacts(0, "Tesla T4", "7.5")])
    problem, fix = host_problems(meta, "linux-64", old)[0]
    # architecture before driver: no driver gives the build sm_75 kernels; the fix is a CUDA
    # whose builds carry it (and that this driver runs), not "upgrade the driver"
    assert "no kernels for this GPU" in problem and "sm_75" in problem
    assert fix.startswith("re-create with `--cuda 11.8`") and "upgrade" not in fix
    newer = HostFacts(driver_version="520.61.05", gpus=[GpuFacts(0, "NVIDIA A100", "8.0")])
    meta129 = {"envtool_cuda": "12.9", "envtool_gpu_archs": "sm_80 sm_90"}
    problem, fix = host_problems(meta129, "linux-64", newer)[0]
    assert "520.61.05" in problem and "12.9" in problem
    assert "login node" in host_problems(meta, "linux-64", HostFacts())[0][1]
    assert host_problems({"envtool_cuda": "cpu"}, "linux-64", HostFacts()) == []
    # an H200 on a 470 driver: no CUDA helps, the driver must be upgraded for the GPU (issue 12)
    h200_old = fake_h200.facts(driver="470.57.02")
    problem, fix = host_problems({"envtool_cuda": "11.8"}, "linux-64", h200_old)[0]
    assert problem == "driver 470.57.02 cannot drive NVIDIA H200, sm_90 (needs >= 520.61.05)"
    assert fix == "upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (NVIDIA H200, sm_90)"


@pytest.mark.slow
def test_lock_reader_agrees_with_conda_lock_on_real_locks(fixtures: Path) -> None:
    """The one reader (install, bundle, verify and export) reads v1 itself, fast; conda-lock's own
    parser is the authority on the format: same packages, field for field (dependencies and
    builds included: export's top-level specs and CUDA globs come from them), same metadata."""
    from conda_lock.lockfile import parse_conda_lock_file

    from envtool.core.lockfile import toposorted

    locks = sorted((fixtures / "locks").rglob("*conda-lock*.yml"))
    assert len(locks) >= 4
    for path in locks:
        ours = read_lock(path)
        theirs = parse_conda_lock_file(path)  # toposorted, every category
        want = [
            (
                d.manager,
                d.name,
                d.version,
                d.platform,
                d.url,
                d.build
                or (parse_build_from_file_name(d.url.rsplit("/", 1)[-1], d.name, d.version) or ""),
                d.hash.md5 or None,
                d.hash.sha256 or None,
                tuple(sorted(d.dependencies)),
                "main" not in d.categories,
            )
            for d in theirs.package
        ]
        got = [
            (p.manager, p.name, p.version, p.platform, p.url, p.build, p.md5, p.sha256)
            + (p.dependencies, p.optional)
            for p in toposorted(ours.packages)
        ]
        assert got == want, path.name  # same entries, and the same (topological) order
        assert any(p.dependencies for p in ours.packages), path.name
        assert all(p.build for p in ours.packages if p.manager == "conda"), path.name
        meta = theirs.metadata
        assert ours.platforms == list(meta.platforms)
        assert ours.channels == [c.url for c in meta.channels]
        assert ours.sources == list(meta.sources)
        assert ours.content_hash == dict(meta.content_hash)
        assert ours.custom_metadata == dict(meta.custom_metadata or {})


@pytest.mark.integration
def test_a_version_2_lock_reads_like_its_version_1_original(fixtures: Path, tmp_path: Path) -> None:
    """envtool reads v2 without conda-lock (which stays the oracle: it made the v2 file)."""
    import subprocess
    import sys

    import yaml
    from conda_lock.lockfile import parse_conda_lock_file

    v1 = sorted((fixtures / "locks").rglob("*conda-lock*.yml"))[0]
    data = parse_conda_lock_file(v1).model_dump(mode="json", by_alias=True)
    v2 = tmp_path / "conda-lock.yml"
    v2.write_text(yaml.safe_dump({"version": 2, **data}))
    ours, theirs = read_lock(v1), read_lock(v2)
    assert sorted(theirs.packages, key=repr) == sorted(ours.packages, key=repr)
    assert (theirs.platforms, theirs.channels, theirs.custom_metadata) == (
        ours.platforms,
        ours.channels,
        ours.custom_metadata,
    )
    code = (
        "import sys; from envtool.adapters.lockfile.lock_io import read_lock; "
        f"assert read_lock({str(v2)!r}).packages; "
        "assert not any(m.startswith('conda_lock') for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_v2_lock_naming_a_platform_that_is_no_platform_is_refused_like_a_v1(
    fixtures: Path, tmp_path: Path
) -> None:
    """A platform name reaches export's header and the bundle's folder names: a newline in it
    wrote a `prefix:` key into the exported environment.yml. v1 locks were checked, v2 were not."""
    from conda_lock.lockfile import parse_conda_lock_file

    v1 = sorted((fixtures / "locks").rglob("*conda-lock*.yml"))[0]
    data = parse_conda_lock_file(v1).model_dump(mode="json", by_alias=True)
    data["metadata"]["platforms"].append("x\nprefix: /tmp/evil\n#")
    for version in (1, 2):
        bad = tmp_path / f"v{version}.yml"
        bad.write_text(yaml.safe_dump({**data, "version": version}))
        with pytest.raises(UsageError, match="is not a platform name"):
            read_lock(bad)


def test_unreadable_lock_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "conda-lock.yml"
    bad.write_text("version: 1\npackage: [\n")
    with pytest.raises(UsageError, match="conda-lock.yml"):
        read_lock(bad)
    with pytest.raises(UsageError, match="no such lock file"):
        read_lock(tmp_path / "missing.yml")


# ------------------------------------------------------------------ real installs


@pytest.mark.integration
def test_install_links_the_locked_builds_and_the_pip_part(
    setup: cb.CudaSetup, cache: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "envs" / "demo"
    report = install_from_lock(setup.lock, prefix, platform="linux-64", progress=False)
    assert report.conda_packages == 5 and report.pip_packages == 1

    meta = {r["name"]: r for r in read_conda_meta(prefix)}
    assert meta["pytorch"]["build"] == "cuda126_mkl_py311_h30b5a27_300"
    # conda-meta names the lock's URL, like any conda-installed env (not envtool's cache)
    locked = {p.name: p for p in read_lock(setup.lock).packages}
    assert meta["pytorch"]["url"] == locked["pytorch"].url
    assert (prefix / "etc/conda/activate.d/libtorch_activate.sh").is_file()

    import subprocess

    out = subprocess.run(
        [str(prefix / "bin" / "python"), "-c", "import sys, envtool_demo; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(out.stdout.strip()) == prefix  # the pip part went into the env, not elsewhere
    assert install_state.read_install_state(prefix) == "complete"
    state = install_state.read_state_record(prefix)
    assert state["lock_sha256"] == report.lock_sha256
    assert compute_drift(prefix, setup.lock, "linux-64")["clean"]
    assert describe_env(prefix)["torch"] == "2.7.1 cuda126_mkl_py311_h30b5a27_300"


@pytest.mark.integration
def test_reinstall_converges_after_damage(setup: cb.CudaSetup, demo: Path) -> None:
    prefix = demo
    record = next((prefix / "conda-meta").glob("python_abi-*.json"))
    record.unlink()
    drift = compute_drift(prefix, setup.lock, "linux-64")
    assert [m["name"] for m in drift["missing"]] == ["python_abi"]

    report = install_from_lock(setup.lock, prefix, platform="linux-64", progress=False)
    assert set(report.reused) >= {
        p.file_name for p in read_lock(setup.lock).packages if p.manager == "conda"
    }
    assert report.fetched == []  # warm cache: nothing fetched
    assert compute_drift(prefix, setup.lock, "linux-64")["clean"]


@pytest.mark.integration
def test_tampered_cached_archive_is_fetched_again(
    setup: cb.CudaSetup, cache: Path, tmp_path: Path
) -> None:
    install_from_lock(setup.lock, tmp_path / "envs" / "a", platform="linux-64", progress=False)
    cached = next((cache / "archives").glob("pytorch-2.7.1-cuda126*.conda"))
    cb.flip_byte(cached)
    report = install_from_lock(
        setup.lock, tmp_path / "envs" / "b", platform="linux-64", progress=False
    )
    assert report.refetched == [cached.name]  # the lock's hash is the authority
    assert compute_drift(tmp_path / "envs" / "b", setup.lock, "linux-64")["clean"]


@pytest.mark.integration
def test_tampered_package_is_refused_and_nothing_is_linked(
    setup: cb.CudaSetup, cache: Path, tmp_path: Path
) -> None:
    mirror = tmp_path / "mirror"
    shutil.copytree(setup.channel, mirror)
    target = next((mirror / "linux-64").glob("pytorch-2.7.1-cuda126*.conda"))  # the locked build
    cb.flip_byte(target)
    prefix = tmp_path / "envs" / "demo"
    with pytest.raises(DiagnosedFailure) as err:
        install_from_lock(
            setup.lock, prefix, platform="linux-64", channels_override=[str(mirror)], progress=False
        )
    assert "pytorch 2.7.1" in err.value.message and "hash mismatch" in err.value.message
    assert list((prefix / "conda-meta").glob("*.json")) == []  # nothing linked at all
    assert not (prefix / "lib").exists()
    assert install_state.read_install_state(prefix) is None  # refused before the marker
    assert not (cache / "archives" / target.name).exists()  # the bad file is not kept


@pytest.mark.integration
def test_a_lock_entry_without_a_hash_is_refused_before_anything_is_written(
    setup: cb.CudaSetup, cache: Path, tmp_path: Path
) -> None:
    """Not "hash mismatch … tampered with": the lock itself cannot vouch for the file."""
    from envtool.adapters.install.bundle import write_bundle

    data = yaml.safe_load(setup.lock.read_text())
    for entry in data["package"]:
        if entry["name"] == "pytorch":
            entry["hash"] = {}
    lock = tmp_path / "conda-lock.yml"
    lock.write_text(yaml.safe_dump(data, sort_keys=False))
    prefix = tmp_path / "envs" / "demo"
    with pytest.raises(UsageError) as err:
        install_from_lock(lock, prefix, platform="linux-64", progress=False)
    assert "1 linux-64 package(s) have no hash (pytorch)" in err.value.message
    assert "re-lock" in (err.value.hint or "")
    assert not prefix.exists()  # no incomplete marker: nothing was started
    with pytest.raises(UsageError, match="have no hash"):
        write_bundle(lock, tmp_path / "bundle", cache_dir=cache, progress=False)
    assert not (tmp_path / "bundle").exists()


@pytest.mark.integration
def test_lock_without_this_platform_is_refused(
    setup: cb.CudaSetup, cache: Path, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="no osx-arm64 solution"):
        install_from_lock(setup.lock, tmp_path / "envs" / "x", platform="osx-arm64", progress=False)
    assert not (tmp_path / "envs" / "x").exists()


@pytest.mark.integration
def test_install_refuses_a_directory_that_is_not_an_env(
    setup: cb.CudaSetup, cache: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a conda environment"):
        install_from_lock(setup.lock, home, platform="linux-64", progress=False)
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]


def test_markers_are_invisible_to_conda_meta_readers(tmp_path: Path) -> None:
    """conda/mamba/rattler parse conda-meta/*.json as package records: markers must not be there."""
    install_state.write_incomplete_marker(tmp_path, "abc", tmp_path / "lock.yml")
    assert list((tmp_path / "conda-meta").glob("*.json")) == []
    assert install_state.read_install_state(tmp_path) == "incomplete"
    install_state.write_complete_state(tmp_path, {"lock_sha256": "abc"})
    assert install_state.read_install_state(tmp_path) == "complete"
    assert (
        json.loads((tmp_path / "conda-meta/envtool/state.json").read_text())["lock_sha256"] == "abc"
    )


@pytest.mark.integration
def test_activated_environ_runs_activate_d_and_replaces_the_callers_env(
    demo: Path, tmp_path: Path
) -> None:
    from envtool.adapters.launch.activation import activated_environ, render_activation_script

    prefix = demo
    caller = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CONDA_PREFIX": "/opt/other-env"}
    env = activated_environ(prefix, caller)
    assert env["CONDA_PREFIX"] == str(prefix)  # the caller's env is deactivated, not stacked
    assert env["PATH"].split(":")[:3] == [str(prefix / "bin"), "/usr/bin", "/bin"]
    assert env["ENVTOOL_TEST_LIBTORCH"] == "cuda126"  # etc/conda/activate.d/*.sh ran
    assert env["ENVTOOL_TEST_PREFIX_SEEN"] == str(prefix)  # ...after CONDA_PREFIX was set
    fish = render_activation_script(prefix, "fish")
    assert f"set -gx PATH '{prefix}/bin' $PATH" in fish


@pytest.mark.integration
def test_verify_sees_a_pip_package_added_behind_the_locks_back(
    setup: cb.CudaSetup, demo: Path, tmp_path: Path
) -> None:
    import subprocess

    from envtool.adapters.install.uv_pip import uv_binary

    prefix = demo
    stray = cb.build_wheel(tmp_path / "w", name="stray_pkg", version="9.9")
    subprocess.run(
        [
            uv_binary(),
            "pip",
            "install",
            "--python",
            str(prefix / "bin/python"),
            "--offline",
            "--cache-dir",
            str(tmp_path / "uvc"),
            str(stray),
        ],
        check=True,
        capture_output=True,
    )
    drift = compute_drift(prefix, setup.lock, "linux-64")
    assert drift["extra"] == [{"name": "stray_pkg", "manager": "pip", "installed": "9.9"}]
    assert drift["missing"] == [] and drift["changed"] == []


def test_dry_run_on_a_real_lock_lists_its_packages_without_touching_anything(
    fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envtool.adapters.install.installer import plan_install

    lock = read_lock(
        fixtures / "locks" / "konstantinjdobler__nlp-research-template__conda-lock.yml"
    )
    plan = plan_install(
        lock, tmp_path / "envs" / "x", "linux-64", None, tmp_path / "cache"
    ).to_dict()
    names = {p["name"] for p in plan["packages"]}
    assert names == {p.name for p in lock.packages if p.platform == "linux-64"}
    assert "pytorch" in names
    assert all(p["url"].startswith("https://") for p in plan["packages"])
    assert not (tmp_path / "envs").exists() and not (tmp_path / "cache").exists()


@pytest.mark.gpu
@pytest.mark.integration
def test_host_check_on_this_gpu_host() -> None:
    """GPU tier: on a real NVIDIA host the probe + check must accept a lock that this driver and
    these GPUs can run, and refuse one whose arch list leaves the GPUs out. Skips without a GPU."""
    from envtool.adapters.host.host_probe import probe_host
    from envtool.core.cuda import capability_to_arch, newest_cuda_native
    from envtool.core.host_check import host_problems

    host = probe_host()
    if not host.has_driver or not any(g.capability for g in host.gpus):
        pytest.skip("needs an NVIDIA driver and a GPU (run on the GPU machine)")
    cuda = newest_cuda_native(host.driver_version)
    archs = sorted({capability_to_arch(g.capability) for g in host.gpus if g.capability})
    fits = {"envtool_cuda": cuda, "envtool_gpu_archs": " ".join(archs)}
    assert host_problems(fits, "linux-64", host) == []
    misses = {"envtool_cuda": cuda, "envtool_gpu_archs": "sm_35"}  # Kepler only: no modern GPU
    assert host_problems(misses, "linux-64", host)
    too_new = {"envtool_cuda": "99.0"}
    assert host_problems(too_new, "linux-64", host) == []  # unknown CUDA: not judged


@pytest.mark.integration
def test_atomic_text_write_is_utf8_whatever_the_locale(tmp_path) -> None:
    """Locks and markers hold non-ASCII (paths, channel names); an ASCII locale must not break them."""
    import subprocess
    import sys

    target = tmp_path / "state.json"
    code = (
        "import sys; from pathlib import Path; from envtool.adapters.files import write_atomic; "
        'write_atomic(Path(sys.argv[1]), \'{"prefix": "/home/zo\\u00eb/envs"}\')'
    )
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(target)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert target.read_bytes().decode("utf-8") == '{"prefix": "/home/zo\u00eb/envs"}'
