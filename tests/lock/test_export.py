"""`envtool export`: portable environment.yml and @EXPLICIT files from real conda-lock files,
and the key evidence: re-solving the exported file with rattler gives the locked versions."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import channel_builder as cb
import pytest

from envtool.adapters.lockfile.lock_io import read_lock
from envtool.core.export import channel_name
from envtool.core.spec import parse_environment_yml

# (lock, the environment.yml it was solved from) in fixtures/locks
LOCKS = [
    ("konstantinjdobler__nlp-research-template__conda-lock.yml", "konstantinjdobler__nlp-research-template__environment.yml"),
    ("konstantinjdobler__nlp-research-template__conda-lock@98462a29.yml", "konstantinjdobler__nlp-research-template__environment@98462a29.yml"),
    ("pangeo-data__pangeo-docker-images__pytorch-notebook__conda-lock.yml", "pangeo-data__pangeo-docker-images__pytorch-notebook__environment.yml"),
    ("pangeo-data__pangeo-docker-images__pytorch-notebook__conda-lock@74629d5b.yml", "pangeo-data__pangeo-docker-images__pytorch-notebook__environment@74629d5b.yml"),
    ("extra/konstantinjdobler__nlp-research-template__ppc64le.conda-lock.yml", "extra/konstantinjdobler__nlp-research-template__ppc64le.environment.yml"),
    ("extra/pangeo-data__pangeo-docker-images__pytorch-notebook__conda-lock@69a31d58.yml", "extra/pangeo-data__pangeo-docker-images__pytorch-notebook__environment@69a31d58.yml"),
]  # fmt: skip
CUDA_GLOB = re.compile(r"^\*cuda(\d+(\.\d+)?)?\*$")


def _project(fixtures: Path, tmp_path: Path, lock: str, env: str) -> Path:
    """Copy a lock and its request into tmp_path/environments/demo/ as envtool lays them out."""
    folder = tmp_path / "environments" / "demo"
    folder.mkdir(parents=True)
    shutil.copy(fixtures / "locks" / lock, folder / "conda-lock.yml")
    shutil.copy(fixtures / "locks" / env, folder / "environment.yml")
    return folder


def _conda_lock_model(path: Path):
    """conda-lock's own parser: the authority the exports are compared with."""
    from conda_lock.lockfile import parse_conda_lock_file

    return parse_conda_lock_file(path)


@pytest.mark.parametrize(
    ("lock", "env"), LOCKS, ids=[lk.split("__")[1] + lk.split("conda-lock")[1] for lk, _ in LOCKS]
)
def test_export_real_lock_is_portable(fixtures, tmp_path, monkeypatch, run_cli, lock, env) -> None:
    folder = _project(fixtures, tmp_path, lock, env)
    monkeypatch.chdir(tmp_path)
    view = read_lock(folder / "conda-lock.yml")
    request = parse_environment_yml((folder / "environment.yml").read_text(), "environment.yml")
    for platform in [None, *view.platforms]:
        code, out, _ = run_cli(["export", "demo"] + (["--platform", platform] if platform else []))
        assert code == 0
        exported = parse_environment_yml(out, "export")
        # by default every platform, unless they locked different torch builds (CUDA here, CPU
        # there): then the first CUDA kind's platforms, named in the header (issue 12 item 3)
        header = re.search(r"^# Exported by envtool from \S+ for (.+)\.$", out, re.MULTILINE)
        platforms = [platform] if platform else header.group(1).split(", ")
        assert set(platforms) <= set(view.platforms)
        assert exported.prefix is None and "prefix:" not in out
        assert not any(
            c.startswith(("https://conda.anaconda.org", "file:")) for c in exported.channels
        )
        assert exported.dependencies
        for spec in exported.dependencies:
            assert not spec.name.startswith("__")
            locked = {p: view.conda(p).get(spec.name) for p in platforms}
            assert all(locked.values()), f"{spec.name} missing on some of {platforms}"
            versions = {pkg.version for pkg in locked.values()}
            if spec.version is not None:
                assert versions == {spec.version}, spec.render()
            if spec.build is not None:
                # the only builds kept: a glob that matches every locked CUDA build, or a CPU
                # pytorch's cpu glob
                assert CUDA_GLOB.match(spec.build) or (
                    spec.name == "pytorch" and spec.build in ("cpu*", "*cpu*")
                ), spec.render()
                pattern = re.compile(spec.build.replace(".", r"\.").replace("*", ".*"))
                assert all(pattern.fullmatch(pkg.build) for pkg in locked.values())
        if request.pip:
            assert exported.pip, "the request's pip section was dropped"
        # a CUDA pytorch on every exported platform keeps its CUDA in the export
        torch = {p: view.conda(p).get("pytorch") for p in platforms}
        if all(t is not None and "cuda" in t.build for t in torch.values()):
            assert exported.find("pytorch")[0].build is not None


def test_export_pins_pangeo_cuda129_lock(fixtures, tmp_path, monkeypatch, run_cli) -> None:
    _project(fixtures, tmp_path, *LOCKS[2])
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["export", "demo"])
    assert code == 0
    exported = parse_environment_yml(out, "export")
    rendered = [d.render() for d in exported.dependencies]
    assert "pytorch=2.10.0=*cuda129*" in rendered
    assert "cuda-version=12.9" in rendered  # from `cuda-version>=12.9` in the request
    assert exported.channels == ["conda-forge", "nodefaults"]


def test_non_utf8_request_beside_the_lock_is_a_usage_error(
    fixtures, tmp_path, monkeypatch, run_cli
) -> None:
    folder = _project(fixtures, tmp_path, *LOCKS[2])
    (folder / "environment.yml").write_bytes(
        "# caf\u00e9\ndependencies: [pytorch]\n".encode("latin-1")
    )
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["export", "demo"])
    assert code == 2
    assert "environment.yml: not a UTF-8 text file" in err and "Traceback" not in err


def test_export_drops_platform_specific_packages_and_warns(
    fixtures, tmp_path, monkeypatch, run_cli
) -> None:
    _project(fixtures, tmp_path, *LOCKS[0])
    monkeypatch.chdir(tmp_path)
    _, out, err = run_cli(["export", "demo"])
    rendered = [d.render() for d in parse_environment_yml(out, "x").dependencies]
    # osx-arm64 locked the CPU build: one file cannot ask for both, so the default export is for
    # the CUDA platforms and keeps their CUDA (it dropped the glob and pytorch-cuda; issue 12)
    assert "for linux-64, win-64." in out.splitlines()[0]
    assert "pytorch::pytorch=2.3.1=*cuda11.8*" in rendered
    assert "pytorch::pytorch-cuda=11.8" in rendered
    assert "export --platform osx-arm64 for the others" in err
    _, out, _ = run_cli(["export", "demo", "--platform", "linux-64"])
    rendered = [d.render() for d in parse_environment_yml(out, "x").dependencies]
    assert "pytorch::pytorch=2.3.1=*cuda11.8*" in rendered
    assert "pytorch::pytorch-cuda=11.8" in rendered
    # pytorch-channel CUDA: no cuda-version added (the lock's 12.5 is the bug, not the intent)
    assert not any(r.startswith("cuda-version") for r in rendered)


def test_export_warns_about_cpu_torch_in_broken_lock(
    fixtures, tmp_path, monkeypatch, run_cli
) -> None:
    _project(fixtures, tmp_path, *LOCKS[1])
    monkeypatch.chdir(tmp_path)
    _, out, err = run_cli(["export", "demo", "--platform", "linux-64"])
    assert "pytorch on linux-64 is locked as a CPU build (py3.10_cpu_0)" in err
    # broken, not a choice: the CPU build is not pinned (the warning says re-lock)
    assert "pytorch=2.1.0.dev20230310\n" in out and "cpu*" not in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lock", "env"), LOCKS, ids=[lk.split("__")[1] + lk.split("conda-lock")[1] for lk, _ in LOCKS]
)
def test_explicit_matches_conda_lock_render(fixtures, tmp_path, run_cli, lock, env) -> None:
    from conda_lock.conda_lock import render_lockfile_for_platform

    folder = _project(fixtures, tmp_path, lock, env)
    model = _conda_lock_model(folder / "conda-lock.yml")
    for platform in model.metadata.platforms:
        code, out, _ = run_cli(
            [
                "export",
                "--lock",
                str(folder / "conda-lock.yml"),
                "--format",
                "explicit",
                "--platform",
                platform,
            ]
        )
        assert code == 0
        theirs = render_lockfile_for_platform(
            lockfile=_conda_lock_model(folder / "conda-lock.yml"),
            include_dev_dependencies=True,
            extras={c for p in model.package for c in p.categories},
            kind="explicit",
            platform=platform,
            suppress_warning_for_pip_and_explicit=True,
        )
        body = [ln for ln in out.splitlines() if not ln.startswith("# ") or ln.startswith("# pip ")]
        their_body = [
            ln
            for ln in theirs
            if ln.strip() and (not ln.startswith("#") or ln.startswith("# pip "))
        ]
        assert body[0] == "@EXPLICIT" and len(body) > 100
        assert body == their_body


def test_explicit_needs_platform_when_no_linux64(fixtures, tmp_path, run_cli) -> None:
    folder = _project(fixtures, tmp_path, *LOCKS[0])
    code, _, err = run_cli(["export", "--lock", str(folder / "conda-lock.yml"), "--format", "explicit", "--platform", "linux-aarch64"])  # fmt: skip
    assert code == 2 and "linux-64, osx-arm64, win-64" in err


def test_output_file_is_written_atomically_and_dry_run_writes_nothing(
    fixtures, tmp_path, monkeypatch, run_cli
) -> None:
    _project(fixtures, tmp_path, *LOCKS[2])
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "out" / "environment.yml"
    code, out, err = run_cli(["export", "demo", "-o", str(target), "--dry-run"])
    assert code == 0 and not target.exists() and "dry run" in err and "pytorch=" in out
    code, out, _ = run_cli(["export", "demo", "-o", str(target)])
    assert code == 0 and out == ""
    first = target.read_text()
    assert "pytorch=2.10.0=*cuda129*" in first
    assert [p.name for p in target.parent.iterdir()] == ["environment.yml"]  # no temp left
    run_cli(["export", "demo", "-o", str(target)])
    assert target.read_text() == first  # deterministic


def test_unwritable_output_is_usage_error(fixtures, tmp_path, run_cli) -> None:
    folder = _project(fixtures, tmp_path, *LOCKS[2])
    (tmp_path / "a-file").touch()
    target = tmp_path / "a-file" / "environment.yml"
    code, out, err = run_cli(
        ["export", "--lock", str(folder / "conda-lock.yml"), "-o", str(target)]
    )
    assert code == 2 and f"cannot write {target}" in err and out == ""


def test_missing_project_lock_is_usage_error(tmp_path, monkeypatch, run_cli) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["export", "nope"])
    assert code == 2 and "envtool lock nope" in err


def test_name_and_lock_are_exclusive(tmp_path, run_cli) -> None:
    code, _, err = run_cli(["export", "x", "--lock", str(tmp_path / "l.yml")])
    assert code == 2 and "give NAME or --lock FILE" in err


def test_no_name_exports_the_active_envs_lock_or_says_it_has_none(
    tmp_path, run_cli, monkeypatch
) -> None:
    """No NAME, no --lock: the active environment (here the test interpreter's venv, which
    envtool did not install) is named, and why nothing can be exported from it; with nothing
    active, envtool's own venv is not blamed: nothing was named."""
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)
    code, _, err = run_cli(["export"])
    assert code == 2 and len(err.splitlines()) == 1
    assert f"error: {sys.prefix}: this venv was not installed by envtool (no lock to export)" in err
    assert "pass NAME (environments/NAME/conda-lock.yml) or --lock FILE" in err
    monkeypatch.delenv("VIRTUAL_ENV")
    for command in ("export", "verify"):
        code, _, err = run_cli([command])
        assert code == 2 and len(err.splitlines()) == 1, err
        assert f"{command}: no environment is active and none was named" in err
        assert ("--lock FILE" if command == "export" else "--prefix PATH") in err
        assert sys.prefix not in err


@pytest.mark.parametrize(
    ("url", "name", "warns"),
    [
        ("https://conda.anaconda.org/conda-forge", "conda-forge", False),
        ("https://conda.anaconda.org/pytorch/label/nightly/", "pytorch/label/nightly", False),
        ("https://repo.anaconda.com/pkgs/main", "defaults", False),
        ("https://ftp.osuosl.org/pub/open-ce/current/", "https://ftp.osuosl.org/pub/open-ce/current", False),
        ("file:///srv/channel", "file:///srv/channel", True),
        ("nvidia", "nvidia", False),
    ],
)  # fmt: skip
def test_channel_name(url, name, warns) -> None:
    got, warning = channel_name(url)
    assert got == name and (warning is not None) == warns


# --- the key evidence: export -> re-solve gives the lock's versions ------------------------------

# an older glibc and kernel than channel_builder's default target, and an x86_64 archspec
VIRTUAL = (("__glibc", "2.28", "0"), ("__linux", "5.15", "0"), ("__unix", "0", "0"), ("__archspec", "1", "x86_64"))  # fmt: skip


def _channel_urls(harvested: Path, names: list[str]) -> list[str]:
    return [(harvested / n).as_uri() for n in names if n != "nodefaults"]


# case: the request a user wrote, the specs envtool solves it with (CUDA forced), __cuda
RESOLVE_CASES = {
    "conda-forge-cuda126": (
        "name: demo\nchannels:\n  - conda-forge\ndependencies:\n  - python=3.12\n  - pytorch\n",
        ["conda-forge"],
        ["python 3.12.*", "pytorch * cuda*", "cuda-version 12.6.*"],
        "12.6",
    ),
    "pytorch-channel-cuda121": (
        "name: demo\nchannels:\n  - pytorch\n  - nvidia\n  - conda-forge\n"
        "dependencies:\n  - pytorch\n  - pytorch-cuda=12.1\n",
        ["pytorch", "nvidia", "conda-forge"],
        ["pytorch", "pytorch-cuda 12.1.*"],
        "12.1",
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(RESOLVE_CASES))
def test_resolving_the_export_gives_the_locked_versions(
    harvested, tmp_path, monkeypatch, run_cli, case
) -> None:
    request, channel_names, solve_specs, cuda = RESOLVE_CASES[case]
    folder = tmp_path / "environments" / "demo"
    folder.mkdir(parents=True)
    (folder / "environment.yml").write_text(request)
    channels = _channel_urls(harvested, channel_names)

    monkeypatch.chdir(tmp_path)

    locked = cb.solve_records(channels, solve_specs, cuda, VIRTUAL)
    cb.write_lock(folder / "conda-lock.yml", locked, channel_names)
    code, exported_text, _ = run_cli(["export", "demo"])
    assert code == 0
    exported = parse_environment_yml(exported_text, "export")
    exported_channels = _channel_urls(harvested, exported.channels)
    resolved = cb.solve_records(
        exported_channels, [d.render() for d in exported.dependencies], cuda, VIRTUAL
    )
    # the naive export (`conda env export --no-builds` style): versions, no builds
    naive = [f"{d.name}={d.version}" for d in exported.dependencies if d.name != "cuda-version"]
    naive_resolved = cb.solve_records(exported_channels, naive, cuda, VIRTUAL)
    lock_v = {r.name.normalized: (str(r.version), str(r.build)) for r in locked}
    again = {r.name.normalized: (str(r.version), str(r.build)) for r in resolved}
    assert "cuda" in lock_v["pytorch"][1]  # the lock holds a CUDA build
    for spec in exported.dependencies:
        assert again[spec.name][0] == lock_v[spec.name][0], spec.name
    assert again["pytorch"] == lock_v["pytorch"]  # same build: CUDA kept, not a CPU fallback
    if case == "conda-forge-cuda126":
        rendered = [d.render() for d in exported.dependencies]
        assert rendered == ["python=3.12.11", "pytorch=2.7.1=*cuda126*", "cuda-version=12.6"]
        assert again["cuda-version"][0] == "12.6"
        # without the glob and the cuda-version pin, the same versions re-solve to a cuda129
        # build and CUDA 12.9, which needs driver 575 instead of 560: why the export keeps both
        naive = {r.name.normalized: (str(r.version), str(r.build)) for r in naive_resolved}
        assert naive["pytorch"][1].startswith("cuda129") and naive["cuda-version"][0] == "12.9"


def test_not_a_lock_is_usage_error(tmp_path, run_cli) -> None:
    bad = tmp_path / "conda-lock.yml"
    bad.write_text("name: x\ndependencies: []\n")
    code, _, err = run_cli(["export", "--lock", str(bad)])
    assert code == 2 and "not a conda-lock file" in err


def test_export_without_request_uses_the_locks_top_level_packages(
    fixtures, tmp_path, run_cli
) -> None:
    # this lock's metadata.sources are absolute CI paths that do not exist here
    lock = tmp_path / "conda-lock.yml"
    shutil.copy(fixtures / "locks" / LOCKS[5][0], lock)
    code, out, err = run_cli(["export", "--lock", str(lock)])
    assert code == 0 and "no environment.yml beside" in err
    exported = parse_environment_yml(out, "export")
    view = read_lock(lock)
    needed = {d for p in view.packages for d in p.dependencies}
    names = [d.name for d in exported.dependencies]
    assert "pytorch" in names and not any(n in needed and n != "pytorch" for n in names)
    assert exported.find("pytorch")[0].render() == "pytorch=1.13.1=*cuda112*"


def test_a_lock_that_is_not_text_is_a_usage_error(tmp_path, run_cli) -> None:
    lock = tmp_path / "conda-lock.yml"
    lock.write_bytes(b"version: 1\n\xff\xfe\x00garbage")
    code, _, err = run_cli(["export", "--lock", str(lock)])
    assert code == 2
    assert "not valid YAML" in err and "Traceback" not in err


@pytest.mark.integration
def test_export_of_a_v1_lock_does_not_load_conda_lock(fixtures, tmp_path) -> None:
    """export reads v1 with envtool's own reader, like install: importing conda-lock costs more
    than the whole export."""
    import subprocess
    import sys

    lock = tmp_path / "conda-lock.yml"
    shutil.copy(fixtures / "locks" / LOCKS[2][0], lock)
    code = (
        "import sys; from pathlib import Path; from envtool.commands.export import run_export; "
        f"text = run_export(None, Path({str(lock)!r}), 'linux-64', 'explicit', None, False); "
        "assert text.count('https://') > 100; "
        "assert not [m for m in sys.modules if m.startswith('conda_lock')], 'conda_lock loaded'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


DEV_LOCK = """\
version: 1
metadata:
  content_hash: {linux-64: 'c0'}
  channels: [{url: conda-forge, used_env_vars: []}]
  platforms: [linux-64]
  sources: [environment.yml]
package:
- {name: zlib, version: 1.3.1, manager: conda, platform: linux-64, dependencies: {},
   url: 'https://conda.anaconda.org/conda-forge/linux-64/zlib-1.3.1-hb9d3cd8_2.conda',
   hash: {md5: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa3', sha256: 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb3'}, category: main, optional: false}
- {name: pytest, version: 8.3.2, manager: conda, platform: linux-64, dependencies: {python: '*'},
   url: 'https://conda.anaconda.org/conda-forge/noarch/pytest-8.3.2-pyhd8ed1ab_0.conda',
   hash: {md5: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2', sha256: 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2'}, category: dev, optional: true}
- {name: python, version: 3.11.9, manager: conda, platform: linux-64, dependencies: {zlib: '>=1'},
   url: 'https://conda.anaconda.org/conda-forge/linux-64/python-3.11.9-h1_0_cpython.conda',
   hash: {md5: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1', sha256: 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb1'}, category: main, optional: false}
"""


def test_install_leaves_dev_packages_out_and_export_keeps_them(tmp_path, run_cli) -> None:
    """One reader, two uses: install leaves optional (dev/extra) packages out, as `conda-lock
    install` does; export keeps every category, as conda-lock's parser returns them, in
    conda-lock's order (the dependency order, not the file's)."""
    from conda_lock.lockfile import parse_conda_lock_file

    lock = tmp_path / "conda-lock.yml"
    lock.write_text(DEV_LOCK)
    ours, theirs = read_lock(lock), parse_conda_lock_file(lock)
    assert [p.name for p in ours.for_platform("linux-64")] == ["zlib", "python"]
    assert {p.name: p.optional for p in ours.packages} == {
        d.name: "main" not in d.categories for d in theirs.package
    }
    code, out, _ = run_cli(["export", "--lock", str(lock), "--format", "explicit"])
    assert code == 0
    assert [ln.rsplit("/", 1)[-1] for ln in out.splitlines() if ln.startswith("https://")] == [
        "zlib-1.3.1-hb9d3cd8_2.conda#" + "a" * 31 + "3",
        "python-3.11.9-h1_0_cpython.conda#" + "a" * 31 + "1",
        "pytest-8.3.2-pyhd8ed1ab_0.conda#" + "a" * 31 + "2",
    ]
    code, out, _ = run_cli(["export", "--lock", str(lock)])
    rendered = [d.render() for d in parse_environment_yml(out, "x").dependencies]
    assert code == 0 and rendered == ["pytest=8.3.2"]  # the one package nothing depends on


def test_export_takes_dir_like_create_and_lock(fixtures, tmp_path, monkeypatch, run_cli) -> None:
    """`create NAME --dir D` / `lock NAME --dir D` write D/environments/NAME; export found NAME
    only under the cwd (issue 12 item 8). `export NAME --dir D` from elsewhere exports the same
    text as `export NAME` in D; a wrong D names the command that makes the lock there."""
    project = tmp_path / "proj"
    _project(fixtures, project, *LOCKS[2])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, here, _ = run_cli(["export", "demo"], project)
    assert code == 0
    code, there, err = run_cli(["export", "demo", "--dir", str(project)], elsewhere)
    assert code == 0, err
    assert there == here and "pytorch=" in there
    code, _, err = run_cli(["export", "demo", "--dir", str(elsewhere)], project)
    assert code == 2 and "Traceback" not in err
    assert f"run `envtool lock demo --dir {elsewhere}`" in err
    lock = project / "environments" / "demo" / "conda-lock.yml"
    code, _, err = run_cli(["export", "--lock", str(lock), "--dir", str(project)], elsewhere)
    assert code == 2 and "give NAME with --dir, or --lock FILE alone" in err


@pytest.mark.integration
def test_a_cpu_lock_exports_its_cpu_pin_and_inspect_reads_it_back_as_cpu(
    harvested, run_cli, tmp_path
) -> None:
    """A bare `pytorch=2.x` re-solves to a CUDA build on a GPU host; the export keeps `cpu*`,
    and envtool's own reader of environment files says the file asks for the CPU build."""
    conda_forge = str(harvested / "conda-forge")
    rc, _, err = run_cli(
        ["create", "c", "--no-install", "--cuda", "cpu", "--channel", conda_forge], tmp_path
    )
    assert rc == 0, err
    rc, _, err = run_cli(["export", "c", "-o", "exported.yml"], tmp_path)
    assert rc == 0, err
    exported = parse_environment_yml((tmp_path / "exported.yml").read_text(), "exported.yml")
    (torch,) = [d for d in exported.dependencies if d.name == "pytorch"]
    locked = read_lock(tmp_path / "environments" / "c" / "conda-lock.yml").conda("linux-64")[
        "pytorch"
    ]
    assert locked.build.startswith("cpu_")
    assert torch.render() == f"pytorch={locked.version}=cpu*"
    rc, out, err = run_cli(["inspect", "exported.yml", "--json"], tmp_path)
    assert rc == 0, err
    report = json.loads(out)
    assert (report["flavor"], report["cuda"], report["gpu_required"]) == ("cpu", None, False), out
