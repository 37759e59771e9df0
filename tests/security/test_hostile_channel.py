"""A hostile channel costs a bounded amount (issue 23.3): an endless repodata stream and a zstd
bomb in repodata.json.zst are cut at ENVTOOL_MAX_REPODATA_BYTES, the solve ends with one line
naming the host, nothing the channel sent stays in the repodata cache (which lives under
ENVTOOL_CACHE_DIR), and the peak memory of the `envtool create` process is measured.

The channel is a real local HTTP server (tests/mirror_server.py) in front of a copy of the
test channel; `envtool create --no-install` runs as a subprocess, its peak RSS measured by a
small wrapper process (see _PEAK_WRAPPER).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import channel_builder as cb
import pytest
from conftest import envtool_argv
from mirror_server import Faults, MirrorServer

pytestmark = pytest.mark.integration

CAP = 20_000_000  # the test's cap; the default is 1 GiB

# Linux keeps a process's peak RSS across exec, and a child spawned by (v)fork starts with its
# parent's: envtool spawned straight from a pytest worker that holds 500 MB reports 500 MB. A
# fresh ~10 MB interpreter spawns envtool instead and writes the child's own peak (KiB) to argv[1].
_PEAK_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[2:]).returncode\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "open(sys.argv[1], 'w').write(str(peak))\n"
    "sys.exit(code)\n"
)


def _plain_json_only(channel: Path, root: Path) -> Path:
    """A copy of the channel publishing repodata.json only (no .zst, no shards)."""
    shutil.copytree(channel, root)
    for sub in root.iterdir():
        for name in ("repodata.json.zst", "repodata.json.bz2", "repodata_shards.msgpack.zst"):
            (sub / name).unlink(missing_ok=True)
    return root


def _create(url: str, env: dict[str, str], project: Path) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in bytes) of `envtool create` over the channel at `url`."""
    project.mkdir(exist_ok=True)
    (project / "environment.yml").write_text(
        "name: net\ndependencies:\n  - python 3.11.*\n  - pytorch 2.7.*\n"
    )
    argv = [*envtool_argv(), "create", "net", "-f", "environment.yml", "--channel", url,
            "--cuda", "12.6", "--no-install"]  # fmt: skip
    err, peak = project / "stderr.txt", project / "peak-kib.txt"
    with open(err, "w") as fh:
        proc = subprocess.run([sys.executable, "-c", _PEAK_WRAPPER, str(peak), *argv],
                              env=env, cwd=project, stdout=subprocess.DEVNULL, stderr=fh)  # fmt: skip
    return proc.returncode, err.read_text(), int(peak.read_text()) * 1024


def _cache_bytes(env: dict[str, str]) -> int:
    root = Path(env["ENVTOOL_CACHE_DIR"]) / "repodata"
    assert root.is_dir()  # the repodata cache follows ENVTOOL_CACHE_DIR
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


@pytest.fixture
def hostile_env(env: dict[str, str]) -> dict[str, str]:
    env["ENVTOOL_MAX_REPODATA_BYTES"] = str(CAP)
    env.pop("RATTLER_CACHE_DIR", None)
    return env


def test_an_endless_repodata_stream_is_cut_at_the_cap_and_leaves_nothing(
    setup: cb.CudaSetup, hostile_env: dict[str, str], tmp_path: Path
) -> None:
    root = _plain_json_only(setup.channel, tmp_path / "channel")
    with MirrorServer(root, Faults(endless={"/linux-64/repodata.json"})) as server:
        code, err, peak = _create(server.url, hostile_env, tmp_path / "project")
    assert code == 2, err
    line = next(x for x in err.splitlines() if x.startswith("envtool: error:"))
    assert "127.0.0.1 sent more than 19 MB of repodata" in line and "nothing it sent" in line
    assert _cache_bytes(hostile_env) < 1 << 20  # the cut stream is gone from the cache
    print(f"peak RSS of envtool create against an endless repodata stream: {peak >> 20} MB")
    assert peak < 4 * CAP + (400 << 20)  # the watch's bound over a plain create's ~200 MB


def test_a_zstd_bomb_in_repodata_is_cut_at_the_cap(
    setup: cb.CudaSetup, hostile_env: dict[str, str], tmp_path: Path
) -> None:
    import zstandard

    root = _plain_json_only(setup.channel, tmp_path / "channel")
    head = b'{"info":{"subdir":"linux-64"},"packages":{"a-1-0.tar.bz2":{"name":"a","version":"'
    compressor = zstandard.ZstdCompressor(level=3)
    with open(root / "linux-64" / "repodata.json.zst", "wb") as out:
        with compressor.stream_writer(out) as writer:
            writer.write(head)
            zeros = b"0" * (1 << 20)
            for _ in range(400):  # 400 MB inflated from a few hundred KB
                writer.write(zeros)
    assert (root / "linux-64" / "repodata.json.zst").stat().st_size < 1 << 20
    with MirrorServer(root) as server:
        code, err, peak = _create(server.url, hostile_env, tmp_path / "project")
    assert code == 2, err
    assert "sent more than 19 MB of repodata" in err
    assert _cache_bytes(hostile_env) < 1 << 20
    print(f"peak RSS of envtool create against a zstd bomb: {peak >> 20} MB")
    assert peak < 4 * CAP + (400 << 20)
