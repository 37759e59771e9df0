"""What the int8 decode products and attention compile to on Hopper, counted without a GPU.

Each of generate's int8 products (qkv, proj, fc, fc_proj, the head: the fused work and the run
accumulators the decode step gives them) is compiled for sm_90 by Triton's own ptxas at one
tile, with x read by tl.load (X_ASM 0) and by PTX loads (_x_load: 1 an element a load, 2 eight
a load), and its SASS counted
(cuobjdump, shipped with Triton): instructions, barriers (BAR.SYNC, each a wait for every warp
of the program), shared-memory stores and loads, global loads, registers a thread. Round 18
read the barriers as x's layout changes after gdc_wait (docs/benchmarks-gpu.md). Attention
(_attn_kernel, at its chunk and warps) too: its q, k and v of this step, read after the wait.

    python bench/gpu/sass_count.py                      # from the repo root; any machine
    python bench/gpu/sass_count.py --only qkv,head --template OLD.py
"""

import argparse
import collections
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from template import load_template
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

HOPPER = GPUTarget("cuda", 90, 32)
PRODUCTS = {  # name: (BLOCK_N, BLOCK_K, warps) (round 17's tuner picks, 1.3B), fused work
    "qkv": ((8, 1024, 4), dict(LN=True, ZERO=True, K_LN=2048, LANE=4)),
    "proj": ((8, 1024, 8), dict(RES=True, ATTN_HD=128)),
    "fc": ((32, 512, 8), dict(LN=True, GELU=True, K_LN=2048)),
    "fc_proj": ((8, 2048, 8), dict(RES=True)),
    "head": ((16, 512, 4), dict(LN=True, ARGMAX=True, K_LN=2048, LANE=4)),
}
COUNTED = ("BAR", "STS", "LDS", "LDG", "SHFL", "FFMA", "PRMT")


def compile_sm90(fn, types: dict, const: dict, aligned: tuple, **options) -> bytes:
    """fn's cubin for sm_90: types for its tensors and scalars, const for its constexprs (those
    an older template lacks left out), the aligned arguments 16-byte divisible as torch's
    tensors and 1.3B's sizes are."""
    const = {k: v for k, v in const.items() if k in fn.arg_names}
    src = ASTSource(
        fn=fn, signature={k: types.get(k, "constexpr") for k in fn.arg_names},
        constexprs={(fn.arg_names.index(k),): v for k, v in const.items()},
        attrs={(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in aligned},
    )  # fmt: skip
    return triton.compile(src, target=HOPPER, options=options).asm["cubin"]


def compile_product(g, name: str, x_asm: int) -> bytes:
    """The int8 product's cubin for sm_90 (compile_sm90)."""
    (bn, bk, warps), use = PRODUCTS[name]
    fn = g._gemv_kernel.fn
    attn = use.get("ATTN_HD", 0) > 0
    types = {
        "x_ptr": "*fp64" if attn else "*bf16", "w_ptr": "*u8", "s_ptr": "*fp32",
        "g_ptr": "*fp64" if attn else "*bf16", "r_ptr": "*bf16",
        "y_ptr": "*fp32" if use.get("ARGMAX") else "*bf16", "best_ptr": "*i64", "z_ptr": "*fp64",
        "N": "i32", "K": "i32", "Z": "i32", "eps": "fp32",
    }  # fmt: skip
    const = dict(
        HAS_SCALE=True, LN=False, GAIN=False, GELU=False, RES=False, ARGMAX=False, ZERO=False,
        ATTN_HD=0, PDL=True, COMPILED=True, K_LN=1, LANE=0, X_ASM=x_asm, BLOCK_N=bn,
        BLOCK_K=bk, MAGIC=True,
    )  # fmt: skip
    const.update(use)
    aligned = ("x_ptr", "w_ptr", "s_ptr", "g_ptr", "r_ptr", "y_ptr", "z_ptr", "N", "K")
    return compile_sm90(fn, types, const, aligned, num_warps=warps, num_stages=2)


def compile_attention(g, x_asm: int) -> bytes:
    """_attn_kernel's cubin for sm_90 at 1.3B's heads (128 wide), its chunk and warps."""
    fn = g._attn_kernel
    types = {
        "qkv_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16", "pos_ptr": "*i64",
        "acc_ptr": "*fp64", "T": "i32", "scale": "fp32",
    }  # fmt: skip
    const = dict(C=2048, HD=128, CHUNK=g.ATTN_CHUNK, PDL=True, COMPILED=True, X_ASM=x_asm)
    aligned = ("qkv_ptr", "kc_ptr", "vc_ptr", "acc_ptr", "T")
    return compile_sm90(fn, types, const, aligned, num_warps=g.ATTN_WARPS)


def count(cubin: bytes) -> dict:
    """Instructions by opcode (the part before the first dot) and registers a thread."""
    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
        usage = subprocess.run(
            [tool, "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
    ops: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if m:
            op = m.group(2).split(".")[0]
            ops["STS" if op == "STSM" else op] += 1  # STSM: stores matrices to shared memory
    reg = re.search(r"REG:(\d+)", usage)
    return {"n": sum(ops.values()), "REG": int(reg.group(1)) if reg else 0, **ops}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--template", default="templates/generate.py")
    ap.add_argument(
        "--only", default=",".join((*PRODUCTS, "attention")), help="products, comma-separated"
    )
    a = ap.parse_args()
    names = a.only.split(",")
    unknown = [n for n in names if n not in (*PRODUCTS, "attention")]
    if unknown:
        known = ", ".join((*PRODUCTS, "attention"))
        ap.error(f"--only: no product {', '.join(unknown)} (known: {known})")
    g = load_template(a.template)
    modes = (0, 1, 2) if "X_ASM" in g._gemv_kernel.fn.arg_names else (0,)
    print("| product, tile | X_ASM | instructions | registers | " + " | ".join(COUNTED) + " |")
    print("|---|---|---|---|" + "---|" * len(COUNTED))
    for name in names:
        for x_asm in modes:
            if name == "attention":
                c = count(compile_attention(g, x_asm))
                tile = f"{g.ATTN_CHUNK} slots × {g.ATTN_WARPS} warps"
            else:
                c = count(compile_product(g, name, x_asm))
                tile = " × ".join(map(str, PRODUCTS[name][0]))
            cells = " | ".join(str(c.get(k, 0)) for k in COUNTED)
            print(f"| {name} {tile} | {x_asm} | {c['n']} | {c['REG']} | {cells} |")


if __name__ == "__main__":
    main()
