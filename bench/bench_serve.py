"""Benchmark: generate --serve under load, this tree's template vs a baseline from git, side by side.

Two measures, each on a tiny random-weights byte model on CPU (eager), both servers started the
same way and run alternately so machine load hits both alike:
  - busy: with --max-queue 1, one request generating and one waiting, the time a third request
    takes to get its answer (a 503), and whether it came before the request in flight finished;
  - burst: the queue full, many connections at once: how long their 503s take (the worst
    case shows a dropped SYN: a 1 s TCP retransmit);
  - drain: N concurrent clients, SIGTERM half a second in: how many got an HTTP status and how
    many a reset / bare close.

    .venv/bin/python bench/bench_serve.py --baseline 70a1092 --reps 3 [--clients 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = ["--size", "tiny", "--vocab-size", "256", "--seq-len", "512"]
# --eager: the baseline has no --compile default for CPU; both run the same mode
COMMON = [*MODEL, "--cpu", "--eager", "--serve", "0"]


def start(script: Path, args: list[str]) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen(
        [sys.executable, str(script), *COMMON, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    line = proc.stdout.readline()
    port = int(line.split()[1].split(":")[2].split("/")[0])
    return proc, port


def post(port: int, body: dict) -> tuple[object, float]:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        conn.request("POST", "/generate", json.dumps(body))
        reply = conn.getresponse()
        reply.read()
        return reply.status, time.perf_counter()
    except Exception as exc:  # a reset or a bare close
        return type(exc).__name__, time.perf_counter()


def busy(script: Path) -> dict:
    proc, port = start(script, ["--max-queue", "1"])
    try:
        results: dict = {}
        long = {"prompt": "a", "max_new_tokens": 300, "temperature": 0}

        def run(name: str, body: dict) -> None:
            results[name] = post(port, body)

        first = threading.Thread(target=run, args=("first", long))
        first.start()
        time.sleep(1.0)
        second = threading.Thread(target=run, args=("second", {"prompt": "b", "max_new_tokens": 2}))
        second.start()
        time.sleep(1.0)
        t0 = time.perf_counter()
        status, t1 = post(port, {"prompt": "c", "max_new_tokens": 2})
        first.join()
        second.join()
        return {
            "status": status,
            "seconds": t1 - t0,
            "before_in_flight_done": t1 < results["first"][1],
        }
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()


def burst(script: Path, clients: int) -> dict:
    """With the queue full, `clients` connections at once (a barrier releases them): every one
    should get its 503 fast; a dropped SYN (a full listen backlog) costs the client's TCP a 1 s
    retransmit."""
    proc, port = start(script, ["--max-queue", "1"])
    try:
        long = {"prompt": "a", "max_new_tokens": 400, "temperature": 0}
        background = [threading.Thread(target=post, args=(port, long)) for _ in range(2)]
        for t in background:
            t.start()
            time.sleep(1.0)
        gate = threading.Barrier(clients)
        seconds: list = []

        def one() -> None:
            gate.wait()
            t0 = time.perf_counter()
            status, t1 = post(port, {"prompt": "c", "max_new_tokens": 2})
            seconds.append((status, t1 - t0))

        threads = [threading.Thread(target=one) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        times = sorted(s for _, s in seconds)
        return {
            "median": statistics.median(times),
            "max": times[-1],
            "over_half_a_second": sum(s > 0.5 for s in times),
            "statuses": dict(Counter(str(st) for st, _ in seconds)),
        }
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()


def drain(script: Path, clients: int) -> dict:
    proc, port = start(script, ["--max-queue", "4"])
    outcomes: list = []
    body = {"prompt": "a", "max_new_tokens": 60, "temperature": 0}
    threads = [
        threading.Thread(target=lambda: outcomes.append(post(port, body)[0]))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join()
    _, err = proc.communicate(timeout=120)
    counts = Counter(str(o) for o in outcomes)
    answered = sum(n for k, n in counts.items() if k.isdigit())
    return {"answered": answered, "clients": clients, "outcomes": dict(counts),
            "tracebacks": err.count("Traceback")}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="HEAD~3", help="git revision of the baseline")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--burst", type=int, default=60, help="connections at once")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "generate_baseline.py"
        old.write_text(
            subprocess.run(
                ["git", "show", f"{args.baseline}:templates/generate.py"],
                cwd=REPO, check=True, capture_output=True, text=True,
            ).stdout
        )  # fmt: skip
        scripts = {"baseline": old, "this tree": REPO / "templates" / "generate.py"}
        rows: dict = {name: {"busy": [], "burst": [], "drain": []} for name in scripts}
        for _ in range(args.reps):
            for name, script in scripts.items():  # alternate: drifting load hits both
                rows[name]["busy"].append(busy(script))
                rows[name]["burst"].append(burst(script, args.burst))
                rows[name]["drain"].append(drain(script, args.clients))
    for name, row in rows.items():
        secs = [b["seconds"] for b in row["busy"]]
        before = sum(b["before_in_flight_done"] for b in row["busy"])
        answered = sum(d["answered"] for d in row["drain"])
        total = sum(d["clients"] for d in row["drain"])
        print(
            f"{name:10} busy answer: median {statistics.median(secs) * 1e3:.0f} ms "
            f"(statuses {[b['status'] for b in row['busy']]}, before the in-flight request "
            f"finished {before}/{len(secs)}); drain: {answered}/{total} clients got a status, "
            f"outcomes {[d['outcomes'] for d in row['drain']]}, "
            f"tracebacks {sum(d['tracebacks'] for d in row['drain'])}"
        )
        bursts = row["burst"]
        print(
            f"{'':10} burst of {args.burst}: median {statistics.median(b['median'] for b in bursts) * 1e3:.0f} ms, "
            f"worst {max(b['max'] for b in bursts) * 1e3:.0f} ms, over 0.5 s: "
            f"{[b['over_half_a_second'] for b in bursts]}, statuses {[b['statuses'] for b in bursts]}"
        )
    base = statistics.median(b["seconds"] for b in rows["baseline"]["busy"])
    new = statistics.median(b["seconds"] for b in rows["this tree"]["busy"])
    print(f"busy answer: this tree / baseline = {new / base:.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
