"""The multi-node pre-flight exchange, standard library only (Python >= 3.8 syntax).

envtool imports it (adapters/launch/preflight.py, `envtool launch --nnodes N`), and a `--slurm` batch
script runs its source with the environment's python on every node (`python -I -c SOURCE HEAD
PORT NNODES TIMEOUT`, node from $SLURM_NODEID), where envtool may not be installed. One JSON
line each way, bounded in size and time:

- the head listens on the rendezvous port itself (proving that port binds), waits at most
  TIMEOUT s for the other nodes, closes the listener (torchrun's store binds the port next),
  then answers every node with one verdict;
- every other node connects (retrying until TIMEOUT), sends its fingerprint (torch, its CUDA
  build, NCCL, the lock hash), waits for the verdict.
"""

import json
import os
import select
import socket
import sys
import time

MAGIC = "envtool-preflight/1"
MAX_LINE = 64 * 1024  # a fingerprint is ~200 bytes
RETRY_SECONDS = 0.5
FIELDS = (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"), ("lock", "lock hash"))
REACH_HINT = (
    "start the head node (node 0) with the same --rdzv-endpoint, check the port and the firewall"
)


class PreflightError(Exception):
    def __init__(self, message, hint):
        super().__init__(message)
        self.message, self.hint = message, hint


def _plain_json(line, source):
    try:
        data = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data


def compare(head, node):
    """The first difference, as `torch 2.0.0, the head has 2.13.0`; None when they agree."""
    for key, label in FIELDS:
        if head.get(key) != node.get(key):
            mine, theirs = node.get(key) or "none", head.get(key) or "none"
            return f"{label} {mine}, the head has {theirs}"
    return None


def hint_for(error):
    if "--node-rank" in error:
        return "give every node its own --node-rank, 1 to --nnodes minus 1 (0 is the head)"
    if "nodes reached the head" in error:
        return (
            "start every node with the same --nnodes and --rdzv-endpoint (or raise --rdzv-timeout)"
        )
    return "install the same environment (the same lock) on every node, or pass --skip-checks"


def _resolve(host, port, who):
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise PreflightError(
            f"pre-flight: {who}: the rendezvous host {host} does not resolve ({exc.strerror or exc})",
            "pass --rdzv-endpoint with an address or a name every node resolves",
        ) from None
    return infos[0][0]


def _send(sock, data):
    try:
        sock.sendall(json.dumps(data).encode() + b"\n")
    except OSError:
        pass  # that node is gone: it ends by itself


def _read_line(sock, deadline):
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


def _message(line, source, parse):
    if line is None:
        return None
    data = parse(line, source)
    return data if isinstance(data, dict) and data.get("magic") == MAGIC else None


def _duplicate_rank(nodes):
    """Two nodes started with one --node-rank (or one claiming the head's 0)."""
    seen = {0: "the head"}
    for label, _, _, rank in sorted(nodes, key=lambda n: n[0]):
        if rank is None:
            continue
        if rank in seen:
            return f"pre-flight: {label} and {seen[rank]} were both started as --node-rank {rank}"
        seen[rank] = label
    return None


def run_head(host, port, nnodes, fingerprint, timeout, parse=_plain_json):
    """Node 0: listen on the rendezvous port, wait for the other nnodes-1 nodes (at most
    `timeout` s), compare, answer all with one verdict. Raises PreflightError."""
    family = _resolve(host, port, "node 0 (head)")
    try:
        server = socket.create_server(("", port), family=family, backlog=max(16, nnodes))
    except OSError as exc:
        raise PreflightError(
            f"node 0 (head): cannot listen on port {port} ({exc.strerror or exc})",
            "pick another --rdzv-endpoint port (the same on every node)",
        ) from None
    deadline = time.monotonic() + timeout
    nodes = {}  # per node process: (label, connection, fingerprint, node rank or None)
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
            line = _read_line(conn, min(deadline, time.monotonic() + 3))
            hello = _message(line, str(addr[0]), parse)
            if hello is None or not isinstance(hello.get("fp"), dict):
                conn.close()  # not a node of ours (a port scanner, a stray torchrun)
                continue
            rank = hello.get("node_rank")
            rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
            label = f"node {rank} ({addr[0]})" if rank is not None else f"node at {addr[0]}"
            key = str(
                hello.get("id") or f"{addr[0]}:{addr[1]}"
            )  # several nodes may share an address
            old = nodes.pop(key, None)
            if old is not None:  # the same node again (it reconnected): keep the new one
                old[1].close()
            nodes[key] = (label, conn, hello["fp"], rank)
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
        raise PreflightError(error, hint_for(error))


def run_node(host, port, node_rank, fingerprint, timeout, parse=_plain_json):
    """A node other than the head: reach the head within `timeout` s, send the fingerprint,
    wait for the verdict. Raises PreflightError."""
    who = f"node {node_rank}" if node_rank is not None else "this node"
    _resolve(host, port, who)
    deadline = time.monotonic() + timeout
    last = "no answer"
    conn = None
    while conn is None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PreflightError(
                f"pre-flight: {who} cannot reach the head {host}:{port} within {timeout:g} s "
                f"(--rdzv-timeout): {last}",
                REACH_HINT,
            )
        try:
            conn = socket.create_connection((host, port), timeout=min(left, 5.0))
        except OSError as exc:
            last = exc.strerror or str(exc) or type(exc).__name__
            time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
    try:
        hello = {"magic": MAGIC, "id": os.urandom(8).hex(), "node_rank": node_rank}
        hello["fp"] = fingerprint
        _send(conn, hello)
        # the head answers once every node joined or its own time-out passed
        verdict = _message(_read_line(conn, time.monotonic() + timeout + 10), host, parse)
    finally:
        conn.close()
    if verdict is None:
        raise PreflightError(
            f"pre-flight: the head {host}:{port} closed the connection without a verdict",
            "check the head node's output (another program on the port?)",
        )
    if not verdict.get("ok"):
        error = str(verdict.get("error") or "the head refused this node")
        raise PreflightError(error, hint_for(error))


def fingerprint_here():
    """This python's torch, its CUDA build, NCCL and lock hash, without importing torch (the
    batch-script side; envtool reads the same facts from the environment on disk)."""
    import glob
    import importlib.util
    import re

    fp = {"torch": None, "cuda": None, "nccl": None, "lock": None}
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as f:
                text = f.read(1 << 20)
        except OSError:
            continue
        # the same patterns as env_probe.read_torch_static (envtool's side)
        version = re.search(r"^__version__\s*(?::[^=]+)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        cuda = re.search(r"^cuda\s*(?::[^=]+)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        fp["torch"] = version.group(1) if version else None
        fp["cuda"] = cuda.group(1) if cuda else None
        break
    metas = sorted(glob.glob(os.path.join(sys.prefix, "conda-meta", "nccl-*.json")))
    parts = os.path.basename(metas[0])[: -len(".json")].rsplit("-", 2) if metas else []
    if len(parts) == 3 and parts[0] == "nccl":
        fp["nccl"] = parts[1]
    else:
        import importlib.metadata as md

        for dist in md.distributions():
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
            if name.startswith("nvidia-nccl-cu"):
                fp["nccl"] = dist.version
                break
    try:
        with open(os.path.join(sys.prefix, "conda-meta", "envtool", "state.json"), "rb") as f:
            record = json.loads(f.read(1 << 20))
        lock = record.get("lock_sha256") if isinstance(record, dict) else None
        fp["lock"] = lock if isinstance(lock, str) else None
    except (OSError, ValueError, RecursionError):
        pass
    return fp


def main(argv):
    """HEAD PORT NNODES TIMEOUT, this node from $SLURM_NODEID: exit 0, or 1 with one line."""
    host, port, nnodes, timeout = argv[0], int(argv[1]), int(argv[2]), float(argv[3])
    node = int(os.environ.get("SLURM_NODEID", "0"))
    try:
        if node == 0:
            run_head(host, port, nnodes, fingerprint_here(), timeout)
        else:
            run_node(host, port, node, fingerprint_here(), timeout)
    except PreflightError as exc:
        sys.stderr.write(f"envtool: error: {exc.message} — {exc.hint}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
