"""generate's decode attention alone, for a profiler: the template's `decode_attention` at the
1.3B shape (16 heads of 128, a 2048-slot cache), at one cache position, launched a few times
eagerly (no graph, no PDL), so `ncu -k regex:_attn_kernel --launch-skip 3 --launch-count 1`
sees one launch of the template's own chunk and warps. The last launch's output is checked
against torch's attention (relative error, printed), so a profile is never of a wrong kernel.

    ncu --clock-control none -k regex:_attn_kernel --launch-skip 3 --launch-count 1 \\
        --section WarpStateStats --section SchedulerStats python bench/gpu/attn_profile.py
    TRITON_INTERPRET=1 python bench/gpu/attn_profile.py --smoke   # CPU: tiny shapes
"""

import argparse
import math
from types import SimpleNamespace

import torch
from template import load_template


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pos", type=int, default=662, help="the cache position (the new token's)")
    ap.add_argument("--launches", type=int, default=6)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes (the interpreter)")
    a = ap.parse_args()
    g = load_template()
    dev = torch.device("cpu" if a.smoke else "cuda")
    H, HD, T = (2, 32, 200) if a.smoke else (16, 128, 2048)
    pos = min(a.pos, T - 1)
    dt = torch.float32 if a.smoke else torch.bfloat16
    torch.manual_seed(0)
    attn = SimpleNamespace(
        n_head=H, head_dim=HD, sums=g.attention_sums(H, HD, dev),
        k_cache=torch.randn(1, H, T, HD, device=dev, dtype=dt),
        v_cache=torch.randn(1, H, T, HD, device=dev, dtype=dt),
    )  # fmt: skip
    qkv = torch.randn(3 * H * HD, device=dev, dtype=dt)
    p = torch.tensor([pos], device=dev)
    for _ in range(max(1, a.launches)):
        attn.sums.zero_()  # as qkv's product clears them in a decode step
        g.decode_attention(qkv, attn, p)
    got = g.attention_output(attn.sums, H, torch.float32)
    q, k, v = qkv.float().view(3, H, HD)
    kc, vc = attn.k_cache[0].float(), attn.v_cache[0].float()  # slot pos now holds k, v
    assert torch.equal(kc[:, pos], k) and torch.equal(vc[:, pos], v)
    s = (kc[:, : pos + 1] @ q[:, :, None])[..., 0] / math.sqrt(HD)
    want = (s.softmax(-1)[:, None, :] @ vc[:, : pos + 1])[:, 0].reshape(-1)
    err = float((got - want).norm() / want.norm())
    print(f"attention at pos {pos}: chunk {g.ATTN_CHUNK}, {g.ATTN_WARPS} warps; rel err {err:.2e}")
    if err > 2e-2:
        raise SystemExit(f"attention's output is off torch's by {err:.2e}: not profiling it")


if __name__ == "__main__":
    main()
