"""`envtool create` / `envtool lock` as a user meets them: exit codes, one-line errors, --dry-run,
--json, profiles, and nothing written when a check fails."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from solve_scenarios import H200

from envtool.adapters.shipped.profiles import profiles_dir
from envtool.adapters.solve.rattler_solve import resolve_channel
from envtool.core.spec import parse_environment_yml


@pytest.fixture(scope="module")
def conda_forge(harvested) -> str:
    return str(harvested / "conda-forge")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--cuda", "12.4", "--driver", "470.182.03"],
            "needs driver ≥ 550.54.14; this driver (470.182.03) runs CUDA ≤ 11.4",
        ),
        (
            ["--torch", "2.7", "--flavor", "pytorch"],
            "the pytorch channel stopped at 2.5 — use --flavor conda-forge",
        ),
        (
            ["--cuda", "12.7"],
            "--cuda 12.7: not a known CUDA version — use auto, cpu, a major (9, 10, 11, 12, 13) or one",
        ),
        (["--cuda", "cuda12"], "did you mean --cuda 12 (the newest 12.x this host runs)?"),
        (["--cuda", "gpu"], "--cuda auto picks the CUDA build this host's driver and GPUs run"),
        (
            ["--cuda", "cuda12.6"],
            "--cuda cuda12.6: not a known CUDA version — did you mean --cuda 12.6?",
        ),
        (["--cuda", "cu118"], "did you mean --cuda 11.8?"),
        (["--cuda", "12.8.1"], "did you mean --cuda 12.8?"),
        (["--gpu", "eight"], "--gpu eight: not a compute capability"),
        (["--gpu", "sm_xx"], "--gpu sm_xx: not a compute capability"),
        (["--virtual-package", "glibc"], "--virtual-package glibc: expected NAME=VER"),
        (
            ["--profile", "nope"],
            "--profile nope: no such profile — use one of ddp, fsdp, lm, pytorch",
        ),
        (["-f", "missing.yml"], "-f missing.yml: no such file"),
    ],
)
def test_impossible_or_bad_requests_exit_2_with_one_line(args, message, run_cli, tmp_path) -> None:
    rc, out, err = run_cli(["create", "x", "--no-install", *args], tmp_path)
    assert rc == 2
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "environments").exists()


def test_binary_file_given_to_f_is_a_usage_error(run_cli, tmp_path) -> None:
    (tmp_path / "env.yml").write_bytes(b"\xff\xfe\x00binary")
    rc, _, err = run_cli(["create", "x", "--no-install", "-f", "env.yml"], tmp_path)
    assert rc == 2
    assert "-f env.yml: not a UTF-8 text file" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "lock, kind",
    [
        ("locks/konstantinjdobler__nlp-research-template__conda-lock.yml", "a conda-lock file"),
        ("pixi/pytorch-gpu-pixi-example.pixi.lock", "a pixi.lock"),
    ],
)
def test_a_lock_given_to_f_names_install_not_an_empty_env(
    lock, kind, fixtures, run_cli, tmp_path
) -> None:
    """`create x -f conda-lock.yml` locked and installed `pytorch *` alone (3 packages), exit 0:
    every key of an environment.yml is missing from a lock, so the request was empty."""
    import shutil

    base = fixtures if lock.startswith("locks/") else Path(__file__).parents[1] / "fixtures"
    shutil.copy(base / lock, tmp_path / "their.lock")
    rc, _, err = run_cli(["create", "x", "-f", "their.lock", "--cuda", "cpu"], tmp_path)
    assert rc == 2, err
    assert f"their.lock is {kind}, not an environment.yml" in err
    assert "`envtool install NAME --lock their.lock`" in err and "solving" not in err
    assert not (tmp_path / "environments").exists()


def test_pair_never_built_lists_real_builds(conda_forge, run_cli, tmp_path) -> None:
    rc, _, err = run_cli(
        [
            "create",
            "x",
            "--no-install",
            "--torch",
            "2.7",
            "--cuda",
            "12.8",
            "--channel",
            conda_forge,
            *H200,
        ],
        tmp_path,
    )
    assert rc == 2
    # the message names what was searched (a local folder here), not the flavor
    assert (
        f"torch 2.7 was never built for CUDA 12.8 on the channels searched ({conda_forge})" in err
    )
    assert "2.7.1: 12.6, 12.9" in err


@pytest.mark.integration
def test_dry_run_prints_the_plan_and_writes_nothing(conda_forge, run_cli, tmp_path) -> None:
    rc, out, err = run_cli(
        [
            "create",
            "dry",
            "--no-install",
            "--dry-run",
            "--cuda",
            "12.6",
            "--channel",
            conda_forge,
            *H200,
        ],
        tmp_path,
    )
    assert rc == 0, err
    assert "CUDA 12.6" in out and "pytorch * cuda126*" in out
    assert re.search(r"dry run: nothing written \(linux-64: \d+ packages\)", out), out
    assert not (tmp_path / "environments").exists()


@pytest.mark.integration
@pytest.mark.parametrize("name", ["_scratch", "my+env", "env@2"])
def test_names_conda_accepts_are_accepted(name, conda_forge, run_cli, tmp_path) -> None:
    """envtool's env names follow conda's rule (conda create -n _scratch works)."""
    args = ["create", name, "--no-install", "--cuda", "cpu", "--channel", conda_forge]
    rc, _, err = run_cli(args, tmp_path)
    assert rc == 0, err
    assert (tmp_path / "environments" / name / "conda-lock.yml").is_file()


@pytest.mark.integration
def test_unwritable_project_folder_is_a_usage_error(conda_forge, run_cli, tmp_path) -> None:
    (tmp_path / "environments").write_text("a file where the folder should be\n")
    rc, _, err = run_cli(
        ["create", "x", "--no-install", "--cuda", "12.6", "--channel", conda_forge, *H200],
        tmp_path,
    )
    assert rc == 2
    assert "cannot write environments/x: environments is a file, not a directory" in err
    assert "pick a path under a directory" in err
    assert "Traceback" not in err


@pytest.mark.integration
def test_json_envelope_carries_the_plan(conda_forge, run_cli, tmp_path) -> None:
    rc, out, err = run_cli(
        [
            "create",
            "j",
            "--no-install",
            "--json",
            "--cuda",
            "cpu",
            "--channel",
            conda_forge,
            "--profile",
            "ddp",
        ],
        tmp_path,
    )
    assert rc == 0, err
    data = json.loads(out)
    assert data["command"] == "create" and data["exit_code"] == 0 and data["written"] is True
    assert data["plan"]["cuda"] is None and data["plan"]["cuda_mode"] == "cpu"
    assert data["packages"]["linux-64"] > 10


def test_json_error_envelope_on_refusal(run_cli, tmp_path) -> None:
    rc, out, _ = run_cli(["create", "x", "--no-install", "--json", "--cuda", "12.7"], tmp_path)
    assert rc == 2
    assert json.loads(out)["error"]["message"].startswith("--cuda 12.7")


def _write_channel(root: Path) -> Path:
    """A tiny local channel with a mis-specified CUDA build: pytorch cuda126 that drags in a 12.8
    runtime. The solve succeeds; the solution is wrong; envtool must refuse to lock it."""

    def rec(name, version, build, depends):
        return {
            "name": name,
            "version": version,
            "build": build,
            "build_number": 0,
            "depends": depends,
            "subdir": "linux-64",
            "md5": "0" * 32,
            "size": 1,
        }

    packages = {
        "pytorch-2.5.0-cuda126_bad_0.tar.bz2": rec(
            "pytorch", "2.5.0", "cuda126_bad_0", ["cuda-cudart 12.8.*"]
        ),
        "cuda-cudart-12.8.57-0.tar.bz2": rec("cuda-cudart", "12.8.57", "0", []),
        "cuda-version-12.6-0.tar.bz2": rec("cuda-version", "12.6", "0", []),
    }
    for subdir, pk in (("linux-64", packages), ("noarch", {})):
        (root / subdir).mkdir(parents=True)
        (root / subdir / "repodata.json").write_text(
            json.dumps({"info": {"subdir": subdir}, "packages": pk, "packages.conda": {}})
        )
    return root


@pytest.mark.integration
def test_wrong_solution_is_a_diagnosed_failure_and_nothing_is_written(run_cli, tmp_path) -> None:
    channel = _write_channel(tmp_path / "chan")
    (tmp_path / "env.yml").write_text("name: bad\ndependencies:\n  - pytorch\n")
    rc, _, err = run_cli(
        [
            "create",
            "bad",
            "--no-install",
            "--cuda",
            "12.6",
            "-f",
            "env.yml",
            "--channel",
            str(channel),
            *H200,
        ],
        tmp_path,
    )
    assert rc == 1
    assert "more than one CUDA version" in err and "cuda-cudart 12.8.57" in err
    assert not (tmp_path / "environments" / "bad").exists()


def test_lock_without_environment_is_usage_error(run_cli, tmp_path) -> None:
    rc, _, err = run_cli(["lock", "ghost"], tmp_path)
    assert rc == 2 and "envtool create ghost" in err


def test_lock_check_without_lock_is_stale(run_cli, tmp_path) -> None:
    env = tmp_path / "environments" / "nolock"
    env.mkdir(parents=True)
    (env / "environment.yml").write_text("dependencies:\n  - pytorch\n")
    rc, _, err = run_cli(["lock", "nolock", "--check"], tmp_path)
    assert rc == 1 and "missing" in err


def test_lock_check_of_a_conda_lock_made_lock_says_it_cannot_tell(
    run_cli, tmp_path, fixtures
) -> None:
    """A lock conda-lock wrote (a real one from GitHub) has no envtool input hash: not "missing"."""
    src = fixtures / "locks" / "konstantinjdobler__nlp-research-template__conda-lock.yml"
    env = tmp_path / "environments" / "theirs"
    env.mkdir(parents=True)
    (env / "environment.yml").write_text("dependencies:\n  - pytorch\n")
    (env / "conda-lock.yml").write_bytes(src.read_bytes())
    rc, _, err = run_cli(["lock", "theirs", "--check"], tmp_path)
    assert rc == 1
    assert "lock is not envtool's" in err and "missing" not in err
    assert "envtool lock theirs" in err


def test_lock_check_of_a_broken_lock_names_the_broken_yaml(run_cli, tmp_path) -> None:
    """It said "not envtool's (records no input hash)", blaming the wrong thing."""
    env = tmp_path / "environments" / "broken"
    env.mkdir(parents=True)
    (env / "environment.yml").write_text("dependencies:\n  - pytorch\n")
    (env / "conda-lock.yml").write_text("version: 1\nmetadata: [\n")
    rc, _, err = run_cli(["lock", "broken", "--check"], tmp_path)
    assert rc == 2 and "not valid YAML" in err and "line 3" in err, err


def test_lock_of_a_non_utf8_environment_yml_is_a_usage_error(run_cli, tmp_path) -> None:
    env = tmp_path / "environments" / "latin1"
    env.mkdir(parents=True)
    (env / "environment.yml").write_bytes(
        "# caf\u00e9\ndependencies:\n  - pytorch\n".encode("latin-1")
    )
    for extra in ([], ["--check"]):
        rc, _, err = run_cli(["lock", "latin1", *extra], tmp_path)
        assert rc == 2
        assert "environment.yml: not a UTF-8 text file" in err
        assert "Traceback" not in err


def test_shipped_profiles_parse_and_ask_for_pytorch() -> None:
    names = sorted(p.name for p in profiles_dir().iterdir() if (p / "environment.yml").is_file())
    assert names == ["ddp", "fsdp", "lm", "pytorch"]
    for name in names:
        path = profiles_dir() / name / "environment.yml"
        spec = parse_environment_yml(path.read_text(), str(path))
        assert spec.find("pytorch") and spec.find("python")
    default = parse_environment_yml(
        (profiles_dir() / "pytorch" / "environment.yml").read_text(), "p"
    )
    assert {d.name for d in default.dependencies} == {"python", "pytorch", "torchvision", "pip"}


def test_channel_resolution(tmp_path) -> None:
    assert resolve_channel("conda-forge") == "https://conda.anaconda.org/conda-forge"
    assert resolve_channel("https://example.org/chan/") == "https://example.org/chan"
    assert resolve_channel(str(tmp_path)) == tmp_path.resolve().as_uri()


@pytest.mark.integration
def test_create_installs_the_lock_it_wrote(setup, run_cli, tmp_path, monkeypatch) -> None:
    """Without --no-install: plan -> solve -> lock -> the installer, over a real installable channel."""
    monkeypatch.setenv("ENVTOOL_DRIVER_VERSION", "580.65.06")  # a host whose driver runs 12.6
    (tmp_path / "env.yml").write_text("name: e2e\ndependencies:\n  - python\n  - pytorch\n")
    prefix = tmp_path / "prefix"
    rc, out, err = run_cli(
        [
            "create",
            "e2e",
            "--cuda",
            "12.6",
            "-f",
            "env.yml",
            "--channel",
            str(setup.channel),
            "--prefix",
            str(prefix),
            *H200,
        ],
        tmp_path,
    )
    assert rc == 0, err
    assert f"installed e2e into {prefix}" in out
    metas = [p.name for p in (prefix / "conda-meta").glob("pytorch-*.json")]
    assert len(metas) == 1 and "cuda126" in metas[0]


@pytest.mark.integration
def test_create_keeps_hand_edits_and_other_projects_envs_unless_told(
    setup, run_cli, tmp_path, monkeypatch
) -> None:
    """create again rewrote environments/NAME/environment.yml from its flags, dropping hand
    edits; and `create hello` in project B replaced project A's installed `hello`."""
    monkeypatch.setenv("ENVTOOL_DRIVER_VERSION", "580.65.06")
    monkeypatch.setenv("ENVTOOL_ENVS_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "env.yml").write_text("dependencies:\n  - python\n  - pytorch\n")
    base = ["--cuda", "12.6", "--channel", str(setup.channel), *H200]
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    create = ["create", "hello", "-f", str(tmp_path / "env.yml"), *base]
    assert run_cli(create, one)[0] == 0
    assert run_cli([*create, "--no-install"], one)[0] == 0  # create's own file: replaced freely
    yml = one / "environments" / "hello" / "environment.yml"
    lock = one / "environments" / "hello" / "conda-lock.yml"

    def as_an_older_envtool_wrote_it() -> None:  # no file sha256 recorded, a valid digest
        import re

        from envtool.core.lockfile import DIGEST_PLACEHOLDER, with_content_digest

        raw = re.sub(rb"(?m)^\s*envtool_request_file_sha256:.*\n", b"", lock.read_bytes())
        raw = re.sub(
            rb"(envtool_lock_sha256:\s*)'?[0-9a-f]{64}'?",
            rb"\g<1>" + DIGEST_PLACEHOLDER.encode(),
            raw,
        )
        lock.write_bytes(with_content_digest(raw))
        assert b"envtool_request_file_sha256" not in lock.read_bytes()

    as_an_older_envtool_wrote_it()
    assert run_cli([*create, "--no-install"], one)[0] == 0  # its input hash: the same file
    as_an_older_envtool_wrote_it()
    yml.write_text(yml.read_text() + "# my notes: keep numpy <2\n")
    rc, _, err = run_cli([*create, "--no-install"], one)
    assert rc == 2 and "was edited since it was locked" in err and "envtool lock hello" in err
    assert yml.read_text().endswith("# my notes: keep numpy <2\n")
    assert run_cli(["lock", "hello"], one)[0] == 0  # the edits locked: the request as it is
    rc, _, err = run_cli([*create, "--no-install"], one)
    assert rc == 0 and "rewrote environments/hello/environment.yml" in err

    rc, _, err = run_cli(create, two)  # the installed hello is project one's
    assert rc == 2 and "not from this project's environments/hello" in err, err
    assert not (two / "environments").exists()
    rc, _, err = run_cli([*create, "--yes"], two)
    assert rc == 0, err

    # an env envtool did not install (here: made one, then its envtool state removed, as a
    # conda-made env looks): refused before the solve, nothing written (stdin: no answer)
    import shutil

    shutil.rmtree(tmp_path / "envs" / "hello" / "conda-meta" / "envtool")
    three = tmp_path / "three"
    three.mkdir()
    rc, _, err = run_cli(create, three)
    assert rc == 2 and "envtool did not install" in err and "solving" not in err, err
    assert not (three / "environments").exists()


@pytest.mark.integration
def test_create_again_without_f_asks_before_dropping_the_files_packages(
    setup, run_cli, tmp_path, monkeypatch
) -> None:
    """`create team -f team.yml`, then `create team --cuda …` ("make it again") rewrote the locked
    environments/team/environment.yml from the default profile: the file's other packages left
    the file, the lock and the env, exit 0. Now it is refused (no terminal to ask) before the
    solve, and the printed command keeps them; switching CUDA with the same packages is not."""
    import io
    import shlex

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # a script: nobody answers
    monkeypatch.setenv("ENVTOOL_DRIVER_VERSION", "580.65.06")
    (tmp_path / "team.yml").write_text("dependencies:\n  - python\n  - pytorch\n  - python_abi\n")
    base = ["--channel", str(setup.channel), "--no-install", *H200]
    assert run_cli(["create", "team", "-f", "team.yml", "--cuda", "12.6", *base], tmp_path)[0] == 0
    yml = tmp_path / "environments" / "team" / "environment.yml"
    locked = yml.read_text()
    assert "python_abi" in locked and "cuda-version" in locked

    rc, _, err = run_cli(["create", "team", "--cuda", "12.6", *base], tmp_path)
    assert rc == 2, err
    line = _error_line(err)
    assert "asks for python_abi; create's request (profile pytorch) would drop it" in line, line
    assert "solving" not in err and yml.read_text() == locked  # nothing solved or written
    keep = re.search(r"`(envtool create [^`]+)`", line)
    assert keep is not None, line
    argv = [*shlex.split(keep.group(1))[1:], "--cuda", "cpu", "--python", "3.11", *base]
    rc, _, err = run_cli(argv, tmp_path)  # the hint's command, another CUDA: cuda-version goes
    assert rc == 0, err
    text = yml.read_text()
    assert "python_abi" in text and "cpu*" in text and "cuda-version" not in text
    # the same create again, from a file without python: the pin --python writes, pip for a
    # pip section and cuda-version are the plan's; nothing of the user's is dropped
    (tmp_path / "t2.yml").write_text("dependencies:\n  - pytorch\n  - python_abi\n")
    again = ["create", "team", "-f", "t2.yml", "--cuda", "12.6", "--python", "3.11", *base]
    assert run_cli(again, tmp_path)[0] == 0
    assert run_cli(again, tmp_path)[0] == 0


@pytest.mark.integration
@pytest.mark.parametrize("cuda", [[], ["--cuda", "cpu"]])
def test_a_package_no_channel_has_is_named_not_blamed_on_cuda(
    cuda, setup, run_cli, tmp_path, monkeypatch
) -> None:
    """The default profile asks for torchvision, which this channel lacks: the error said "no
    CUDA build (12.6) solves with this request: pass --cuda cpu", and --cuda cpu failed alike."""
    monkeypatch.setenv("ENVTOOL_DRIVER_VERSION", "580.65.06")
    args = ["create", "g1", "--channel", str(setup.channel), "--dry-run", *cuda, *H200]
    rc, _, err = run_cli(args, tmp_path)
    assert rc == 2, err
    line = _error_line(err)
    assert f"no torchvision package in {setup.channel.as_uri()}" in line, line
    assert "the request asks for torchvision: drop it" in line and "--cuda cpu" not in line


@pytest.mark.integration
@pytest.mark.parametrize("file", ["  - python_abi >=9\n", "  - conda-forge::python_abi >=9\n"])
def test_a_version_no_channel_has_is_not_called_a_missing_package(
    file, setup, run_cli, tmp_path
) -> None:
    """The channel has python_abi 3.11 only: ">=9" is a pin to relax, not a package to drop."""
    (tmp_path / "e.yml").write_text("dependencies:\n  - python\n  - pytorch\n" + file)
    args = ["create", "v", "-f", "e.yml", "--channel", str(setup.channel), "--cuda", "cpu"]
    rc, _, err = run_cli([*args, "--dry-run"], tmp_path)
    assert rc == 2, err
    line = _error_line(err)
    assert "no solution for linux-64" in line and "relax a pin" in line, line
    assert "package in" not in line and "drop it" not in line


@pytest.mark.integration
def test_create_in_a_read_only_project_says_so_before_solving(tmp_path) -> None:
    """It solved first (minutes, on a real channel), then failed to write the lock."""
    import shutil
    import subprocess
    import sys

    project = tmp_path / "ro"
    project.mkdir()
    argv = [sys.executable, "-m", "envtool", "create", "x", "--cuda", "cpu", "--no-install"]
    if os.geteuid() == 0:  # root writes anywhere; without its capabilities it cannot
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("needs setpriv(1) to drop root's capabilities")
        argv = [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", *argv]
    project.chmod(0o555)
    try:
        out = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=120)
    finally:
        project.chmod(0o755)
    assert out.returncode == 2, out.stderr
    assert f"{project} is not writable" in out.stderr and "solving" not in out.stderr


def _error_line(err: str) -> str:
    (line,) = [x for x in err.splitlines() if x.startswith("envtool: error: ")]
    return line


@pytest.mark.integration
def test_create_and_install_refuse_a_cuda_build_on_a_gpu_less_host_alike(
    setup, run_cli, tmp_path, monkeypatch
) -> None:
    """One host check (issue 12 item 4): create used to install a CUDA build on a GPU-less host
    silently while `install` of the very lock it wrote refused. Now create refuses before it
    installs with install's line, and --force proceeds in both; --no-install only locks."""
    from envtool.adapters.host.host_probe import probe_host

    for var in ("ENVTOOL_DRIVER_VERSION", "CONDA_OVERRIDE_CUDA"):
        monkeypatch.delenv(var, raising=False)
    if probe_host().has_driver:
        pytest.skip("this host has an NVIDIA driver: the GPU-less refusal cannot happen here")
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "env.yml").write_text("name: e2e\ndependencies:\n  - python\n  - pytorch\n")
    prefix = tmp_path / "prefix"
    args = ["-f", "env.yml", "--channel", str(setup.channel), "--prefix", str(prefix)]
    create = ["create", "e2e", "--cuda", "12.6", *args, *H200]

    rc, _, err = run_cli(create, tmp_path)
    assert rc == 2, err
    refused = _error_line(err)
    assert "the lock is a CUDA 12.6 build but this host has no usable NVIDIA driver" in refused
    assert "pass --force" in refused and "Traceback" not in err
    assert not prefix.exists()  # nothing installed
    lock = tmp_path / "environments" / "e2e" / "conda-lock.yml"
    assert lock.is_file() and "locked environments/e2e/conda-lock.yml; not installed" in err

    rc, _, err = run_cli(["install", "--lock", str(lock), "--prefix", str(prefix)], tmp_path)
    assert rc == 2 and _error_line(err) == refused  # the same line, word for word
    assert not prefix.exists()
    bundle = tmp_path / "bundle"  # and install --from a bundle of that lock
    assert run_cli(["bundle", "e2e", "-o", str(bundle)], tmp_path)[0] == 0
    rc, _, err = run_cli(["install", "--from", str(bundle), "--prefix", str(prefix)], tmp_path)
    assert rc == 2 and _error_line(err) == refused
    assert not prefix.exists()

    rc, out, err = run_cli([*create, "--force"], tmp_path)
    assert rc == 0, err
    assert f"installed e2e into {prefix}" in out
    assert [p.name for p in (prefix / "conda-meta").glob("pytorch-*.json")][0].count("cuda126")

    # --no-install locks and checks nothing
    rc, _, err = run_cli(["create", "e2", "--cuda", "12.6", *args[:4], "--no-install"], tmp_path)
    assert rc == 0, err


SUGGESTED = re.compile(r"pass (--cuda [0-9a-z.]*[0-9a-z])")


def _with_cuda(args: list[str], flag: str) -> list[str]:
    """`args` with its --cuda replaced by (or extended with) the suggested flag."""
    out = list(args)
    if "--cuda" in out:
        i = out.index("--cuda")
        del out[i : i + 2]
    return [*out, *flag.split()]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "suggested"),
    [
        # the example: 11.4 was suggested and has no build; 11.8 and 11.2 builds exist but
        # do not solve with the default profile's torchvision: only the CPU build works here
        (["--cuda", "12.6", "--driver", "470.57.02"], "--cuda cpu"),
        (["--driver", "470.57.02"], "--cuda cpu"),  # auto on the same driver says the same
        (["--cuda", "13.0", "--driver", "560.28.03"], "--cuda 12.9"),  # minor-version compat
        # V100: CUDA 13 dropped Volta; conda-forge's 12.9 builds carry sm_70 (its own arch list)
        (["--cuda", "13.0", "--driver", "580.65.06", "--gpu", "7.0"], "--cuda 12.9"),
        # Kepler on its last branch (R470): CUDA 12 dropped it; 11.x builds carry sm_35 but do
        # not solve with the default profile here
        (["--cuda", "12.6", "--driver", "470.57.02", "--gpu", "3.5"], "--cuda cpu"),
        (["--cuda", "12.6", "--driver", "470.57.02", "--gpu", "9.0"], "--cuda cpu"),  # Hopper
    ],
)
def test_a_refusal_suggests_a_cuda_that_then_succeeds(
    args, suggested, conda_forge, run_cli, tmp_path
) -> None:
    """Every --cuda a refusal suggests is run on the same inputs (channel, driver, GPU) and plans
    and solves."""
    base = ["create", "x", "--no-install", "--channel", conda_forge]
    rc, _, err = run_cli([*base, *args], tmp_path)
    assert rc == 2, err
    found = SUGGESTED.findall(err)
    assert found == [suggested], err
    assert "--cuda 11.4" not in err and "or --cuda auto" not in err
    rc, out, err2 = run_cli([*base, "--dry-run", *_with_cuda(args, suggested)], tmp_path)
    assert rc == 0, err2
    assert "dry run: nothing written" in out


@pytest.mark.integration
def test_auto_skips_a_cuda_whose_builds_do_not_solve(conda_forge, run_cli, tmp_path) -> None:
    """torch alone (no torchvision): CUDA 11.8 solves on driver 470 (minor-version compat)."""
    (tmp_path / "env.yml").write_text("name: x\ndependencies:\n  - python\n  - pytorch\n")
    base = ["create", "x", "--dry-run", "--channel", conda_forge, "-f", "env.yml"]
    rc, out, err = run_cli([*base, "--driver", "470.57.02"], tmp_path)
    assert rc == 0, err
    assert "CUDA 11.8 (compat)" in out
    # an H200 on the same driver: no build helps, the driver must be upgraded
    rc, _, err = run_cli([*base, "--driver", "470.57.02", "--gpu", "9.0"], tmp_path)
    assert rc == 2
    assert "upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (sm_90)" in err
    assert "--cuda 11.8" not in err


@pytest.mark.integration
def test_create_plans_for_the_visible_gpus_of_a_probed_host(
    conda_forge, fixtures, env, tmp_path
) -> None:
    """The whole path: nvidia-smi (the real H200 capture with a real P2000 added, served by a
    stand-in on PATH) probed by `create`, CUDA_VISIBLE_DEVICES hiding the P2000: the plan's
    __cuda_arch is the H200's 9.0 and the plan says what was hidden; all visible, it is 6.1."""
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))
    from test_host_scenarios import h200_host_with_a_p2000

    xml = tmp_path / "q.xml"
    xml.write_text(h200_host_with_a_p2000(fixtures))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\n[ "$*" = "-q -x" ] && exec cat "{xml}"\nexit 1\n')
    smi.chmod(0o755)
    env.pop("ENVTOOL_DRIVER_VERSION")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    args = ["create", "v", "--dry-run", "--json", "--channel", conda_forge, "--torch", "2.7"]
    plans = {}
    for visible in ("0,1", None):
        if visible is None:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            env["CUDA_VISIBLE_DEVICES"] = visible
        out = subprocess.run(
            [sys.executable, "-m", "envtool", *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        plans[visible] = json.loads(out.stdout)["plan"]
    assert plans["0,1"]["gpus"] == ["9.0", "9.0"] and plans["0,1"]["cuda_arch"] == "9.0"
    assert (
        "planning for 2× NVIDIA H200 (CUDA_VISIBLE_DEVICES hides 1× Quadro P2000)"
        in (plans["0,1"]["notes"])
    )
    assert plans[None]["gpus"] == ["9.0", "9.0", "6.1"] and plans[None]["cuda_arch"] == "6.1"
