#!/usr/bin/env bash
# Issue 25 round 14, nvidia-h200 calls; the template before the round (ecbbb4c, carried as
# .gpuwork/generate_old.py) runs beside the changed one, each on its own --compile-cache (the
# kernels differ, so do their best tiles), and the probe.
# Call 1 (default PARTS): one fp32 accumulator per 16-byte run of weights (a thread's load),
# summed by a chain of multiply-adds, instead of one per weight: int8 16 x 512 tiles go from
# 128 registers a thread to 56 (compiled for sm_90 here), so more programs fit an SM. End to
# end (1.3B int8 and bf16), then each int8 block product's tiles timed in the graph for both
# kernels (gemv_cost.py --sweep --tiles). It lost (int8 -7.7 %, bf16 -4.5 %); reverted in b2aca70.
# Call 2 (PARTS="newint8 oldint8 newbf16 oldbf16 new124 old124 probe13 sweepnew sweepold"):
# each product asks for what does not depend on the kernel before it (row scales, the
# LayerNorm's first gains) before gdc_wait, and for everything that does (x's first chunk, all
# of x for the LayerNorm's sums, the residual) at once right after it. Kept (62a6d3d).
# Call 3 (PARTS="newint8 oldint8 probe13 new124 probe124 train sampleint8 samplebf16"):
# Int8Linear keeps w + 128 as uint8, so the decode kernel's byte permute needs no xor;
# generate_old.py is 62a6d3d's template. Then round 8's trained-checkpoint check: a 124M byte-level model trained
# on the standard library's sources, held-out loss and 300 sampled tokens, int8 and bf16.
# Call 4 (PARTS="newint8 oldint8"): int8's prompt products (_int8_mm_kernel) take w + 128 back
# to w by flipping the top bit, not by a subtraction after an int -> float conversion (call 3's
# TTFT 7.36 ms against 6.46); generate_old.py is still 62a6d3d's template.
# Call 5 (PARTS="newint8 newint8w"): the final template, int8 cold and restarted on its cache.
# Not run in round 14: 267 s of device time were left, too little to start a machine.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
T8=16x512x4,32x512x4,64x256x4,32x256x4,16x1024x8,32x512x8,8x1024x4,8x2048x4,4x2048x4,16x512x8,8x1024x8,64x512x16
for part in ${PARTS:-newint8 oldint8 probe13 newbf16 oldbf16 sweepnew sweepold}; do
  generate_part g14 $part || echo "unknown part: $part"
done
summarize "$GENERATE_SUMMARY"
