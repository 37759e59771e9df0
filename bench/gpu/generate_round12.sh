#!/usr/bin/env bash
# Issue 25 round 12, nvidia-h200 calls; generate runs beside the template before the round
# (af651cc, carried as .gpuwork/generate_old.py) and the probe, all in one call.
# Call 1 (template at ef2fb4b): the decode products loaded their weights as 32-bit words (int8
# quads, bf16 pairs), one fp32 accumulator a word: 2-4x fewer registers a thread, so 2-4x the
# weight bytes in flight an SM (compiled for sm_90 here). It lost (int8 -16 %, bf16 -3.5 %).
# Call 2 (PARTS="probe13 newint8 oldint8 new13 old13 probe124 new124 old124"): the LayerNorm
# before qkv, fc and the head applied after the product, rstd (W (g x) - mean W g), its
# statistics summed from the x the product's loop reads: no pass over x before the weights.
# Call 3 (PARTS="attnparts gemv"): af651cc's attention timed with its merge and its cache
# loads taken out (attn_cost.py --parts), and each product's cost (gemv_cost.py): a token's
# time split into products, attention and the rest.
# Call 4 (PARTS="attnparts newint8 oldint8c new13 old13c"): the merge's counter put back by a
# plain store, not atomic_xchg; the old template runs on the new one's --compile-cache (the
# same tiles), so the greedy tokens must be the same.
# Call 5 (PARTS="new124 old124c probe124 probe13"): the same at 124M, and both probes.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
OLD="python3 .gpuwork/generate_old.py"
for part in ${PARTS:-probe13 newint8 oldint8 new13 old13}; do case $part in
sweep) step gemv-sweep ${SWEEP_S:-300} python3 bench/gpu/gemv_cost.py --sweep ;;
probe13) step probe-1.3b 100 python3 $P 1.3b ;;
new13) step g13-cold 90 $G --size 1.3b $BENCH --compile-cache /tmp/cb
       step g13-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/cb ;;
old13) step g13-old 80 $OLD --size 1.3b $BENCH ;;
old13c) step g13-old-samecache 60 $OLD --size 1.3b $BENCH --compile-cache /tmp/cb ;;
newint8) step g13-int8-cold 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8
         step g13-int8-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
oldint8) step g13-int8-old 100 $OLD --size 1.3b $BENCH --quant int8 ;;
oldint8c) step g13-int8-old-samecache 60 $OLD --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
attnparts) step attn-parts 150 python3 bench/gpu/attn_cost.py --parts ;;
gemv) step gemv-cost 200 python3 bench/gpu/gemv_cost.py ;;
probe124) step probe-124m 50 python3 $P 124m ;;
new124) step g124 50 $G --size 124m $BENCH --compile-cache /tmp/c124 ;;
old124) step g124-old 50 $OLD --size 124m $BENCH ;;
old124c) step g124-old-samecache 40 $OLD --size 124m $BENCH --compile-cache /tmp/c124 ;;
esac; done
summarize "^=== |^prefill|^decode|TTFT|Error|error|gemv_tiles|WRONG|^\| |autotuned|fit,|^PDL"
