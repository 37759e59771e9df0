#!/usr/bin/env bash
# Issue 25 round 17, nvidia-h200 calls; the template before the round (653f247, carried as
# .gpuwork/generate_old.py) runs beside the changed one, each on its own --compile-cache, and
# the probe.
# Call 1 (default PARTS): each LayerNorm's statistics added up by the kernel before it. proj's
# and fc_proj's products (and the embedding) add their output's sum and sum of squares (fp64,
# two atomics a program) into the layer's buffer, which qkv's product clears with attention's
# sums; qkv, fc and the head then load two numbers, not all of x and a reduction. The head
# also reads the best key before it waits, not at each program's end.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
T8=16x512x4,16x512x8,32x512x8,8x1024x8,8x2048x8
for part in ${PARTS:-newint8 oldint8 newbf16 oldbf16 new124 old124 probe13}; do case $part in
*) generate_part g17 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
