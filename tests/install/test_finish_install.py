"""After an install or a create that did not finish, `info`, `list` and `doctor` say a command
that finishes it, and that command, run from another folder, does (issue 12 item 5).

Real installs from a channel the tests build (file:// only), killed midway through the
installer's test seam; the suggested command is taken from the output and run as printed.
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
from conftest import envtool_argv, run_envtool

pytestmark = pytest.mark.integration

FIX = re.compile(r"`(envtool install [^`]+)`")


def killed_midway(env: dict[str, str], cwd: Path, *args: str) -> None:
    """`envtool ARGS` killed with SIGKILL while it links (an install left unfinished), through
    the installer's test seam (channel_builder.paused_argv; older trees: the pause variables)."""
    if hasattr(cb, "paused_argv"):
        argv, run_env = cb.paused_argv("mid-link", 60.0, *args), env
    else:
        argv = [*envtool_argv(), *args]
        run_env = dict(env, ENVTOOL_TEST_PAUSE_AT="mid-link", ENVTOOL_TEST_PAUSE_S="60")
    proc = subprocess.Popen(
        argv, env=run_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "PAUSED AT mid-link" in line or "ENVTOOL_TEST_PAUSE_AT=mid-link" in line:
            break
    else:
        raise AssertionError(f"exited before linking: rc={proc.wait()}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def run_fix(command: str, env: dict[str, str], cwd: Path) -> None:
    """Run the printed `envtool install …` as a user would paste it (shell words), elsewhere."""
    argv = shlex.split(command)
    assert argv[:2] == ["envtool", "install"], command
    done = run_envtool(*argv[1:], env=env, cwd=cwd)
    assert done.returncode == 0, f"{command}: {done.stderr}"


def state(env: dict[str, str], *where: str) -> str:
    out = run_envtool("info", *where, "--json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["state"]


def test_install_lock_prefix_left_unfinished_gets_a_fix_that_works(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    prefix = tmp_path / "elsewhere" / "my env"  # outside the envs dir, with a space
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    lock = Path(shutil_copy(setup.lock, work / "conda-lock.yml"))
    # a relative --lock: the fix must still name it from any folder
    killed_midway(env, work, "install", "--lock", "conda-lock.yml", "--prefix", str(prefix))
    assert state(env, "--prefix", str(prefix)) == "incomplete"

    info = run_envtool("info", "--prefix", str(prefix), env=env, cwd=other)
    want = f"envtool install --lock {lock} --prefix {shlex.quote(str(prefix))}"
    assert FIX.findall(info.stdout) == [want], info.stdout
    doctor = run_envtool("doctor", "--prefix", str(prefix), "--fast", "--json", env=env, cwd=other)
    assert doctor.returncode == 1, doctor.stderr
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["install-state"]["fix"] == want

    run_fix(want, env, other)
    assert state(env, "--prefix", str(prefix)) == "complete"


def test_named_install_and_create_left_unfinished_get_a_fix_that_works(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    project, other = tmp_path / "project", tmp_path / "other"
    project.mkdir()
    other.mkdir()
    (project / "environment.yml").write_text(
        f"name: e2e\nchannels:\n  - {setup.channel.as_uri()}\n"
        "dependencies:\n  - python 3.11.*\n  - pytorch 2.7.*\n"
    )
    create = ("create", "e2e", "-f", "environment.yml", "--channel", str(setup.channel))
    killed_midway(env, project, *create, "--cuda", "12.6", "--driver", "570.86.10")
    lock = project / "environments" / "e2e" / "conda-lock.yml"
    assert lock.is_file()
    want = f"envtool install e2e --lock {lock}"

    listed = run_envtool("list", env=env, cwd=other)
    assert FIX.findall(listed.stdout) == [want], listed.stdout
    assert "envtool install NAME" not in listed.stdout
    info = run_envtool("info", "e2e", env=env, cwd=other)
    assert FIX.findall(info.stdout) == [want], info.stdout
    doctor = run_envtool("doctor", "e2e", "--fast", "--json", env=env, cwd=other)
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["install-state"]["fix"] == want
    # the old hint, `envtool install e2e`, fails outside the project (no ./environments/e2e)
    assert run_envtool("install", "e2e", env=env, cwd=other).returncode == 2

    run_fix(want, env, other)
    assert state(env, "e2e") == "complete"


def shutil_copy(src: Path, dst: Path) -> Path:
    import shutil

    return Path(shutil.copy(src, dst))
