"""What a token costs between CUDA graphs: generate's Triton decode step at 1.3B (random weights,
each product's tile tuned in the graph as Engine does), K steps captured in one graph and
replayed back to back for 288 tokens, K = 1 (the template's way: one graph a token), 2, 4, 8.
A graph launch ends PDL's overlap (the first kernel of a graph waits for the last of the one
before, whole), so K > 1 shows what that boundary and the launch cost a token.

    python bench/gpu/graph_gap.py [--quant int8]   # from the repo root, on a CUDA machine
"""

import argparse
import statistics

import torch
from template import load_template, random_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quant", choices=("none", "int8"), default="int8")
    ap.add_argument("--tokens", type=int, default=288)
    a = ap.parse_args()
    g = load_template()
    dev = torch.device("cuda")
    s = g.ModelShape(24, 16, 2048, 50304, 2048)
    m = random_model(g, s, 1337, a.quant)
    g.PDL["on"] = g.pdl_usable(dev)
    tok = torch.ones(1, 1, dtype=torch.long, device=dev)
    pos = torch.full((1,), 512, dtype=torch.long, device=dev)
    out = torch.zeros(s.seq_len + 1, dtype=torch.long, device=dev)
    with torch.no_grad():
        g.tune_gemv(lambda: m.decode_fast(tok, pos))
        m.work["best"].fill_(g.LOWEST_KEY)
        print(f"| steps a graph | us a token | tokens/s | quant {a.quant}, PDL {g.PDL['on']} |")
        print("|---|---|---|---|")
        for k in (1, 2, 4, 8):

            def steps(k=k) -> None:
                for _ in range(k):
                    g.decode_step_fast(m, tok, pos, out, 0)

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                steps()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                steps()
            runs = []
            for _ in range(5):
                pos.fill_(512)
                torch.cuda.synchronize()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(a.tokens // k):
                    graph.replay()
                end.record()
                end.synchronize()
                runs.append(start.elapsed_time(end) * 1e3 / (a.tokens // k * k))
            us = statistics.median(runs)
            print(f"| {k} | {us:.1f} | {1e6 / us:.1f} | {min(runs):.1f}-{max(runs):.1f} |")
            del graph


if __name__ == "__main__":
    main()
