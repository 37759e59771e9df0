"""What one of generate's matrix-vector products costs on a GPU, fixed part and bytes part.

For each product a 1.3B decode step makes (qkv, proj, fc, fc_proj, the head), bf16 and int8, it
multiplies LAYERS distinct matrices one after another (more bytes than L2 holds, as the 24
layers do) inside one CUDA graph, with and without programmatic dependent launch, and prints the
microseconds per product. A least-squares line t = t0 + bytes / BW per weight type (over the
four block products) then splits a product into a fixed cost (launch, ramp, the prologue, the
last wave) and its bytes. The products are templates/generate.py's own `gemv` (LayerNorm /
GELU / residual / argmax fused as in the decode step; since round 15 qkv also clears
attention's sums and proj reads its x from them). Round 9 measured t0 = 1.3 us (bf16) and
1.8 us (int8) under PDL, int8 at 2.66 TB/s against bf16's 3.93 (docs/benchmarks-gpu.md).

    python bench/gpu/gemv_cost.py              # from the repo root, on a CUDA machine
    python bench/gpu/gemv_cost.py --sweep      # + each block product with every tile of
                                               #   sweep_configs(), checked, then timed the same way
    python bench/gpu/gemv_cost.py --sweep --tiles 16x512x4,32x512x4 --template OLD.py
                                               # those tiles (MAGIC for int8) of another template
    python bench/gpu/gemv_cost.py --sweep --tiles all --template X.py
                                               # every tile the template's tuner tries, checked
    python bench/gpu/gemv_cost.py --no-ln ...      # the same products without their LayerNorm
    python bench/gpu/gemv_cost.py --sweep --head --only head --quant int8 --tiles ...
                                               # the head's tiles too (only: those products)
    TRITON_INTERPRET=1 python bench/gpu/gemv_cost.py --smoke   # CPU: runs each product once
"""

import argparse

import torch
from template import load_template

SHAPES = {  # name: (N, K, fused work), the 1.3B model's (d 2048), as the decode step makes them:
    # qkv also clears attention's sums (zero), proj reads them (attn: 16 heads' fp64 sums)
    "qkv": (3 * 2048, 2048, "ln+zero"),
    "proj": (2048, 2048, "res+attn"),
    "fc": (4 * 2048, 2048, "ln+gelu"),
    "fc_proj": (2048, 4 * 2048, "res"),
    "head": (50304, 2048, "ln+argmax"),
}


class Forced:
    """Stands in for the template's autotuned _gemv_kernel: launches its kernel with one tile."""

    def __init__(self, kernel, bn: int, bk: int, warps: int, stages: int, magic: bool) -> None:
        self.kernel, self.launches = kernel, 0
        self.meta = {"BLOCK_N": bn, "BLOCK_K": bk, "MAGIC": magic}
        self.launch = (
            {"num_warps": warps, "num_stages": stages} if torch.cuda.is_available() else {}
        )

    @property
    def fn(self):  # gemv on CPU launches _gemv_kernel.fn (the interpreter, --smoke)
        return self

    def __getitem__(self, grid):
        def run(*args, **kw):
            meta = {**kw, **self.meta}
            self.kernel.fn[grid(meta)](*args, **meta, **self.launch)  # gemv's grid, this tile
            self.launches += 1

        return run


def parse_tiles(text: str) -> list[tuple[int, int, int]] | str:
    """--tiles "NxKxWARPS,...": each a power of 2 (Triton's block shapes), else a usage error;
    "all": the template's own candidates (GEMV_TILES), each weight type its own."""
    if text == "all":
        return text
    try:
        tiles = [tuple(int(v) for v in t.split("x")) for t in text.split(",")]
    except ValueError:
        tiles = []
    if not tiles or any(len(t) != 3 or min(t) < 1 or any(v & (v - 1) for v in t) for t in tiles):
        raise argparse.ArgumentTypeError(f"{text!r}: want NxKxWARPS,... in powers of 2")
    return tiles  # type: ignore[return-value]


def sweep_configs(int8: bool, tiles=()) -> list[tuple[int, int, int, int, bool]]:
    """(BLOCK_N, BLOCK_K, warps, stages, MAGIC): every tile of 4,096-65,536 weights and 16-64
    accumulator registers a thread (stages: Triton pipelines loads only into tl.dot, so one
    value); int8 with and without MAGIC. (Round 11 also swept tensor-core tiles, in 3c05187's
    template: none beat these.) tiles: (N, K, WARPS) instead, int8 with MAGIC only."""
    if tiles:
        return [(n, k, warps, 2, int8) for n, k, warps in tiles]
    out = []
    for bn in (2, 4, 8, 16, 32, 64):
        for bk in (256, 512, 1024, 2048):
            for warps in (4, 8, 16):
                if 16 <= bn * bk / (32 * warps) <= 64 and 4096 <= bn * bk <= 65536:
                    out += [(bn, bk, warps, 2, m) for m in ((True, False) if int8 else (False,))]
    return out


def reference(
    g, x, m, ln=None, gelu=False, res=None, out_dtype=None, best=None, zero=None, heads=0,
    runs=False,
) -> torch.Tensor:  # fmt: skip
    """gemv's product by torch, in fp32: the check a tile must pass before it is timed (runs,
    how the kernel accumulates, does not change it)."""
    if heads:  # attention's sums: the output they stand for, rounded to the model's dtype
        x = g.attention_output(x, heads, out_dtype)
    xf = (ln(x) if ln is not None else x).float()
    scale = getattr(m, "scale", None)  # Int8Linear: its int8 values, scaled
    w = m.weight.float() if scale is None else m.values(torch.float32) * scale.float()[:, None]
    y = w @ xf
    if gelu:
        y = torch.nn.functional.gelu(y)
    if res is not None:
        y = y + res.float()
    return y


def fit(rows: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares t = t0 + bytes * s over (bytes, seconds) -> (t0 seconds, bytes/s)."""
    n = len(rows)
    mx = sum(b for b, _ in rows) / n
    my = sum(t for _, t in rows) / n
    s = sum((b - mx) * (t - my) for b, t in rows) / sum((b - mx) ** 2 for b, _ in rows)
    return my - s * mx, 1 / s


def sweep(
    g, step, first, want, name: str, shape: tuple[int, int], n_mats: int, nbytes: int, a
) -> None:
    """The autotuner's pick (just made by step) and the five fastest tiles of sweep_configs(),
    each timed as step is (with PDL where it runs) after its product is checked against
    torch's (want: relative to its largest value, 2e-2 for bf16 outputs; --smoke's fp32 ones
    1e-4)."""
    tuned = g._gemv_kernel
    int8 = "int8" in name
    cache = getattr(tuned, "cache", {})  # keys: N, K, then the tensors' dtypes
    picked = [str(v) for k, v in cache.items() if k[:2] == shape and ("int8" in str(k)) == int8]
    tol = (1e-4 if a.smoke else 2e-2) * float(want.abs().max())
    results, launches = [], 0
    try:
        smoke = [(2, 16, 1, 1, int8), (4, 32, 1, 1, False)]
        tiles = g.GEMV_TILES["int8" if int8 else "float"] if a.tiles == "all" else a.tiles
        for cfg in smoke if a.smoke else sweep_configs(int8, tiles):
            g._gemv_kernel = forced = Forced(tuned, *cfg)
            try:
                got = first()
                t = float("nan") if a.smoke else g.graph_seconds(step, a.reps) / n_mats
            except Exception as e:  # a tile the GPU has no room for (shared memory, registers)
                print(f"  {name} {cfg}: {type(e).__name__} {str(e)[-300:]}", flush=True)
                continue
            launches += forced.launches
            if not torch.allclose(got.float(), want, rtol=0, atol=tol):
                print(f"  {name} {cfg}: WRONG (max diff {(got.float() - want).abs().max():.3g})")
                continue
            results.append((t, cfg))
    finally:
        g._gemv_kernel = tuned
    results.sort()
    print(
        f"  {name}: autotuned {picked or '-'}; {len(results)} tiles checked ({launches} launches)",
        flush=True,
    )
    for t, cfg in results[:5]:
        print(f"  {name}: {cfg} {t * 1e6:.2f} us {nbytes / t / 1e12:.2f} TB/s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=24, help="distinct matrices per shape")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, no timing")
    ap.add_argument("--sweep", action="store_true", help="time every tile of sweep_configs")
    ap.add_argument("--quant", choices=("both", "bf16", "int8"), default="both")
    ap.add_argument("--tiles", type=parse_tiles, default=(), help="--sweep these NxKxWARPS only")
    ap.add_argument("--template", default="templates/generate.py", help="whose gemv to time")
    ap.add_argument("--no-ln", action="store_true", help="the products without their LayerNorm")
    ap.add_argument("--head", action="store_true", help="--sweep the head's tiles too")
    ap.add_argument("--only", default="", help="these products (comma-separated names) only")
    a = ap.parse_args()
    unknown = sorted(set(a.only.split(",")) - set(SHAPES)) if a.only else []
    if unknown:  # a misspelt name would time nothing and say so nowhere
        ap.error(f"--only {a.only!r}: no product {', '.join(unknown)} (one of {', '.join(SHAPES)})")
    g = load_template(a.template)
    dev = torch.device("cpu" if a.smoke else "cuda")
    dt = torch.float32 if a.smoke else torch.bfloat16
    shapes = {k: (n // 64, kk // 64, e) for k, (n, kk, e) in SHAPES.items()} if a.smoke else SHAPES
    if a.only:
        shapes = {k: v for k, v in shapes.items() if k in a.only.split(",")}
    if a.no_ln:  # what a LayerNorm prologue costs: the same products, x taken as it is
        shapes = {k: (n, kk, e.replace("ln+", "")) for k, (n, kk, e) in shapes.items()}
    layers = 2 if a.smoke else a.layers
    pdl_modes = (False, True) if not a.smoke and g.pdl_usable(dev) else (False,)
    torch.manual_seed(0)
    print("| product | weights | N x K | MB each | us, no PDL | us, PDL | TB/s, no PDL |")
    print("|---|---|---|---|---|---|---|")
    rows: dict[tuple, list[tuple[float, float]]] = {}  # (weights, PDL) -> (bytes, s)
    quants = ("int8", "bf16") if a.sweep else ("bf16", "int8")  # --sweep: int8 first
    for quant in [q for q in quants if a.quant in ("both", q)]:
        for name, (N, K, work) in shapes.items():
            n_mats = max(2, layers // 3) if name == "head" else layers  # 206 MB each in bf16
            mats = []
            for _ in range(n_mats):
                lin = torch.nn.Linear(K, N, bias=False, device=dev, dtype=dt)
                torch.nn.init.normal_(lin.weight, std=0.02)
                mats.append(g.Int8Linear(lin.weight) if quant == "int8" else lin)
            # int8 folds the LayerNorm's gains into W (the template's quantize_int8)
            gains = quant != "int8"
            ln = torch.nn.LayerNorm(K, bias=False, elementwise_affine=gains, device=dev, dtype=dt)
            x = torch.randn(K, device=dev, dtype=dt)
            heads = max(1, K // 128) if "attn" in work else 0
            if heads:  # sums of values weighted, then of the weights (positive)
                x = torch.cat([torch.randn(K, device=dev), torch.rand(heads, device=dev) + 0.5])
                x = x.double()
            res = torch.randn(N, device=dev, dtype=dt) if "res" in work else None
            # never reset between products (the decode step's end does): with the same x every
            # time, every program then skips its atomic, where a step does a handful
            best = torch.full((1,), g.LOWEST_KEY, device=dev, dtype=torch.int64)
            kw = {
                "ln": ln if "ln" in work else None,
                "gelu": "gelu" in work,
                "res": res,
                "out_dtype": torch.float32 if "argmax" in work else None,
                "best": best if "argmax" in work else None,
                "zero": torch.empty(K + max(1, K // 128), device=dev, dtype=torch.float64)
                if "zero" in work
                else None,
                "heads": heads,
                "runs": "zero" in work or "argmax" in work,  # qkv and the head, as the step
            }
            if heads:
                kw["out_dtype"] = dt

            def step(mats=mats, kw=kw, x=x) -> None:
                for m in mats:
                    g.gemv(x, m, **kw)

            def first(mats=mats, kw=kw, x=x) -> torch.Tensor:
                return g.gemv(x, mats[0], **kw)

            want = reference(g, x, mats[0], **kw)

            nbytes = mats[0].weight.numel() * mats[0].weight.element_size()
            us = {}
            for pdl in pdl_modes:
                g.PDL["on"] = pdl
                if a.smoke:
                    step()
                    us[pdl] = float("nan")
                    continue
                t = g.graph_seconds(step, a.reps) / n_mats
                us[pdl] = t * 1e6
                if name != "head":  # the fit: the block products (the head also argmaxes)
                    rows.setdefault((quant, pdl), []).append((nbytes, t))
            if a.sweep and (name != "head" or a.head):
                sweep(g, step, first, want, f"{name} {quant}", (N, K), n_mats, nbytes, a)
            pdl_us = f"{us[True]:.2f}" if True in us else "-"
            rate = nbytes / us[False] / 1e6  # nan under --smoke
            print(
                f"| {name} ({work}) | {quant} | {N} x {K} | {nbytes / 1e6:.1f} | "
                f"{us[False]:.2f} | {pdl_us} | {rate:.2f} |",
                flush=True,
            )
            del mats
    if a.smoke:
        return
    for (quant, pdl), pts in rows.items():  # one line per weight type: is t0 the same?
        t0, bw = fit(pts)
        how = "PDL" if pdl else "no PDL"
        print(f"fit, {quant}, {how}: t = {t0 * 1e6:.2f} us + bytes / {bw / 1e12:.2f} TB/s")


if __name__ == "__main__":
    main()
