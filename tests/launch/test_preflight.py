"""The multi-node pre-flight's pieces that need no second machine: the fingerprint read from an
environment on disk, the comparison, an endpoint that does not resolve, a stray client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO

from envtool.adapters.launch import preflight

SCRIPT = str(REPO / "tests" / "scripts" / "allreduce_loss.py")
TOKEN = b"a-shared-secret-of-this-run-0123456789"
S = preflight.script  # the exchange itself (stdlib only: the batch script runs it too)


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
        env={**os.environ, S.TOKEN_VAR: TOKEN.decode()},
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
            preflight.run_head("127.0.0.1", port, 2, fp, 20, TOKEN)
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
    preflight.run_node("127.0.0.1", port, 1, dict(fp), 20, TOKEN)
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
        target=lambda: errors.extend(
            _raised(preflight.run_head, "127.0.0.1", port, 2, fp, 20, TOKEN)
        )
    )
    t.start()
    with pytest.raises(preflight.PreflightFailure) as node_err:
        preflight.run_node("127.0.0.1", port, 1, {**fp, "lock": "bb"}, 20, TOKEN)
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
                _raised(preflight.run_head, "127.0.0.1", port, len(ranks) + 1, fp, 20, TOKEN)
            )
        )
    ]
    for i, rank in enumerate(ranks, start=1):
        threads.append(
            threading.Thread(
                target=lambda i=i, rank=rank: results[i].extend(
                    _raised(preflight.run_node, "127.0.0.1", port, rank, dict(fp), 20, TOKEN)
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


# --- attacks: anyone who reaches the port -----------------------------------------------------
# The head and the honest node run in threads of this process over real sockets; the attacker is
# this test, speaking the protocol by hand (script._mac is the only way to authenticate, and an
# attacker without the token computes it with the wrong key).

FP = {"torch": "2.13.0", "cuda": "12.9", "nccl": "2.27.3", "lock": "ab" * 32}


class Head:
    """run_head in a thread; .errors what it raised, .log what it noted."""

    def __init__(self, port: int, fp: dict = FP, nnodes: int = 2, timeout: float = 20) -> None:
        self.errors: list[BaseException] = []
        self.log: list[str] = []
        self.thread = threading.Thread(target=self.run, args=(port, fp, nnodes, timeout))
        self.thread.start()
        self.port = port

    def run(self, port: int, fp: dict, nnodes: int, timeout: float) -> None:
        try:
            S.run_head("127.0.0.1", port, nnodes, fp, timeout, TOKEN, log=self.log.append)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.errors.append(exc)

    def join(self) -> None:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()


def connect(port: int) -> socket.socket:
    for _ in range(200):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=15)
        except OSError:
            threading.Event().wait(0.05)
    raise AssertionError("the head never listened")


def line(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf


def send(sock: socket.socket, msg: dict) -> None:
    sock.sendall(json.dumps(msg).encode() + b"\n")


def forge_hello(sock: socket.socket, fp: dict, key: bytes, rank: int = 1) -> dict:
    """The whole node side of the handshake by hand, MACs under `key`: the head's challenge."""
    nn = os.urandom(16).hex()
    send(sock, {"magic": S.MAGIC, "nonce": nn})
    challenge = json.loads(line(sock))
    body = json.dumps({"id": "forger", "node_rank": rank, "fp": fp})
    mac = S._mac(key, "node", nn, challenge["nonce"], body)
    send(sock, {"magic": S.MAGIC, "body": body, "mac": mac})
    return challenge


def honest_node(port: int, fp: dict = FP, token: bytes = TOKEN) -> list[BaseException]:
    return _raised(S.run_node, "127.0.0.1", port, 1, dict(fp), 20, token)


@pytest.mark.integration
def test_a_forged_hello_with_the_head_fingerprint_takes_no_slot() -> None:
    """Before: a matching hello from anyone took node 1's slot and the real node was refused.
    Now it is dropped (closed, no verdict) and logged; the real node joins; both pass."""
    head = Head(_free_port())
    with connect(head.port) as forger:
        forge_hello(forger, FP, b"guessed-wrong-token-0000")
        assert line(forger) == b""  # closed: no verdict, nothing learned
    assert honest_node(head.port) == []
    head.join()
    assert head.errors == []
    assert any(
        "dropped a connection from 127.0.0.1: its hello does not carry" in x for x in head.log
    )


@pytest.mark.integration
def test_a_wrong_fingerprint_without_the_token_aborts_nobody() -> None:
    """Before: one hello with another fingerprint ended every node. Without the token it is
    dropped; the honest node joins and the run goes on."""
    head = Head(_free_port())
    with connect(head.port) as forger:
        forge_hello(forger, {**FP, "torch": "0.0.1"}, b"not-this-runs-token-000")
        assert line(forger) == b""
    assert honest_node(head.port) == []
    head.join()
    assert head.errors == []


@pytest.mark.integration
def test_a_peer_with_the_token_and_another_fingerprint_is_a_real_mismatch() -> None:
    """With the token it is one of ours: a different torch ends every node, naming it (the
    value escaped: it came over the network)."""
    head = Head(_free_port())
    errors = honest_node(head.port, {**FP, "torch": "2.0.0\x1b[2J"})
    head.join()
    assert len(errors) == 1 and len(head.errors) == 1
    message = "pre-flight: node 1 (127.0.0.1) has torch 2.0.0\\x1b[2J, the head has 2.13.0"
    assert str(errors[0]) == str(head.errors[0]) == message
    assert "install the same environment" in errors[0].hint  # type: ignore[attr-defined]


@pytest.mark.integration
def test_a_replayed_hello_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """An honest node's lines recorded from one run (same token, same port) and sent again to
    the next head: the hello's HMAC covers the first head's challenge, so it fails."""
    recorded: list[dict] = []
    real_send = S._send

    def recording_send(sock: socket.socket, data: dict) -> bool:
        if "mac" not in data or "body" in data:  # the node's two lines
            recorded.append(data)
        return real_send(sock, data)

    port = _free_port()
    head = Head(port)
    monkeypatch.setattr(S, "_send", recording_send)
    assert honest_node(port) == []
    monkeypatch.setattr(S, "_send", real_send)
    head.join()
    opener, hello = (m for m in recorded if m.get("magic") == S.MAGIC and "verdict" not in m)
    assert "nonce" in opener and "body" in hello

    head = Head(port)
    with connect(port) as replay:
        send(replay, opener)
        assert set(json.loads(line(replay))) == {"magic", "nonce", "mac"}
        send(replay, hello)
        assert line(replay) == b""  # dropped: another challenge
    assert honest_node(port) == []
    head.join()
    assert head.errors == []
    assert any("a replayed hello" in x for x in head.log)


@pytest.mark.integration
def test_twelve_silent_connections_do_not_hold_the_honest_node_out() -> None:
    """Before: silent connections (a port scanner, a health check) held the one-at-a-time accept
    loop and both nodes failed with "joined: none". Each is now handled on its own deadline."""
    head = Head(_free_port(), timeout=25)
    silent = [connect(head.port) for _ in range(12)]
    try:
        assert honest_node(head.port) == []
        head.join()
        assert head.errors == []
        for sock in silent:  # closed when the wait ended, with no verdict
            sock.settimeout(15)
            assert line(sock) == b""
    finally:
        for sock in silent:
            sock.close()


@pytest.mark.integration
def test_a_flood_of_silent_connections_past_the_cap_does_not_hold_the_honest_node_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: at MAX_PENDING connections being checked, a newcomer was closed at once, so
    MAX_PENDING silent ones held every node out for HANDSHAKE_SECONDS (10 s), past this
    head's 6 s wait. Now a newcomer closes the oldest one still being checked — also one
    that opened the handshake (no token needed for that) and then went quiet."""
    monkeypatch.setattr(S, "MAX_PENDING", 8)
    head = Head(_free_port(), timeout=6)
    silent = [connect(head.port) for _ in range(12)]
    for sock in silent[::2]:
        send(sock, {"magic": S.MAGIC, "nonce": os.urandom(16).hex()})
    try:
        assert honest_node(head.port) == []
        head.join()
        assert head.errors == []
        assert any("closed for a newer one: 8 were being checked" in x for x in head.log)
    finally:
        for sock in silent:
            sock.close()


@pytest.mark.integration
def test_a_node_whose_connection_made_room_for_a_newer_one_connects_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Room is made by closing the oldest connection being checked, which can be an honest
    node's mid-handshake (here: its hello held back 0.5 s while a newer connection comes).
    Before: the node failed, 'closed the connection without a verdict'. It connects again."""
    monkeypatch.setattr(S, "MAX_PENDING", 1)
    head = Head(_free_port(), timeout=15)
    real_send = S._send
    held: list[bool] = []
    at_hello = threading.Event()

    def slow_hello(sock: socket.socket, data: dict) -> bool:
        if "body" in data and not held:  # the node's first hello only
            held.append(True)
            at_hello.set()
            time.sleep(0.5)
        return real_send(sock, data)

    monkeypatch.setattr(S, "_send", slow_hello)
    errors: list[list[BaseException]] = []
    node = threading.Thread(target=lambda: errors.append(honest_node(head.port)))
    node.start()
    assert at_hello.wait(10)
    newer = connect(head.port)  # one more than MAX_PENDING: the node's connection is closed
    try:
        node.join(timeout=30)
        head.join()
        assert errors == [[]] and head.errors == []
        assert any("closed for a newer one: 1 were being checked" in x for x in head.log)
    finally:
        newer.close()


@pytest.mark.integration
def test_an_unauthenticated_peer_learns_no_version() -> None:
    """What a client without the token can get from the head: a nonce and a MAC, no torch,
    CUDA, NCCL or lock; the head's time-out then names what it dropped."""
    head = Head(_free_port(), timeout=3)
    with connect(head.port) as peer:
        send(peer, {"magic": S.MAGIC, "nonce": os.urandom(16).hex()})
        reply = line(peer)
        send(peer, {"magic": S.MAGIC, "body": "{}", "mac": "00" * 32})
        rest = line(peer)
    head.join()
    assert set(json.loads(reply)) == {"magic", "nonce", "mac"} and rest == b""
    for value in FP.values():
        assert value.encode() not in reply
    (error,) = head.errors
    assert (
        "joined: none; 1 connection(s) dropped without this run's ENVTOOL_PREFLIGHT_TOKEN"
        in str(error)
    )


@pytest.mark.integration
def test_a_node_with_another_token_stops_before_it_says_anything() -> None:
    """The node checks the head's proof first: with another token it ends at once with the
    fix, and its fingerprint never goes out; the head drops the connection."""
    head = Head(_free_port(), timeout=5)
    (error,) = honest_node(head.port, token=b"another-token-on-this-node")
    assert "does not hold this node's ENVTOOL_PREFLIGHT_TOKEN" in str(error)
    assert "export the same ENVTOOL_PREFLIGHT_TOKEN on every node" in error.hint  # type: ignore[attr-defined]
    head.join()
    assert "joined: none; 1 connection(s) dropped" in str(head.errors[0])


@pytest.mark.integration
def test_a_fake_head_learns_nothing_from_a_node() -> None:
    """Something else listening on the head's port (without the token) answers the opener with
    a made-up challenge: the node sends no fingerprint and stops."""
    port = _free_port()
    got: list[bytes] = []
    server = socket.create_server(("127.0.0.1", port))

    def fake() -> None:
        conn, _ = server.accept()
        with conn:
            got.append(line(conn))
            send(conn, {"magic": S.MAGIC, "nonce": "11" * 16, "mac": "22" * 32})
            conn.settimeout(5)
            try:
                while chunk := conn.recv(4096):
                    got.append(chunk)
            except OSError:
                pass

    t = threading.Thread(target=fake)
    t.start()
    (error,) = honest_node(port)
    t.join(timeout=30)
    server.close()
    assert "does not hold this node's" in str(error)
    assert b"torch" not in b"".join(got) and b"2.13.0" not in b"".join(got)


def test_the_token_is_required_and_long_enough() -> None:
    for value, said in ((None, "is not set"), ("", "is not set"), ("short", "5 characters")):
        with pytest.raises(S.PreflightError) as err:
            S.check_token(value)
        assert said in err.value.message
    assert S.check_token("x" * 16) == b"x" * 16
    from envtool.core.slurm import PREFLIGHT_TOKEN_VAR

    assert PREFLIGHT_TOKEN_VAR == S.TOKEN_VAR  # one name, in the stdlib script and the core


def test_the_scripts_printable_is_core_printable() -> None:
    """The batch script escapes network text with its own copy of printable's rule (it cannot
    import envtool): the two agree on every control and surrogate character."""
    from envtool.core.shell_quote import printable

    text = "".join(chr(c) for c in [*range(0x00, 0xA1), 0x2028, 0xD800, 0xDC9B, 0xDFFF, 0x1F600])
    assert S.printable(text) == printable(text)
    assert S.printable("torch 2.0\x1b]0;x\x07\n") == "torch 2.0\\x1b]0;x\\x07\\x0a"


@pytest.mark.integration
def test_launch_without_a_token_is_exit_2_and_dry_run_prints_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != S.TOKEN_VAR}
    argv = [sys.executable, "-m", "envtool", "launch", SCRIPT, "--cpu", "--nnodes", "2"]
    argv += ["--node-rank", "0", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}"]
    run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    (error,) = [x for x in run.stderr.splitlines() if "error:" in x]
    assert "ENVTOOL_PREFLIGHT_TOKEN is not set" in error and "--dry-run" in error
    dry = subprocess.run(
        [*argv, "--dry-run", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    token = json.loads(dry.stdout)["preflight_token"]
    assert len(token) == 64 and S.check_token(token)
    text = subprocess.run(
        [*argv, "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "export ENVTOOL_PREFLIGHT_TOKEN=" in text.stdout
    env[S.TOKEN_VAR] = "the-user-exported-this-one"
    dry = subprocess.run(
        [*argv, "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (
        "the-user-exported-this-one" not in dry.stdout
        and "export ENVTOOL_PREFLIGHT" not in dry.stdout
    )
    assert not list(tmp_path.glob("runs/*"))
