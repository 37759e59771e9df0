#!/usr/bin/env bash
# Issue 25 round 15, nvidia-h200 calls; the template before the round (60c758c, carried as
# .gpuwork/generate_old.py) runs beside the changed one, each on its own --compile-cache (the
# kernels differ, so do their best tiles), and the probe.
# Call 1 (default PARTS): each product's program asks the copy engine, before gdc_wait, to bring
# its whole slice of W into L2 (sm_90's bulk prefetch, one instruction from one thread, no
# registers): its loop then reads at L2's latency, and HBM is busy while the kernel before
# ends. End to end (1.3B int8 and bf16, 124M), the 1.3B probe, then the int8 block products'
# tiles timed in the graph for both templates (gemv_cost.py --sweep --tiles).
# Call 2 (PARTS="newint8 newint8w oldint8 sweepnew sweepold"): W's loads are told runs of 8
# bytes (tl.max_contiguous), so an int8 tile's layout along K is x's and x's chunk no longer
# goes through shared memory (2-8 barriers an iteration, compiled here) every iteration; two
# int8 tiles more, 16 x 1024 and 4 x 1024 with 4 warps. int8 cold, restarted, beside the old.
# Call 3 (PARTS="newint8 oldint8 newbf16 oldbf16 new124 old124 probe13 attnparts"): attention
# without its merge: every program weighs its slots against the new key's score and adds its
# sums into fp64 sums (REDs, no reply waited for); qkv's product clears them, proj's reads
# o / l. No ticket, no fence, no last program. Then attn_cost.py --parts on the new kernel.
# Call 4 (PARTS="newint8 oldint8 newbf16 oldbf16 new124 old124 newint8w"): call 3's change with
# proj's prologue dividing in fp32 (the sums first scaled by the weights' power of 2) instead of
# an fp64 division; int8 restarted on its cache last (ready time, same tokens cold and warm).
# Call 5 (PARTS="train sampleint8 samplebf16"): round 8's trained-checkpoint check on the final
# template: a 124M byte-level model trained on the standard library's sources, held-out loss
# and 300 sampled tokens, int8 and bf16.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
T8=16x512x4,32x512x8,16x512x8,8x1024x4,8x1024x8,4x2048x4,8x2048x4,8x2048x8,2x2048x4,4x1024x4,16x1024x4,16x2048x8
for part in ${PARTS:-newint8 oldint8 newbf16 oldbf16 new124 old124 probe13 sweepnew sweepold}; do case $part in
attnparts) step attn-parts 90 python3 bench/gpu/attn_cost.py --parts ;;
*) generate_part g15 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
