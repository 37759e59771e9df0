"""A local HTTP mirror of a channel folder with fault injection (tests/install/test_fetch.py and
bench/bench_fetch.py): a real `ThreadingHTTPServer` on 127.0.0.1, serving files with their
Content-Length, and per-path faults decided by `Faults`:

- `busy_first`: paths (substring match, "*" for all) answered 503 on their first request;
- `cut`: paths whose body is cut at half (the Content-Length still says the full size) — on the
  first request only, or on every request with `cut_always`;
- `latency`: seconds to wait before each answer;
- `auth`: "user:password" that every request must present as HTTP basic auth (else 401);
- `die_after`: stop the whole server after this many archive bodies (the next archive
  request is not answered);
- `no_range`: ignore `Range: bytes=N-` (answer 200 with the whole file) instead of 206;
- `stall`: paths whose body stops at half with the connection held open (first request only,
  or every request with `cut_always`);
- `drip`: paths whose body comes one byte every half second, never finishing in a test's time;
- `endless`: paths (exact) answered with a chunked body of repodata-like JSON that never ends.

`served` counts complete bodies per path; `ranges` lists (path, first byte) of 206 answers.

`served` counts complete bodies per path; `requests` counts every request per path.
"""

from __future__ import annotations

import base64
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Faults:
    busy_first: set[str] = field(default_factory=set)
    cut: set[str] = field(default_factory=set)
    cut_always: bool = False
    latency: float = 0.0
    auth: str | None = None
    die_after: int | None = None
    no_range: bool = False
    stall: set[str] = field(default_factory=set)
    drip: set[str] = field(default_factory=set)
    endless: set[str] = field(default_factory=set)

    def matches(self, names: set[str], path: str) -> bool:
        return "*" in names or any(n in path for n in names)


class MirrorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, root: Path, faults: Faults | None = None, port: int = 0) -> None:
        self.root = Path(root).resolve()
        self.faults = faults or Faults()
        self.requests: Counter[str] = Counter()
        self.served: Counter[str] = Counter()
        self.ranges: list[tuple[str, int]] = []
        self.bytes_sent: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.dead = False
        self.begun = 0  # archive bodies begun (die_after)
        super().__init__(("127.0.0.1", port), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> MirrorServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if not self.dead:
            self.dead = True
            self.shutdown()
        self.server_close()

    def die(self) -> None:
        """From a handler: new connections are refused, kept-alive ones closed, then the server
        stops (from another thread: shutdown waits for serve_forever)."""
        self.dead = True
        threading.Thread(target=self.kill, daemon=True).start()

    def kill(self) -> None:
        self.shutdown()
        self.server_close()

    def archive_bodies(self) -> int:
        return sum(n for p, n in self.served.items() if p.endswith((".conda", ".tar.bz2")))


class _Handler(BaseHTTPRequestHandler):
    server: MirrorServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        srv, faults = self.server, self.server.faults
        path = self.path.split("?", 1)[0]
        archive = body and path.endswith((".conda", ".tar.bz2"))
        with srv.lock:
            srv.requests[path] += 1
            nth = srv.requests[path]
            # die_after bodies begun, the next archive request finds the server dead: decided
            # before sending, as concurrent downloads could otherwise all finish before the
            # count of finished bodies reached it (a flake: every archive served, no death)
            if archive and faults.die_after is not None:
                if srv.begun >= faults.die_after and not srv.dead:
                    srv.die()
                srv.begun += 1
        if srv.dead:
            self.close_connection = True
            return
        if faults.latency:
            time.sleep(faults.latency)
        if faults.auth is not None:
            want = "Basic " + base64.b64encode(faults.auth.encode()).decode()
            if self.headers.get("Authorization") != want:
                self._status(401, {"WWW-Authenticate": 'Basic realm="mirror"'})
                return
        if nth == 1 and faults.matches(faults.busy_first, path):
            self._status(503, {"Retry-After": "0"})
            return
        if path in faults.endless:  # exact: repodata.json, not repodata.json.zst
            self._endless()
            return
        target = (srv.root / path.lstrip("/")).resolve()
        if srv.root not in target.parents or not target.is_file():
            self._status(404)
            return
        data = target.read_bytes()
        total = len(data)
        start = _range_start(self.headers.get("Range"))
        if start is not None and not faults.no_range and start < total:
            with srv.lock:
                srv.ranges.append((path, start))
            data = data[start:]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{total - 1}/{total}")
        else:
            self.send_response(200)
        cut = faults.matches(faults.cut, path) and (faults.cut_always or nth == 1)
        stall = faults.matches(faults.stall, path) and (faults.cut_always or nth == 1)
        drip = faults.matches(faults.drip, path)
        self.send_header("Accept-Ranges", "none" if faults.no_range else "bytes")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/octet-stream")
        if cut:
            self.send_header("Connection", "close")
        self.end_headers()
        if not body:
            return
        try:
            if stall or drip:
                self.wfile.write(data[: len(data) // 2] if stall else b"")
                self.wfile.flush()
                sent = 0
                while not srv.dead and sent < len(data):  # until the client gives up
                    time.sleep(0.5)
                    if drip:
                        self.wfile.write(data[sent : sent + 1])
                        self.wfile.flush()
                        sent += 1
                self.close_connection = True
                return
            if cut:
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            return
        with srv.lock:
            srv.served[path] += 1
            srv.bytes_sent[path] += len(data)
            done = srv.archive_bodies()
        if faults.die_after is not None and done >= faults.die_after:
            with srv.lock:
                if not srv.dead:
                    srv.die()

    def _endless(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        entry = b'"a-1-0.tar.bz2":{"name":"a","version":"1","build":"0","depends":[]},'
        pieces = [b'{"info":{"subdir":"linux-64"},"packages":{', entry * 4096]
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(pieces[0]), pieces[0]))
            while not self.server.dead:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(pieces[1]), pieces[1]))
        except OSError:  # the client cut it: what the test wants
            pass
        self.close_connection = True

    def _status(self, code: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _range_start(header: str | None) -> int | None:
    """The N of `bytes=N-` (the only form a resuming client sends), else None."""
    if not header or not header.startswith("bytes=") or not header.endswith("-"):
        return None
    text = header[len("bytes=") : -1]
    return int(text) if text.isdigit() else None


def main(argv: list[str] | None = None) -> None:
    """`python tests/mirror_server.py ROOT PORT [FAULTS_JSON]`: serve in its own process (the
    benchmark keeps the server's GIL out of the installs it times); prints the URL, then serves
    until killed."""
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[2]) if len(args) > 2 else {}
    for key in ("busy_first", "cut", "stall", "drip", "endless"):
        if key in spec:
            spec[key] = set(spec[key])
    server = MirrorServer(Path(args[0]), Faults(**spec), port=int(args[1]))
    print(server.url, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
