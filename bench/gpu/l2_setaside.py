"""Run a script with part of the GPU's L2 set aside for persisting accesses.

    python bench/gpu/l2_setaside.py MIB SCRIPT ARGS...   # on a CUDA machine with cuda-bindings

cudaLimitPersistingL2CacheSize (capped at the device's most) is set in this process, then
SCRIPT runs in it as __main__: the generate template's evict_last loads (HEAD_L2_SHARE) with
and without a set-aside, round 18 (docs/benchmarks-gpu.md).
"""

import runpy
import sys

import torch
from cuda.bindings import runtime as rt


def main() -> None:
    mib, script = float(sys.argv[1]), sys.argv[2]
    torch.empty(1, device="cuda")  # the primary context, which the template's kernels use
    err, most = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrMaxPersistingL2CacheSize, 0)
    size = min(int(mib * 2**20), most)
    (err,) = rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, size)
    err2, now = rt.cudaDeviceGetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize)
    print(f"L2 set aside for persisting accesses: {now / 2**20:.1f} MiB asked "
          f"{size / 2**20:.1f} (most {most / 2**20:.1f}), {err} {err2}", flush=True)  # fmt: skip
    sys.argv = [script, *sys.argv[3:]]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
