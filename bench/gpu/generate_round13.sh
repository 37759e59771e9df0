#!/usr/bin/env bash
# Issue 25 round 13, nvidia-h200 calls; generate runs beside the template before the round
# (62fd7ca, carried as .gpuwork/generate_old.py) on the same --compile-cache (the same tiles),
# and the probe.
# Call 1 (template at a3d114b, reverted): qkv's product and attention in one launch, a head's
# attention programs waiting on a count its qkv programs raise (--fused-attention) beside two
# launches (--no-fused-attention); PARTS="check int8 int8two bf16 bf16two probe13 g124 g124two"
# of a3d114b's version of this script. It lost (int8 -1.4 %, bf16 -1.9 %, 124M -5.3 %).
# Call 2 (default PARTS): int8 weights made w + 2**15 + 128 by one byte permute, the bias taken
# off each lane's sum once, not a subtraction a weight.
# Call 3 (PARTS="new13 old13c new124 old124c probe124"): the same at bf16 (1.3B) and 124M,
# which the change leaves with the same instructions.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
OLD="python3 .gpuwork/generate_old.py"
for part in ${PARTS:-newint8 oldint8c newint8w oldint8c2 gemv probe13}; do case $part in
newint8) step g13-int8-cold 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
newint8w) step g13-int8-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
oldint8c) step g13-int8-old-samecache 60 $OLD --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
oldint8c2) step g13-int8-old-samecache2 60 $OLD --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
new13) step g13-cold 90 $G --size 1.3b $BENCH --compile-cache /tmp/cb ;;
old13c) step g13-old-samecache 60 $OLD --size 1.3b $BENCH --compile-cache /tmp/cb ;;
new124) step g124 50 $G --size 124m $BENCH --compile-cache /tmp/c124 ;;
old124c) step g124-old-samecache 40 $OLD --size 124m $BENCH --compile-cache /tmp/c124 ;;
probe124) step probe-124m 50 python3 $P 124m ;;
gemv) step gemv-cost 200 python3 bench/gpu/gemv_cost.py ;;
probe13) step probe-1.3b 100 python3 $P 1.3b ;;
esac; done
summarize "^=== |^prefill|^decode|TTFT|Error|error|gemv_tiles|WRONG|^\| |autotuned|fit,|^PDL"
