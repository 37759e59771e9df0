"""Settings files: the user's config.toml (XDG_CONFIG_HOME honoured) and the project's
envtool.toml, with flag > environment variable > project > user, exercised through real
commands: where an install lands, an --offline install from the package cache only, the channels
a request without any is solved against; bad files are one line naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool
from mirror_server import MirrorServer

from envtool.core.config import parse_config, plan_environ
from envtool.errors import UsageError

pytestmark = pytest.mark.integration


@pytest.fixture
def cfg_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """`env` without the envs dir and offline variables, a user config folder of its own."""
    env = dict(env)
    for var in ("ENVTOOL_ENVS_DIR", "ENVTOOL_OFFLINE", "ENVTOOL_CHANNELS"):
        env.pop(var, None)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    (tmp_path / "xdg" / "envtool").mkdir(parents=True)
    return env


def _settings(env: dict[str, str], cwd: Path, *flags: str) -> dict[str, dict]:
    out = run_envtool(*flags, "config", "--json", env=env, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return {s["key"]: s for s in json.loads(out.stdout)["settings"]}


def test_precedence_flag_variable_project_user(
    setup: cb.CudaSetup, cfg_env: dict[str, str], tmp_path: Path
) -> None:
    user = tmp_path / "xdg" / "envtool" / "config.toml"
    user.write_text('envs-dir = "user-envs"  # relative to this file\nnetwork-idle-timeout = 7.5\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "envtool.toml").write_text("network-idle-timeout = 9\n")

    s = _settings(cfg_env, project)
    assert s["network-idle-timeout"] == {
        "key": "network-idle-timeout",
        "env": "ENVTOOL_NETWORK_IDLE_TIMEOUT",
        "value": "9",
        "source": str(project / "envtool.toml"),  # project over user
    }
    assert s["envs-dir"]["value"] == str(user.parent / "user-envs")
    assert s["envs-dir"]["source"] == str(user)
    installed = run_envtool("install", "p1", "--lock", str(setup.lock), env=cfg_env, cwd=project)
    assert installed.returncode == 0, installed.stderr
    assert (user.parent / "user-envs" / "p1" / "conda-meta").is_dir()

    # an environment variable beats both files
    cfg_env["ENVTOOL_ENVS_DIR"] = str(tmp_path / "from-var")
    assert (
        _settings(cfg_env, project)["envs-dir"]["source"] == "environment variable ENVTOOL_ENVS_DIR"
    )
    out = run_envtool("install", "p2", "--lock", str(setup.lock), env=cfg_env, cwd=project)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "from-var" / "p2" / "conda-meta").is_dir()
    # and the flag beats the variable
    prefix = tmp_path / "flagged"
    out = run_envtool(
        "install",
        "p3",
        "--lock",
        str(setup.lock),
        "--prefix",
        str(prefix),
        env=cfg_env,
        cwd=project,
    )
    assert out.returncode == 0, out.stderr
    assert (prefix / "conda-meta").is_dir() and not (tmp_path / "from-var" / "p3").exists()


def test_offline_installs_from_the_package_cache_only(
    setup: cb.CudaSetup, cfg_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "xdg" / "envtool" / "config.toml").write_text("offline = true\n")
    cfg_env["ENVTOOL_ENVS_DIR"] = str(tmp_path / "envs")
    with MirrorServer(setup.channel) as server:
        lock = tmp_path / "lock" / "conda-lock.yml"
        lock.parent.mkdir()
        lock.write_text(setup.lock.read_text().replace(setup.channel.as_uri(), server.url))
        refused = run_envtool("install", "o1", "--lock", str(lock), env=cfg_env, cwd=tmp_path)
        assert refused.returncode == 2 and "not in the package cache" in refused.stderr
        assert server.archive_bodies() == 0  # nothing downloaded
        assert not (tmp_path / "envs" / "o1" / "conda-meta").is_dir()
        # the variable turns the file's offline off; the install fills the package cache
        online = run_envtool(
            "install", "o1", "--lock", str(lock), env={**cfg_env, "ENVTOOL_OFFLINE": "0"}
        )
        assert online.returncode == 0, online.stderr
        fetched = server.archive_bodies()
        assert fetched > 0
        # now --offline installs a second env from that cache alone
        flag = {**cfg_env, "ENVTOOL_OFFLINE": "0"}
        out = run_envtool("--offline", "install", "o2", "--lock", str(lock), env=flag)
        assert out.returncode == 0, out.stderr
        assert server.archive_bodies() == fetched
    assert (tmp_path / "envs" / "o2" / "conda-meta").is_dir()
    flagged = _settings(flag, tmp_path, "--offline")
    assert flagged["offline"]["value"] == "1" and flagged["offline"]["source"] == "flag --offline"


def test_default_channels_solve_a_request_that_names_none(
    setup: cb.CudaSetup, cfg_env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "envtool.toml").write_text(f'default-channels = ["{setup.channel.as_uri()}"]\n')
    (project / "environment.yml").write_text("name: c1\ndependencies:\n  - python\n  - pytorch\n")
    out = run_envtool(
        "create", "c1", "-f", "environment.yml", "--cuda", "12.6", "--driver", "570.86.10",
        "--no-install", "--json", env=cfg_env, cwd=project,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["plan"]["channels"] == [setup.channel.as_uri()]


def test_a_bad_settings_file_is_one_line_naming_the_file_and_key(
    cfg_env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    cases = {
        "colour = true\n": "colour: unknown key",
        "offline = 1\n": "offline: expected true or false",
        "network-idle-timeout = -3\n": "network-idle-timeout: expected seconds",
        'default-channels = "conda-forge"\n': "default-channels: expected a list",
        "offline = [\n": "not valid TOML",
        # a cloned repository's file choosing where envtool installs or caches: never (outside,
        # it sends envtool's writes anywhere; inside, it could ship a planted package cache)
        'cache-dir = "/tmp/elsewhere"\n': "cache-dir: a project's envtool.toml does not choose",
        'cache-dir = ".cache"\n': "cache-dir: a project's envtool.toml does not choose",
        'envs-dir = "envs"\n': "envs-dir: a project's envtool.toml does not choose",
    }
    for text, want in cases.items():
        (project / "envtool.toml").write_text(text)
        out = run_envtool("list", env=cfg_env, cwd=project)
        assert out.returncode == 2, (text, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert str(project / "envtool.toml") in lines[0] or "envtool.toml" in lines[0]
        assert want in lines[0], (text, lines[0])


def test_the_user_file_is_shared_with_rattler(cfg_env: dict[str, str], tmp_path: Path) -> None:
    # ~/.config/envtool/config.toml is also rattler's (mirrors, proxies, TLS: solve/network.py):
    # its keys are not unknown there, but they are in the project's envtool.toml
    user = tmp_path / "xdg" / "envtool" / "config.toml"
    user.write_text(
        "offline = true\ntls-no-verify = false\n"
        '[mirrors]\n"https://conda.anaconda.org/conda-forge" = ["https://mirror.example/cf"]\n'
    )
    project = tmp_path / "project"
    project.mkdir()
    assert _settings(cfg_env, project)["offline"]["value"] == "1"
    user.write_text("offline = true\nofline = false\n")  # a typo neither tool knows
    out = run_envtool("list", env=cfg_env, cwd=project)
    assert out.returncode == 2 and f"{user}: ofline: unknown key" in out.stderr
    user.write_text("offline = true\n")
    (project / "envtool.toml").write_text("tls-no-verify = true\n")
    out = run_envtool("list", env=cfg_env, cwd=project)
    assert out.returncode == 2 and "tls-no-verify: unknown key" in out.stderr


def test_merge_keeps_variables_already_set() -> None:
    user = parse_config('envs-dir = "/u"\noffline = true\n', "user.toml")
    project = parse_config('envs-dir = "/p"\n', "envtool.toml")
    to_set, origin = plan_environ(
        [("user.toml", user), ("envtool.toml", project)], {"ENVTOOL_OFFLINE": "0"}
    )
    assert to_set == {"ENVTOOL_ENVS_DIR": "/p"}
    assert origin["ENVTOOL_OFFLINE"] == "environment variable ENVTOOL_OFFLINE"
    with pytest.raises(UsageError, match=r"^x\.toml: cache-dir: expected a folder path"):
        parse_config('cache-dir = "a\\u001b[31m"\n', "x.toml")
