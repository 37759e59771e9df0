"""Fetching through rattler's networking from a real local HTTP mirror with faults (issue 11).

The mirror (tests/mirror_server.py) serves the channel channel_builder built; the lock names the
mirror's URLs. Faults: a 503 on the first request, a body cut at half (once, or always), added
latency, a server that dies mid-install, a file changed on the mirror, a mirror that demands
HTTP basic auth (credentials from rattler's store, RATTLER_AUTH_FILE). Every install runs the
real `envtool` CLI in a subprocess; no timed assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import envtool_argv, run_envtool
from mirror_server import Faults, MirrorServer

pytestmark = pytest.mark.integration

ARCHIVES = (".conda", ".tar.bz2")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_port_named_like_a_status() -> int:
    """A free port whose digits hold "404" (CI once got 40429 by chance, and a dead mirror was
    then called "does not have this file"): the error text carries the port."""
    for port in (*range(40400, 40500), *range(14040, 14050)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 40400-40499 or 14040-14049")


@pytest.fixture
def mirror(setup: cb.CudaSetup, tmp_path: Path) -> Path:
    """A private copy of the built channel (a test may change a file in it)."""
    root = tmp_path / "mirror"
    shutil.copytree(setup.channel, root)
    return root


def _http_lock(setup: cb.CudaSetup, url: str, tmp_path: Path) -> Path:
    """The demo lock with every conda URL on the mirror at `url`."""
    lock = tmp_path / "lock" / "conda-lock.yml"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(setup.lock.read_text().replace(setup.channel.as_uri(), url))
    return lock


def _install(lock: Path, env: dict[str, str], *more: str) -> subprocess.CompletedProcess[str]:
    return run_envtool(
        "install", "--lock", str(lock), "--prefix", str(_prefix(env)), *more, env=env
    )


def _prefix(env: dict[str, str]) -> Path:
    return Path(env["ENVTOOL_ENVS_DIR"]) / "demo"


def _archive_names(setup: cb.CudaSetup) -> set[str]:
    return {r.file_name for r in setup.records}


def _served_archives(server: MirrorServer) -> dict[str, int]:
    return {p.rsplit("/", 1)[-1]: n for p, n in server.served.items() if p.endswith(ARCHIVES)}


def _requested_archives(server: MirrorServer) -> dict[str, int]:
    return {p.rsplit("/", 1)[-1]: n for p, n in server.requests.items() if p.endswith(ARCHIVES)}


def _cached(env: dict[str, str]) -> set[str]:
    archives = Path(env["ENVTOOL_CACHE_DIR"]) / "archives"
    return (
        {p.name for p in archives.iterdir() if p.name.endswith(ARCHIVES)}
        if archives.is_dir()
        else set()
    )


def _leftover_temps(env: dict[str, str]) -> list[str]:
    archives = Path(env["ENVTOOL_CACHE_DIR"]) / "archives"
    return [p.name for p in archives.glob(".*.part")] if archives.is_dir() else []


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("envtool: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def _verified(env: dict[str, str]) -> None:
    out = run_envtool("verify", "--prefix", str(_prefix(env)), "--json", env=env)
    assert out.returncode == 0, out.stdout + out.stderr


# --------------------------------------------------------------- transient faults: one run


def test_a_503_on_the_first_request_of_every_archive_still_installs_in_one_run(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with MirrorServer(mirror, Faults(busy_first={"*"})) as server:
        out = _install(_http_lock(setup, server.url, tmp_path), env)
    assert out.returncode == 0, out.stderr
    names = _archive_names(setup)
    assert _requested_archives(server) == dict.fromkeys(names, 2)  # rattler retried each once
    assert _served_archives(server) == dict.fromkeys(names, 1)
    assert "fetched" in out.stderr and "linked 5 packages" in out.stderr  # the closing summary


def test_a_body_cut_at_half_is_fetched_again_not_called_tampered(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with MirrorServer(mirror, Faults(cut={".conda"})) as server:
        out = _install(_http_lock(setup, server.url, tmp_path), env)
    assert out.returncode == 0, out.stderr
    assert "hash mismatch" not in out.stderr
    assert set(_requested_archives(server).values()) == {2}  # cut once, fetched again by envtool
    # ... from where it stopped: a Range request for the second half of each archive
    sizes = {p.name: p.stat().st_size for p in mirror.glob("*/*.conda")}
    resumed = {path.rsplit("/", 1)[-1]: start for path, start in server.ranges}
    assert resumed == {name: sizes[name] // 2 for name in _archive_names(setup)}
    assert not _leftover_temps(env)
    _verified(env)


def test_a_cut_body_from_a_server_that_ignores_range_is_fetched_whole_again(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """rattler does not show the answer's status: a 200 to a Range request appends the whole
    file; the digest shows it, and the file is fetched once more from byte 0 — not "changed"."""
    with MirrorServer(mirror, Faults(cut={".conda"}, no_range=True)) as server:
        out = _install(_http_lock(setup, server.url, tmp_path), env)
    assert out.returncode == 0, out.stderr
    assert "hash mismatch" not in out.stderr
    assert set(_requested_archives(server).values()) == {3}  # cut, whole (appended), whole
    assert not _leftover_temps(env)
    _verified(env)


@pytest.mark.slow
def test_a_body_always_cut_short_is_a_network_failure_naming_the_bytes(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with MirrorServer(mirror, Faults(cut={"/libtorch-"}, cut_always=True)) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        out = _install(lock, env)
    assert out.returncode == 1, out.stderr
    line = _one_error_line(out.stderr)
    assert "could not fetch" in line and "/libtorch-" in line and "connection dropped after" in line
    assert "4 tries" in line and "check the network / mirror" in line
    assert "hash mismatch" not in line and "re-lock" not in line and "tamper" not in line
    libtorch = next(n for n in _archive_names(setup) if n.startswith("libtorch-"))
    assert _requested_archives(server)[libtorch] == 4
    prefix = _prefix(env)
    assert not (prefix / "conda-meta").exists()  # nothing linked, no marker
    # the archives that did arrive are verified in the cache: the rerun fetches only libtorch
    assert _cached(env) == _archive_names(setup) - {libtorch}
    assert not _leftover_temps(env)
    with MirrorServer(mirror, port=int(server.url.rsplit(":", 1)[1])) as again:
        rerun = _install(lock, env)
    assert rerun.returncode == 0, rerun.stderr
    assert set(_requested_archives(again)) == {libtorch}


def test_a_slow_mirror_is_waited_for(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with MirrorServer(mirror, Faults(latency=0.5)) as server:
        out = _install(_http_lock(setup, server.url, tmp_path), env, "--quiet")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # --quiet: no progress at all
    _verified(env)


# --------------------------------------------------------------- a mirror that dies: resume


@pytest.mark.slow
def test_a_mirror_that_dies_mid_install_fails_cleanly_and_the_rerun_fetches_only_the_rest(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    port = _free_port_named_like_a_status()
    with MirrorServer(mirror, Faults(die_after=2), port=port) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        out = _install(lock, env)
    assert out.returncode == 1, out.stderr
    line = _one_error_line(out.stderr)
    assert "could not fetch" in line and "check the network / mirror" in line
    assert "hash mismatch" not in line and "re-lock" not in line
    assert "does not have this file" not in line  # the port holds "404"; no server said 404
    assert not (_prefix(env) / "conda-meta").exists()
    kept = _cached(env)
    assert len(kept) >= 2 and kept == set(_served_archives(server))
    with MirrorServer(mirror, port=port) as again:
        rerun = _install(lock, env)
    assert rerun.returncode == 0, rerun.stderr
    assert set(_requested_archives(again)) == _archive_names(setup) - kept  # none fetched twice
    _verified(env)


def test_an_install_killed_mid_fetch_reruns_to_a_verified_env_without_refetching(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    port = _free_port()
    with MirrorServer(mirror, Faults(latency=1.0), port=port) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        proc = subprocess.Popen(
            [*envtool_argv(), "install", "--lock", str(lock), "--prefix", str(_prefix(env))],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while not _cached(env) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()  # SIGKILL: no cleanup of any kind
        proc.wait()
    kept = _cached(env)
    assert kept, "the install finished before the kill"
    archives = Path(env["ENVTOOL_CACHE_DIR"]) / "archives"
    old, fresh = archives / ".gone.conda.x1.part", archives / ".busy.conda.x2.part"
    old.write_bytes(b"left by a kill long ago")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    fresh.write_bytes(b"another install is writing this one")
    with MirrorServer(mirror, port=port) as again:
        rerun = _install(lock, env)
    assert rerun.returncode == 0, rerun.stderr
    assert not set(_requested_archives(again)) & kept  # completed archives never fetched again
    _verified(env)
    assert not old.exists() and fresh.exists()  # a killed install's temps are swept once stale


# --------------------------------------------------------------- a changed file: refused


def test_a_complete_file_that_differs_from_the_lock_is_refused_with_nothing_linked(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    locked = next(r.file_name for r in setup.records if r.name.normalized == "pytorch")
    pytorch = next(mirror.glob(f"*/{locked}"))
    cb.flip_byte(pytorch)
    with MirrorServer(mirror) as server:
        out = _install(_http_lock(setup, server.url, tmp_path), env)
    assert out.returncode == 1, out.stderr
    line = _one_error_line(out.stderr)
    assert "hash mismatch" in line and f"{server.url}/" in line and pytorch.name in line
    assert "the mirror serves a different file" in line
    assert "re-lock only if you trust the new file" in line
    assert not (_prefix(env) / "conda-meta").exists()
    assert pytorch.name not in _cached(env)  # never renamed into the cache


# --------------------------------------------------------------- credentials from rattler's store


def test_credentials_come_from_rattlers_auth_store(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with MirrorServer(mirror, Faults(auth="envtool:s3cret")) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        env["RATTLER_AUTH_FILE"] = str(tmp_path / "none.json")
        (tmp_path / "none.json").write_text("{}")
        refused = _install(lock, env)
        assert refused.returncode == 1, refused.stderr
        line = _one_error_line(refused.stderr)
        assert "401" in line and "RATTLER_AUTH_FILE" in line
        # rattler-build's documented format: host -> {"BasicHTTP": {username, password}}
        auth = tmp_path / "auth.json"
        auth.write_text(
            json.dumps({"127.0.0.1": {"BasicHTTP": {"username": "envtool", "password": "s3cret"}}})
        )
        env["RATTLER_AUTH_FILE"] = str(auth)
        out = _install(lock, env)
    assert out.returncode == 0, out.stderr
    assert set(_served_archives(server)) == _archive_names(setup)


# --------------------------------------------------------------- repodata through the client


def _create_over(url: str, env: dict[str, str], project: Path) -> subprocess.CompletedProcess[str]:
    project.mkdir(exist_ok=True)
    (project / "environment.yml").write_text(
        "name: net\ndependencies:\n  - python 3.11.*\n  - pytorch 2.7.*\n"
    )
    return run_envtool(
        "create", "net", "-f", "environment.yml", "--channel", url, "--cuda", "12.6",
        "--driver", "570.86.10", "--no-install", env=env, cwd=project,
    )  # fmt: skip


def test_a_channel_whose_first_answers_are_503_is_retried_not_called_unreadable(
    mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    env["RATTLER_CACHE_DIR"] = str(tmp_path / "rattler-cache")  # a cold repodata cache
    with MirrorServer(mirror, Faults(busy_first={"*"})) as server:
        out = _create_over(server.url, env, tmp_path / "project")
    assert out.returncode == 0, out.stderr
    assert "cannot read channel repodata" not in out.stderr
    assert any(n == 2 for n in server.requests.values())  # a 503, then the answer
    assert (tmp_path / "project" / "environments" / "net" / "conda-lock.yml").is_file()


def test_a_channel_nobody_answers_names_the_host_the_cause_and_the_mirror_fix(
    env: dict[str, str], tmp_path: Path
) -> None:
    """It was rattler's error chain cut at 300 characters mid-cause, exit 2 (bad usage), and no
    word of the mirror config the README offers for exactly this."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env["RATTLER_CACHE_DIR"] = str(tmp_path / "rattler-cache")
    out = _create_over(f"http://127.0.0.1:{port}/conda-forge", env, tmp_path / "project")
    assert out.returncode == 1, out.stderr
    line = _one_error_line(out.stderr)
    assert f"cannot reach the channel for linux-64: 127.0.0.1:{port}: Connection refused" in line
    assert "[mirrors]" in line and "Caused by" not in line


def test_a_sharded_channel_is_solved_from_its_shards(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    sharded = cb.sharded_copy(setup.channel, tmp_path / "sharded")
    assert (sharded / "linux-64" / "repodata_shards.msgpack.zst").is_file()
    env["RATTLER_CACHE_DIR"] = str(tmp_path / "rattler-cache")
    with MirrorServer(sharded) as server:
        out = _create_over(server.url, env, tmp_path / "project")
    assert out.returncode == 0, out.stderr
    asked = set(server.served)
    assert "/linux-64/repodata_shards.msgpack.zst" in asked
    assert any(p.startswith("/linux-64/shards/") for p in asked), asked
    assert not any("repodata.json" in p for p in asked)


# --------------------------------------------------------------- rattler's shared package cache


def _pixi_like_install(records: list, prefix: Path, pkgs_dir: Path) -> None:
    """What pixi does: rattler.install into its own env, extracting into the shared cache."""
    import asyncio

    from rattler import install

    async def run() -> None:
        await install(records, target_prefix=prefix, cache_dir=pkgs_dir, show_progress=False)
        await asyncio.sleep(0.05)

    asyncio.run(run())


def test_packages_already_in_rattlers_shared_cache_are_verified_not_downloaded(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    xdg = tmp_path / "xdg"
    env.pop("ENVTOOL_CACHE_DIR")  # the default: rattler's shared cache, as pixi uses it
    env.pop("RATTLER_CACHE_DIR", None)
    env["XDG_CACHE_HOME"] = str(xdg)
    shared = xdg / "rattler" / "cache" / "pkgs"
    _pixi_like_install(setup.records, tmp_path / "pixi-env", shared)
    with MirrorServer(mirror) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        out = _install(lock, env, "--json")
        assert out.returncode == 0, out.stderr
        # nothing downloaded but the python stub, whose bin/python is an absolute link: used
        # without its archive only when every softlink stays in the prefix
        python = {n for n in _archive_names(setup) if n.startswith("python-")}
        assert set(_requested_archives(server)) == python
        report = json.loads(out.stdout)
        assert sorted(report["from_package_cache"]) == sorted(_archive_names(setup) - python)
        _verified(env)

        # a file changed in one extracted package: that one is downloaded (and re-extracted)
        libtorch = next(shared.glob("libtorch-*/lib/libtorch_cuda.so"))
        libtorch.write_bytes(b"changed after extraction\n")
        env["ENVTOOL_ENVS_DIR"] = str(tmp_path / "envs2")
        again = _install(lock, env, "--json")
        assert again.returncode == 0, again.stderr
        fetched = json.loads(again.stdout)["fetched"]
        assert [n.split("-")[0] for n in fetched] == ["libtorch"]
        assert set(_requested_archives(server)) == set(fetched) | python
        assert libtorch.read_bytes() != b"changed after extraction\n"  # rattler extracted it again
        _verified(env)


def test_a_shared_cache_entry_extracted_from_another_archive_is_not_used(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """rattler's <entry>.lock records the sha256 of the archive it was extracted from: another
    file than the lock's (same name-version-build, another build of the bytes) is downloaded."""
    xdg = tmp_path / "xdg"
    env.pop("ENVTOOL_CACHE_DIR")
    env.pop("RATTLER_CACHE_DIR", None)
    env["XDG_CACHE_HOME"] = str(xdg)
    shared = xdg / "rattler" / "cache" / "pkgs"
    _pixi_like_install(setup.records, tmp_path / "pixi-env", shared)
    marker = next(shared.glob("cuda-version-*.lock"))
    data = bytearray(marker.read_bytes())
    data[8] ^= 0xFF  # the recorded archive sha256 is no longer the lock's
    marker.write_bytes(bytes(data))
    with MirrorServer(mirror) as server:
        out = _install(_http_lock(setup, server.url, tmp_path), env, "--json")
    assert out.returncode == 0, out.stderr
    # and the python stub, whose bin/python is an absolute link (see above)
    assert sorted(n.split("-")[0] for n in _requested_archives(server)) == ["cuda", "python"]
    _verified(env)


# --------------------------------------------------------------- rattler's config.toml


def _config_home(env: dict[str, str], tmp_path: Path, text: str) -> None:
    """A rattler config.toml in the shared place pixi and rattler-build read."""
    home = tmp_path / "home"
    config = home / ".config" / "rattler" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))


def test_mirrors_come_from_the_shared_rattler_config(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The lock names a channel host that does not exist; the user's rattler config.toml
    mirrors it to the local server: every archive comes from the mirror."""
    gone = "http://channel.invalid/conda-forge"
    with MirrorServer(mirror) as server:
        _config_home(env, tmp_path, f'[mirrors]\n"{gone}" = ["{server.url}"]\n')
        out = _install(_http_lock(setup, gone, tmp_path), env)
    assert out.returncode == 0, out.stderr
    assert set(_served_archives(server)) == _archive_names(setup)


def test_a_rattler_config_it_cannot_read_is_one_line_exit_2(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    _config_home(env, tmp_path, "mirrors = 5\n")
    with MirrorServer(setup.channel) as server:
        out = _install(_http_lock(setup, server.url, tmp_path), env)
    assert out.returncode == 2, out.stderr
    line = _one_error_line(out.stderr)
    assert "cannot read the rattler configuration" in line and "config.toml" in line
    assert not (_prefix(env) / "conda-meta").exists()


# --------------------------------------------------------------- progress on a terminal


def test_a_terminal_gets_a_live_progress_line_and_a_pipe_one_line_per_phase(
    setup: cb.CudaSetup, mirror: Path, env: dict[str, str], tmp_path: Path
) -> None:
    import pty

    master, slave = pty.openpty()
    with MirrorServer(mirror, Faults(latency=0.2)) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        proc = subprocess.Popen(
            [*envtool_argv(), "install", "--lock", str(lock), "--prefix", str(_prefix(env))],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=slave,
        )
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait() == 0, seen
    os.close(master)
    text = seen.decode()
    assert "\r  fetched " in text and "/5 archives" in text and "\x1b[K" in text  # redrawn
    assert "\r  linked " in text
    summary = text.replace("\r", "\n").splitlines()
    assert any(line.startswith("fetched ") and "linked 5 packages in" in line for line in summary)
    # not a terminal: the phases as lines, no carriage returns or escapes
    env["ENVTOOL_ENVS_DIR"] = str(tmp_path / "envs2")
    with MirrorServer(mirror) as server:
        piped = _install(_http_lock(setup, server.url, tmp_path), env)
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stderr and "\x1b" not in piped.stderr
    lines = piped.stderr.splitlines()
    assert lines[0].startswith("fetching 5 packages") and lines[1].startswith("linking 5 packages")


@pytest.mark.parametrize(
    ("why", "status"),
    [
        ("HTTP status client error (404 Not Found) for url (http://127.0.0.1:8080/a.conda)", 404),
        ("HTTP status client error (401 Unauthorized) for url (http://h:40129/a.conda)", 401),
        ("503 Service Unavailable (4 tries)", 503),
        ("no connection (4 tries): http://127.0.0.1:40429/linux-64/a.conda", None),
        ("error sending request for url (http://10.4.0.4:14041/a.conda)", None),
    ],
)
def test_the_status_is_read_from_the_answer_never_from_a_host_or_port(
    why: str, status: int | None
) -> None:
    from envtool.adapters.install.fetch import http_status

    assert http_status(why) == status
