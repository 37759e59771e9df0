#!/usr/bin/env bash
# Issue 25 round 16, nvidia-h200 calls; the template before the round (fc5b876, carried as
# .gpuwork/generate_old.py) runs beside the changed one, each on its own --compile-cache, and
# the probe.
# Call 1 (default PARTS): a block's MLP in one kernel. Each program of _mlp_kernel computes
# BLOCK_N of fc's hidden units (LayerNorm, GELU, as fc's product did) and then their share of
# fc_proj (BLOCK_N columns of its weight, stored transposed), added into the block's fp64 sums,
# which proj's product set to the residual: one kernel boundary a layer less. The RESULT
# line's tiles.us has every candidate's time in the graph (the MLP against fc + fc_proj).
# Call 2 (PARTS="newint8 gap lncost nolncost"): where the rest of a token goes. The template
# (the tuner now reports each candidate's time) at 1.3B int8; graph_gap.py: K decode steps a
# CUDA graph, K = 1, 2, 4, 8 (what a graph boundary costs a token); gemv_cost.py's int8 products
# with and without their LayerNorm prologue, the same tiles (what the prologue costs).
# Call 3 (PARTS="newint8 ncint8 oldint8 newbf16 oldbf16 new124 old124 probe13 lncost"): the
# LayerNorm applied at a product's end: rstd * (sum W g (x - c) - (mean - c) * sum W g), x's
# sums from the chunks the loop loads, c the first chunk's mean; ncint8 is the same template
# with c = 0 (LN_CENTER off: no reduction before the loop, x's offset not taken off first).
# Call 4 (PARTS="newint8 oldint8 train sampleint8 samplebf16"): --quant int8 folds each
# LayerNorm's gains into the matrix after it (W diag(g) quantized), so the int8 products'
# loops load no gains; then round 8's trained-checkpoint check (held-out loss, 300 samples).
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
T8=16x512x4,16x512x8,32x512x8,8x1024x8,8x2048x8
for part in ${PARTS:-newint8 oldint8 newbf16 oldbf16 probe13}; do case $part in
gap) step graph-gap 120 python3 bench/gpu/graph_gap.py --quant int8 ;;
ncint8) # d45abb7's template only (LN_CENTER is gone since 8f0cd80)
  sed 's/^LN_CENTER = True/LN_CENTER = False/' $W/gen.py > $W/gen_nc.py
  step g16-int8-nocentre 100 python3 $W/gen_nc.py --size 1.3b $BENCH --compile-cache /tmp/cinc --quant int8 ;;
lncost) step ln-cost 120 python3 bench/gpu/gemv_cost.py --sweep --quant int8 --tiles $T8 ;;
nolncost) step no-ln-cost 120 python3 bench/gpu/gemv_cost.py --sweep --quant int8 --tiles $T8 --no-ln ;;
*) generate_part g16 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
