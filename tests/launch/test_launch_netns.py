"""Two "nodes" on one machine: two network namespaces joined by a veth pair, each running
`envtool launch --nnodes 2 --node-rank R --rdzv-endpoint 10.x:PORT --cpu --nproc 2`.
The ranks rendezvous across the namespaces, and the loss equals a 4-process single-node run.
Needs root (CAP_NET_ADMIN) and iproute2; skips with the reason otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO

from envtool.adapters.launch.launcher import pids_with_environ

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


# envtool with another torch version in its pre-flight fingerprint: patched in this child
# interpreter only (the product reads no variable or flag for it)
FAKE_TORCH = (
    "import sys, envtool.adapters.launch.preflight as p; real = p.probe_fingerprint; "
    "p.probe_fingerprint = lambda *a: {**real(*a), 'torch': '2.0.0+other'}; "
    "from envtool.cli import main; sys.argv[0] = 'envtool'; main()"
)


def launch(
    ns: str | None,
    veth: str | None,
    args: list[str],
    marker: str,
    fake_torch: bool = False,
    token: str | None = None,
) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ENVTOOL_TEST_MARKER": marker}
    # the run's pre-flight secret, the same on every node (as a user exports it)
    env["ENVTOOL_PREFLIGHT_TOKEN"] = token or "netns-" + marker
    if veth:
        env["GLOO_SOCKET_IFNAME"] = veth  # gloo must use the veth, not the host's hostname address
    prefix = ["ip", "netns", "exec", ns] if ns else []
    python = [sys.executable, "-c", FAKE_TORCH] if fake_torch else [sys.executable, "-m", "envtool"]
    return subprocess.Popen(
        [*prefix, *python, "launch", SCRIPT, "--cpu", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result_lines(out: str) -> list[str]:
    return [
        line.split(":", 1)[-1] for line in out.splitlines() if " loss " in line or "RESULT" in line
    ]


@pytest.fixture(scope="module")
def single_node_result(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The reference: the same script as 4 processes on one node."""
    run_dir = tmp_path_factory.mktemp("single")
    proc = launch(None, None, ["--nproc", "4", "--run-dir", str(run_dir)], uuid.uuid4().hex)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = result_lines(out)
    assert len(lines) == 6  # 5 steps + RESULT
    return lines


@pytest.mark.slow
@pytest.mark.parametrize(
    "rendezvous",
    ["static", "c10d"],
    ids=["static-with-node-rank", "c10d-dynamic-like-slurm"],
)
def test_two_namespaces_rendezvous_and_match_a_single_node_run(
    two_nodes: list[tuple[str, str]],
    tmp_path: Path,
    single_node_result: list[str],
    rendezvous: str,
) -> None:
    marker = uuid.uuid4().hex
    multi = ["--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", f"{HEAD}:29400"]
    procs = []
    for rank, (ns, veth) in enumerate(two_nodes):
        # c10d: ranks find rank 0's node by the address it advertises; the namespaces' shared
        # hostname resolves to the host's own IP, so each node names its veth address
        node = (
            ["--node-rank", str(rank)]
            if rendezvous == "static"
            else ["--local-addr", (HEAD, WORKER)[rank]]
        )
        procs.append(
            launch(ns, veth, [*multi, *node, "--run-dir", str(tmp_path / f"n{rank}")], marker)
        )
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()  # envtool forwards it and cleans up its ranks
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        for pid in pids_with_environ(f"ENVTOOL_TEST_MARKER={marker}".encode()):
            os.kill(pid, signal.SIGKILL)
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    assert "pre-flight: waiting for 1 other node(s) on port 29400" in outs[0][1]
    # each node's all.log names its ranks by node and global rank; with c10d the node's rank
    # is only known to its workers (read from their environment)
    seen = set()
    for i in range(2):
        (merged,) = (tmp_path / f"n{i}").glob("*/all.log")
        done = [line for line in merged.read_text().splitlines() if line.endswith(" of 4 done")]
        for line in done:
            node_rank, rank = (int(v) for v in re.findall(r"\d+", line.split("]", 1)[0]))
            assert line == f"[node {node_rank} rank {rank}] rank {rank} of 4 done"
            assert node_rank == rank // 2 and (rendezvous == "c10d" or node_rank == i)
            seen.add(rank)
        assert len(done) == 2
    assert seen == {0, 1, 2, 3}
    # the node holding global rank 0 prints the results (static: always the head node)
    printed = [out for out, _ in outs if "RESULT" in out]
    assert len(printed) == 1
    if rendezvous == "static":
        assert "RESULT" in outs[0][0]
    assert "RESULT world=4 " in printed[0]  # 2 nodes x 2 processes joined one group
    assert pids_with_environ(f"ENVTOOL_TEST_MARKER={marker}".encode()) == []
    assert result_lines(printed[0]) == single_node_result


def run_nodes(
    two_nodes: list[tuple[str, str]],
    tmp_path: Path,
    node_args: list[list[str]],
    fake: int = -1,
    tokens: tuple[str | None, ...] = (None, None),
) -> list[tuple[int, str]]:
    """Start one envtool per given args list (node i in namespace i), wait for all to end;
    [(exit code, stderr)]. Nothing is left running."""
    marker = uuid.uuid4().hex
    procs = [
        launch(
            ns,
            veth,
            [*args, "--run-dir", str(tmp_path / f"n{i}")],
            marker,
            fake_torch=i == fake,
            token=tokens[i],
        )
        for i, ((ns, veth), args) in enumerate(zip(two_nodes, node_args, strict=False))
    ]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for pid in pids_with_environ(f"ENVTOOL_TEST_MARKER={marker}".encode()):
            os.kill(pid, signal.SIGKILL)
    return [(p.returncode, err) for p, (_, err) in zip(procs, outs, strict=True)]


def node(rank: int, port: int = 29400, timeout: str = "8") -> list[str]:
    return ["--nproc", "2", "--nnodes", "2", "--node-rank", str(rank)] + [
        "--rdzv-endpoint",
        f"{HEAD}:{port}",
        "--rdzv-timeout",
        timeout,
    ]


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if not line.startswith("envtool: pre-flight:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.slow
def test_a_head_that_never_starts_ends_the_node_with_one_line(
    two_nodes: list[tuple[str, str]], tmp_path: Path
) -> None:
    # only node 1 runs, in the worker namespace; the head's address answers, nothing listens
    [(code, err)] = run_nodes(two_nodes[1:], tmp_path, [node(1, timeout="5")])
    assert code == 1
    line = one_error_line(err)
    assert f"pre-flight: node 1 cannot reach the head {HEAD}:29400 within 5 s" in line, err
    assert not list(tmp_path.glob("n0/*/torchrun"))  # torchrun never started


@pytest.mark.slow
def test_a_wrong_port_ends_both_nodes_naming_the_cause(
    two_nodes: list[tuple[str, str]], tmp_path: Path
) -> None:
    (head_code, head_err), (code, err) = run_nodes(
        two_nodes, tmp_path, [node(0, 29400), node(1, 29401)]
    )
    assert (head_code, code) == (1, 1)
    assert "pre-flight: only 1 of 2 nodes reached the head on port 29400" in one_error_line(
        head_err
    )
    assert f"node 1 cannot reach the head {HEAD}:29401" in one_error_line(err)


@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
def test_a_node_with_another_torch_ends_both_nodes_naming_it(
    two_nodes: list[tuple[str, str]], tmp_path: Path, rendezvous: str
) -> None:
    if rendezvous == "static":
        args = [node(0), node(1)]
        who = f"node 1 ({WORKER})"
    else:  # no --node-rank: the head is the node the endpoint is local to
        args = [
            [*node(r)[:4], *node(r)[6:], "--local-addr", a] for r, a in ((0, HEAD), (1, WORKER))
        ]
        who = f"node at {WORKER}"
    results = run_nodes(two_nodes, tmp_path, args, fake=1)
    import torch

    for code, err in results:
        assert code == 1, err
        line = one_error_line(err)
        assert f"pre-flight: {who} has torch 2.0.0+other, the head has {torch.__version__}" in line
    assert not list(tmp_path.glob("n*/*/torchrun"))  # no torchrun started on either node


@pytest.mark.slow
def test_skip_checks_bypasses_the_pre_flight(
    two_nodes: list[tuple[str, str]], tmp_path: Path, single_node_result: list[str]
) -> None:
    """--skip-checks: no fingerprint exchange, so a node with another torch still runs (its
    torch is the same in truth): the run goes straight to torchrun and succeeds."""
    results = run_nodes(
        two_nodes, tmp_path, [[*node(0), "--skip-checks"], [*node(1), "--skip-checks"]], fake=1
    )
    for code, err in results:
        assert code == 0, err
        assert "pre-flight" not in err


@pytest.mark.slow
def test_a_node_with_another_token_ends_both_nodes_naming_the_token(
    two_nodes: list[tuple[str, str]], tmp_path: Path
) -> None:
    """Node 1 exported another ENVTOOL_PREFLIGHT_TOKEN: it stops at once, before it sends its
    fingerprint; the head drops it, notes the drop, and ends at its time-out saying so."""
    tokens = ("the-head-has-this-token", "node-one-has-another-token")
    (head_code, head_err), (code, err) = run_nodes(
        two_nodes, tmp_path, [node(0, timeout="6"), node(1, timeout="6")], tokens=tokens
    )
    assert (head_code, code) == (1, 1)
    assert f"the head {HEAD}:29400 does not hold this node's ENVTOOL_PREFLIGHT_TOKEN" in (
        one_error_line(err)
    )
    assert f"dropped a connection from {WORKER}: its hello does not carry" in head_err
    assert "joined: none; 1 connection(s) dropped without this run's ENVTOOL_PREFLIGHT_TOKEN" in (
        one_error_line(head_err)
    )
    assert not list(tmp_path.glob("n*/*/torchrun"))
