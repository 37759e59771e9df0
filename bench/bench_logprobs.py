"""Benchmark: what a served reply's logprobs cost the host, this tree's template vs a baseline
from git, side by side. On an H100 (benchmarks-gpu.md round 35) `logprobs: 5` still added ~5 ms
to a 300-token request at both 124M and 1.3B, `logprobs: 0` ~2.5 ms: the same at both sizes, so
the host's work, not the GPU's. This times that work on the same rows for both templates,
alternating: LogprobsOut.render (OpenAI's shape) and the server's json.dumps of the reply, for a
completion with logprobs 5 and 0 and a chat reply with top_logprobs 5. Needs no torch kernels.

    .venv/bin/python bench/bench_logprobs.py --baseline 6e5c009 [--reps 7] [--tokens 300]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and NamedTuples look their module up
    spec.loader.exec_module(module)
    return module


def rows(tokens: int, k: int, seed: int = 0) -> list:
    """(token, (its logprob, [(id, logprob)] * k)) as Logprobs.rows gives them: float32 values
    widened to Python floats, text bytes and some above 127."""
    rng = random.Random(seed)

    def value() -> float:
        return float(-rng.random() * 8)

    return [
        (rng.randrange(256), (value(), [(rng.randrange(256), value()) for _ in range(k)]))
        for _ in range(tokens)
    ]


def reply_seconds(module, pairs: list, chat: bool, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        out = module.LogprobsOut(chat).render(pairs)
        json.dumps({"choices": [{"index": 0, "logprobs": out}]})
    return (time.perf_counter() - t) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD~1", help="git revision of the baseline")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--inner", type=int, default=20, help="replies timed together")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "generate_baseline.py"
        text = subprocess.run(
            ["git", "show", f"{args.baseline}:templates/generate.py"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        old.write_text(text)
        modules = {
            "baseline": load(old, "generate_baseline"),
            "this tree": load(REPO / "templates" / "generate.py", "generate_tree"),
        }
    cases = {
        "completion, logprobs 5": (rows(args.tokens, 5), False),
        "completion, logprobs 0": (rows(args.tokens, 0), False),
        "chat, top_logprobs 5": (rows(args.tokens, 5), True),
    }
    for pairs, chat in cases.values():  # the same reply from both, or the ratio means nothing
        replies = [m.LogprobsOut(chat).render(pairs) for m in modules.values()]
        if json.dumps(replies[0]) != json.dumps(replies[1]):
            print(f"the two templates render {'chat' if chat else 'completion'} differently")
            return 1
    print(f"| reply ({args.tokens} tokens) | baseline {args.baseline} ms | this tree ms | ratio |")
    print("|---|---|---|---|")
    for name, (pairs, chat) in cases.items():
        times: dict[str, list[float]] = {m: [] for m in modules}
        for _ in range(args.reps):  # alternating: machine load hits both alike
            for label, module in modules.items():
                times[label].append(reply_seconds(module, pairs, chat, args.inner))
        base, new = (statistics.median(times[m]) * 1e3 for m in modules)
        print(f"| {name} | {base:.2f} | {new:.2f} | {new / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
