"""Time a generate server from its start to its first answer: start gen.py --serve 0 with the
given arguments, wait for its 'serving http://...' line (seconds since the spawn), POST one
/generate request, print both, then SIGTERM it and wait for it to exit.

    python bench/gpu/serve_ready.py GEN.py --size 1.3b --vocab-size 256 --compile-cache DIR
"""

import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.request


@contextlib.contextmanager
def served(gen: str, args: list[str]):
    """gen.py --serve 0 ARGS as a child: yields its first line ('serving http://...'), or None
    when it exited before serving; SIGTERM to it after, and a wait for its exit."""
    proc = subprocess.Popen(
        [sys.executable, gen, "--serve", "0", *args], stdout=subprocess.PIPE, text=True
    )
    try:
        line = ""
        while not line.startswith("serving http://"):
            line = proc.stdout.readline()
            if not line:
                break
        yield line.strip() or None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def base_of(line: str) -> str:
    """The server's address (http://host:port) from its 'serving' line."""
    return line.split()[1].removesuffix("/generate")


def main() -> int:
    t0 = time.time()
    with served(sys.argv[1], sys.argv[2:]) as line:
        if line is None:
            print("server exited before serving", flush=True)
            return 1
        ready = time.time() - t0
        print(line, flush=True)
        body = json.dumps({"prompt": "def main():", "max_new_tokens": 64, "temperature": 0})
        req = urllib.request.Request(base_of(line) + "/generate", body.encode(), method="POST")
        t1 = time.time()
        with urllib.request.urlopen(req, timeout=60) as reply:
            answer = json.load(reply)
        first = time.time() - t1
        print(
            f"serve: ready {ready:.1f} s after the spawn; first request {first * 1e3:.0f} ms "
            f"({len(answer.get('tokens', []))} tokens, TTFT {answer.get('ttft_ms', 0):.2f} ms)",
            flush=True,
        )
        return 0


if __name__ == "__main__":
    sys.exit(main())
