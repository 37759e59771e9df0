"""What the decode products and attention compile to on Hopper, counted without a GPU.

Each of generate's int8 products (bf16 with --weights bf16: qkv, proj, fc, fc_proj, the head,
with the fused work and the run accumulators the decode step gives them) is compiled for sm_90 by Triton's own ptxas at one
tile, with x read by tl.load (X_ASM 0) and by PTX loads (_x_load: 1 an element a load, 2 eight
a load), and its SASS counted (cuobjdump, shipped with Triton): instructions, barriers
(BAR.SYNC, each a wait for every warp of the program) and those inside the K loop (between a
backward branch and its target), stores to local memory (STL: spilled registers),
shared-memory stores and loads, global loads, registers a thread, and the programs an SM holds
at once (registers, warps and shared memory, Hopper's limits). Round 18 read the barriers as
x's layout changes after gdc_wait (docs/benchmarks-gpu.md). Attention
(_attn_kernel, at its chunk and warps) too: its q, k and v of this step, read after the wait;
"attention-select" is its other form (ATTN_SELECT 1: this step's key and value in the tiles).

"LDG before wait": global loads ptxas placed before griddepcontrol.wait (ACQBULK in the SASS):
what never depends on the kernel before (weights, scales); x read by PTX loads must not add
any. "x8 apart" counts X_ASM 2's loads (eight 16-bit elements a load, packed by Triton from the
elements a thread holds) that Triton placed in a layout where a thread's eight do not lie
together, read from the TTGIR: each would load its first element's neighbours in place of
the others (round 19's prep found one in every int8 fc and fc_proj tile, and in attention).

    python bench/gpu/sass_count.py                      # from the repo root; any machine
    python bench/gpu/sass_count.py --only qkv,head --template OLD.py
    python bench/gpu/sass_count.py --all-tiles            # every candidate tile, not the picks
    python bench/gpu/sass_count.py --maxnreg 128          # registers capped (STL: spills)
    python bench/gpu/sass_count.py --weights bf16         # the bf16 products
    python bench/gpu/sass_count.py --only attention,attention-select --x-asm 1
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
COUNTED = (
    "BAR",
    "BAR in loop",
    "x8 apart",
    "LDG before wait",
    "STL",
    "STS",
    "LDS",
    "LDG",
    "SHFL",
    "FFMA",
    "PRMT",
)


def compile_sm90(fn, types: dict, const: dict, aligned: tuple, **options):
    """fn compiled for sm_90 (Triton's CompiledKernel: .asm["cubin"], .metadata): types for
    its tensors and scalars, const for its constexprs (those an older template lacks left
    out), the aligned arguments 16-byte divisible as torch's tensors and 1.3B's sizes are."""
    const = {k: v for k, v in const.items() if k in fn.arg_names}
    src = ASTSource(
        fn=fn, signature={k: types.get(k, "constexpr") for k in fn.arg_names},
        constexprs={(fn.arg_names.index(k),): v for k, v in const.items()},
        attrs={(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in aligned},
    )  # fmt: skip
    return triton.compile(src, target=HOPPER, options=options)


def compile_product(
    g, name: str, x_asm: int, tile: tuple | None = None, maxnreg: int = 0, weights: str = "int8"
):
    """The product compiled for sm_90 (compile_sm90), at tile (BLOCK_N, BLOCK_K, warps) or
    round 17's pick; maxnreg: a cap on its registers a thread (GEMV_MAXNREG), 0 none;
    weights: int8 (scaled, MAGIC, the LayerNorm's gains folded in) or bf16."""
    (bn, bk, warps), use = (tile or PRODUCTS[name][0]), dict(PRODUCTS[name][1])
    if weights == "bf16":  # the LayerNorm keeps its gains; a 16-byte run is 8 weights
        use.update(HAS_SCALE=False, MAGIC=False, GAIN=use.get("LN", False))
        if use.get("LANE"):
            use.update(LANE=3)
    fn = g._gemv_kernel.fn
    attn = use.get("ATTN_HD", 0) > 0
    types = {
        "x_ptr": "*fp64" if attn else "*bf16", "w_ptr": "*u8" if weights == "int8" else "*bf16",
        "s_ptr": "*fp32",
        "g_ptr": "*fp64" if attn else "*bf16", "r_ptr": "*bf16",
        "y_ptr": "*fp32" if use.get("ARGMAX") else "*bf16", "best_ptr": "*i64", "z_ptr": "*fp64",
        "t_ptr": "*fp32", "seed_ptr": "*i64", "pos_ptr": "*i64",
        "N": "i32", "K": "i32", "Z": "i32", "eps": "fp32",
    }  # fmt: skip
    const = dict(
        HAS_SCALE=True, LN=False, GAIN=False, GELU=False, RES=False, ARGMAX=False, ZERO=False,
        ATTN_HD=0, PDL=True, COMPILED=True, K_LN=1, LANE=0, X_ASM=x_asm, BLOCK_N=bn,
        BLOCK_K=bk, MAGIC=True,
    )  # fmt: skip
    const.update(use)
    const["SAMPLE"] = const["ARGMAX"]  # the head, as the decode step runs it: it may draw
    aligned = ("x_ptr", "w_ptr", "s_ptr", "g_ptr", "r_ptr", "y_ptr", "z_ptr", "N", "K")
    cap = {"maxnreg": maxnreg} if maxnreg else {}
    return compile_sm90(fn, types, const, aligned, num_warps=warps, num_stages=2, **cap)


def compile_attention(g, x_asm: int, select: int = 0):
    """_attn_kernel compiled for sm_90 at 1.3B's heads (128 wide), its chunk and warps; select:
    its form with this step's key and value put into the tiles (ATTN_SELECT)."""
    fn = g._attn_kernel
    types = {
        "qkv_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16", "pos_ptr": "*i64",
        "acc_ptr": "*fp64", "T": "i32", "scale": "fp32",
    }  # fmt: skip
    const = dict(C=2048, HD=128, CHUNK=g.ATTN_CHUNK, PDL=True, COMPILED=True, X_ASM=x_asm)
    if select:
        const["SELECT"] = select
    aligned = ("qkv_ptr", "kc_ptr", "vc_ptr", "acc_ptr", "T")
    return compile_sm90(fn, types, const, aligned, num_warps=g.ATTN_WARPS)


def programs_per_sm(regs: int, warps: int, shared: int) -> int:
    """How many programs of this size one Hopper SM runs at once: 64K registers (a warp's
    taken in 256s, so a thread's rounded up to 8), 64 warps, 32 programs, 228 KiB of shared
    memory (1 KiB of it reserved a program)."""
    by_regs = 65536 // (-(-regs // 8) * 8 * 32) // warps
    by_shared = 228 * 1024 // (shared + 1024)
    return min(by_regs, 64 // warps, 32, by_shared)


def packed_apart(ttgir: str) -> int:
    """X_ASM 2's packed loads (packed_element = 8) whose layout does not give each thread runs
    of a multiple of 8 neighbouring elements (a 1D blocked layout's sizePerThread, or a slice's
    parent's along the kept dimension; any other layout counts as apart)."""
    defs = dict(re.findall(r"^(#\w+) = (#ttg\.\w+<.*>)$", ttgir, re.M))

    def per_thread(enc: str) -> list[int]:
        m = re.match(r"#ttg\.blocked<\{sizePerThread = \[([\d, ]+)\]", defs.get(enc, enc))
        return [int(v) for v in m.group(1).split(",")] if m else []

    apart = 0
    for line in ttgir.splitlines():
        if "elementwise_inline_asm" not in line or "packed_element = 8 " not in line:
            continue
        enc = re.search(r"-> tensor<\d+x[^,]+, (.*)> loc", line)
        sliced = (
            re.match(r"#ttg\.slice<\{dim = (\d), parent = (#\w+)\}>", enc.group(1)) if enc else None
        )
        if sliced:
            parent = per_thread(sliced.group(2))
            run = parent[1 - int(sliced.group(1))] if len(parent) == 2 else 0
        else:
            own = per_thread(enc.group(1)) if enc else []
            run = own[0] if len(own) == 1 else 0
        apart += run == 0 or run % 8 != 0
    return apart


def count(kernel) -> dict:
    """Instructions by opcode (the part before the first dot), BAR.SYNCs inside a loop ("BAR
    in loop"), registers a thread and programs an SM (programs_per_sm)."""
    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
        usage = subprocess.run(
            [tool, "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
    ops: collections.Counter = collections.Counter()
    bars, loops = [], []  # barriers' addresses; (target, branch) of each backward branch
    early, waited = 0, False  # global loads before griddepcontrol.wait (SASS: ACQBULK)
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*)", line)
        if not m:
            continue
        at, op = int(m.group(1), 16), m.group(3).split(".")[0]
        ops["STS" if op == "STSM" else op] += 1  # STSM: stores matrices to shared memory
        waited = waited or op == "ACQBULK"
        early += op == "LDG" and not waited
        bars += [at] if op == "BAR" else []
        jump = re.match(r"\s+(0x[0-9a-f]+)", m.group(4)) if op == "BRA" else None
        if jump and int(jump.group(1), 16) < at:
            loops.append((int(jump.group(1), 16), at))
    reg = re.search(r"REG:(\d+)", usage)
    regs = int(reg.group(1)) if reg else 0
    in_loop = sum(any(a <= b <= e for a, e in loops) for b in bars)
    occupancy = programs_per_sm(regs, kernel.metadata.num_warps, kernel.metadata.shared)
    apart = packed_apart(kernel.asm["ttgir"])
    return {
        "n": sum(ops.values()), "REG": regs, "SM": occupancy, "BAR in loop": in_loop,
        "x8 apart": apart, "LDG before wait": early, **ops,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--template", default="templates/generate.py")
    ap.add_argument(
        "--only", default=",".join((*PRODUCTS, "attention")), help="products, comma-separated"
    )
    ap.add_argument("--all-tiles", action="store_true", help="every tile the tuner tries")
    ap.add_argument("--maxnreg", type=int, default=0, help="cap the products' registers")
    ap.add_argument("--weights", choices=("int8", "bf16"), default="int8")
    ap.add_argument("--x-asm", default="0,1,2", help="X_ASM modes, comma-separated")
    a = ap.parse_args()
    if a.maxnreg and not 16 <= a.maxnreg <= 255:
        ap.error(f"--maxnreg {a.maxnreg}: a thread has 16 to 255 registers (0: no cap)")
    names = a.only.split(",")
    known = (*PRODUCTS, "attention", "attention-select")
    unknown = [n for n in names if n not in known]
    if unknown:
        known = ", ".join(known)
        ap.error(f"--only: no product {', '.join(unknown)} (known: {known})")
    g = load_template(a.template)
    if "attention-select" in names and "SELECT" not in g._attn_kernel.arg_names:
        ap.error(f"--only attention-select: {a.template}'s attention has one form")
    modes = [int(m) for m in a.x_asm.split(",") if m in ("0", "1", "2")]
    if len(modes) != len(a.x_asm.split(",")):
        ap.error(f"--x-asm {a.x_asm}: X_ASM modes are 0, 1 and 2")
    if "X_ASM" not in g._gemv_kernel.fn.arg_names:  # an older template: tl.load only
        modes = [0]
    header = "| product, tile | X_ASM | instructions | registers | programs an SM | "
    print(header + " | ".join(COUNTED) + " |")
    print("|---|---|---|---|---|" + "---|" * len(COUNTED))
    for name in names:
        kind = "int8" if a.weights == "int8" else "float"
        tiles = g.GEMV_TILES[kind] if a.all_tiles else [PRODUCTS.get(name, (None,))[0]]
        attention = name in ("attention", "attention-select")
        for tile in [None] if attention else tiles:
            for x_asm in modes:
                if attention:  # -select: ATTN_SELECT's form, the new key and value in the tiles
                    c = count(compile_attention(g, x_asm, int(name == "attention-select")))
                    label = f"{g.ATTN_CHUNK} slots × {g.ATTN_WARPS} warps"
                else:
                    c = count(compile_product(g, name, x_asm, tile, a.maxnreg, a.weights))
                    label = " × ".join(map(str, tile))
                cells = " | ".join(str(c.get(k, 0)) for k in COUNTED)
                print(f"| {name} {label} | {x_asm} | {c['n']} | {c['REG']} | {c['SM']} | {cells} |")


if __name__ == "__main__":
    main()
