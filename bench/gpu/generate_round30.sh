#!/usr/bin/env bash
# Issue 25 round 30: attention's select form as cef9ec7 wrote it, line for line. Round 29's
# SELECT=1 computed the new key's score first and ran 2.7 % slower a step than the form without
# selects (1,337 vs 1,374 tokens/s, qkv 8 x 1024 x 4), where cef9ec7's template had run 1.7 %
# faster (round 28: 1,396.7 vs 1,372.9); its SASS was 1,920 instructions and 185 registers
# against cef9ec7's 1,928 and 182. With cef9ec7's order both match. Here: a cold start (does
# the tuner now take the select form?), then restarts on its picks with qkv at 8 x 1024 x 4
# and at 4 x 2048 x 4, each form (set_pick.py --form), and cef9ec7's template on the same
# picks, twice, alternating; a second cold start, bf16 and 124M cold (the tuner picks the form
# there too). cef9ec7's template is carried as .gpuwork/generate_old.py (`git show
# cef9ec7:templates/generate.py`). Run with carry [".gpuwork"]: TAG=call1 BUDGET=520.
set -u
source "$(dirname "$0")/steps.sh"
need .gpuwork/decode_probe.py .gpuwork/generate_old.py
machine_line; generate_setup
OLD="python3 .gpuwork/generate_old.py"
for part in ${PARTS:-probe13 newint8 picks pairs cold2 newbf16 probe124 new124}; do case $part in
cold2) step g30-int8-b 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci2 --quant int8 ;;
picks) for t in 8x1024x4x0 4x2048x4x0; do for f in 0 1; do
    step pick-f$f-$t 30 python3 bench/gpu/set_pick.py /tmp/ci /tmp/f$f-$t --shape 6144x2048 --tile $t --form $f
  done; done ;;
pairs) for i in 1 2; do for t in 8x1024x4x0 4x2048x4x0; do
    step g30-form0-$t-$i 40 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/f0-$t
    step g30-form1-$t-$i 40 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/f1-$t
    step g30-cef9ec7-$t-$i 60 $OLD --size 1.3b $BENCH --quant int8 --compile-cache /tmp/f1-$t
  done; done ;;
*) generate_part g30 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
