"""The multi-node pre-flight's pieces that need no second machine: the fingerprint read from an
environment on disk, the comparison, an endpoint that does not resolve, a stray client."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO

from envtool.adapters.launch import preflight

SCRIPT = str(REPO / "tests" / "scripts" / "allreduce_loss.py")


def test_nccl_version_from_conda_meta_or_a_pip_dist(tmp_path: Path) -> None:
    conda = tmp_path / "conda"
    (conda / "conda-meta").mkdir(parents=True)
    (conda / "conda-meta" / "nccl-2.21.5.1-h3a97aeb_0.json").write_text("{}")
    assert preflight.read_nccl_version(conda) == "2.21.5.1"
    venv = tmp_path / "venv"
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "nvidia_nccl_cu12-2.27.3.dist-info").mkdir(parents=True)
    assert preflight.read_nccl_version(venv) == "2.27.3"
    assert preflight.read_nccl_version(tmp_path / "empty") is None


def test_compare_names_the_first_difference() -> None:
    head = {"torch": "2.13.0", "cuda": "12.9", "nccl": "2.27.3", "lock": "ab"}
    assert preflight.compare(head, dict(head)) is None
    assert preflight.compare(head, {**head, "nccl": None}) == "NCCL none, the head has 2.27.3"
    assert preflight.compare(head, {**head, "lock": "cd"}) == "lock hash cd, the head has ab"


@pytest.mark.integration
def test_an_endpoint_that_does_not_resolve_is_one_line_in_seconds(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envtool", "launch", SCRIPT, "--cpu", "--nnodes", "2"]
        + ["--node-rank", "1", "--rdzv-endpoint", "no-such-host.invalid:29400"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        "pre-flight: node 1: the rendezvous host no-such-host.invalid does not resolve" in errors[0]
    )


@pytest.mark.integration
def test_the_head_ignores_a_stray_client_and_accepts_the_node() -> None:
    """Something else connecting to the rendezvous port (a port scan, an early torchrun) is
    closed; the real node still checks in and both agree."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fp = {"torch": "2.13.0", "cuda": None, "nccl": None, "lock": None}
    errors: list[BaseException] = []

    def head() -> None:
        try:
            preflight.run_head("127.0.0.1", port, 2, fp, 20)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=head)
    t.start()
    for _ in range(100):
        try:
            stray = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            threading.Event().wait(0.05)
    stray.sendall(b'{"hello": "not envtool"}\n' + json.dumps({"x": 1}).encode() + b"\n")
    assert stray.recv(100) == b""  # closed without a word
    stray.close()
    preflight.run_node("127.0.0.1", port, 1, dict(fp), 20)
    t.join(timeout=30)
    assert not errors, errors


@pytest.mark.integration
def test_a_mismatch_fails_the_head_and_the_node_alike() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fp = {"torch": "2.13.0", "cuda": None, "nccl": None, "lock": "aa"}
    errors: list[BaseException] = []
    t = threading.Thread(
        target=lambda: errors.extend(_raised(preflight.run_head, "127.0.0.1", port, 2, fp, 20))
    )
    t.start()
    with pytest.raises(preflight.PreflightFailure) as node_err:
        preflight.run_node("127.0.0.1", port, 1, {**fp, "lock": "bb"}, 20)
    t.join(timeout=30)
    assert str(errors[0]) == str(node_err.value)
    assert "node 1 (127.0.0.1) has lock hash bb, the head has aa" in str(node_err.value)


def _raised(fn, *args) -> list[BaseException]:  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - the caller looks at it
        return [exc]
    return []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nodes(port: int, ranks: list[int | None], fp: dict) -> list[list[BaseException]]:
    """The head plus one node per rank, each in a thread; what each raised."""
    results: list[list[BaseException]] = [[] for _ in range(len(ranks) + 1)]
    threads = [
        threading.Thread(
            target=lambda: results[0].extend(
                _raised(preflight.run_head, "127.0.0.1", port, len(ranks) + 1, fp, 20)
            )
        )
    ]
    for i, rank in enumerate(ranks, start=1):
        threads.append(
            threading.Thread(
                target=lambda i=i, rank=rank: results[i].extend(
                    _raised(preflight.run_node, "127.0.0.1", port, rank, dict(fp), 20)
                )
            )
        )
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


@pytest.mark.integration
def test_several_nodes_on_one_address_all_join() -> None:
    """c10d without --node-rank, three nodes on one host: one address, three nodes."""
    fp = {"torch": "2.13.0", "cuda": None, "nccl": None, "lock": None}
    assert _nodes(_free_port(), [None, None], fp) == [[], [], []]


@pytest.mark.integration
def test_two_nodes_with_one_node_rank_end_every_node() -> None:
    fp = {"torch": "2.13.0", "cuda": None, "nccl": None, "lock": None}
    results = _nodes(_free_port(), [1, 1], fp)
    for raised in results:
        assert len(raised) == 1 and isinstance(raised[0], preflight.PreflightFailure)
        assert "were both started as --node-rank 1" in str(raised[0])
