"""Multi-node pre-flight: before torchrun, every node checks in with the head on the rendezvous
port and compares a fingerprint (torch, CUDA, NCCL, lock hash) with it.

torchrun alone waits up to 900 s for a head that never starts or a port nobody listens on, and
a node with another torch fails late with an obscure collective error. Here the head listens on
the rendezvous endpoint's own port (so the check proves that port binds and is reachable, not
another one), waits at most --rdzv-timeout for the other nodes, closes its listener (before it
answers, so no torchrun store client lands in a socket about to close), then answers each node
with one verdict: every node ends within the time-out, all with the same one line naming the
node and the cause. Protocol: one JSON line each way, bounded, read with safe_load.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from pathlib import Path
from typing import Any

from envtool.errors import DiagnosedFailure

MAGIC = "envtool-preflight/1"
MAX_LINE = 64 * 1024  # a fingerprint is ~200 bytes
RETRY_SECONDS = 0.5
FIELDS = (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"), ("lock", "lock hash"))


class PreflightFailure(DiagnosedFailure):
    """A node cannot take part: unreachable head, a missing node, a different fingerprint."""


def probe_fingerprint(prefix: Path | None, torch_version: str | None) -> dict[str, str | None]:
    """What every node must share, read without importing torch: torch and its CUDA build
    (torch/version.py), the NCCL package (conda-meta or a pip nvidia-nccl dist), the lock."""
    from envtool.adapters.env_probe import read_torch_static
    from envtool.adapters.launcher import read_lock_hash

    facts = read_torch_static(prefix) if prefix is not None else None
    return {
        "torch": torch_version or (facts.version if facts else None),
        "cuda": facts.cuda if facts else None,
        "nccl": read_nccl_version(prefix),
        "lock": read_lock_hash(prefix),
    }


def read_nccl_version(prefix: Path | None) -> str | None:
    """NCCL's package version: conda's nccl-<version>-<build>.json, or pip's
    nvidia_nccl_cu<N>-<version>.dist-info; None for a CPU build (no NCCL package)."""
    if prefix is None:
        return None
    for meta in sorted((prefix / "conda-meta").glob("nccl-*.json")):
        parts = meta.name[: -len(".json")].rsplit("-", 2)
        if len(parts) == 3 and parts[0] == "nccl":
            return parts[1]
    from envtool.adapters.env_probe import site_packages_dirs

    for d in site_packages_dirs(prefix):
        for dist in sorted(d.glob("nvidia_nccl_cu*-*.dist-info")):
            return dist.name[: -len(".dist-info")].rsplit("-", 1)[1]
    return None


def compare(head: dict[str, Any], node: dict[str, Any]) -> str | None:
    """The first difference, as `torch 2.0.0, the head has 2.13.0`; None when they agree."""
    for key, label in FIELDS:
        if head.get(key) != node.get(key):
            return f"{label} {node.get(key) or 'none'}, the head has {head.get(key) or 'none'}"
    return None


def _resolve(host: str, port: int, who: str) -> tuple[int, tuple[Any, ...]]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise PreflightFailure(
            f"pre-flight: {who}: the rendezvous host {host} does not resolve "
            f"({exc.strerror or exc})",
            "pass --rdzv-endpoint with an address or a name every node resolves",
        ) from None
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def _send(sock: socket.socket, data: dict[str, Any]) -> None:
    try:
        sock.sendall(json.dumps(data).encode() + b"\n")
    except OSError:
        pass  # that node is gone: it ends by itself


def _read_line(sock: socket.socket, deadline: float) -> bytes | None:
    """One line, at most MAX_LINE bytes, by `deadline`; None if the peer closed or went quiet."""
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or len(buf) > MAX_LINE:
            return None
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf.split(b"\n", 1)[0]


def _parse(line: bytes | None, source: str) -> dict[str, Any] | None:
    from envtool.core.safe_load import parse_json
    from envtool.errors import UsageError

    if line is None:
        return None
    try:
        data = parse_json(line, source)
    except UsageError:
        return None
    return data if isinstance(data, dict) and data.get("magic") == MAGIC else None


def run_head(
    host: str, port: int, nnodes: int, fingerprint: dict[str, Any], timeout: float
) -> None:
    """Node 0: listen on the rendezvous port, wait for the other nnodes-1 nodes (at most
    `timeout` s), compare, answer all with one verdict. Raises PreflightFailure."""
    family, _ = _resolve(host, port, "node 0 (head)")
    try:
        server = socket.create_server(("", port), family=family, backlog=max(16, nnodes))
    except OSError as exc:
        raise PreflightFailure(
            f"node 0 (head): cannot listen on port {port} ({exc.strerror or exc})",
            "pick another --rdzv-endpoint port (the same on every node)",
        ) from None
    deadline = time.monotonic() + timeout
    nodes: dict[str, tuple[str, socket.socket, dict[str, Any], int | None]] = {}
    try:
        while len(nodes) < nnodes - 1:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([server], [], [], left)[0]:
                break
            try:
                conn, addr = server.accept()
            except OSError:
                continue
            # a node sends its line as soon as it connects; something silent is not one
            hello = _parse(_read_line(conn, min(deadline, time.monotonic() + 3)), str(addr[0]))
            if hello is None or not isinstance(hello.get("fp"), dict):
                conn.close()  # not a node of ours (a port scanner, a stray torchrun)
                continue
            rank = hello.get("node_rank")
            label = f"node {rank} ({addr[0]})" if isinstance(rank, int) else f"node at {addr[0]}"
            # one entry per node process (several may share an address: nodes on one host)
            key = str(hello.get("id") or f"{addr[0]}:{addr[1]}")
            old = nodes.pop(key, None)
            if old is not None:  # the same node again (it reconnected): keep the new one
                old[1].close()
            nodes[key] = (label, conn, hello["fp"], rank if isinstance(rank, int) else None)
    finally:
        server.close()  # before any verdict: the torchrun that follows binds this port
    try:
        error = _duplicate_rank(list(nodes.values()))
        for label, _, fp, _ in sorted(nodes.values(), key=lambda n: n[0]):
            diff = compare(fingerprint, fp)
            if diff and error is None:
                error = f"pre-flight: {label} has {diff}"
        if error is None and len(nodes) < nnodes - 1:
            joined = ", ".join(sorted(n[0] for n in nodes.values())) or "none"
            error = (
                f"pre-flight: only {len(nodes) + 1} of {nnodes} nodes reached the head on port "
                f"{port} within {timeout:g} s (--rdzv-timeout); joined: {joined}"
            )
        for _, conn, _, _ in nodes.values():
            _send(conn, {"magic": MAGIC, "ok": error is None, "error": error})
    finally:
        for _, conn, _, _ in nodes.values():
            conn.close()
    if error:
        raise PreflightFailure(error, _hint(error))


def _duplicate_rank(
    nodes: list[tuple[str, socket.socket, dict[str, Any], int | None]],
) -> str | None:
    """Two nodes started with the same --node-rank (or a node claiming the head's 0): static
    rendezvous would hang on it."""
    seen: dict[int, str] = {0: "the head"}
    for label, _, _, rank in sorted(nodes, key=lambda n: n[0]):
        if rank is None:
            continue
        if rank in seen:
            return f"pre-flight: {label} and {seen[rank]} were both started as --node-rank {rank}"
        seen[rank] = label
    return None


def run_node(
    host: str,
    port: int,
    node_rank: int | None,
    fingerprint: dict[str, Any],
    timeout: float,
) -> None:
    """A node other than the head: reach the head within `timeout` s, send the fingerprint,
    wait for the verdict. Raises PreflightFailure."""
    who = f"node {node_rank}" if node_rank is not None else "this node"
    _resolve(host, port, who)
    deadline = time.monotonic() + timeout
    last = "no answer"
    conn = None
    while conn is None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PreflightFailure(
                f"pre-flight: {who} cannot reach the head {host}:{port} within {timeout:g} s "
                f"(--rdzv-timeout): {last}",
                "start the head node (node 0) with the same --rdzv-endpoint, check the port "
                "and the firewall",
            )
        try:
            conn = socket.create_connection((host, port), timeout=min(left, 5.0))
        except OSError as exc:
            last = exc.strerror or str(exc) or type(exc).__name__
            time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
    try:
        hello = {"magic": MAGIC, "id": os.urandom(8).hex(), "node_rank": node_rank}
        _send(conn, {**hello, "fp": fingerprint})
        # the head answers once every node joined or its own time-out passed
        verdict = _parse(_read_line(conn, time.monotonic() + timeout + 10), f"{host}:{port}")
    finally:
        conn.close()
    if verdict is None:
        raise PreflightFailure(
            f"pre-flight: the head {host}:{port} closed the connection without a verdict",
            "check the head node's output (another program on the port?)",
        )
    if not verdict.get("ok"):
        error = str(verdict.get("error") or "the head refused this node")
        raise PreflightFailure(error, _hint(error))


def _hint(error: str) -> str:
    if "--node-rank" in error:
        return "give every node its own --node-rank, 1 to --nnodes minus 1 (0 is the head)"
    if "nodes reached the head" in error:
        return (
            "start every node with the same --nnodes and --rdzv-endpoint (or raise --rdzv-timeout)"
        )
    return "install the same environment (the same lock) on every node, or pass --skip-checks"
