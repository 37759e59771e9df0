#!/usr/bin/env bash
# Issue 25 round 33: the drawing step in a graph of its own. Round 32 compiled the head's draw
# (_gemv_kernel's SAMPLE) into every decode step, skipped at run time when greedy: sampled
# requests then cost what greedy ones do (124M: +11 % -> within 1 %), but greedy decode ran
# 0.2-0.3 % slower than cd09cb3's template on the same picks. Now the greedy step's graph has
# no draw compiled in, and the drawing step is a second graph (captured at the server's
# warm-up). Here, side by side with cd09cb3's template (carried as .gpuwork/generate_old.py:
# `git show cd09cb3:templates/generate.py > .gpuwork/generate_old.py`): the probe, the greedy
# decode on one set of picks, restarts three times each, alternating (greedy should be back at
# cd09cb3's speed), then serve_options.py on each at 1.3B int8 and 124M (sampling as in round
# 32). Run with carry [".gpuwork"]: TAG=call1 BUDGET=560.
set -u
source "$(dirname "$0")/steps.sh"
need .gpuwork/decode_probe.py .gpuwork/generate_old.py
machine_line; generate_setup
OLD="python3 .gpuwork/generate_old.py"
S13="--size 1.3b --vocab-size 256 --seq-len 2048 --quant int8"
S124="--size 124m --vocab-size 256 --seq-len 2048"
for part in ${PARTS:-probe13 oldcold pairs options options124}; do case $part in
oldcold) step g33-int8-old 100 $OLD --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
pairs) for i in 1 2 3; do
    step g33-int8-new-$i 40 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/ci
    step g33-int8-old-$i 40 $OLD --size 1.3b $BENCH --quant int8 --compile-cache /tmp/ci
  done ;;
options) step options-old 150 python3 bench/gpu/serve_options.py .gpuwork/generate_old.py $S13 --compile-cache /tmp/cs
  step options-new 100 python3 bench/gpu/serve_options.py $W/gen.py $S13 --compile-cache /tmp/cs ;;
options124) step options124-old 100 python3 bench/gpu/serve_options.py .gpuwork/generate_old.py $S124 --compile-cache /tmp/cs124
  step options124-new 80 python3 bench/gpu/serve_options.py $W/gen.py $S124 --compile-cache /tmp/cs124 ;;
*) generate_part g33 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
