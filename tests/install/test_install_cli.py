"""The install family through the real CLI (`.venv/bin/envtool` subprocesses), as users run it.

Every test gets its own envs dir and package cache (ENVTOOL_ENVS_DIR / ENVTOOL_CACHE_DIR);
channels are file:// only, so nothing here touches the network.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool, start_envtool

pytestmark = pytest.mark.integration


def list_json(env: dict[str, str]) -> dict[str, dict]:
    out = run_envtool("list", "--json", env=env)
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout)["environments"]}


@pytest.mark.slow
def test_install_verify_run_hook_remove(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    project = setup.lock.parent.parent.parent  # <project>/environments/demo/conda-lock.yml
    dry = run_envtool("install", "demo", "--dry-run", "--json", env=env, cwd=project)
    assert dry.returncode == 0, dry.stderr
    assert not (tmp_path / "envs" / "demo").exists()

    out = run_envtool("install", "demo", env=env, cwd=project)
    assert out.returncode == 0, out.stderr
    assert (
        "linked 5 packages" in out.stderr and "fetching 5 packages" in out.stderr
    )  # progress on stderr

    row = list_json(env)["demo"]
    assert (row["state"], row["cuda"], row["flavor"]) == ("complete", "12.6", "conda-forge")
    assert row["torch"].startswith("2.7.1 cuda126")

    verify = run_envtool("verify", "demo", "--json", env=env)
    assert verify.returncode == 0 and json.loads(verify.stdout)["clean"] is True

    # run: the activated env (activate.d script ran), our exit code is the command's
    code = "import os, sys; print(os.environ['ENVTOOL_TEST_LIBTORCH'], sys.prefix); sys.exit(7)"
    run = run_envtool("run", "-n", "demo", "--", "python", "-c", code, env=env)
    assert run.returncode == 7, run.stderr
    assert run.stdout.split() == ["cuda126", str(tmp_path / "envs" / "demo")]

    hook = run_envtool("shell-hook", "demo", env=env)
    probe = subprocess.run(
        [
            "bash",
            "--norc",
            "-c",
            f'{hook.stdout}\necho "$CONDA_PREFIX $ENVTOOL_TEST_LIBTORCH"; command -v python',
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert probe.stdout.split() == [
        str(tmp_path / "envs" / "demo"),
        "cuda126",
        str(tmp_path / "envs/demo/bin/python"),
    ]

    # drift: a file-level change that verify must see (a package record removed by hand)
    next((tmp_path / "envs/demo/conda-meta").glob("python_abi-*.json")).unlink()
    drifted = run_envtool("verify", "demo", env=env)
    assert drifted.returncode == 1 and "missing  python_abi" in drifted.stdout

    keep = run_envtool("remove", "demo", env=env, input="n\n")
    assert keep.returncode == 2 and (tmp_path / "envs" / "demo").is_dir()
    gone = run_envtool("remove", "demo", "--yes", env=env)
    assert gone.returncode == 0 and not (tmp_path / "envs" / "demo").exists()
    assert list_json(env) == {}


def test_install_refuses_a_driver_that_cannot_run_the_lock(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    env["ENVTOOL_DRIVER_VERSION"] = "470.57.02"  # CUDA 11.4 driver vs a CUDA 12.6 lock
    out = run_envtool("install", "demo", "--lock", str(setup.lock), env=env)
    assert out.returncode == 2
    assert "470.57.02" in out.stderr and "--force" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "envs" / "demo").exists()
    forced = run_envtool("install", "demo", "--lock", str(setup.lock), "--force", env=env)
    assert forced.returncode == 0, forced.stderr


def test_remove_refuses_a_directory_that_is_not_an_env(env: dict[str, str], tmp_path: Path) -> None:
    victim = tmp_path / "envs" / "notanenv"
    victim.mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    out = run_envtool("remove", "notanenv", "--yes", env=env)
    assert out.returncode == 2 and "does not look like a conda environment" in out.stderr
    assert (victim / "precious.txt").exists()


def test_remove_refuses_a_conda_installation_and_the_active_env(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`remove --prefix <conda root>` deleted base and every env under it; the active env went
    too (conda refuses both)."""
    root = tmp_path / "miniforge"
    for meta in (root / "conda-meta", root / "envs" / "a" / "conda-meta"):
        meta.mkdir(parents=True)
        (meta / "history").write_text("==> 2024-01-01 <==\n")
    out = run_envtool("remove", "--prefix", str(root), "--yes", env=env)
    assert out.returncode == 2 and "conda installation" in out.stderr, out.stderr
    assert (root / "envs" / "a" / "conda-meta" / "history").exists()
    one = root / "envs" / "a"
    out = run_envtool(
        "remove", "--prefix", str(one), "--yes", env={**env, "CONDA_PREFIX": str(one)}
    )
    assert out.returncode == 2 and "deactivate" in out.stderr, out.stderr
    assert one.exists()
    out = run_envtool("remove", "--prefix", str(one), "--yes", env=env)
    assert out.returncode == 0, out.stderr
    assert not one.exists() and root.exists()
    # an env with the conda package installed has condabin/ too: still just an env
    two = root / "envs" / "b"
    (two / "conda-meta").mkdir(parents=True)
    (two / "conda-meta" / "history").write_text("")
    (two / "condabin").mkdir()
    assert run_envtool("remove", "--prefix", str(two), "--yes", env=env).returncode == 0
    (root / "pkgs").mkdir()  # a base with no env left: envs/ beside pkgs/
    out = run_envtool("remove", "--prefix", str(root), "--yes", env=env)
    assert out.returncode == 2 and "conda installation" in out.stderr, out.stderr


def test_export_name_outside_its_project_exports_the_lock_it_was_installed_from(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """It pointed at ./environments/NAME (absent) and told the user to start a new project."""
    assert run_envtool("install", "demo", "--lock", str(setup.lock), env=env).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = run_envtool("export", "demo", "--format", "explicit", env=env, cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    assert "exporting the lock demo was installed from" in out.stderr
    assert "@EXPLICIT" in out.stdout and "pytorch-2.7.1" in out.stdout
    # `run demo python …` without `--`: demo was taken for the command; the hint says so
    missed = run_envtool("run", "demo", "python", "-c", "1", env=env, cwd=elsewhere)
    assert missed.returncode == 2
    assert "demo is an environment — envtool run demo -- python -c 1" in missed.stderr
    alone = run_envtool("run", "demo", env=env, cwd=elsewhere)  # no command at all
    assert alone.returncode == 2
    assert alone.stderr.splitlines() == [
        "envtool: error: demo is an environment and no command followed — envtool run demo -- CMD"
    ]
    # conda list -n demo: every package, pip's as pypi
    listed = run_envtool("info", "demo", "--packages", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)["packages"]}
    assert rows["pytorch"]["version"] == "2.7.1" and "cuda126" in rows["pytorch"]["build"]
    assert rows["envtool_demo"]["channel"] == "pypi"


def test_install_into_an_env_envtool_did_not_install_asks_first(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """A conda-made env of the same name: installing the lock removes its other packages, so
    envtool asks (as `conda create` does of an existing env); no answer is a no."""
    import shutil

    prefix = tmp_path / "envs" / "mine"
    assert run_envtool("install", "mine", "--lock", str(setup.lock), env=env).returncode == 0
    shutil.rmtree(prefix / "conda-meta" / "envtool")  # now it looks like conda's own
    record = next((prefix / "conda-meta").glob("python-*.json"))
    extra = prefix / "conda-meta" / "scipy-1.0-0.json"  # a package the lock does not hold
    extra.write_text(record.read_text())
    before = sorted(p.name for p in (prefix / "conda-meta").iterdir())
    out = run_envtool("install", "mine", "--lock", str(setup.lock), env=env, input="")
    assert out.returncode == 2 and "envtool did not install" in out.stderr, out.stderr
    assert "--yes" in out.stderr
    assert sorted(p.name for p in (prefix / "conda-meta").iterdir()) == before
    out = run_envtool("install", "mine", "--lock", str(setup.lock), env=env, input="y\n")
    assert out.returncode == 0, out.stderr
    assert (prefix / "conda-meta" / "envtool" / "state.json").is_file()
    # envtool's own now: no question the next time
    out = run_envtool("install", "mine", "--lock", str(setup.lock), env=env, input="")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "ghost"],
        ["info", "ghost"],
        ["run", "-n", "ghost", "--", "true"],
        ["shell-hook", "ghost"],
    ],
)
def test_commands_on_a_missing_env_say_where_they_looked(
    args: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    out = run_envtool(*args, env=env, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"envtool: error: no environment named 'ghost' under {tmp_path / 'envs'}"
        " — create it with `envtool create ghost` (envtool list shows the installed ones)"
    ]
    assert "Traceback" not in out.stderr
    # locked in this project, not installed: the fix is the install, not a second create
    (tmp_path / "environments" / "ghost").mkdir(parents=True)
    (tmp_path / "environments" / "ghost" / "conda-lock.yml").write_text("version: 1\n")
    out = run_envtool(*args, env=env, cwd=tmp_path)
    if args[0] == "info":  # info reads the lock instead (before install)
        return
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1].endswith(
        " — environments/ghost/conda-lock.yml is here: install it with `envtool install ghost`"
    )


@pytest.mark.parametrize(
    "args", [["install", "../etc"], ["lock", "a/b"], ["bundle", "..", "-o", "x"]]
)
def test_an_env_name_that_is_a_path_is_refused(
    args: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    """NAME becomes environments/NAME/ in the project: a name with a slash would write elsewhere."""
    out = run_envtool(*args, env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "not a valid environment name" in out.stderr
    assert "Traceback" not in out.stderr


def test_verify_of_a_conda_named_env_outside_the_project_asks_for_its_lock(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`_scratch` is a name conda accepts (envs made by conda, or with --prefix); verify must say
    which lock to pass, not refuse the name as if it were a project folder."""
    meta = tmp_path / "envs" / "_scratch" / "conda-meta"
    meta.mkdir(parents=True)
    (meta / "history").write_text("")
    out = run_envtool("verify", "_scratch", env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        f"envtool: error: no lock known for {tmp_path / 'envs' / '_scratch'}"
        " — pass --lock FILE: the conda-lock.yml it came from",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["remove", "..", "--yes"],
        ["install", "../root", "--lock", "x.yml"],
        ["info", ".."],
        ["doctor", "..", "--fast"],
        ["launch", "x.yml", "-n", "..", "--dry-run"],
    ],
)
def test_a_name_that_leaves_the_envs_dir_is_refused(
    args: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    """NAME is <envs dir>/NAME: `..` is the conda root itself (a conda env too), which `remove ..
    --yes` deleted whole. A path belongs in --prefix."""
    root = tmp_path / "root"
    (root / "conda-meta").mkdir(parents=True)
    (root / "conda-meta" / "history").write_text("")
    (root / "envs").mkdir()
    (tmp_path / "x.yml").write_text("version: 1\n")
    env = {**env, "ENVTOOL_ENVS_DIR": str(root / "envs")}
    out = run_envtool(*args, env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "not a valid environment name (it leaves" in out.stderr and "Traceback" not in out.stderr
    assert (root / "conda-meta" / "history").exists()


def test_an_absolute_path_as_name_still_names_that_env(env: dict[str, str], tmp_path: Path) -> None:
    """`envtool info /path/to/env` (an env made with --prefix) worked before names were checked."""
    meta = tmp_path / "elsewhere" / "conda-meta"
    meta.mkdir(parents=True)
    (meta / "history").write_text("")
    out = run_envtool("info", str(tmp_path / "elsewhere"), "--json", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["prefix"] == str(tmp_path / "elsewhere")


def _start_paused(
    setup: cb.CudaSetup, env: dict[str, str], point: str, seconds: str = "60"
) -> subprocess.Popen:
    argv = cb.paused_argv(point, float(seconds), "install", "demo", "--lock", str(setup.lock))
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # block until the installer says it reached the point
        if f"PAUSED AT {point}" in line:
            return proc
    raise AssertionError(f"installer exited before {point}: rc={proc.wait()}")


@pytest.mark.parametrize("point", ["after-download", "mid-link", "after-link"])
def test_killed_install_reads_incomplete_and_the_next_install_converges(
    setup: cb.CudaSetup, env: dict[str, str], point: str
) -> None:
    proc = _start_paused(setup, env, point)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list_json(env)["demo"]["state"] == "incomplete"  # never reported healthy
    verify = run_envtool("verify", "demo", "--lock", str(setup.lock), env=env)
    assert verify.returncode == 1

    again = run_envtool("install", "demo", "--lock", str(setup.lock), env=env)
    assert again.returncode == 0, again.stderr
    assert list_json(env)["demo"]["state"] == "complete"
    assert run_envtool("verify", "demo", env=env).returncode == 0


@pytest.mark.parametrize("point", ["after-download", "mid-link"])
def test_ctrl_c_says_what_it_left_and_the_command_it_prints_finishes(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path, point: str
) -> None:
    """Ctrl-C used to print click's bare "Aborted.": now one line says whether the env was
    touched and the fix, and the printed command (run elsewhere, as pasted) finishes it."""
    proc = _start_paused(setup, env, point)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Aborted" not in err
    line = next(x for x in err.splitlines() if x.startswith("envtool: error: interrupted"))
    assert "is marked incomplete" in line, line
    assert list_json(env)["demo"]["state"] == "incomplete"
    fix = re.search(r"`(envtool install [^`]+)`", line)
    assert fix is not None, line
    done = run_envtool(*shlex.split(fix.group(1))[1:], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list_json(env)["demo"]["state"] == "complete"


def test_two_installs_of_one_env_serialize(setup: cb.CudaSetup, env: dict[str, str]) -> None:
    first = _start_paused(setup, env, "after-download", seconds="3")  # holds the env lock
    second = start_envtool("install", "demo", "--lock", str(setup.lock), env=env)
    _, err2 = second.communicate(timeout=120)
    first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, err2
    assert "waiting for another envtool on demo" in err2
    assert list_json(env)["demo"]["state"] == "complete"
    assert run_envtool("verify", "demo", env=env).returncode == 0


def test_create_then_install_end_to_end(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """plan → solve → lock (`envtool create`, another module) → install → verify → export → remove."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "environment.yml").write_text(
        f"name: e2e\nchannels:\n  - {setup.channel.as_uri()}\ndependencies:\n  - python 3.11.*\n  - pytorch 2.7.*\n"
    )
    created = run_envtool(
        "create",
        "e2e",
        "-f",
        "environment.yml",
        "--channel",
        str(setup.channel),
        "--cuda",
        "12.6",
        "--driver",
        "570.86.10",
        env=env,
        cwd=project,
    )
    assert created.returncode == 0, created.stderr
    assert (project / "environments/e2e/conda-lock.yml").is_file()
    assert list_json(env)["e2e"]["state"] == "complete"
    assert run_envtool("verify", "e2e", env=env, cwd=project).returncode == 0

    # same lock: converges, no fetch
    reinstall = run_envtool("install", "e2e", env=env, cwd=project)
    assert reinstall.returncode == 0 and "0 to download, 5 already in the cache" in reinstall.stderr

    export = run_envtool("export", "e2e", env=env, cwd=project)
    assert export.returncode == 0, export.stderr
    assert "pytorch=2.7.1" in export.stdout and "h30b5a27" not in export.stdout  # no build hash
    assert run_envtool("remove", "e2e", "--yes", env=env).returncode == 0
    assert "e2e" not in list_json(env)
