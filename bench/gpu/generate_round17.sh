#!/usr/bin/env bash
# Issue 25 round 17, nvidia-h200 calls; the template before the round (653f247, carried as
# .gpuwork/generate_old.py) runs beside the changed one, each on its own --compile-cache, and
# the probe.
# Call 1 (default PARTS): each LayerNorm's statistics added up by the kernel before it. proj's
# and fc_proj's products (and the embedding) add their output's sum and sum of squares (fp64,
# two atomics a program) into the layer's buffer, which qkv's product clears with attention's
# sums; qkv, fc and the head then load two numbers, not all of x and a reduction. The head
# also reads the best key before it waits, not at each program's end.
# Call 2 (PARTS="newint8 nosums noruns oldint8 newbf16 oldbf16"): call 1's change taken back
# in the blocks (their products there cost more than the ones after saved), kept for the head
# alone: the last block's fc_proj adds up its output's statistics (HEAD_SUMS), the head's
# accumulators are one a 16-byte run of weights (HEAD_RUNS), and it reads the best key early;
# nosums / noruns: the same template with one of the two off.
# Call 3 (PARTS="newint8 oldint8 newbf16 oldbf16 new124 old124 headsweep"): the head's run
# accumulators kept (HEAD_SUMS dropped, the statistics code gone) against 653f247 at all three
# sizes; headsweep: the int8 head's tiles in gemv_cost.py's graph (its accumulators take few
# registers now, so wider tiles may fit).
# Call 4 (PARTS="newint8 oldint8 probe13 train sampleint8 samplebf16 newint8w"): the kept
# template's second same-call pair with the probe beside it, round 8's trained-checkpoint check
# (held-out loss, 300 samples) and a restart on the warm cache.
# Call 5 (PARTS="newint8 tilesint8 tilesweep"): wider int8 tiles (8 x 2048 and 16 x 2048 with 16
# warps, 8 x 4096 with 16) added to the tuner's candidates (tilesint8, a sed copy), and the
# block products swept with them in gemv_cost.py's graph.
# Call 6 (PARTS="boundary"): bench/gpu/boundary_cost.py, what a kernel boundary costs alone
# (120 steps, without and with PDL) against a grid-wide barrier in one persistent kernel.
# Call 8 (PARTS="newint8 lanesqkv lanesall"): the run accumulators (LANE) also in qkv's
# product (lanesqkv), or in every product (lanesall), sed copies; the tuner picks each one's tile.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
T8=16x512x4,16x512x8,32x512x8,8x1024x8,8x2048x8
HT=16x512x4,64x512x16,32x512x8,16x1024x8,32x1024x8,32x1024x16,64x1024x16,16x2048x8,32x2048x16,8x2048x4,128x512x16,64x512x8,32x512x4,16x1024x4,8x1024x4
for part in ${PARTS:-newint8 oldint8 newbf16 oldbf16 new124 old124 probe13}; do case $part in
tilesint8) sed 's/^        (4, 2048, 8), (8, 2048, 8), (2, 2048, 4), (64, 512, 16),$/&\n        (8, 2048, 16), (16, 2048, 16), (8, 4096, 16),/' $W/gen.py > $W/gen_tiles.py
  grep -c "(8, 4096, 16)" $W/gen_tiles.py >> $LOG
  step g17-int8-tiles 110 python3 $W/gen_tiles.py --size 1.3b $BENCH --compile-cache /tmp/cit --quant int8 ;;
tilesweep) step tile-sweep 120 python3 bench/gpu/gemv_cost.py --sweep --quant int8 --only qkv,fc,fc_proj,proj --tiles 8x2048x8,8x2048x16,16x2048x16,8x4096x16,16x512x8,8x1024x4 ;;
lanesqkv) sed 's/bit_length() - 1 if best is not None else 0,/bit_length() - 1 if best is not None or zero is not None else 0,/' $W/gen.py > $W/gen_lq.py
  grep -c "if best is not None or zero is not None else 0" $W/gen_lq.py >> $LOG
  step g17-int8-lanesqkv 100 python3 $W/gen_lq.py --size 1.3b $BENCH --compile-cache /tmp/cilq --quant int8 ;;
lanesall) sed 's/bit_length() - 1 if best is not None else 0,/bit_length() - 1,/' $W/gen.py > $W/gen_la.py
  grep -c "bit_length() - 1, \*\*fixed" $W/gen_la.py >> $LOG
  step g17-int8-lanesall 100 python3 $W/gen_la.py --size 1.3b $BENCH --compile-cache /tmp/cila --quant int8 ;;
boundary) step boundary 150 python3 bench/gpu/boundary_cost.py
  step boundary-32k 150 python3 bench/gpu/boundary_cost.py --bytes 32768 ;;
headsweep) step head-sweep 200 python3 bench/gpu/gemv_cost.py --sweep --head --only head --quant int8 --tiles $HT ;;
nosums) sed 's/^HEAD_SUMS = True/HEAD_SUMS = False/' $W/gen.py > $W/gen_nosums.py
  step g17-int8-nosums 100 python3 $W/gen_nosums.py --size 1.3b $BENCH --compile-cache /tmp/cins --quant int8 ;;
noruns) sed 's/^HEAD_RUNS = True/HEAD_RUNS = False/' $W/gen.py > $W/gen_noruns.py
  step g17-int8-noruns 100 python3 $W/gen_noruns.py --size 1.3b $BENCH --compile-cache /tmp/cinr --quant int8 ;;
*) generate_part g17 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
