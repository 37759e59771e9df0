"""Faults named right, and bounded (issues 21.5, 23.3, 23.4): a dead host, a stalled or dripping
body, a 503 shown as a retry, a full disk while downloading and while linking, Ctrl-C mid-fetch.

Every install is the real `envtool` CLI in a subprocess against a real local HTTP mirror
(tests/mirror_server.py); a full disk is a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) set in
the child only. No timed assertions: what is checked is what was said, what was asked of the
server, and what is left on disk.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import threading
import time
import zlib
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import envtool_argv, run_envtool
from mirror_server import Faults, MirrorServer

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_lock(setup: cb.CudaSetup, url: str, tmp_path: Path) -> Path:
    lock = tmp_path / "lock" / "conda-lock.yml"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(setup.lock.read_text().replace(setup.channel.as_uri(), url))
    return lock


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("envtool: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def _archives(server: MirrorServer) -> dict[str, int]:
    return {p.rsplit("/", 1)[-1]: n for p, n in server.requests.items() if p.endswith(".conda")}


def _cached(env: dict[str, str]) -> set[str]:
    root = Path(env["ENVTOOL_CACHE_DIR"]) / "archives"
    return {p.name for p in root.glob("*.conda")} if root.is_dir() else set()


# --------------------------------------------------------------- a host that is not there


def test_a_refused_connection_ends_naming_the_host_and_what_was_tried(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    port = _free_port()  # nothing listens there
    lock = _http_lock(setup, f"http://127.0.0.1:{port}", tmp_path)
    out = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert out.returncode == 1, out.stderr
    line = _error_line(out.stderr)
    assert f"127.0.0.1:{port}" in line and "refused" in line.lower(), line
    assert "4 tries" in line and "check the network" in line
    assert "hash mismatch" not in line
    assert not (tmp_path / "p" / "conda-meta").exists()


def test_a_host_with_no_address_is_named_as_a_dns_failure(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    lock = _http_lock(setup, "http://mirror.envtool-test.invalid", tmp_path)
    out = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert out.returncode == 1, out.stderr
    line = _error_line(out.stderr)
    assert "mirror.envtool-test.invalid: DNS lookup failed" in line, line


# --------------------------------------------------------------- retries shown, stalls cut


def test_a_503_is_shown_as_a_retry_and_the_install_completes(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    with MirrorServer(setup.channel, Faults(busy_first={"/libtorch-"})) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        out = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert out.returncode == 0, out.stderr
    assert "retry 2/4 127.0.0.1: 503 Service Unavailable" in out.stderr
    libtorch = [n for n in _archives(server) if n.startswith("libtorch-")]
    assert [_archives(server)[n] for n in libtorch] == [2]


def test_a_body_that_stalls_is_cut_by_the_idle_timeout_and_resumed(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    env["ENVTOOL_NETWORK_IDLE_TIMEOUT"] = "1"
    with MirrorServer(setup.channel, Faults(stall={"/libtorch-"})) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        out = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert out.returncode == 0, out.stderr
    assert "stalled: under 1024 bytes in 1 s" in out.stderr  # the retry line says why
    assert [p for p, start in server.ranges if "/libtorch-" in p and start > 0]  # resumed
    assert run_envtool("verify", "--prefix", str(tmp_path / "p"), env=env).returncode == 0


def test_a_server_that_drips_one_byte_at_a_time_fails_naming_the_stall(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    env["ENVTOOL_NETWORK_IDLE_TIMEOUT"] = "1"
    with MirrorServer(setup.channel, Faults(drip={"/libtorch-"})) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        out = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert out.returncode == 1, out.stderr
    line = _error_line(out.stderr)
    assert "/libtorch-" in line and "stalled: under 1024 bytes in 1 s" in line and "4 tries" in line
    assert len(_cached(env)) == 4  # every other archive verified and kept for the rerun
    assert not list((Path(env["ENVTOOL_CACHE_DIR"]) / "archives").glob(".*.part"))


def test_a_bad_idle_timeout_is_a_usage_error(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    env["ENVTOOL_NETWORK_IDLE_TIMEOUT"] = "soon"
    with MirrorServer(setup.channel) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        out = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert out.returncode == 2, out.stderr
    assert "ENVTOOL_NETWORK_IDLE_TIMEOUT='soon'" in _error_line(out.stderr)


# --------------------------------------------------------------- Ctrl-C


def test_ctrl_c_mid_fetch_exits_130_and_the_rerun_resumes_the_partial_download(
    setup: cb.CudaSetup, env: dict[str, str], tmp_path: Path
) -> None:
    port = _free_port()
    archives = Path(env["ENVTOOL_CACHE_DIR"]) / "archives"
    with MirrorServer(setup.channel, Faults(stall={"/libtorch-"}), port=port) as server:
        lock = _http_lock(setup, server.url, tmp_path)
        proc = subprocess.Popen(
            [*envtool_argv(), "install", "--lock", str(lock), "--prefix", str(tmp_path / "p")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while (
            (len(_cached(env)) < 4 or not any(p.stat().st_size for p in archives.glob(".*.part")))
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    # the user is told the env is untouched and that the rerun goes on from the cache
    assert f"interrupted before anything was installed into {tmp_path / 'p'}" in err, err
    assert "run the same command to go on" in err
    assert len(_cached(env)) == 4  # the finished ones stay verified in the cache
    assert not (tmp_path / "p" / "conda-meta").exists()
    partial = list(archives.glob(".libtorch-*.part"))
    assert len(partial) == 1 and partial[0].stat().st_size > 0  # kept for the rerun
    half = partial[0].stat().st_size
    with MirrorServer(setup.channel, port=port) as again:
        out = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert out.returncode == 0, out.stderr
    assert [n for n in _archives(again)] == [partial[0].name.split(".conda.")[0][1:] + ".conda"]
    assert [start for _, start in again.ranges] == [half]  # asked only for the rest
    assert not list(archives.glob(".*.part"))


# --------------------------------------------------------------- a full disk


def _limited(limit: int):
    def apply() -> None:  # in the child only: writes past `limit` bytes fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _big_channel(tmp_path: Path, text: str) -> tuple[Path, Path]:
    channel = cb.build_channel(
        tmp_path / "big", [cb.Pkg("bigdata", "1.0", "h0_0", files={"share/big/blob": text})]
    )
    lock = cb.write_lock(
        tmp_path / "big.yml", cb.solve_records(channel, ["bigdata"], cuda=None), channel.as_uri()
    )
    return channel, lock


def test_a_full_disk_while_downloading_is_named_and_not_retried(
    env: dict[str, str], tmp_path: Path
) -> None:
    channel, lock = _big_channel(tmp_path, os.urandom(1 << 20).hex())  # ~1 MB compressed
    with MirrorServer(channel) as server:
        http = tmp_path / "http.yml"
        http.write_text(lock.read_text().replace(channel.as_uri(), server.url))
        out = subprocess.run(
            [*envtool_argv(), "install", "--lock", str(http), "--prefix", str(tmp_path / "p")],
            env=env,
            capture_output=True,
            text=True,
            preexec_fn=_limited(256 << 10),
            timeout=300,
        )
    assert out.returncode == 1, out.stderr
    line = _error_line(out.stderr)
    archives = Path(env["ENVTOOL_CACHE_DIR"]) / "archives"
    assert f"disk full at {archives}" in line and "ulimit -f" in line, line
    assert "MB free, at least 1 MB needed" in line
    assert "check the network" not in line and "tries" not in line
    assert list(_archives(server).values()) == [1]  # asked once: no retry
    assert not list(archives.glob(".*.part"))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_a_failed_link_waits_for_threads_still_writing_before_envtool_exits() -> None:
    """After a failed link, rattler's threads may still be writing other files; one entering
    Python while the interpreter exits aborts envtool (exit -6, not 1). The wait lasts while
    another thread works (here: zlib, which runs without the GIL, like rattler's Rust), not
    just a fixed pause, and gives up at its bound when a thread never stops."""
    from envtool.adapters.install.link import _wait_for_rattler

    stop, done = threading.Event(), threading.Event()

    def work(seconds: float) -> None:
        data, end = os.urandom(1 << 20), time.monotonic() + seconds
        while time.monotonic() < end and not stop.is_set():
            zlib.compress(data, 9)
        done.set()

    worker = threading.Thread(target=work, args=(0.5,))
    worker.start()
    _wait_for_rattler(timeout=10)
    assert done.is_set()  # it returned only once the worker had gone quiet
    worker.join()
    done.clear()
    forever = threading.Thread(target=work, args=(60,))
    forever.start()
    t0 = time.monotonic()
    try:
        _wait_for_rattler(timeout=0.5)
        assert not done.is_set() and time.monotonic() - t0 < 5  # bounded, not for ever
    finally:
        stop.set()
        forever.join()


def test_a_full_disk_while_linking_is_named_with_the_room_needed(
    env: dict[str, str], tmp_path: Path
) -> None:
    _, lock = _big_channel(tmp_path, "0" * (3 << 20))  # a 3 MB file in a tiny archive
    out = subprocess.run(
        [*envtool_argv(), "install", "--lock", str(lock), "--prefix", str(tmp_path / "p")],
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=_limited(1 << 20),
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    line = _error_line(out.stderr)
    assert f"disk full at {tmp_path / 'p'}" in line, line
    assert "about 3 MB needed" in line and "failed to link" not in line
    # with room, the same command finishes the install
    again = run_envtool("install", "--lock", str(lock), "--prefix", str(tmp_path / "p"), env=env)
    assert again.returncode == 0, again.stderr
    shutil.rmtree(tmp_path / "p")
