"""What the OpenAI request options cost a served model: start gen.py --serve 0 with the given
arguments, then POST the same /v1/completions request (a 512-byte prompt, 300 tokens, greedy)
plainly and with each option (sampling, logprobs, penalties, a bias, echo's scoring, streamed,
a stop sequence), in turns, REPS times each; print each one's median wall time per request, its
ratio to the plain one, and its first request's time (what its kernels and graphs cost once,
untimed in the median).

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
    # each token read on the host as it comes (a stop never met: all 300 tokens run)
    "stream": {"stream": True, "stream_options": {"include_usage": True}},
    "stop sequence": {"stop": ["@@never@@"]},
    "stream, logprobs 5": {
        "stream": True,
        "stream_options": {"include_usage": True},
        "logprobs": 5,
    },
}
REPS = int(os.environ.get("REPS", "5"))


def post(base: str, body: dict) -> tuple[float, dict]:
    """(seconds, the reply); a stream's chunks joined into one reply's text and logprobs, its
    last chunk's usage."""
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as reply:
        if not body.get("stream"):
            answer = json.load(reply)
        else:
            events = [
                line[6:] for line in reply.read().decode().splitlines() if line[:6] == "data: "
            ]
    seconds = time.perf_counter() - t
    if body.get("stream"):
        if events[-1] != "[DONE]":
            raise RuntimeError(f"a stream that did not end: {events[-1][:200]}")
        chunks = [json.loads(e) for e in events[:-1]]
        text, lps = "", []
        for c in chunks:
            for choice in c["choices"]:
                text += choice["text"]
                lps += (choice.get("logprobs") or {}).get("token_logprobs") or []
        logprobs = {"token_logprobs": lps} if body.get("logprobs") is not None else None
        answer = {"choices": [{"text": text, "logprobs": logprobs}], "usage": chunks[-1]["usage"]}
    return seconds, answer


def same_reply(a: dict, b: dict) -> bool:
    """The same text and the same chosen tokens' logprobs (a stream against a whole reply)."""
    ca, cb = a["choices"][0], b["choices"][0]
    lp = [(c.get("logprobs") or {}).get("token_logprobs") for c in (ca, cb)]
    return ca["text"] == cb["text"] and lp[0] == lp[1]


def main() -> int:
    with served(sys.argv[1], sys.argv[2:]) as line:
        if line is None:
            print("server exited before serving", flush=True)
            return 1
        print(line, flush=True)
        base = base_of(line)
        first = {}  # each option's first request: its kernels or graphs, once
        answers = {}
        for name, extra in OPTIONS.items():
            first[name], answers[name] = post(base, {**ASK, **extra})
        # streamed (each token read one step behind the decode) or whole: the same reply
        for streamed, whole in (("stream", "plain"), ("stream, logprobs 5", "logprobs 5")):
            same = same_reply(answers[streamed], answers[whole])
            print(f"STREAM_SAME {streamed!r} vs {whole!r}: {'yes' if same else 'NO'}", flush=True)
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
