"""What generate's decode attention costs on a GPU, by cache chunk and warps.

For the 1.3B shape (16 heads of 128, a 2048-slot cache), LAYERS distinct layers' caches (more
bytes than L2 holds, as the 24 layers are) run templates/generate.py's own `decode_attention`
one after another inside one CUDA graph, with PDL where the GPU has it, at cache positions
across the benchmark's range (a 512-token prompt and 300 new tokens). Each (ATTN_CHUNK,
ATTN_WARPS) is checked against torch's attention first. Round 7's profile put attention at
~8 us a layer for ~5.4 MB of cache: latency, not bytes. Round 12's --parts put ~3 us of it in
the merge (the ticket, the last program's loads) and ~0 in the cache's loads; round 15 replaced
the merge by fp64 sums every program adds into (atomics, no reply waited for).

    python bench/gpu/attn_cost.py             # from the repo root, on a CUDA machine
    python bench/gpu/attn_cost.py --parts     # the kept (chunk, warps) with parts taken out
    python bench/gpu/attn_cost.py --template OLD.py   # another template's attention
    TRITON_INTERPRET=1 python bench/gpu/attn_cost.py --smoke   # CPU: tiny shapes, no timing

--parts splits a layer's time: the kernel as it is, with its sums stored instead of added
(no atomics), without the cache's loads (masked off: no bytes), and without both. Those
variants compute wrong values on purpose, so they are timed, not checked. Timing runs never
clear the sums (qkv's product does that in the decode step): they grow, harmlessly, in fp64.
"""

import argparse
import math
import tempfile
from types import SimpleNamespace

import torch
from template import load_template

ADDS = [  # the sums added (atomics) -> stored
    (
        'tl.atomic_add(acc_ptr + h * HD + d, o.to(tl.float64) * f, sem="relaxed")',
        "tl.store(acc_ptr + h * HD + d, o.to(tl.float64) * f)",
    ),
    (
        'tl.atomic_add(acc_ptr + C + h, tl.sum(p, 0).to(tl.float64) * f, sem="relaxed")',
        "tl.store(acc_ptr + C + h, tl.sum(p, 0).to(tl.float64) * f)",
    ),
]
NO_CACHE = [("mask=old, other=0.0)", "mask=old & (idx < 0)[:, None], other=0.0)")]
PARTS = {  # name: the kernel's text replaced, as (old, new) pairs
    "as it is": [],
    "sums stored, not added": ADDS,
    "no cache loads": NO_CACHE,
    "neither": ADDS + NO_CACHE,
}


def variant(text: str, swaps: list[tuple[str, str]], folder: str, name: str):
    """The template with its attention kernel's text changed (each old text must be there)."""
    for old, new in swaps:
        assert old in text, f"attn_cost --parts: {old!r} is no longer in the template"
        text = text.replace(old, new)
    path = f"{folder}/{name.replace(' ', '_')}.py"
    with open(path, "w") as f:
        f.write(text)
    return load_template(path)


def reference(qkv, k_cache, v_cache, pos: int, H: int, HD: int) -> torch.Tensor:
    q, k, v = qkv.float().view(3, H, HD)
    kc, vc = k_cache[0].float().clone(), v_cache[0].float().clone()
    kc[:, pos], vc[:, pos] = k, v
    att = (q[:, None, :] @ kc[:, : pos + 1].transpose(-1, -2)) / math.sqrt(HD)
    return (att.softmax(-1) @ vc[:, : pos + 1]).reshape(-1)


def setup(a) -> SimpleNamespace:
    """The shapes, the device, LAYERS layers' caches, this step's qkv and its position: what
    both modes time attention over."""
    dev = torch.device("cpu" if a.smoke else "cuda")
    dt = torch.float32 if a.smoke else torch.bfloat16
    H, HD, T = (2, 16, 128) if a.smoke else (16, 128, 2048)
    torch.manual_seed(0)
    attns = [
        SimpleNamespace(
            n_head=H,
            head_dim=HD,
            k_cache=torch.randn(1, H, T, HD, device=dev, dtype=dt),
            v_cache=torch.randn(1, H, T, HD, device=dev, dtype=dt),
            sums=torch.zeros(H * (HD + 1), device=dev, dtype=torch.float64),
        )  # fmt: skip
        for _ in range(2 if a.smoke else a.layers)
    ]
    qkv = torch.randn(3 * H * HD, device=dev, dtype=dt)
    pos = torch.zeros(1, device=dev, dtype=torch.int64)
    positions = (5, 70) if a.smoke else (512, 662, 811)
    return SimpleNamespace(
        dev=dev, H=H, HD=HD, T=T, attns=attns, qkv=qkv, pos=pos, positions=positions
    )


def layer_cell(g, b: SimpleNamespace, a, smoke_mark: str) -> str:
    """Every layer's attention at b.pos, one after another: µs a layer, timed in a CUDA graph
    (--smoke: run once, smoke_mark)."""

    def step() -> None:
        for at in b.attns:
            g.decode_attention(b.qkv, at, b.pos)

    if a.smoke:
        step()
        return smoke_mark
    return f"{g.graph_seconds(step, a.reps) / len(b.attns) * 1e6:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, no timing")
    ap.add_argument("--parts", action="store_true", help="the kept tile, parts taken out")
    ap.add_argument("--template", default="templates/generate.py", help="whose attention")
    a = ap.parse_args()
    b = setup(a)
    if a.parts:
        return time_parts(a, b)
    g = load_template(a.template)
    g.PDL["on"] = not a.smoke and g.pdl_usable(b.dev)
    chunks = (16, 32) if a.smoke else (16, 32, 64, 128, 256)
    warps = (4,) if a.smoke else (1, 2, 4, 8)
    print(f"PDL {g.PDL['on']}; us per layer at positions {b.positions}")
    print("| chunk | warps | " + " | ".join(f"pos {p}" for p in b.positions) + " |")
    print("|---|---|" + "---|" * len(b.positions))
    at = b.attns[0]
    for chunk in chunks:
        g.ATTN_CHUNK = chunk
        for w in warps:
            g.ATTN_WARPS = w
            cells = []
            for p in b.positions:
                b.pos.fill_(p)
                want = reference(b.qkv, at.k_cache, at.v_cache, p, b.H, b.HD)
                at.sums.zero_()  # as qkv's product does
                sums = g.decode_attention(b.qkv, at, b.pos)
                got = g.attention_output(sums, b.H, torch.float32)
                err = float((got - want).norm() / want.norm())
                ok = err < 2e-2
                cells.append(layer_cell(g, b, a, "ok") if ok else f"WRONG ({err:.2g})")
            print(f"| {chunk} | {w} | " + " | ".join(cells) + " |", flush=True)


def time_parts(a, b: SimpleNamespace) -> None:
    """The template's (ATTN_CHUNK, ATTN_WARPS) as it is and with parts taken out (PARTS)."""
    text = open(a.template).read()
    print(f"us per layer at positions {b.positions}")
    print("| part | " + " | ".join(f"pos {p}" for p in b.positions) + " |")
    print("|---|" + "---|" * len(b.positions))
    with tempfile.TemporaryDirectory() as folder:
        for name, swaps in PARTS.items():
            g = variant(text, swaps, folder, name)
            g.PDL["on"] = not a.smoke and g.pdl_usable(b.dev)
            cells = []
            for p in b.positions:
                b.pos.fill_(p)
                cells.append(layer_cell(g, b, a, "ran"))
            print(
                f"| {name} (chunk {g.ATTN_CHUNK}, {g.ATTN_WARPS} warps) | "
                + " | ".join(cells)
                + " |",
                flush=True,
            )


if __name__ == "__main__":
    main()
