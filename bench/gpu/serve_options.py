"""What the OpenAI request options cost a served model: start gen.py --serve 0 with the given
arguments, then POST the same /v1/completions request (a 512-byte prompt, 300 tokens, greedy)
plainly and with each option (sampling, logprobs, penalties, a bias, echo's scoring), in turns,
REPS times each; print each one's median wall time per request, its ratio to the plain one,
and its first request's time (what its kernels and graphs cost once, untimed in the median).

    python bench/gpu/serve_options.py GEN.py --size 1.3b --vocab-size 256 --quant int8
"""

import json
import os
import statistics
import sys
import time
import urllib.request

from serve_ready import base_of, served  # bench/gpu: the script's own folder

PROMPT = ("the quick brown fox jumps over the lazy dog; " * 12)[:512]
ASK = {"prompt": PROMPT, "max_tokens": 300, "temperature": 0}
OPTIONS = {  # name -> the fields added to ASK
    "plain": {},
    "temperature 1": {"temperature": 1.0, "seed": 1},
    "temperature 1, top_p 0.9": {"temperature": 1.0, "top_p": 0.9, "seed": 1},
    "logprobs 5": {"logprobs": 5},
    "logprobs 0": {"logprobs": 0},
    "temperature 1, logprobs 5": {"temperature": 1.0, "seed": 1, "logprobs": 5},
    "temperature 1, top_p 0.9, logprobs 5": {
        "temperature": 1.0,
        "top_p": 0.9,
        "seed": 1,
        "logprobs": 5,
    },
    "penalties": {"frequency_penalty": 0.5, "presence_penalty": 0.5},
    "logit_bias": {"logit_bias": {"120": 1.0}},
    "echo scoring (max_tokens 0)": {"echo": True, "logprobs": 1, "max_tokens": 0},
}
REPS = int(os.environ.get("REPS", "5"))


def post(base: str, body: dict) -> tuple[float, dict]:
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as reply:
        answer = json.load(reply)
    return time.perf_counter() - t, answer


def main() -> int:
    with served(sys.argv[1], sys.argv[2:]) as line:
        if line is None:
            print("server exited before serving", flush=True)
            return 1
        print(line, flush=True)
        base = base_of(line)
        first = {}  # each option's first request: its kernels or graphs, once
        for name, extra in OPTIONS.items():
            first[name] = post(base, {**ASK, **extra})[0]
        times: dict[str, list[float]] = {name: [] for name in OPTIONS}
        tokens = {}
        for _ in range(REPS):  # in turns, so a drift in the clock or the GPU hits all alike
            for name, extra in OPTIONS.items():
                seconds, answer = post(base, {**ASK, **extra})
                times[name].append(seconds)
                tokens[name] = answer["usage"]["completion_tokens"]
        plain = statistics.median(times["plain"])
        print(
            f"| option | tokens | median ms / request | ratio to plain | first ms | (REPS {REPS}) |"
        )
        print("|---|---:|---:|---:|---:|---|")
        for name, ts in times.items():
            mid, once = statistics.median(ts), first[name] * 1e3
            print(
                f"| {name} | {tokens[name]} | {mid * 1e3:.1f} | {mid / plain:.3f} | {once:.1f} | |"
            )
        return 0


if __name__ == "__main__":
    sys.exit(main())
