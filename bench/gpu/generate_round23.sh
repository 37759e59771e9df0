#!/usr/bin/env bash
# Issue 25 round 23, one call on whichever one-GPU kind comes (nvidia-h100-x1 is lent beside
# nvidia-h200 now): every single-GPU target of the template as committed, beside the probe,
# in one call. Round 22 came on an H100 and measured only X_ASM 0 there (2.545x the probe);
# this call measures the default (X_ASM 1) and X_ASM 0 (gl) on one machine, each twice (cold,
# then restarted from its --compile-cache), bf16 and 124M beside their probes, and the 1.3B
# probe again at the end (a machine that drifts shows it); then attention's cost by chunk and
# warps on this machine, and split into its parts (bench/gpu/attn_cost.py, --parts).
# Run with carry [".gpuwork"] (the probe; gitignored): TAG=call1 BUDGET=560 (PARTS picks).
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
sed "s/^X_ASM = [0-9]$/X_ASM = 0/" $W/gen.py > $W/gl.py; grep -c "^X_ASM = 0$" $W/gl.py >> $LOG
GL="python3 $W/gl.py"
for part in ${PARTS:-probe13 newint8 newint8w gl glw newbf16 probe124 new124 probe13 attn attnparts}; do case $part in
gl) step g23-int8-gl 100 $GL --size 1.3b $BENCH --compile-cache /tmp/cgl --quant int8 ;;
glw) step g23-int8-gl-warm 40 $GL --size 1.3b $BENCH --compile-cache /tmp/cgl --quant int8 ;;
attn) step attn-cost 90 python3 bench/gpu/attn_cost.py ;;
attnparts) step attn-parts 90 python3 bench/gpu/attn_cost.py --parts ;;
*) generate_part g23 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
