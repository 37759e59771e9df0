"""Drive a running `gen.py --serve PORT`: wait for /health, one JSON and one streamed request,
three bad ones (malformed, wrong type, oversized), then a good one again. Prints each reply."""

import json
import sys
import time
import urllib.error
import urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"
deadline = time.time() + float(sys.argv[2] if len(sys.argv) > 2 else 240)
while True:
    try:
        print("health", urllib.request.urlopen(base + "/health", timeout=2).read().decode().strip())
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("server never answered /health")
        time.sleep(1)


def post(body: bytes, label: str) -> None:
    req = urllib.request.Request(base + "/generate", data=body, method="POST")
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            lines = r.read().decode().splitlines()
            status = r.status
    except urllib.error.HTTPError as e:
        lines, status = e.read().decode().splitlines(), e.code
    ms = (time.perf_counter() - t) * 1e3
    last = json.loads(lines[-1])
    last.pop("tokens", None)
    print(f"{label}: HTTP {status} in {ms:.0f} ms, {len(lines)} line(s), last: {json.dumps(last)}")


good = {"prompt": "The H200 has", "max_new_tokens": 64, "temperature": 0}
post(json.dumps(good).encode(), "json")
post(json.dumps({**good, "stream": True}).encode(), "stream")
post(json.dumps({**good, "temperature": 0.8, "top_p": 0.9, "seed": 1}).encode(), "sampled")
post(b'{"prompt": "x",', "malformed")
post(json.dumps({**good, "max_new_tokens": "64"}).encode(), "wrong type")
post(b'{"prompt": "' + b"a" * 70000 + b'"}', "oversized")
post(json.dumps(good).encode(), "json again")
