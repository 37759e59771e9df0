"""Findings of the session's security review, each reproduced as an attack and then refused:
a lock's pip URL that expands the user's secrets, a lock whose `sources` names any file, a cloned
project whose environments/NAME is a link out of it, and a non-UTF-8 prefix in shell-hook."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import channel_builder as cb
import pytest
import yaml
from conftest import run_envtool

from envtool.adapters.locate import project_env_paths
from envtool.core.pip_lock import requirements_text
from envtool.errors import UsageError


def _env(tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.update(ENVTOOL_ENVS_DIR=str(tmp_path / "envs"), ENVTOOL_CACHE_DIR=str(tmp_path / "cache"))
    for var in ("CONDA_PREFIX", "CONDA_SHLVL", "CONDA_DEFAULT_ENV"):
        e.pop(var, None)
    return e


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.path)
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.integration
def test_a_lock_pip_url_cannot_expand_the_users_secrets(setup, tmp_path: Path) -> None:
    """uv expands ${VAR} in requirement URLs: the lock must be refused before any request."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        url = f"http://127.0.0.1:{port}/${{SECRET_TOKEN}}/envtool_demo-0.1.0-py3-none-any.whl"
        lock = cb.edit_lock(
            setup.lock, tmp_path / "p" / "conda-lock.yml", {"envtool-demo": {"url": url}}
        )
        env = {**_env(tmp_path), "SECRET_TOKEN": "hunter2", "ENVTOOL_DRIVER_VERSION": "570.86.10"}
        prefix = tmp_path / "env"
        out = run_envtool(
            "install", "--lock", str(lock), "--prefix", str(prefix), env=env, cwd=tmp_path
        )
    finally:
        server.shutdown()
    assert out.returncode == 2, out.stdout + out.stderr
    assert "holds '$'" in out.stderr and "Traceback" not in out.stderr
    assert "hunter2" not in out.stdout + out.stderr
    assert _Recorder.seen == [] and not prefix.exists()


def test_an_env_file_pip_entry_cannot_refer_to_a_variable() -> None:
    with pytest.raises(UsageError, match=r"refers to an environment variable"):
        requirements_text(["demo @ https://example.org/${GITHUB_TOKEN}/demo.whl"], "env.yml")
    assert requirements_text(["demo==1.0"], "env.yml") == "demo==1.0\n"


@pytest.mark.integration
def test_export_reads_no_source_outside_the_locks_folder(setup, tmp_path: Path) -> None:
    """A lock's metadata.sources naming another project's file made export copy its channels
    (credentials included) into the output."""
    secret = tmp_path / "secret" / "environment.yml"
    secret.parent.mkdir()
    secret.write_text(
        "name: secretproj\nchannels:\n  - https://user:S3CRETTOKEN@private.example.com/ch\n"
        "dependencies:\n  - python\n"
    )
    data = yaml.safe_load(setup.lock.read_text())
    data["metadata"]["sources"] = [str(secret), "../secret/environment.yml"]
    lock = tmp_path / "p" / "conda-lock.yml"
    lock.parent.mkdir()
    lock.write_text(yaml.safe_dump(data, sort_keys=False))
    out = run_envtool("export", "--lock", str(lock), env=_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "S3CRETTOKEN" not in out.stdout and "secretproj" not in out.stdout
    assert "ignoring the lock's sources outside its folder" in out.stderr


@pytest.mark.integration
def test_an_environments_link_out_of_the_project_is_refused(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    (project / "environments").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "environments" / "demo").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="outside the project"):
        project_env_paths("demo", str(project))
    out = run_envtool("lock", "demo", "--dir", str(project), env=_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 2 and "outside the project" in out.stderr, out.stderr
    assert list(elsewhere.iterdir()) == []
    # a link that stays inside the project is a layout choice, not an escape
    (project / "shared").mkdir()
    (project / "environments" / "demo").unlink()
    (project / "environments" / "demo").symlink_to(project / "shared")
    assert project_env_paths("demo", str(project))[0].name == "demo"


@pytest.mark.integration
def test_a_run_root_another_user_could_swap_a_job_script_in_is_refused(tmp_path: Path) -> None:
    """A cloned repo commits `runs` as a link to a folder its author owns: launch --slurm wrote
    job.sbatch there and printed `sbatch <it>`, so the author could swap the script the user
    then submits. Refused: a root owned by another user, or writable by every user without the
    sticky bit. The user's own link (runs -> /scratch/$USER/runs) is fine."""
    project, mine = tmp_path / "proj", tmp_path / "scratch-mine"
    project.mkdir()
    mine.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    argv = [sys.executable, "-m", "envtool", "launch", "train.py", "--slurm", "--nodes", "1"]

    def launch() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*argv, "--cpu"], cwd=project, env=_env(tmp_path), capture_output=True, text=True
        )

    (project / "runs").symlink_to(mine)  # the user's own scratch folder
    out = launch()
    assert out.returncode == 0, out.stderr
    (job,) = mine.glob("*/job.sbatch")
    assert job.stat().st_mode & 0o077 == 0  # the script keeps the script's secrets to itself
    if os.geteuid() == 0:  # the author's folder: another uid
        theirs = tmp_path / "scratch-theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        (project / "runs").unlink()
        (project / "runs").symlink_to(theirs)
        out = launch()
        assert out.returncode == 2 and "belongs to another user" in out.stderr, out.stderr
        assert list(theirs.iterdir()) == []
    (project / "runs").unlink()
    (project / "runs").mkdir()
    os.chmod(project / "runs", 0o777)
    out = launch()
    assert out.returncode == 2 and "writable by every user" in out.stderr, out.stderr
    assert list((project / "runs").iterdir()) == []
    os.chmod(project / "runs", 0o1777)  # sticky, like /tmp, and ours: others cannot rename
    out = launch()
    assert out.returncode == 0, out.stderr
    assert len(list((project / "runs").glob("*/job.sbatch"))) == 1


@pytest.mark.integration
def test_a_secret_on_the_command_line_is_not_written_into_the_runs_manifest(
    tmp_path: Path,
) -> None:
    """The job script must carry it (the job runs with it); the record of the run must not."""
    import json

    (tmp_path / "train.py").write_text("print('hi')\n")
    argv = [sys.executable, "-m", "envtool", "launch", "train.py", "--slurm", "--nodes", "1"]
    argv += ["--cpu", "--", "--hf-token", "hf_S3CRET", "--api-key=sk-S3CRET", "--lr", "3e-4"]
    out = subprocess.run(argv, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    (run,) = (tmp_path / "runs").iterdir()
    manifest = (run / "manifest.json").read_text()
    assert "S3CRET" not in manifest
    tail = ["--", "--hf-token", "***", "--api-key=***", "--lr", "3e-4"]
    assert json.loads(manifest)["envtool_argv"][-6:] == tail
    assert "hf_S3CRET" in (run / "job.sbatch").read_text()  # what runs keeps its arguments


@pytest.mark.integration
@pytest.mark.parametrize("shell", ["bash", "fish"])
def test_shell_hook_of_a_non_utf8_prefix_is_exact_and_printable(shell: str, tmp_path: Path) -> None:
    import shutil

    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (.ci/run installs it with apt)")
    raw = os.fsencode(tmp_path) + b"/env\xff\x9b"
    (Path(os.fsdecode(raw)) / "conda-meta").mkdir(parents=True)
    (Path(os.fsdecode(raw)) / "conda-meta" / "history").write_text("")
    env = {**_env(tmp_path), "PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"}
    out = subprocess.run(
        [sys.executable, "-m", "envtool", "shell-hook", "--prefix", os.fsdecode(raw)]
        + ["--shell", shell],
        env=env,
        capture_output=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode("utf-8")  # strict: the hook is valid UTF-8
    assert not any("\x80" <= c <= "\x9f" or "\ud800" <= c <= "\udfff" for c in text)
    probe = 'printf %s "$CONDA_PREFIX"' if shell == "bash" else "printf %s $CONDA_PREFIX"
    seen = subprocess.run(
        [shell, "-c", out.stdout.decode() + "\n" + probe], capture_output=True, env=env
    )
    assert seen.stdout == raw, seen.stderr
