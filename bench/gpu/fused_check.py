"""Checks generate's qkv + attention launch (_qkv_attn_kernel) on a GPU against the two launches.

The fused launch's attention programs wait on a count the qkv programs raise, inside one grid,
so a mistake there is a race: it shows as a wrong or a varying result, or a hang (run it under
`timeout`). For the 1.3B shape (random weights, random caches), bf16 and int8, at cache edges,
the decode step's logits and caches with --fused-attention must equal those of two launches
with the same tiles, and a CUDA graph of the step replayed REPS times must give the same logits
every time (with PDL where the GPU has it, as the template runs it).

    timeout 300 python bench/gpu/fused_check.py        # from the repo root, on a CUDA machine
    TRITON_INTERPRET=1 python bench/gpu/fused_check.py --smoke   # CPU: a tiny shape, no graph
"""

import argparse

import torch
from template import load_template


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1.3b")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--smoke", action="store_true", help="CPU, a tiny shape, no graph")
    a = ap.parse_args()
    g = load_template()
    dev = torch.device("cpu" if a.smoke else "cuda")
    dt = torch.float32 if a.smoke else torch.bfloat16
    g.PDL["on"] = g.pdl_usable(dev)
    s = g.ModelShape(2, 2, 64, 300, 200) if a.smoke else g.ModelShape(*g.SIZES[a.size], 50304, 2048)
    sd = g.shard(g.random_state_dict(s, 0, dev, dt), s, 0, 1)
    bad = 0
    for quant in ("none", "int8"):
        m = g.GPT(s).to(device=dev, dtype=dt).eval().requires_grad_(False)
        m.load_state_dict(sd)
        if quant == "int8":
            g.quantize_int8(m)
        m.setup_cache(dev, dt)
        torch.manual_seed(1)
        for b in m.blocks:
            b.attn.k_cache.normal_()
            b.attn.v_cache.normal_()
        caches = [(b.attn.k_cache.clone(), b.attn.v_cache.clone()) for b in m.blocks]
        tok = torch.tensor([[17]], device=dev)
        for P in sorted({0, 63, 64, min(700, s.seq_len - 2), s.seq_len - 1}):
            pos = torch.tensor([P], device=dev)
            got = {}
            for fused in (False, True):
                for b, (k, v) in zip(m.blocks, caches, strict=True):
                    b.attn.k_cache.copy_(k)
                    b.attn.v_cache.copy_(v)
                g.FUSED_ATTENTION["on"] = fused
                logits = m.decode_fast(tok, pos).clone()
                got[fused] = (logits, [b.attn.k_cache.clone() for b in m.blocks])
            err = float((got[True][0] - got[False][0]).abs().max())
            scale = float(got[False][0].abs().max())
            same = all(torch.equal(x, y) for x, y in zip(got[True][1], got[False][1], strict=True))
            ok = err <= 2e-2 * scale and same
            bad += not ok
            print(
                f"{quant} pos {P}: max |fused - two launches| {err:.3g} (of {scale:.3g}), "
                f"caches {'equal' if same else 'DIFFER'} {'ok' if ok else 'WRONG'}",
                flush=True,
            )
        if a.smoke:
            continue
        # replays of one graph: the counters must be back at 0 after each, the result the same
        g.FUSED_ATTENTION["on"] = True
        pos = torch.tensor([900], device=dev)
        first = m.decode_fast(tok, pos).clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = m.decode_fast(tok, pos)
        varied = 0
        for _ in range(a.reps):
            graph.replay()
            varied += not torch.equal(out, first)
        torch.cuda.synchronize()
        left = int(m.work["ready"].abs().sum() + m.work["count"].abs().sum())
        bad += varied > 0 or left > 0
        print(
            f"{quant} {a.reps} replays: {varied} differed, counters left {left} "
            f"{'ok' if not varied and not left else 'WRONG'}",
            flush=True,
        )
    print("fused check:", "WRONG" if bad else "ok")


if __name__ == "__main__":
    main()
