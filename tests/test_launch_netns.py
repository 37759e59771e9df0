"""Two "nodes" on one machine: two network namespaces joined by a veth pair, each running
`envtool launch --nnodes 2 --node-rank R --rdzv-endpoint 10.x:PORT --cpu --nproc 2`.
The ranks rendezvous across the namespaces, and the loss equals a 4-process single-node run.
Needs root (CAP_NET_ADMIN) and iproute2; skips with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO

from envtool.adapters.launcher import pids_with_environ

pytestmark = pytest.mark.integration

SCRIPT = str(REPO / "tests" / "scripts" / "allreduce_loss.py")
HEAD, WORKER = "10.213.0.1", "10.213.0.2"


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_nodes() -> Iterator[list[tuple[str, str]]]:
    """[(namespace, veth)] for the head and the worker; torn down in any case."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2 not installed (apt-get install -y iproute2)")
    tag = uuid.uuid4().hex[:6]
    nodes = [(f"envtool-{tag}-0", f"et{tag}a"), (f"envtool-{tag}-1", f"et{tag}b")]
    try:
        first = ip("netns", "add", nodes[0][0])
        if first.returncode != 0:
            pytest.skip(f"`ip netns add` failed (needs root/CAP_NET_ADMIN): {first.stderr.strip()}")
        steps = [
            ("netns", "add", nodes[1][0]),
            ("link", "add", nodes[0][1], "type", "veth", "peer", "name", nodes[1][1]),
        ]
        for (ns, veth), addr in zip(nodes, (HEAD, WORKER), strict=True):
            steps += [
                ("link", "set", veth, "netns", ns),
                ("-n", ns, "addr", "add", f"{addr}/24", "dev", veth),
                ("-n", ns, "link", "set", veth, "up"),
                ("-n", ns, "link", "set", "lo", "up"),
            ]
        for step in steps:
            res = ip(*step)
            if res.returncode != 0:
                pytest.skip(f"`ip {' '.join(step)}` failed: {res.stderr.strip()}")
        yield nodes
    finally:
        for ns, _ in nodes:
            ip("netns", "del", ns)  # removes the veth pair with it


def launch(ns: str | None, veth: str | None, args: list[str], marker: str) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ENVTOOL_TEST_MARKER": marker}
    if veth:
        env["GLOO_SOCKET_IFNAME"] = veth  # gloo must use the veth, not the host's hostname address
    prefix = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "envtool", "launch", SCRIPT, "--cpu", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result_lines(out: str) -> list[str]:
    return [
        line.split(":", 1)[-1] for line in out.splitlines() if " loss " in line or "RESULT" in line
    ]


def test_two_namespaces_rendezvous_and_match_a_single_node_run(
    two_nodes: list[tuple[str, str]], tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    multi = ["--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", f"{HEAD}:29400"]
    procs = [
        launch(
            ns,
            veth,
            [*multi, "--node-rank", str(rank), "--run-dir", str(tmp_path / f"n{rank}")],
            marker,
        )
        for rank, (ns, veth) in enumerate(two_nodes)
    ]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    head_out = outs[0][0]
    assert "RESULT world=4 " in head_out  # 2 nodes x 2 processes joined one group
    assert pids_with_environ(f"ENVTOOL_TEST_MARKER={marker}".encode()) == []

    single = launch(None, None, ["--nproc", "4", "--run-dir", str(tmp_path / "single")], marker)
    out, err = single.communicate(timeout=120)
    assert single.returncode == 0, err
    assert result_lines(head_out) == result_lines(out)
    assert len(result_lines(out)) == 6  # 5 steps + RESULT
