"""Where a streamed or stopped request's extra milliseconds go (issue 25 round 36): the engine
alone, in one process, no server. Engine.generate of 300 tokens, greedy, plainly and with an
on_token that reads each token (StepReader, as streams and stop sequences do), that and a
stop sequence's checks, that and logprobs 5, in turns, REPS times; prints each one's median
ms and its difference from plain, and what the reader's setup costs alone. Random weights,
byte-level vocabulary.

    python bench/gpu/stream_cost.py GEN.py [SIZE]
"""

import os
import statistics
import sys
import time

import torch
from template import load_template, random_engine  # bench/gpu: the script's own folder

REPS = int(os.environ.get("REPS", "7"))


def main() -> int:
    size = sys.argv[2] if len(sys.argv) > 2 else "124m"
    g = load_template(sys.argv[1])  # sets argv aside
    e = random_engine(g, size)
    ids = list(b"the quick brown fox jumps over the lazy dog; " * 11)[:512]

    def read(t, row):
        return False

    def stopper():  # as the server's run_choice: the stream's text, its stop found
        text = g.StreamText([b"@@never@@"])

        def on_token(t, row):
            text.feed(t)
            return text.end is not None

        return on_token

    runs = {
        "plain": lambda: e.generate(ids, 300),
        "on_token (read only)": lambda: e.generate(ids, 300, on_token=read),
        "on_token, stop checks": lambda: e.generate(ids, 300, on_token=stopper()),
        "logprobs 5": lambda: e.generate(ids, 300, logprobs=5),
        "on_token, logprobs 5": lambda: e.generate(ids, 300, on_token=read, logprobs=5),
    }
    for run in runs.values():  # graphs and kernels, once
        run()
    times = {name: [] for name in runs}
    for _ in range(REPS):
        for name, run in runs.items():
            torch.cuda.synchronize()
            t = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t)
    plain = statistics.median(times["plain"])
    print(f"| {size} engine.generate, 300 tokens | median ms | minus plain ms | (REPS {REPS}) |")
    for name, ts in times.items():
        mid = statistics.median(ts)
        print(f"| {name} | {mid * 1e3:.2f} | {(mid - plain) * 1e3:+.2f} | |")
    if hasattr(g, "StepReader"):
        t = time.perf_counter()
        for _ in range(100):
            g.StepReader(e.tok, e.picker.kept, 5)
        print(f"STEP_READER setup with logprobs: {(time.perf_counter() - t) * 1e4:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
