"""Credentials in channel and mirror URLs are never written to a file or printed (issue 23.2).

A channel given as `http://user:SECRET@host/…` (and a mirror with credentials in rattler's
config.toml) is used for the real solve and install over a local mirror that demands them; then
every file under the test's folders — project, environments, caches (envtool's and rattler's),
the three export formats — and every line printed is searched for the secret. The credentials the install needs
come from rattler's auth store (RATTLER_AUTH_FILE), the documented place, kept outside the
searched folders.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool
from mirror_server import Faults, MirrorServer

from envtool.core.credentials import redact_credentials

pytestmark = pytest.mark.integration

SECRET = "s3cret-Pw-7f3a"


def test_the_rule_masks_for_the_terminal_and_strips_for_files() -> None:
    url = f"https://user:{SECRET}@mirror.example/conda-forge/linux-64/x.conda"
    assert redact_credentials(url) == "https://***@mirror.example/conda-forge/linux-64/x.conda"
    assert (
        redact_credentials(url, strip=True) == "https://mirror.example/conda-forge/linux-64/x.conda"
    )
    token = f"error at https://conda.anaconda.org/t/{SECRET}/private/noarch/repodata.json: 401"
    assert SECRET not in redact_credentials(token) and "/t/***/private" in redact_credentials(token)
    assert redact_credentials(token, strip=True).startswith(
        "error at https://conda.anaconda.org/private/noarch/"
    )
    # an @ in a local path is no credential
    assert redact_credentials("file:///home/a@b/channel") == "file:///home/a@b/channel"


def _files_holding(root: Path, secret: str) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if secret.encode() in path.read_bytes():
                    found.append(str(path.relative_to(root)))
            except OSError:
                pass
    return found


def test_a_channel_url_with_credentials_reaches_no_file_and_no_output(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    project = work / "project"
    project.mkdir(parents=True)
    (project / "environment.yml").write_text(
        "name: net\ndependencies:\n  - python 3.11.*\n  - pytorch 2.7.*\n"
    )
    env.update(
        ENVTOOL_ENVS_DIR=str(work / "envs"),
        ENVTOOL_CACHE_DIR=str(work / "cache"),
        RATTLER_CACHE_DIR=str(work / "rattler-cache"),
        HOME=str(work / "home"),
        XDG_CONFIG_HOME=str(work / "home" / ".config"),
    )
    auth = tmp_path / "auth.json"  # the user's own store, outside what envtool writes
    auth.write_text(
        json.dumps({"127.0.0.1": {"BasicHTTP": {"username": "envtool", "password": SECRET}}})
    )
    env["RATTLER_AUTH_FILE"] = str(auth)
    printed: list[subprocess.CompletedProcess[str]] = []
    with MirrorServer(setup.channel, Faults(auth=f"envtool:{SECRET}")) as server:
        channel = server.url.replace("http://", f"http://envtool:{SECRET}@")
        created = run_envtool(
            "create", "net", "-f", "environment.yml", "--channel", channel, "--cuda", "12.6",
            env=env, cwd=project,
        )  # fmt: skip
        printed.append(created)
        assert created.returncode == 0, created.stderr
        for more in (["--json"], []):
            printed.append(run_envtool("info", "net", *more, env=env, cwd=project))
        printed.append(run_envtool("export", "net", "-o", "env.yml", env=env, cwd=project))
        printed.append(
            run_envtool(
                "export", "net", "--format", "explicit", "-o", "explicit.txt", env=env, cwd=project
            )
        )
        printed.append(run_envtool("export", "net", "--format", "explicit", env=env, cwd=project))
        printed.append(
            run_envtool(
                "export", "net", "--format", "pixi", "-o", "pixi.toml", env=env, cwd=project
            )
        )
        # a failure that names the URL: the same lock's archives on a host that is gone
        lock = project / "environments" / "net" / "conda-lock.yml"
        broken = tmp_path / "work" / "broken.yml"
        broken.write_text(
            lock.read_text().replace(
                server.url, channel.replace(":" + str(server.server_address[1]), ":9")
            )
        )
        shutil.rmtree(work / "cache" / "archives")
        printed.append(
            run_envtool("install", "--lock", str(broken), "--prefix", str(work / "p2"), env=env)
        )
        assert printed[-1].returncode == 1, printed[-1].stderr
        printed.append(
            run_envtool(
                "install", "--lock", str(broken), "--prefix", str(work / "p3"), "--json", env=env
            )
        )
    assert (project / "environments" / "net" / "conda-lock.yml").is_file()
    assert (project / "env.yml").is_file() and (project / "explicit.txt").is_file()
    assert "127.0.0.1" in (project / "pixi.toml").read_text()  # the channel, without its secret
    assert (work / "envs" / "net" / "conda-meta").is_dir()
    assert SECRET in broken.read_text()  # the input had it; nothing envtool wrote does
    leaked = [p for p in _files_holding(work, SECRET) if p != "broken.yml"]
    assert leaked == []
    for proc in printed:
        assert SECRET not in proc.stdout + proc.stderr, proc.args
    assert "***@127.0.0.1" in printed[-2].stderr  # masked, so the reader sees it had some


def test_a_credentialed_mirror_from_rattlers_config_is_not_printed(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    config = home / ".config" / "rattler" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'[mirrors]\n"http://channel.invalid/demo" = ["http://envtool:{SECRET}@127.0.0.1:9/demo"]\n'
    )
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    lock = tmp_path / "conda-lock.yml"
    lock.write_text(
        setup.lock.read_text().replace(setup.channel.as_uri(), "http://channel.invalid/demo")
    )
    out = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert out.returncode == 1, out.stderr
    assert SECRET not in out.stdout + out.stderr
    assert _files_holding(tmp_path / "p", SECRET) == [] if (tmp_path / "p").exists() else True
    assert _files_holding(Path(env["ENVTOOL_CACHE_DIR"]), SECRET) == []


def test_secret_options_are_masked_in_a_recorded_command_line_and_nothing_else() -> None:
    from envtool.core.credentials import redact_secret_args

    argv = ["python", "train.py", "--hf-token", "hf_x", "--api-key=sk-x", "--wandb_key", "w"]
    argv += ["--PASSWORD", "p", "--key", "k", "--keyboard", "1", "--monkey", "z", "--lr", "3e-4"]
    argv += ["https://user:pw@host/ch"]
    assert redact_secret_args(argv) == [
        "python", "train.py", "--hf-token", "***", "--api-key=***", "--wandb_key", "***",
        "--PASSWORD", "***", "--key", "***", "--keyboard", "1", "--monkey", "z", "--lr", "3e-4",
        "https://***@host/ch",
    ]  # fmt: skip
