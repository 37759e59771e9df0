#!/usr/bin/env bash
# Issue 25 round 13, nvidia-h200 calls: qkv's product and attention in one launch
# (_qkv_attn_kernel, --fused-attention, the default) beside the two launches
# (--no-fused-attention) of the same template, on one --compile-cache (the other products'
# tiles the same), and the probe.
# Call 1 (default PARTS): fused_check.py (the fused launch against the two, replays), then
# int8 and bf16 at 1.3B both ways, the 1.3B probe, 124M both ways.
# Run with carry [".gpuwork"] (the probe; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
for part in ${PARTS:-check int8 int8two bf16 bf16two probe13 g124 g124two}; do case $part in
check) step fused-check 240 python3 bench/gpu/fused_check.py ;;
int8) step g13-int8-cold 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
int8two) step g13-int8-two 60 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 --no-fused-attention ;;
bf16) step g13-cold 90 $G --size 1.3b $BENCH --compile-cache /tmp/cb ;;
bf16two) step g13-two 60 $G --size 1.3b $BENCH --compile-cache /tmp/cb --no-fused-attention ;;
g124) step g124 50 $G --size 124m $BENCH --compile-cache /tmp/c124 ;;
g124two) step g124-two 50 $G --size 124m $BENCH --compile-cache /tmp/c124 --no-fused-attention ;;
probe13) step probe-1.3b 100 python3 $P 1.3b ;;
probe124) step probe-124m 50 python3 $P 124m ;;
esac; done
summarize "^=== |^prefill|^decode|TTFT|Error|error|gemv_tiles|WRONG|fused check|replays|^\| |^PDL"
