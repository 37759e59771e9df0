#!/usr/bin/env bash
# Issue 25 round 18, nvidia-h200 calls; 880afef's template (round 17's head-only run
# accumulators, carried as .gpuwork/generate_old.py) runs beside the changed one, each on its
# own --compile-cache, and the probe.
# Call 1 (default PARTS): qkv's run accumulators (0ff08ed) repeated against 880afef (nopin: the
# template with the head's L2 rows off), and the head's first rows kept in L2 from step to
# step (HEAD_L2_SHARE of L2, read evict_last; every other weight evict_first): 0.5 (the
# template), 0.25 and 0.75 (sed copies).
# aside: the template (0.5) with L2 set aside for persisting accesses (bench/gpu/l2_setaside.py,
# cudaLimitPersistingL2CacheSize up to the device's most), in case evict_last keeps lines only there.
# Runs the template at e4e60a5 (HEAD_L2_SHARE is gone since 8b5e9d9). Call 2 was refused;
# its parts (refine_in_step against STEP_TOP = 0) are in generate_round19.sh.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
share() {  # share NAME FRACTION: the template with HEAD_L2_SHARE set to FRACTION, int8 1.3B
  sed "s/^HEAD_L2_SHARE = 0.5 /HEAD_L2_SHARE = $2 /" $W/gen.py > $W/gen_$1.py
  grep -c "^HEAD_L2_SHARE = $2 " $W/gen_$1.py >> $LOG
  step g18-int8-$1 100 python3 $W/gen_$1.py --size 1.3b $BENCH --compile-cache /tmp/ci$1 --quant int8
}
for part in ${PARTS:-newint8 nopin oldint8 pin25 aside pin75 probe13}; do case $part in
nopin) share nopin 0 ;;
pin25) share pin25 0.25 ;;
pin75) share pin75 0.75 ;;
aside) step g18-int8-aside 100 python3 bench/gpu/l2_setaside.py 40 $W/gen.py --size 1.3b $BENCH --compile-cache /tmp/ciaside --quant int8 ;;
*) generate_part g18 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
