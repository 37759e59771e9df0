"""generate's decode attention alone, for a profiler: the template's `decode_attention` at the
1.3B shape (attn_cost.py's: 16 heads of 128, a 2048-slot cache), at one cache position,
launched a few times eagerly (no graph, no PDL), so `ncu -k regex:_attn_kernel --launch-skip 3
--launch-count 1` sees one launch of the template's own chunk and warps. The last launch's
output is checked against torch's attention (attn_cost.py's reference) first, so a profile is
never of a wrong kernel.

    ncu --clock-control none -k regex:_attn_kernel --launch-skip 3 --launch-count 1 \\
        --section WarpStateStats --section SchedulerStats python bench/gpu/attn_profile.py
    TRITON_INTERPRET=1 python bench/gpu/attn_profile.py --smoke   # CPU: attn_cost's tiny shapes
"""

import argparse

import torch
from attn_cost import reference, setup
from template import load_template


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pos", type=int, help="the cache position (the new token's; 662)")
    ap.add_argument("--launches", type=int, default=6)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes (the interpreter)")
    a = ap.parse_args()
    b = setup(argparse.Namespace(smoke=a.smoke, layers=1))
    a.pos = b.positions[1] if a.pos is None else a.pos  # the benchmark's middle (662)
    if not 0 <= a.pos < b.T:
        ap.error(f"--pos {a.pos}: the cache has {b.T} slots, 0 to {b.T - 1}")
    if a.launches < 1:
        ap.error(f"--launches {a.launches}: at least 1")
    g = load_template()
    attn, pos = b.attns[0], a.pos
    b.pos.fill_(pos)
    want = reference(b.qkv, attn.k_cache, attn.v_cache, pos, b.H, b.HD)
    for _ in range(a.launches):
        attn.sums.zero_()  # as qkv's product clears them in a decode step
        g.decode_attention(b.qkv, attn, b.pos)
    got = g.attention_output(attn.sums, b.H, torch.float32)
    err = float((got - want).norm() / want.norm())
    print(f"attention at pos {pos}: chunk {g.ATTN_CHUNK}, {g.ATTN_WARPS} warps; rel err {err:.2e}")
    if err > 2e-2:
        raise SystemExit(f"attention's output is off torch's by {err:.2e}: not profiling it")


if __name__ == "__main__":
    main()
