#!/usr/bin/env bash
# Issue 25 round 26, prepared in round 25's session (its device time spent). Two calls.
# Call 1 (the default PARTS): attention without the new key in its tile. Round 25's profile
# put attention at 8 cycles between a warp's instructions, ~1 warp a scheduler: its time is
# the instructions on the path after the wait. Those included a select an element to put
# this step's key and value into the K and V tiles (the `new` mask, ~250 of a thread's); now
# the new key's score is `ref` (which every program computed anyway) and its value is added
# after the sum over slots, in the one program whose chunk holds pos. sm_90 SASS
# (bench/gpu/sass_count.py): 1,928 -> 1,608 instructions, the same barriers and
# shared-memory loads. Checked against torch under the interpreter (the suite) and here by
# attn_cost's own check at every (chunk, warps). The template before it is carried as
# .gpuwork/generate_old.py (the old* parts; `git show cef9ec7:templates/generate.py` makes it):
# attention's cost both ways, then 1.3B int8 and bf16 decode both ways beside the probe.
# Call 2 (PARTS="warm ncuprod ncuattn probe124 new124 old124"): Nsight Compute inside the
# decode step's graph (round 25 found it on the image, with counters), then 124M both ways:
#  - warm: newint8's run, only where its --compile-cache has no tile picks (a fresh machine:
#    the profiled window must be decode steps, not the tuner's timings);
#  - ncuprod: ncu on a restart from that --compile-cache (8 new tokens, one generation),
#    graph nodes profiled one by one, NCU_SKIP decode kernels skipped, then NCU_COUNT (the
#    products and attention, told apart by grid size: qkv 768 at its 8 x 1024 tile, proj and
#    fc_proj 256, fc 256 at 32 x 512, the head 3,144, attention 512);
#  - ncuattn: attention at 32 slots x 1 warp (a sed copy) on the same cache (the products'
#    picks do not depend on attention), to see which stall the narrower program trades.
# Profiled kernels run slower under the profiler: its durations are not the step's.
# Run with carry [".gpuwork"]: TAG=call1 BUDGET=560, then TAG=call2 BUDGET=560 with call 2's PARTS.
# Call 1 (H100, 2026-12-05) found int8 3 % slower new than old, bf16 equal, attn_cost equal,
# and the two int8 runs' tuners picking different qkv tiles (step-time picks within ~15 us of
# noise). Call 2 (PARTS="newint8 sameint8 ncuprod probe124 new124 same124 newbf16 samebf16 ncuattn")
# so times both templates on one set of picks: the new template's, copied into the old one's
# cache before it starts (same*: old, new, old, new), which leaves attention the only difference.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
sed "s/^ATTN_CHUNK = [0-9]*  /ATTN_CHUNK = 32  /; s/^ATTN_WARPS = [0-9]  /ATTN_WARPS = 1  /" $W/gen.py > $W/a32.py
grep -c "^ATTN_CHUNK = 32  " $W/a32.py >> $LOG; grep -c "^ATTN_WARPS = 1  " $W/a32.py >> $LOG
NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu) --clock-control none --graph-profiling node -k regex:_gemv_kernel|_attn_kernel --launch-skip ${NCU_SKIP:-600} --launch-count ${NCU_COUNT:-12} --section LaunchStats --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis"
SHORT="--size 1.3b --seq-len 2048 --prompt-len 512 --max-new-tokens 8 --temperature 0 --repeat 1 --quant int8"
same() {  # same NAME NEWCACHE ARGS...: NEWCACHE's tile picks copied into a cache of the old
  # template's, then old, new, old, new on them (the new one's runs are restarts)
  local name=$1 c=$2; shift 2; local x=$c-x old="python3 .gpuwork/generate_old.py"
  step $name-copy 10 bash -c "mkdir -p $x && cp $c/gemv-tiles.json $x/"
  for i in 1 2; do
    step $name-old-$i 60 $old "$@" --compile-cache $x; step $name-new-$i 40 $G "$@" --compile-cache $c
  done
}
for part in ${PARTS:-probe13 attnnew attnold newint8 oldint8 newint8w newbf16 oldbf16}; do case $part in
warm) [[ -f /tmp/ci/gemv-tiles.json ]] || generate_part g26 newint8 ;;
attnnew) step attn-cost-new 90 python3 bench/gpu/attn_cost.py ;;
attnold) step attn-cost-old 90 python3 bench/gpu/attn_cost.py --template .gpuwork/generate_old.py ;;
sameint8) same g26-same-int8 /tmp/ci --size 1.3b $BENCH --quant int8 ;;
samebf16) same g26-same-bf16 /tmp/cb --size 1.3b $BENCH ;;
same124) same g26-same-124m /tmp/c124 --size 124m $BENCH ;;
ncuprod) step g26-ncu-products 150 $NCU python3 $W/gen.py $SHORT --compile-cache /tmp/ci ;;
ncuattn) step g26-ncu-attn32 150 $NCU python3 $W/a32.py $SHORT --compile-cache /tmp/ci ;;
*) generate_part g26 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY|Duration|Grid Size|Warp Cycles Per Issued|Eligible Warps|Registers Per"
