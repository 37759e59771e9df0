"""What a kernel boundary costs on its own, and what a grid-wide barrier in one persistent kernel
costs instead: the trade a persistent ("megakernel") decode step would make.

generate's decode step at 1.3B is ~123 kernels a token (five a layer, each waiting for the one
before). Three chains of K steps, P programs a step (P = the GPU's SMs, and twice that), each
step loading B bytes a program of fresh data (a stand-in for a product's first tile):

- kernels, no PDL: K launches in one CUDA graph, each after the one before has ended;
- kernels, PDL: each launches early and waits in gdc_wait for the one before (as generate's);
- one kernel, barriers: P resident programs pass K grid-wide barriers (each program adds 1 to
  a counter, then re-reads it, an acquire load a round, until all P have arrived), loading the
  next step's bytes after the barrier, or before it (ahead, as PDL's kernels do).

Prints us a step (median of replays). The counter is cleared in the graph before each replay.

    python bench/gpu/boundary_cost.py             # from the repo root, on a CUDA machine
    TRITON_INTERPRET=1 python bench/gpu/boundary_cost.py --smoke   # CPU: each kernel runs
"""

import argparse
import statistics

import torch
import triton
import triton.language as tl
from template import load_template

try:  # programmatic dependent launch, as generate imports it
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # an older Triton: the PDL column is not run
    gdc_launch_dependents = gdc_wait = None


@triton.jit
def _step_kernel(src_ptr, out_ptr, i, BYTES: tl.constexpr, PDL: tl.constexpr):
    """One step of the kernel chain: its program's B bytes of src loaded, one value stored (so
    the load is not dropped), after waiting for the kernel before under PDL."""
    if PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    r = tl.arange(0, BYTES // 4)
    v = tl.load(src_ptr + (i * tl.num_programs(0) + pid) * (BYTES // 4) + r)
    if PDL:
        gdc_wait()
    tl.store(out_ptr + pid, tl.sum(v, 0))


@triton.jit
def _barrier_kernel(src_ptr, out_ptr, count_ptr, K, BYTES: tl.constexpr, AHEAD: tl.constexpr):
    """K steps in one kernel: each uses its B bytes, then waits at a grid-wide barrier. AHEAD:
    the next step's bytes are asked for before the barrier (as PDL's kernels load before
    gdc_wait), else after it."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    r = tl.arange(0, BYTES // 4)
    acc = tl.zeros([BYTES // 4], tl.int32)
    cur = tl.load(src_ptr + pid * (BYTES // 4) + r)
    for i in range(K):
        nxt = cur
        if AHEAD:
            nxt = tl.load(src_ptr + (((i + 1) % K) * P + pid) * (BYTES // 4) + r)
        acc += cur
        tl.atomic_add(count_ptr, 1, sem="release")
        seen = tl.atomic_add(count_ptr, 0, sem="acquire")
        while seen < P * (i + 1):
            seen = tl.atomic_add(count_ptr, 0, sem="acquire")
        if AHEAD:
            cur = nxt
        else:
            cur = tl.load(src_ptr + (((i + 1) % K) * P + pid) * (BYTES // 4) + r)
    tl.store(out_ptr + pid, tl.sum(acc, 0))


def replay_us(fn, reps: int) -> float:
    """Median microseconds of one replay of a CUDA graph of fn()."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=120, help="K: steps a chain")
    ap.add_argument("--bytes", type=int, default=8192, help="B: bytes a program loads a step")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="CPU: one program, each kernel runs")
    a = ap.parse_args()
    g = load_template()  # its pdl_usable (it sets sys.argv aside: after parse_args)
    if a.smoke:  # the interpreter runs programs one after another: one program, no waiting
        dev, K, sizes = torch.device("cpu"), 3, (1,)
    else:
        dev, K = torch.device("cuda"), a.steps
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        sizes = (sms, 2 * sms)
    words = a.bytes // 4
    pdl = not a.smoke and g.pdl_usable(dev)
    print(f"| programs | kernels, no PDL | kernels, PDL | one kernel, barriers | barriers, loads ahead | {K} steps, {a.bytes} B a program a step |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for P in sizes:
        src = torch.ones(K * P * words, device=dev, dtype=torch.int32)
        out = torch.zeros(P, device=dev, dtype=torch.int32)
        count = torch.zeros(1, device=dev, dtype=torch.int32)

        def chain(on: bool, P=P, src=src, out=out) -> None:
            extra = {"launch_pdl": True} if on else {}
            for i in range(K):
                _step_kernel[(P,)](src, out, i, BYTES=a.bytes, PDL=on, **extra)

        def barriers(ahead: bool, P=P, src=src, out=out, count=count) -> None:
            count.zero_()
            _barrier_kernel[(P,)](src, out, count, K, BYTES=a.bytes, AHEAD=ahead)

        if a.smoke:
            chain(False)
            for ahead in (False, True):
                barriers(ahead)
                assert int(count) == P * K and int(out[0]) == K * words, (count, out)
            print(f"| {P} | ran | - | ran | ran | |")
            continue
        plain = replay_us(lambda: chain(False), a.reps) / K
        early = replay_us(lambda: chain(True), a.reps) / K if pdl else float("nan")
        barrier = replay_us(lambda: barriers(False), a.reps) / K
        ahead = replay_us(lambda: barriers(True), a.reps) / K
        assert int(count) == P * K and int(out[0]) == K * words, (count, out)
        print(f"| {P} | {plain:.2f} | {early:.2f} | {barrier:.2f} | {ahead:.2f} | |", flush=True)


if __name__ == "__main__":
    main()
