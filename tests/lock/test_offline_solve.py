"""`--offline` for solves (create, lock): the channels' repodata from rattler's cache, however
old, never a request; a channel never fetched is refused naming it. Real solves over a real
HTTP channel (tests/mirror_server.py) that is stopped before the offline run."""

from __future__ import annotations

import shutil
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import run_envtool
from mirror_server import MirrorServer

pytestmark = pytest.mark.integration


def _error_line(stderr: str) -> str:
    (line,) = [x for x in stderr.splitlines() if x.startswith("envtool: error:")]
    return line


@pytest.mark.parametrize("sharded", [False, True])
def test_offline_relocks_from_cached_repodata_and_names_a_channel_never_fetched(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path, sharded: bool
) -> None:
    """It used to need the network for every solve: `--offline` only meant installs. Sharded
    repodata (CEP-16) is cached shard by shard and read back the same way."""
    (tmp_path / "env.yml").write_text("dependencies:\n  - python\n  - pytorch\n")
    channel = cb.sharded_copy(setup.channel, tmp_path / "sharded") if sharded else setup.channel
    with MirrorServer(channel) as server:
        url = server.url
        args = ["create", "demo", "-f", "env.yml", "--channel", url, "--cuda", "12.6"]
        made = run_envtool(*args, env=env, cwd=tmp_path)
        assert made.returncode == 0, made.stderr
    # on a plane: another env from the same request, solved and installed with no server
    args[1] = "again"
    plane = run_envtool("--offline", *args, env=env, cwd=tmp_path)
    assert plane.returncode == 0, plane.stderr
    assert (Path(env["ENVTOOL_ENVS_DIR"]) / "again" / "conda-meta").is_dir()
    lock = tmp_path / "environments" / "demo" / "conda-lock.yml"
    before = lock.read_text()
    lock.unlink()  # the server is gone: only the cache can answer

    again = run_envtool("--offline", "lock", "demo", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert lock.read_text().count("url: ") == before.count("url: ")  # the same packages
    assert f"{url}/linux-64/pytorch-2.7.1" in lock.read_text()

    online = run_envtool("lock", "demo", "--force", env=env, cwd=tmp_path)  # not offline
    assert online.returncode == 1 and "cannot reach the channel" in online.stderr, online.stderr
    assert "solved here before: `envtool --offline …` reads the cached repodata" in online.stderr

    shutil.rmtree(Path(env["ENVTOOL_CACHE_DIR"]) / "repodata")  # nothing cached
    bare = run_envtool("--offline", "lock", "demo", "--force", env=env, cwd=tmp_path)
    assert bare.returncode == 2, bare.stderr
    line = _error_line(bare.stderr)
    assert line.startswith(f"envtool: error: --offline: no cached repodata for {url}/"), line
    assert "run the command once online" in line


def test_offline_reads_a_channel_by_its_own_repodata_config(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    """A channel's own [repodata-config."URL"] table (here: shards for one channel, none by
    default) decides what the online run cached; the offline read must look for that form,
    not the defaults' — it found nothing and refused a channel it had fetched."""
    (tmp_path / "env.yml").write_text("dependencies:\n  - python\n  - pytorch\n")
    config = tmp_path / "xdg"
    env = {**env, "XDG_CONFIG_HOME": str(config)}
    channel = cb.sharded_copy(setup.channel, tmp_path / "both", keep_json=True)
    with MirrorServer(channel) as server:
        (config / "envtool").mkdir(parents=True)
        (config / "envtool" / "config.toml").write_text(
            "[repodata-config]\ndisable-sharded = true\n"
            f'[repodata-config."{server.url}"]\ndisable-sharded = false\n'
        )
        args = ["create", "demo", "-f", "env.yml", "--channel", server.url, "--cuda", "12.6"]
        made = run_envtool(*args, env=env, cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        fetched = set(server.requests)
        assert not any(p.endswith("/repodata.json") for p in fetched), fetched  # its shards
    (tmp_path / "environments" / "demo" / "conda-lock.yml").unlink()
    again = run_envtool("--offline", "lock", "demo", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
