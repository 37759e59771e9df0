#!/usr/bin/env bash
# Issue 25 round 9 (prepared 2026-12-02, not yet run), one nvidia-h200 call: what round 8 left
# to measure. gemv_cost: the fixed and the bytes part of one matrix-vector product (the
# question behind int8's 1.93x); int8 with --prefill graph (the prompt pass's int8 products in
# _int8_mm_kernel, built after round 8's device time was spent) against --prefill compile:
# TTFT, cold start and the restart; the probe beside them as before.
# Call 2 ran the products as streaming programs (c946a79, dropped: slower) beside the kernel
# they replaced (old13: .gpuwork/generate_old.py, `git show d3bcfa7:templates/generate.py`),
# then the tile sweep. Next (round 10): PARTS=sweep, the kept kernel's tiles in the graph.
# Run with carry [".gpuwork"] (the probe, copied there from ../shared/baselines; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
for part in ${PARTS:-probe13 cost int13graph int13 g13}; do case $part in
probe13) step probe-1.3b 100 python3 $P 1.3b ;;
cost) step gemv-cost 150 python3 bench/gpu/gemv_cost.py ;;
int13graph) step g13-int8-graph 100 $G --size 1.3b $BENCH --compile-cache /tmp/cg --quant int8 --prefill graph
            step g13-int8-graph-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/cg --quant int8 --prefill graph ;;
int13) step g13-int8 120 $G --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8
       step g13-int8-warm 50 $G --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8 ;;
g13) step g13-cold 90 $G --size 1.3b $BENCH --compile-cache /tmp/cc
     step g13-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/cc ;;
old13) step g13-old-int8 100 python3 .gpuwork/generate_old.py --size 1.3b $BENCH --quant int8
       step g13-old-bf16 80 python3 .gpuwork/generate_old.py --size 1.3b $BENCH ;;
sweep) step gemv-sweep 400 python3 bench/gpu/gemv_cost.py --sweep ;;
esac; done
summarize "^=== |^\| |^fit|^prefill|^decode|TTFT|compiled:|eager:|params|Error|error|checked|TB/s$"
