"""Lifecycle under races, kills and permission errors: one lock per env, a crash-safe remove.

Real processes (`envtool` subprocesses) against local channels built by channel_builder; a
kill lands at a chosen point by running the CLI in a child interpreter whose delete step the
test replaced (no hook the product itself reads). No timed assertions: waits are bounded
polls, results are checked for consistency.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import REPO, run_envtool, start_envtool

from envtool.adapters.install.install_state import removal_leftovers
from envtool.adapters.lockfile.lock_io import read_lock
from envtool.adapters.mutex import env_mutex_path, hold_env_mutex

pytestmark = pytest.mark.integration

ENVS_NOTE = "waiting for another envtool on"


def list_rows(env: dict[str, str]) -> list[dict]:
    out = run_envtool("list", "--json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["environments"]


def installed_files(prefix: Path) -> set[str]:
    """Archive stems of the conda packages in a prefix (conda-meta/NAME-VER-BUILD.json)."""
    return {p.name[: -len(".json")] for p in (prefix / "conda-meta").glob("*.json")}


def locked_files(lock: Path) -> set[str]:
    pkgs = read_lock(lock).hashed_for_platform("linux-64")
    return {
        p.file_name.removesuffix(".conda").removesuffix(".tar.bz2")
        for p in pkgs
        if p.manager == "conda"
    }


def fake_env(prefix: Path, files: int = 3) -> Path:
    """A directory `remove` accepts as a conda env (conda-meta/history), with some content."""
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "history").write_text("")
    for sub in ("bin", "lib", "share"):
        (prefix / sub).mkdir()
        for i in range(files):
            (prefix / sub / f"f{i}").write_text("x")
    return prefix


# --- 1. one lock per env: create = lock-write + install, install waits for remove ------------


def start_waiting(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """`envtool ARGS` started and read until it says it waits for another envtool."""
    proc = start_envtool(*args, env=env, cwd=cwd)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if ENVS_NOTE in line:
            return proc
    raise AssertionError(f"{args[0]} did not wait: rc={proc.wait()} {''.join(seen)}")


@pytest.fixture
def race_project(setup: cb.CudaSetup, tmp_path: Path) -> tuple[Path, list[str]]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "env.yml").write_text("name: race\ndependencies:\n  - python 3.11.*\n")
    return project, ["-f", "env.yml", "--channel", str(setup.channel), "--driver", "570.86.10"]


@pytest.mark.slow
def test_two_concurrent_creates_leave_a_lock_and_an_env_that_agree(
    race_project: tuple[Path, list[str]], env: dict[str, str], tmp_path: Path
) -> None:
    """Two `create race` with different requests (a CUDA and a CPU build) running together:
    whichever finishes last, environments/race/conda-lock.yml is what envs/race holds. Each
    round both are started while an install holds the env, so they overlap for sure."""
    project, common = race_project
    prefix = tmp_path / "envs" / "race"
    lock = project / "environments" / "race" / "conda-lock.yml"
    for _ in range(3):  # the order the two then run in is the OS's; a few rounds
        with hold_env_mutex(prefix, "race"):
            procs = [
                start_waiting("create", "race", *common, "--cuda", cuda, env=env, cwd=project)
                for cuda in ("12.6", "cpu")
            ]
        errs = [p.communicate(timeout=300)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errs
        assert installed_files(prefix) == locked_files(lock), errs


def test_a_create_stopped_while_another_installs_leaves_the_lock_that_was_installed(
    race_project: tuple[Path, list[str]], env: dict[str, str], tmp_path: Path
) -> None:
    """create A is installing; create B of the same name starts, then is killed (Ctrl-C, a
    closed terminal). B must not have replaced the lock A is installing from."""
    project, common = race_project
    prefix = tmp_path / "envs" / "race"
    with hold_env_mutex(prefix, "race"):
        first = start_waiting("create", "race", *common, "--cuda", "cpu", env=env, cwd=project)
        second = start_waiting("create", "race", *common, "--cuda", "12.6", env=env, cwd=project)
        second.kill()
        second.wait()
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    lock = project / "environments" / "race" / "conda-lock.yml"
    assert installed_files(prefix) == locked_files(lock)
    assert any("cpu" in f for f in locked_files(lock))


def test_install_waits_for_a_removal_in_progress_then_installs(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """While a removal holds the env lock (and has deleted conda-meta/ as the old remove did
    first), `install` waits with the usual message, then installs into what it finds: nothing."""
    prefix = fake_env(tmp_path / "envs" / "demo")
    with hold_env_mutex(prefix, "demo"):
        shutil.rmtree(prefix / "conda-meta")  # a removal midway, as the old `remove` left it
        proc = start_envtool("install", "demo", "--lock", str(setup.lock), env=env)
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if ENVS_NOTE in line:
                break
        else:
            raise AssertionError(f"install did not wait: rc={proc.wait()} {''.join(seen)}")
        shutil.rmtree(prefix)  # the removal finishes, then releases the lock
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, "".join(seen) + err
    assert "not a conda environment" not in err
    rows = {r["name"]: r for r in list_rows(env)}
    assert rows["demo"]["state"] == "complete"
    assert run_envtool("verify", "demo", "--lock", str(setup.lock), env=env).returncode == 0


def test_install_racing_a_real_remove_never_sees_a_half_removed_env(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """A real `remove` of a large env and an `install` of the same name started right after:
    install either waits for the removal or comes first; it never refuses a half-gone prefix."""
    prefix = fake_env(tmp_path / "envs" / "demo", files=4000)
    remove = start_envtool("remove", "demo", "--yes", env=env)
    install = start_envtool("install", "demo", "--lock", str(setup.lock), env=env)
    _, rerr = remove.communicate(timeout=300)
    _, ierr = install.communicate(timeout=300)
    assert "not a conda environment" not in ierr
    assert install.returncode == 0 and remove.returncode == 0, rerr + ierr
    # remove first (then a fresh install) or install first (then the removal of it)
    states = [(r["name"], r["state"]) for r in list_rows(env)]
    assert states in ([], [("demo", "complete")]), states
    assert not removal_leftovers(prefix)


def test_create_lock_and_install_take_the_env_lock(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """A held env lock makes `create` and `install` wait (and say so) rather than race."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "env.yml").write_text("name: held\ndependencies:\n  - python 3.11.*\n")
    prefix = tmp_path / "envs" / "held"
    with hold_env_mutex(prefix, "held"):
        proc = start_envtool(
            "create", "held", "-f", "env.yml", "--channel", str(setup.channel), "--cuda", "cpu",
            env=env, cwd=project,
        )  # fmt: skip
        assert proc.stderr is not None
        for line in proc.stderr:
            if ENVS_NOTE in line:
                break
        else:
            raise AssertionError(f"create did not wait: rc={proc.wait()}")
        assert not prefix.exists()  # nothing installed while the lock is held
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert installed_files(prefix) == locked_files(
        project / "environments" / "held" / "conda-lock.yml"
    )
    assert env_mutex_path(prefix).is_file()  # beside the prefix: survives its removal


# --- 2. remove: rename aside, then delete; a kill or a permission error leaves a listed leftover


KILLABLE_REMOVE = textwrap.dedent(
    """
    import sys, time
    from envtool.adapters.install import install_state

    real = install_state.delete_tree

    def stuck(path):
        # delete part of it (conda-meta/, as an rmtree may), then wait to be killed
        real(path / "conda-meta")
        print("PAUSED", path, file=sys.stderr, flush=True)
        time.sleep(600)

    install_state.delete_tree = stuck
    from envtool.cli import main
    main(sys.argv[1:])
    """
)


def start_stuck_remove(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`envtool remove ARGS` in a child interpreter whose delete stops midway (test-only patch)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE_REMOVE, "remove", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("PAUSED"):
            return proc
    raise AssertionError(f"remove never reached its delete: rc={proc.wait()}")


def test_remove_killed_midway_is_listed_and_the_next_remove_finishes_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    prefix = fake_env(tmp_path / "envs" / "demo")
    fake_env(tmp_path / "envs" / "other")
    proc = start_stuck_remove(env, "demo", "--yes")
    # the prefix went in one step: no env named demo with bin/ lib/ but no conda-meta/
    assert not prefix.exists()
    rows = {r["name"]: r for r in list_rows(env)}
    assert rows["demo"]["state"] == "removing" and rows["demo"]["interrupted"] is False
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    rows = {r["name"]: r for r in list_rows(env)}
    assert rows["demo"]["state"] == "removing" and rows["demo"]["interrupted"] is True
    assert rows["other"]["state"] != "removing"
    text = run_envtool("list", env=env).stdout
    assert "removing (interrupted)" in text and "run `envtool remove demo --yes` to finish" in text

    again = run_envtool("remove", "demo", "--yes", env=env)
    assert again.returncode == 0, again.stderr
    assert "finished removing" in again.stdout
    assert not removal_leftovers(prefix)
    assert [r["name"] for r in list_rows(env)] == ["other"]
    assert run_envtool("remove", "demo", "--yes", env=env).returncode == 2  # nothing left


def test_install_after_an_interrupted_remove_cleans_it_up(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    prefix = fake_env(tmp_path / "envs" / "demo")
    proc = start_stuck_remove(env, "demo", "--yes")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert removal_leftovers(prefix)
    out = run_envtool("install", "demo", "--lock", str(setup.lock), env=env)
    assert out.returncode == 0, out.stderr
    assert "finishing the interrupted removal of demo" in out.stderr
    assert not removal_leftovers(prefix)
    assert [(r["name"], r["state"]) for r in list_rows(env)] == [("demo", "complete")]


def test_remove_dry_run_names_the_leftover_and_deletes_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    prefix = fake_env(tmp_path / "envs" / "demo")
    start_stuck_remove(env, "demo", "--yes").kill()
    out = run_envtool("remove", "demo", "--dry-run", env=env)
    assert out.returncode == 0, out.stderr
    assert "(an interrupted removal)" in out.stdout
    assert removal_leftovers(prefix)


def run_without_privileges(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`envtool ARGS` as root stripped of every capability (no CAP_DAC_OVERRIDE/CAP_FOWNER):
    files of user nobody are then as closed to it as to any other user. (Dropping to uid
    nobody itself is not possible here: the interpreter lives under root's 0700 home.)"""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv(1) to drop capabilities")
    return subprocess.run(
        [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", sys.executable, "-m", "envtool"]
        + list(args),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_remove_hitting_a_permission_error_says_so_and_the_next_remove_finishes_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    prefix = fake_env(tmp_path / "envs" / "demo")
    foreign = prefix / "lib" / "nobodys"  # another user's folder: its files cannot be deleted
    foreign.mkdir()
    (foreign / "keep").write_text("x")
    os.chown(foreign, 65534, 65534)
    os.chown(foreign / "keep", 65534, 65534)
    out = run_without_privileges(env, "remove", "demo", "--yes")
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert "Permission denied" in out.stderr and "envtool remove demo" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not prefix.exists()
    rows = {r["name"]: r for r in list_rows(env)}
    assert rows["demo"]["state"] == "removing" and rows["demo"]["interrupted"] is True
    again = run_envtool("remove", "demo", "--yes", env=env)  # with the permission back
    assert again.returncode == 0, again.stderr
    assert not removal_leftovers(prefix) and list_rows(env) == []


@pytest.mark.parametrize("lock_there", [True, False], ids=["lock-file-there", "no-lock-file"])
def test_remove_of_an_env_it_cannot_rename_changes_nothing(
    env: dict[str, str], tmp_path: Path, lock_there: bool
) -> None:
    """The envs dir belongs to someone else: the lock or the rename fails, nothing is deleted."""
    envs = tmp_path / "envs"
    prefix = fake_env(envs / "demo")
    if lock_there:
        (envs / ".demo.lock").touch()  # the lock exists (ours); the folder is not writable to us
    os.chown(envs, 65534, 65534)
    out = run_without_privileges(env, "remove", "demo", "--yes")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "nothing was deleted" in out.stderr or "nothing was changed" in out.stderr
    assert (prefix / "conda-meta" / "history").is_file() and (prefix / "bin" / "f0").is_file()


def test_remove_of_an_env_that_is_a_symlink_removes_the_link_only(
    env: dict[str, str], tmp_path: Path
) -> None:
    real = fake_env(tmp_path / "scratch" / "real-env")
    (tmp_path / "envs").mkdir()
    link = tmp_path / "envs" / "linked"
    link.symlink_to(real)
    out = run_envtool("remove", "linked", "--yes", env=env)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert "removed the link" in out.stdout
    assert not link.is_symlink() and not link.exists()
    assert (real / "conda-meta" / "history").is_file() and (real / "bin" / "f0").is_file()


def test_remove_of_an_env_with_a_255_byte_name(env: dict[str, str], tmp_path: Path) -> None:
    """The longest valid name still gets its lock and its aside folder (cut + hashed)."""
    name = "n" * 255
    prefix = fake_env(tmp_path / "envs" / name)
    out = run_envtool("remove", name, "--yes", env=env)
    assert out.returncode == 0, out.stderr
    assert not prefix.exists() and not removal_leftovers(prefix)
    assert len(env_mutex_path(prefix).name.encode()) <= 255


def test_a_killed_remove_of_a_255_byte_name_is_found_and_finished(
    env: dict[str, str], tmp_path: Path
) -> None:
    name = "n" * 255
    prefix = fake_env(tmp_path / "envs" / name)
    start_stuck_remove(env, name, "--yes").kill()
    assert removal_leftovers(prefix)  # the cut + hashed aside name still maps back to NAME
    out = run_envtool("remove", name, "--yes", env=env)
    assert out.returncode == 0, out.stderr
    assert not removal_leftovers(prefix) and list_rows(env) == []


def test_an_env_named_like_an_aside_folder_is_never_taken_for_one(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """Aside folders hold a `#`, which no env NAME may: `.demo.removing-12345678` is an env."""
    lookalike = fake_env(tmp_path / "envs" / ".demo.removing-12345678")
    out = run_envtool("install", "demo", "--lock", str(setup.lock), env=env)
    assert out.returncode == 0, out.stderr
    assert run_envtool("remove", "demo", "--yes", env=env).returncode == 0
    assert (lookalike / "conda-meta" / "history").is_file()
    assert [r["name"] for r in list_rows(env)] == [".demo.removing-12345678"]


def test_a_relative_envs_dir_does_not_make_the_re_entrant_lock_wait_for_itself(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """The install command and the installer take the env lock under two spellings of one
    path (relative, absolute): one process, one lock, no self-deadlock."""
    env = dict(env, ENVTOOL_ENVS_DIR="rel-envs")
    out = run_envtool(
        "install", "demo", "--lock", str(setup.lock), env=env, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "rel-envs" / "demo" / "conda-meta").is_dir()


def test_lock_waits_for_the_project_and_refuses_an_environment_yml_changed_meanwhile(
    race_project: tuple[Path, list[str]], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lock` solves from environment.yml, then waits for the project lock (a create holds it);
    when that create rewrote environment.yml meanwhile, the stale solve is not written."""
    from envtool.adapters.mutex import hold_project_mutex

    monkeypatch.setenv("ENVTOOL_CACHE_DIR", env["ENVTOOL_CACHE_DIR"])  # the same project lock
    project, common = race_project
    made = run_envtool(
        "create", "race", *common, "--cuda", "cpu", "--no-install", env=env, cwd=project
    )
    assert made.returncode == 0, made.stderr
    env_dir = project / "environments" / "race"
    yml = env_dir / "environment.yml"
    yml.write_text(yml.read_text() + "# edited: lock re-solves\n")
    before = (env_dir / "conda-lock.yml").read_bytes()
    with hold_project_mutex(env_dir, "race"):
        proc = start_waiting("lock", "race", env=env, cwd=project)
        yml.write_text(yml.read_text() + "# and edited again by someone else\n")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "changed while race was being locked; nothing written" in err
    assert (env_dir / "conda-lock.yml").read_bytes() == before
    again = run_envtool("lock", "race", env=env, cwd=project)  # as the line says: runs clean
    assert again.returncode == 0, again.stderr


def test_lock_variants_waits_for_the_project_and_refuses_an_environment_yml_changed_meanwhile(
    race_project: tuple[Path, list[str]], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lock --variants` solves every variant from environment.yml into staging, then waits for
    the project mutex to move them in: an edit meanwhile must stop it as it stops `lock` (the
    check looked at the staging folder, so the stale variants landed)."""
    from envtool.adapters.mutex import hold_project_mutex

    monkeypatch.setenv("ENVTOOL_CACHE_DIR", env["ENVTOOL_CACHE_DIR"])
    project, common = race_project
    made = run_envtool(
        "create", "race", *common, "--cuda", "cpu", "--no-install", env=env, cwd=project
    )
    assert made.returncode == 0, made.stderr
    env_dir = project / "environments" / "race"
    yml = env_dir / "environment.yml"
    with hold_project_mutex(env_dir, "race"):
        proc = start_waiting("lock", "race", "--variants", "cpu", env=env, cwd=project)
        yml.write_text(yml.read_text() + "# edited by someone else\n")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "changed while race was being locked; nothing written" in err
    assert not (env_dir / "conda-lock.cpu.yml").exists() and not (env_dir / "variants.yml").exists()
    assert not list(env_dir.glob(".envtool-variants-*"))  # its staging folder is gone too
    again = run_envtool("lock", "race", "--variants", "cpu", env=env, cwd=project)
    assert again.returncode == 0, again.stderr


def test_install_from_a_bundle_takes_the_same_env_lock(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """`install --from DIR` (an offline bundle) waits for the env lock like every install."""
    bundle = tmp_path / "bundle"
    made = run_envtool("bundle", "--lock", str(setup.lock), "-o", str(bundle), env=env)
    assert made.returncode == 0, made.stderr
    prefix = tmp_path / "envs" / "demo"
    with hold_env_mutex(prefix, "demo"):
        proc = start_waiting("install", "demo", "--from", str(bundle), env=env, cwd=tmp_path)
        assert not prefix.exists()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert [(r["name"], r["state"]) for r in list_rows(env)] == [("demo", "complete")]
