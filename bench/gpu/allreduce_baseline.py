"""Plain torch.distributed NCCL all-reduce benchmark — the baseline for `envtool doctor --deep`.

Same sizes and formula as doctor --deep: busbw = algbw * 2(n-1)/n.
Usage: torchrun --standalone --nproc-per-node N bench/gpu/allreduce_baseline.py [--out FILE.json]
"""

import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist

SIZES_MIB = (1, 4, 16, 64, 256)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    rows = []
    for mib in SIZES_MIB:
        x = torch.ones(mib * (1 << 20) // 4, device="cuda", dtype=torch.float32)
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            dist.all_reduce(x)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        t = statistics.median(times)
        algbw = mib * (1 << 20) / t / 1e9
        rows.append(
            {
                "size_mib": mib,
                "time_us": round(t * 1e6, 1),
                "algbw_gbps": round(algbw, 1),
                "busbw_gbps": round(algbw * 2 * (n - 1) / n, 1),
            }
        )
    if dist.get_rank() == 0:
        out = {"world_size": n, "rows": rows}
        print(json.dumps(out))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(out, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
