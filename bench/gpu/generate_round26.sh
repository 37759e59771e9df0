#!/usr/bin/env bash
# Issue 25 round 26, prepared in round 25's session (its device time spent): Nsight Compute
# inside the decode step's graph. Round 25 found ncu on the device image, with counters, and
# attention profiled alone a latency chain (8 cycles an instruction, 0.14 eligible warps a
# scheduler). What each int8 product pays beyond its bytes (~1.7-2.3 us, ~0.7 of it the PDL
# boundary: rounds 16-17, 22-24) has never been profiled where it runs, after the kernel
# before it under PDL. Parts:
#  - warm: the template at 1.3B --quant int8 fills its --compile-cache (the tile picks, Triton's
#    kernels), so the profiled runs restart without tuning;
#  - ncuprod: ncu on a restart (8 new tokens, one generation), graph nodes profiled one by one
#    (--graph-profiling node), NCU_SKIP decode kernels skipped, then NCU_COUNT of them (the
#    products and attention, told apart by grid size in the report: qkv 768 programs at its
#    8 x 1024 tile, proj and fc_proj 256, fc 256 at 32 x 512, the head 3,144, attention 512);
#  - ncuattn: the same for attention at 32 slots x 1 warp (a sed copy: round 19's table put it
#    level with 64 x 2 at pos 512 and behind after), to see which stall the narrower one trades;
#    it restarts on warm's cache (the products' picks do not depend on attention).
# The profiled kernels run slower under the profiler: its durations are not the step's.
# Run with carry [".gpuwork"]: TAG=call1 BUDGET=400 (PARTS picks; NCU_SKIP, NCU_COUNT).
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
sed "s/^ATTN_CHUNK = [0-9]*  /ATTN_CHUNK = 32  /; s/^ATTN_WARPS = [0-9]  /ATTN_WARPS = 1  /" $W/gen.py > $W/a32.py
grep -c "^ATTN_CHUNK = 32  " $W/a32.py >> $LOG; grep -c "^ATTN_WARPS = 1  " $W/a32.py >> $LOG
NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu) --clock-control none --graph-profiling node -k regex:_gemv_kernel|_attn_kernel --launch-skip ${NCU_SKIP:-600} --launch-count ${NCU_COUNT:-12} --section LaunchStats --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis"
SHORT="--size 1.3b --seq-len 2048 --prompt-len 512 --max-new-tokens 8 --temperature 0 --repeat 1 --quant int8"
for part in ${PARTS:-warm ncuprod ncuattn}; do case $part in
warm) step g26-int8-warm 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
ncuprod) step g26-ncu-products 150 $NCU python3 $W/gen.py $SHORT --compile-cache /tmp/ci ;;
ncuattn) step g26-ncu-attn32 150 $NCU python3 $W/a32.py $SHORT --compile-cache /tmp/ci ;;  # warm's picks
*) generate_part g26 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY|Duration|Grid Size|Warp Cycles Per Issued|Eligible Warps|Registers Per"
