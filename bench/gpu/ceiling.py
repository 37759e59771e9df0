"""Measure the card's two ceilings (METHOD.md): bf16 dense matmul TFLOP/s and device copy GB/s.

Random data (never zeros), warm-up, CUDA-event timing, median of many repeats.
Usage: python bench/gpu/ceiling.py [--out FILE.json]
"""

import argparse
import json
import statistics

import torch


def time_cuda(fn, warmup: int = 5, reps: int = 30) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _rotating_matmul(sets):
    i = [0]

    def mm():
        a, b = sets[i[0] % len(sets)]
        i[0] += 1
        return a @ b

    return mm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    results = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    for n in (4096, 8192):
        # rotate 3 input sets so the L2 does not serve repeats
        sets = [
            (
                torch.randn(n, n, device=dev, dtype=torch.bfloat16),
                torch.randn(n, n, device=dev, dtype=torch.bfloat16),
            )
            for _ in range(3)
        ]
        t = time_cuda(_rotating_matmul(sets))
        results[f"bf16_matmul_{n}_tflops"] = round(2 * n**3 / t / 1e12, 1)
    x = torch.randn(1 << 30, device=dev, dtype=torch.float32)  # 4 GiB
    y = torch.empty_like(x)
    t = time_cuda(lambda: y.copy_(x), warmup=3, reps=20)
    results["d2d_copy_gbps"] = round(2 * x.numel() * 4 / t / 1e9, 1)  # read + write
    print(json.dumps(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
