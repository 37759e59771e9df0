"""`envtool doctor --deep` worker: runs in the TARGET environment's python (imports only torch and
the standard library; envtool itself never imports torch).

Two modes:
  python deep_script.py matmul OUT.json [--size N] [--cpu]
      On each visible GPU, bf16 and fp32 matmuls of N x N, compared with a float64 CPU reference
      (relative Frobenius error), plus achieved TFLOP/s.
  python -m torch.distributed.run --standalone --nproc-per-node N deep_script.py allreduce OUT.json
      One process per GPU: NCCL all-reduce of 1 MiB ... 256 MiB tensors, the sum checked exactly,
      timed with CUDA events after warm-up; rank 0 writes algbw and busbw = algbw * 2(n-1)/n (GB/s).
      ENVTOOL_DEEP_CPU=1 runs the same path with gloo on CPU (small sizes) so CI can exercise it.

Results go to OUT.json (not stdout: torchrun and NCCL may print there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

# fp32 with TF32 off: error is accumulation order only (~1e-6); bf16: inputs are rounded to bf16
# before the float64 reference is computed, so only fp32 accumulation + bf16 output rounding remain.
TOLERANCE = {"float32": 1e-4, "bfloat16": 1e-2}
GPU_SIZES_MIB = (1, 4, 16, 64, 256)
CPU_SIZES_MIB = (1, 4)


def _write(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def run_matmul(out: str, size: int, cpu: bool) -> int:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    devices = ["cpu"] if cpu else [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    result: dict = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_count": 0 if cpu else torch.cuda.device_count(),
        "size": size,
        "results": [],
    }
    if not devices:
        result["error"] = "torch sees no CUDA device"
        _write(out, result)
        return 0
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen, dtype=torch.float32)
    b = torch.randn(size, size, generator=gen, dtype=torch.float32)
    refs = {}
    for dtype in (torch.float32, torch.bfloat16):
        ra, rb = a.to(dtype).double(), b.to(dtype).double()
        refs[dtype] = ra @ rb
    for dev in devices:
        for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float32, "float32")):
            row = {"device": dev, "dtype": name}
            try:
                da, db = a.to(dev, dtype), b.to(dev, dtype)
                c = da @ db  # warm-up and the checked result
                ref = refs[dtype]
                err = (c.double().cpu() - ref).norm() / ref.norm()
                row["rel_error"] = float(err)
                row["tolerance"] = TOLERANCE[name]
                row["ok"] = bool(err <= TOLERANCE[name])
                if dev != "cpu":
                    row["name"] = torch.cuda.get_device_name(torch.device(dev))
                    # events record on the current device's stream: make it this GPU
                    with torch.cuda.device(torch.device(dev)):
                        iters = 10
                        start = torch.cuda.Event(enable_timing=True)
                        end = torch.cuda.Event(enable_timing=True)
                        start.record()
                        for _ in range(iters):
                            da @ db
                        end.record()
                        end.synchronize()
                        secs = start.elapsed_time(end) / 1000 / iters
                    row["tflops"] = round(2 * size**3 / secs / 1e12, 1)
            except Exception as exc:  # report a broken GPU as data, keep testing the others
                row["ok"] = False
                row["error"] = f"{type(exc).__name__}: {exc}"
            result["results"].append(row)
    _write(out, result)
    return 0


def _nccl_version(torch) -> str:
    v = torch.cuda.nccl.version()  # (2, 28, 9) in current torch; an int (2809) in old ones
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def run_allreduce(out: str, iters: int, warmup: int) -> int:
    import torch
    import torch.distributed as dist

    cpu = os.environ.get("ENVTOOL_DEEP_CPU") == "1"
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    rows = []
    ok = True
    try:
        for mib in CPU_SIZES_MIB if cpu else GPU_SIZES_MIB:
            numel = mib * (1 << 20) // 4
            t = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
            dist.all_reduce(t)
            expected = float(world * (world + 1) // 2)  # small integers: exact in float32
            exact = bool((t == expected).all().item())
            ok = ok and exact
            t.zero_()  # timing on zeros keeps values bounded
            for _ in range(warmup):
                dist.all_reduce(t)
            if cpu:
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(t)
                secs = (time.perf_counter() - t0) / iters
            else:
                torch.cuda.synchronize(device)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    dist.all_reduce(t)
                end.record()
                end.synchronize()
                secs = start.elapsed_time(end) / 1000 / iters
            nbytes = numel * 4
            algbw = nbytes / secs / 1e9
            rows.append(
                {
                    "size_mib": mib,
                    "exact": exact,
                    "time_us": round(secs * 1e6, 1),
                    "algbw_gbps": round(algbw, 2),
                    "busbw_gbps": round(algbw * 2 * (world - 1) / world, 2),
                }
            )
        if rank == 0:
            _write(
                out,
                {
                    "world_size": world,
                    "backend": dist.get_backend(),
                    "nccl": None if cpu else _nccl_version(torch),
                    "sum_exact": ok,
                    "sizes": rows,
                },
            )
    finally:
        dist.destroy_process_group()
    return 0 if ok else 3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("matmul", "allreduce"))
    p.add_argument("out")
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args(argv)
    try:
        if args.mode == "matmul":
            return run_matmul(args.out, args.size, args.cpu)
        return run_allreduce(args.out, args.iters, args.warmup)
    except Exception:
        # The adapter reads stderr; a full traceback is what a bug report needs here.
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
