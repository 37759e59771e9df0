"""The multi-node pre-flight exchange, standard library only (Python >= 3.8 syntax).

envtool imports it (adapters/launch/preflight.py, `envtool launch --nnodes N`), and a `--slurm` batch
script runs its source with the environment's python on every node (`python -I -c SOURCE HEAD
PORT NNODES TIMEOUT`, node from $SLURM_NODEID, the token from $ENVTOOL_PREFLIGHT_TOKEN), where
envtool may not be installed. docs/multi-node-security.md tells the whole story.

Every node holds one per-run secret, the token (ENVTOOL_PREFLIGHT_TOKEN: exported by the user on
every node, or made per job by the batch script and handed to each node by srun). One JSON line
at a time, each bounded in size and time; every line that matters carries an HMAC-SHA256 under
the token over both sides' fresh nonces, so a hello recorded from an earlier run, or a verdict,
does not authenticate again:

  node -> head  {magic, nonce: Nn}                          (opens; says nothing)
  head -> node  {magic, nonce: Nh, mac("head", Nn, Nh)}     (the head proves it holds the token)
  node -> head  {magic, body, mac("node", Nn, Nh, body)}    (body: id, node rank, fingerprint)
  head -> node  {magic, verdict, mac("verdict", Nn, Nh, verdict)}   (once every node joined)

- the head listens on the rendezvous port itself (proving that port binds), handles every
  connection in its own thread with a deadline of its own (a port scanner's silent connections
  cannot hold the honest nodes out), drops and logs anything that does not authenticate, waits
  at most TIMEOUT s for the other nodes, closes the listener (torchrun's store binds the port
  next), then answers every authenticated node with one verdict;
- every other node connects (retrying until TIMEOUT), checks the head's proof before it sends
  its fingerprint (torch, its CUDA build, NCCL, the lock hash), waits for the verdict.
A peer without the token learns nothing but that something speaks this protocol there.
"""

import hashlib
import hmac
import json
import os
import re
import select
import socket
import sys
import threading
import time

MAGIC = "envtool-preflight/2"
TOKEN_VAR = "ENVTOOL_PREFLIGHT_TOKEN"  # core.slurm.PREFLIGHT_TOKEN_VAR: the same name
MIN_TOKEN = 16  # characters: a shorter one is guessable
MAX_LINE = 64 * 1024  # a fingerprint is ~200 bytes
HANDSHAKE_SECONDS = 10.0  # per connection: an honest node answers in milliseconds
MAX_PENDING = 128  # connections being authenticated at once; a newer one closes the oldest
MAX_LOGGED = 10  # dropped connections named one by one; the rest counted
MAX_FIELD = 80  # a fingerprint value shown in a message
RETRY_SECONDS = 0.5
FIELDS = (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"), ("lock", "lock hash"))
REACH_HINT = (
    "start the head node (node 0) with the same --rdzv-endpoint, check the port and the firewall"
)
TOKEN_HINT = (
    "export the same " + TOKEN_VAR + " on every node (`envtool launch … --dry-run` prints a fresh "
    "one), or pass --skip-checks"
)
_NONCE = re.compile(r"[0-9a-f]{32}")
# core.shell_quote.printable's rule (C0 but tab, DEL, C1, lone surrogates), for a script that
# cannot import envtool: network text reaches slurm-*.out through here (tests check they agree)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


class PreflightError(Exception):
    def __init__(self, message, hint):
        super().__init__(message)
        self.message, self.hint = message, hint


def printable(text):
    """`text` with control characters shown as \\xNN / \\uNNNN (core.shell_quote.printable)."""

    def esc(m):
        c = m.group(0)
        if "\udc80" <= c <= "\udcff":
            return f"\\x{ord(c) - 0xDC00:02x}"
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _CONTROL.sub(esc, text)


def check_token(text):
    """The token as the key bytes; PreflightError when it is missing or too short."""
    if not text:
        raise PreflightError(
            "pre-flight: " + TOKEN_VAR + " is not set: the nodes need a shared secret to "
            "know each other",
            TOKEN_HINT,
        )
    if len(text) < MIN_TOKEN:
        raise PreflightError(
            f"pre-flight: {TOKEN_VAR} has {len(text)} characters, fewer than {MIN_TOKEN}: "
            "too short to be a secret",
            TOKEN_HINT,
        )
    return text.encode("utf-8", "surrogateescape")


def _mac(token, label, *parts):
    message = "\n".join((MAGIC, label) + parts).encode("utf-8", "surrogatepass")
    return hmac.new(token, message, hashlib.sha256).hexdigest()


def _mac_ok(token, mac, label, *parts):
    if not isinstance(mac, str):
        return False
    expected = _mac(token, label, *parts).encode()
    return hmac.compare_digest(expected, mac.encode("utf-8", "surrogatepass"))


def _plain_json(line, source):
    try:
        data = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data


def _shown(value):
    """A fingerprint value as a message shows it: text only, bounded, escaped."""
    if value is None:
        return "none"
    text = value if isinstance(value, str) else json.dumps(value)
    text = printable(text)
    return text if len(text) <= MAX_FIELD else text[:MAX_FIELD] + "…"


def compare(head, node):
    """The first difference, as `torch 2.0.0, the head has 2.13.0`; None when they agree."""
    for key, label in FIELDS:
        if head.get(key) != node.get(key):
            return f"{label} {_shown(node.get(key))}, the head has {_shown(head.get(key))}"
    return None


def hint_for(error):
    if "--node-rank" in error:
        return "give every node its own --node-rank, 1 to --nnodes minus 1 (0 is the head)"
    if "nodes reached the head" in error:
        return (
            "start every node with the same --nnodes, --rdzv-endpoint and "
            + TOKEN_VAR
            + " (or raise --rdzv-timeout)"
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
        return True
    except OSError:
        return False  # that node is gone: it ends by itself


def _read_line(sock, deadline):
    """One line, at most MAX_LINE bytes, by `deadline`; None if the peer closed or went quiet."""
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or len(buf) > MAX_LINE:
            return None
        try:
            sock.settimeout(left)
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


def _wake(sock):
    """Shut a socket down: a thread blocked on it wakes and fails (close alone does not)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock):
    """Close a socket another thread may be blocked on."""
    _wake(sock)
    sock.close()


def _duplicate_rank(nodes):
    """Two nodes started with one --node-rank (or one claiming the head's 0)."""
    seen = {0: "the head"}
    for node in sorted(nodes, key=lambda n: n["label"]):
        rank = node["rank"]
        if rank is None:
            continue
        if rank in seen:
            return (
                f"pre-flight: {node['label']} and {seen[rank]} were both started as "
                f"--node-rank {rank}"
            )
        seen[rank] = node["label"]
    return None


def _log_stderr(line):
    sys.stderr.write(printable(line) + "\n")
    sys.stderr.flush()


class _Dropped(Exception):
    """A connection that is not one of our nodes: why, for the head's log."""


class _Head:
    """The head's side: the nodes that authenticated, the connections still being checked."""

    def __init__(self, nnodes, token, parse, log):
        self.nnodes, self.token, self.parse, self.log = nnodes, token, parse, log
        self.lock = threading.Lock()
        self.all_joined = threading.Event()
        self.nodes = {}  # node id -> {label, conn, fp, rank, nn, nh}
        self.pending = {}  # connection -> its thread, oldest first
        self.evicted = set()  # pending connections closed to make room, their threads ending
        self.closed = False
        self.dropped = 0

    def accept(self, conn, addr):
        """Check `conn` in its own thread. At MAX_PENDING the oldest connection still being
        checked is closed to make room: an honest node authenticates in milliseconds, so a
        flood of silent connections (each allowed HANDSHAKE_SECONDS) cannot hold it out, as
        closing the newcomer did."""
        evict = None
        with self.lock:
            if len(self.pending) >= 2 * MAX_PENDING:  # evicted threads not yet gone: a bound
                busy = True
            else:
                busy = False
                live = [c for c in self.pending if c not in self.evicted]
                if len(live) >= MAX_PENDING:
                    evict = live[0]
                    self.evicted.add(evict)
                thread = threading.Thread(target=self.handle, args=(conn, addr), daemon=True)
                self.pending[conn] = thread
        if busy:
            conn.close()
            self.drop(addr, "too many connections at once")
            return
        if evict is not None:  # its thread fails its read, drops and closes it (a close here
            _wake(evict)  # could hand its number to the next accept while that thread reads)
        thread.start()

    def drop(self, addr, why):
        with self.lock:
            self.dropped += 1
            n = self.dropped
        if n <= MAX_LOGGED:
            self.log(f"envtool: pre-flight: dropped a connection from {addr[0]}: {why}")
        elif n == MAX_LOGGED + 1:
            self.log("envtool: pre-flight: more connections dropped; counting, not naming them")

    def handle(self, conn, addr):
        try:
            node = self.authenticate(conn, addr)
        except _Dropped as exc:
            with self.lock:
                self.pending.pop(conn, None)
                late = self.closed
                evicted = conn in self.evicted
                self.evicted.discard(conn)
            _close(conn)
            why = f"closed for a newer one: {MAX_PENDING} were being checked" if evicted else exc
            if not late:
                self.drop(addr, str(why))
            return
        with self.lock:
            self.pending.pop(conn, None)
            evicted = conn in self.evicted
            self.evicted.discard(conn)
            if self.closed or evicted:  # the wait ended (or room was made) as it checked in:
                _close(conn)  # no verdict; an evicted node connects again (run_node)
                return
            old = self.nodes.pop(node["id"], None)
            if old is not None:  # the same node again (it reconnected): keep the new one
                _close(old["conn"])
            self.nodes[node["id"]] = node
            if len(self.nodes) >= self.nnodes - 1:
                self.all_joined.set()

    def authenticate(self, conn, addr):
        """The handshake with one connection, by its own deadline; _Dropped if it fails."""
        deadline = time.monotonic() + HANDSHAKE_SECONDS
        source = f"{addr[0]}:{addr[1]}"
        line = _read_line(conn, deadline)
        if line is None:
            raise _Dropped(f"it sent no pre-flight hello within {HANDSHAKE_SECONDS:g} s")
        opener = _message(line, source, self.parse)
        nn = opener.get("nonce") if opener else None
        if not isinstance(nn, str) or not _NONCE.fullmatch(nn):
            raise _Dropped("not an envtool pre-flight hello")
        nh = os.urandom(16).hex()
        if not _send(conn, {"magic": MAGIC, "nonce": nh, "mac": _mac(self.token, "head", nn, nh)}):
            raise _Dropped("it closed the connection")
        hello = _message(_read_line(conn, deadline), source, self.parse)
        body = hello.get("body") if hello else None
        if not isinstance(body, str) or not _mac_ok(
            self.token, hello.get("mac"), "node", nn, nh, body
        ):
            raise _Dropped(
                "its hello does not carry this run's " + TOKEN_VAR + " (another run's node, "
                "another token, a replayed hello, or not an envtool node)"
            )
        data = self.parse(body.encode("utf-8", "surrogatepass"), source)
        if not isinstance(data, dict) or not isinstance(data.get("fp"), dict):
            raise _Dropped("an authenticated hello without a fingerprint")
        rank = data.get("node_rank")
        rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
        label = f"node {rank} ({addr[0]})" if rank is not None else f"node at {addr[0]}"
        node_id = data.get("id")
        node_id = node_id if isinstance(node_id, str) and len(node_id) <= 64 else source
        return {
            "id": node_id,
            "label": label,
            "conn": conn,
            "fp": data["fp"],
            "rank": rank,
            "nn": nn,
            "nh": nh,
        }

    def close(self):
        """The wait is over: no node joins after this; connections still being checked end."""
        with self.lock:
            self.closed = True
            pending = list(self.pending.items())
        for conn, _ in pending:
            _close(conn)
        for _, thread in pending:
            thread.join(timeout=5)

    def answer(self, error):
        verdict = json.dumps({"ok": error is None, "error": error})
        for node in self.nodes.values():
            mac = _mac(self.token, "verdict", node["nn"], node["nh"], verdict)
            _send(node["conn"], {"magic": MAGIC, "verdict": verdict, "mac": mac})
            _close(node["conn"])


def run_head(host, port, nnodes, fingerprint, timeout, token, parse=_plain_json, log=_log_stderr):
    """Node 0: listen on the rendezvous port, wait for the other nnodes-1 nodes (at most
    `timeout` s) to authenticate with `token`, compare, answer all with one verdict. Raises
    PreflightError; a connection that does not authenticate is dropped and logged."""
    family = _resolve(host, port, "node 0 (head)")
    try:
        server = socket.create_server(("", port), family=family, backlog=max(128, nnodes))
    except OSError as exc:
        raise PreflightError(
            f"node 0 (head): cannot listen on port {port} ({exc.strerror or exc})",
            "pick another --rdzv-endpoint port (the same on every node)",
        ) from None
    head = _Head(nnodes, token, parse, log)
    deadline = time.monotonic() + timeout
    try:
        while not head.all_joined.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not select.select([server], [], [], min(left, 0.1))[0]:
                continue
            try:
                conn, addr = server.accept()
            except OSError:
                continue
            head.accept(conn, addr)
    finally:
        server.close()  # before any verdict: the torchrun that follows binds this port
        head.close()
    nodes = list(head.nodes.values())
    error = _duplicate_rank(nodes)
    for node in sorted(nodes, key=lambda n: n["label"]):
        diff = compare(fingerprint, node["fp"])
        if diff and error is None:
            error = f"pre-flight: {node['label']} has {diff}"
    if error is None and len(nodes) < nnodes - 1:
        joined = ", ".join(sorted(n["label"] for n in nodes)) or "none"
        dropped = (
            f"; {head.dropped} connection(s) dropped without this run's {TOKEN_VAR}"
            if head.dropped
            else ""
        )
        error = (
            f"pre-flight: only {len(nodes) + 1} of {nnodes} nodes reached the head on port "
            f"{port} within {timeout:g} s (--rdzv-timeout); joined: {joined}{dropped}"
        )
    head.answer(error)
    if error:
        raise PreflightError(error, hint_for(error))


def _connect(host, port, who, deadline, timeout, last):
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PreflightError(
                f"pre-flight: {who} cannot reach the head {host}:{port} within {timeout:g} s "
                f"(--rdzv-timeout): {last}",
                REACH_HINT,
            )
        try:
            return socket.create_connection((host, port), timeout=min(left, 5.0))
        except OSError as exc:
            last = exc.strerror or str(exc) or type(exc).__name__
            time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))


def run_node(host, port, node_rank, fingerprint, timeout, token, parse=_plain_json):
    """A node other than the head: reach the head within `timeout` s, check that it holds
    `token`, send the fingerprint, wait for the verdict. Raises PreflightError."""
    who = f"node {node_rank}" if node_rank is not None else "this node"
    _resolve(host, port, who)
    deadline = time.monotonic() + timeout
    node_id = os.urandom(8).hex()
    last = "no answer"
    while True:
        conn = _connect(host, port, who, deadline, timeout, last)
        try:
            nn = os.urandom(16).hex()
            _send(conn, {"magic": MAGIC, "nonce": nn})
            step = min(deadline, time.monotonic() + HANDSHAKE_SECONDS)
            reply = _message(_read_line(conn, step), host, parse)
            if reply is None:  # the head is busy or went away: connect again while there is time
                last = "the connection closed without a pre-flight answer"
                _close(conn)
                time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
                continue
            nh = reply.get("nonce")
            if not isinstance(nh, str) or not _mac_ok(token, reply.get("mac"), "head", nn, nh):
                raise PreflightError(
                    f"pre-flight: the head {host}:{port} does not hold this node's {TOKEN_VAR} (another value "
                    "on the head, or not envtool's head on that port)",
                    TOKEN_HINT,
                )
            body = json.dumps({"id": node_id, "node_rank": node_rank, "fp": fingerprint})
            _send(conn, {"magic": MAGIC, "body": body, "mac": _mac(token, "node", nn, nh, body)})
            # the head answers once every node joined or its own time-out passed
            answer = _message(_read_line(conn, time.monotonic() + timeout + 10), host, parse)
            if answer is None and time.monotonic() < deadline:
                # closed before a verdict: the head made room for a newer connection while
                # this one was being checked (a flood), or it is gone: try again in time
                last = "the connection closed before the head's verdict"
                time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
                continue
        finally:
            _close(conn)
        break
    verdict = answer.get("verdict") if answer else None
    if verdict is None:
        raise PreflightError(
            f"pre-flight: the head {host}:{port} closed the connection without a verdict",
            "check the head node's output (another program on the port?)",
        )
    if not isinstance(verdict, str) or not _mac_ok(
        token, answer.get("mac"), "verdict", nn, nh, verdict
    ):
        raise PreflightError(
            f"pre-flight: the verdict from {host}:{port} does not carry this run's {TOKEN_VAR}",
            "check the network between the nodes (something answers in the head's place)",
        )
    data = parse(verdict.encode("utf-8", "surrogatepass"), host)
    if not isinstance(data, dict):
        raise PreflightError(
            f"pre-flight: the head {host}:{port} sent an unreadable verdict",
            "run the same envtool on every node",
        )
    if not data.get("ok"):
        error = str(data.get("error") or "the head refused this node")
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
    """HEAD PORT NNODES TIMEOUT, this node from $SLURM_NODEID, the token from
    $ENVTOOL_PREFLIGHT_TOKEN: exit 0, or 1 with one line (escaped: it reaches slurm-*.out)."""
    host, port, nnodes, timeout = argv[0], int(argv[1]), int(argv[2]), float(argv[3])
    node = int(os.environ.get("SLURM_NODEID", "0"))
    try:
        token = check_token(os.environ.get(TOKEN_VAR))
        if node == 0:
            run_head(host, port, nnodes, fingerprint_here(), timeout, token)
        else:
            run_node(host, port, node, fingerprint_here(), timeout, token)
    except PreflightError as exc:
        _log_stderr(f"envtool: error: {exc.message} — {exc.hint}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
