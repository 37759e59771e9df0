"""Regressions found by walking envtool as a user would (create → install → verify → bundle → remove).

Each test drives the real CLI in a subprocess with its own envs dir and package cache, over the
file:// channel that channel_builder builds (no network).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool

pytestmark = pytest.mark.integration


def _interrupt_install(setup: cb.CudaSetup, env: dict[str, str], prefix: Path) -> None:
    """Ctrl-C an install into `prefix` after its downloads, before anything is linked."""
    argv = cb.paused_argv(
        "after-download", 60.0, "install", "--lock", str(setup.lock), "--prefix", str(prefix)
    )  # the installer's test seam: no variable in the product pauses it
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "PAUSED AT after-download" in line:
            break
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130


def test_verify_after_an_interrupted_first_install_reports_it_unfinished(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    # README: verify exits 1 "when the last install did not finish", with the lock defaulting to
    # the one the env was being installed from. It used to exit 2 ("no lock known") because
    # only a finished install's record was consulted, not the incomplete marker.
    prefix = tmp_path / "envs" / "half"
    _interrupt_install(setup, env, prefix)
    out = run_envtool("verify", "--prefix", str(prefix), env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "the last install did not finish" in out.stdout


def test_remove_without_yes_and_no_answer_is_bad_usage_not_a_ctrl_c(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    # In a script or CI nobody answers the question: stdin is at its end. README: bad usage is
    # exit 2 with the fix; it used to print "Aborted." and exit 130, as if Ctrl-C was pressed.
    prefix = tmp_path / "envs" / "demo"
    installed = run_envtool("install", "--lock", str(setup.lock), "--prefix", str(prefix), env=env)
    assert installed.returncode == 0, installed.stderr
    out = run_envtool("remove", "--prefix", str(prefix), env=env, input="")
    assert out.returncode == 2, out.stderr
    assert "pass --yes" in out.stderr
    assert prefix.is_dir()  # nothing removed without a yes


def test_remove_answered_no_at_a_terminal_is_an_answer_not_an_error(
    setup: cb.CudaSetup, env: dict[str, str]
) -> None:
    """A "n" at the question printed "envtool: error: not removed — pass --yes", exit 2, as if
    the user had made a mistake; now "not removed: PREFIX", exit 1 (apt's "Abort."), no error."""
    import os
    import pty

    from conftest import envtool_argv

    prefix = Path(env["ENVTOOL_ENVS_DIR"]) / "demo"
    installed = run_envtool("install", "--lock", str(setup.lock), "--prefix", str(prefix), env=env)
    assert installed.returncode == 0, installed.stderr
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [*envtool_argv(), "remove", "--prefix", str(prefix)],
        env=env,
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(terminal)
    os.write(controller, b"n\n")
    out, err = proc.communicate(timeout=60)
    os.close(controller)
    assert proc.returncode == 1, err
    assert out.strip() == f"not removed: {prefix}" and "error" not in err, (out, err)
    assert (prefix / "conda-meta").is_dir()


def test_a_failed_bundle_leaves_no_half_bundle_and_the_retry_works(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    # A fetch that fails midway (network down, channel moved) used to leave DIR/channel/...
    # without DIR/conda-lock.yml; re-running the same command was then refused with
    # "directory exists and is not a bundle" until the user deleted DIR by hand.
    moved = tmp_path / "moved" / "conda-lock.yml"
    moved.parent.mkdir()
    gone = (tmp_path / "gone").as_uri()
    moved.write_text(setup.lock.read_text().replace(setup.channel.as_uri(), gone))
    out_dir = tmp_path / "bundle"
    failed = run_envtool("bundle", "--lock", str(moved), "-o", str(out_dir), env=env)
    assert failed.returncode == 1, failed.stderr
    assert "could not fetch" in failed.stderr
    assert not out_dir.exists()

    again = run_envtool("bundle", "--lock", str(setup.lock), "-o", str(out_dir), env=env)
    assert again.returncode == 0, again.stderr
    assert (out_dir / "conda-lock.yml").is_file()


def test_inspect_names_a_non_utf8_file_like_create_does(tmp_path: Path) -> None:
    # `create -f` said "not a UTF-8 text file (… at byte N) — save it as UTF-8"; `inspect` on
    # the same file printed Python's raw codec error and "check the file", which gives no fix.
    bad = tmp_path / "environment.yml"
    bad.write_bytes("name: x\ndependencies: [pytorch]\n".encode("utf-16"))
    out = run_envtool("inspect", str(bad))
    assert out.returncode == 2
    assert "not a UTF-8 text file" in out.stderr and "save it as UTF-8" in out.stderr
    assert "codec" not in out.stderr


def test_init_under_a_file_says_which_file_is_in_the_way(tmp_path: Path) -> None:
    # `envtool init notes.txt/train.py` used to fail with "(File exists)", naming neither the
    # file in the way nor why: mkdir met a file where a directory had to be.
    (tmp_path / "notes.txt").write_text("not a folder\n")
    out = run_envtool("init", "notes.txt/train.py", cwd=tmp_path)
    assert out.returncode == 2
    assert "notes.txt is a file, not a directory" in out.stderr
    assert "File exists" not in out.stderr


def test_a_directory_where_a_file_is_expected_is_named_as_such(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`export --lock DIR`, `doctor --replay FILE`, `run -- DIR` said "no such file" or
    "command not found" about something that is there, just of the other kind."""
    lock = run_envtool("export", "--lock", str(tmp_path), env=env)
    assert lock.returncode == 2
    assert f"{tmp_path}: a directory, not a lock file" in lock.stderr
    assert f"--lock {tmp_path / 'conda-lock.yml'}" in lock.stderr
    note = tmp_path / "notes.txt"
    note.write_text("x\n")
    replay = run_envtool("doctor", "--replay", str(note), env=env)
    assert replay.returncode == 2 and f"--replay {note}: a file, not a directory" in replay.stderr
    prefix = tmp_path / "envs" / "demo"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "history").write_text("")
    run = run_envtool("run", "--prefix", str(prefix), "--", str(tmp_path), env=env)
    assert run.returncode == 2 and f"{tmp_path}: a directory" in run.stderr
    for out in (lock, replay, run):
        assert "Traceback" not in out.stderr


def test_verify_sees_a_file_deleted_from_an_installed_package_and_install_repairs_it(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """The records still match the lock, but a package is no longer whole on disk."""
    import json

    prefix = tmp_path / "envs" / "demo"
    installed = run_envtool("install", "--lock", str(setup.lock), "--prefix", str(prefix), env=env)
    assert installed.returncode == 0, installed.stderr
    record = json.loads(next((prefix / "conda-meta").glob("cuda-version-*.json")).read_text())
    victim = record["files"][0]
    (prefix / victim).unlink()
    out = run_envtool("verify", "--prefix", str(prefix), "--json", env=env)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert not data["clean"] and not data["missing"] and not data["changed"]
    assert data["damaged"] == [
        {"name": "cuda-version", "missing_files": 1, "changed_files": 0, "first": victim}
    ]
    text = run_envtool("verify", "--prefix", str(prefix), env=env)
    assert f"damaged  cuda-version: 1 file gone (first: {victim})" in text.stdout
    # the next install relinks it (rattler alone skips a package whose record is in conda-meta)
    again = run_envtool("install", "--lock", str(setup.lock), "--prefix", str(prefix), env=env)
    assert again.returncode == 0, again.stderr
    assert "relinking 1 damaged package(s): cuda-version" in again.stderr
    assert (prefix / victim).is_file()
    assert run_envtool("verify", "--prefix", str(prefix), env=env).returncode == 0
    # rattler unlinks pytorch before relinking it: said as that, not as a removal
    record = json.loads(next((prefix / "conda-meta").glob("pytorch-*.json")).read_text())
    (prefix / record["files"][0]).unlink()
    again = run_envtool("install", "--lock", str(setup.lock), "--prefix", str(prefix), env=env)
    assert again.returncode == 0, again.stderr
    assert "unlinking pytorch (linked again as the lock has it)" in again.stderr
    assert "pytorch (not in the lock)" not in again.stderr


def test_info_on_an_unfinished_env_given_by_path_prints_a_command_that_finishes_it(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """It said `envtool install <folder name>`, which names a project env that does not exist."""
    import shlex

    prefix = tmp_path / "scratch" / "half"
    _interrupt_install(setup, env, prefix)
    out = run_envtool("info", "--prefix", str(prefix), env=env)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if "did not finish" in x)
    command = line.split("`")[1]
    assert command == f"envtool install --lock {setup.lock.resolve()} --prefix {prefix}"
    finished = run_envtool(*shlex.split(command)[1:], env=env)
    assert finished.returncode == 0, finished.stderr
    assert run_envtool("verify", "--prefix", str(prefix), env=env).returncode == 0


def test_verify_relink_hint_is_a_command_this_host_runs_with_force_where_the_host_check_needs_it(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """verify said "`envtool install` again relinks…": no lock, no prefix, and on a host the
    lock's CUDA build does not run (here: no driver) install refuses without --force. The hint
    is now the command, with --force exactly when the one host check refuses (issue 12 item 8)."""
    import json
    import shlex

    from envtool.adapters.host.host_probe import probe_host

    gpu_less = {
        k: v for k, v in env.items() if k not in ("ENVTOOL_DRIVER_VERSION", "CONDA_OVERRIDE_CUDA")
    }
    if probe_host(gpu_less).has_driver:
        pytest.skip("this host has an NVIDIA driver: no GPU-less host check here")
    prefix = tmp_path / "envs" / "demo"
    installed = run_envtool("install", "--lock", str(setup.lock), "--prefix", str(prefix), env=env)
    assert installed.returncode == 0, installed.stderr
    record = json.loads(next((prefix / "conda-meta").glob("cuda-version-*.json")).read_text())
    (prefix / record["files"][0]).unlink()

    def hint(e: dict[str, str]) -> str:
        out = run_envtool("verify", "--prefix", str(prefix), env=e)
        assert out.returncode == 1, out.stderr
        line = next(x for x in out.stdout.splitlines() if "relinks the damaged" in x)
        return line.split("`")[1]

    plain = f"envtool install --lock {setup.lock.resolve()} --prefix {prefix}"
    assert hint(env) == plain  # the driver runs the lock's CUDA: no --force
    forced = hint(gpu_less)
    assert forced == plain + " --force"
    refused = run_envtool(*shlex.split(plain)[1:], env=gpu_less)
    assert refused.returncode == 2 and "pass --force" in refused.stderr
    again = run_envtool(*shlex.split(forced)[1:], env=gpu_less)
    assert again.returncode == 0, again.stderr
    assert run_envtool("verify", "--prefix", str(prefix), env=gpu_less).returncode == 0
