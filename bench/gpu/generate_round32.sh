#!/usr/bin/env bash
# Issue 25 round 32: the Triton step draws a sampled token itself. OpenAI's default request
# samples (temperature 1), and the template drew each token eagerly after the step's graph
# (a softmax, the exponential noise, a divide, an argmax, two copies); now the head's product
# draws it (_gemv_kernel's SAMPLE: the Gumbel-max trick, Philox noise at the seed and the
# position). Here, side by side with the template before it (carried as
# .gpuwork/generate_old.py, `git show HEAD~:templates/generate.py` at the round's commit): the
# greedy decode on one set of picks, restarts twice each, alternating (the head's product
# gained an epilogue branch: greedy must not pay for it), then serve_options.py on each, at
# 1.3B int8 and 124M. Run with carry [".gpuwork"]: TAG=call1 BUDGET=540. Call 2, after the
# head read its draw's scalars before the wait: PARTS="oldcold pairs options124" TAG=call2.
set -u
source "$(dirname "$0")/steps.sh"
need .gpuwork/decode_probe.py .gpuwork/generate_old.py
machine_line; generate_setup
OLD="python3 .gpuwork/generate_old.py"
S13="--size 1.3b --vocab-size 256 --seq-len 2048 --quant int8"
S124="--size 124m --vocab-size 256 --seq-len 2048"
for part in ${PARTS:-oldcold pairs options options124}; do case $part in
oldcold) step g32-int8-old 100 $OLD --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
pairs) for i in 1 2; do
    step g32-int8-new-$i 40 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/ci
    step g32-int8-old-$i 40 $OLD --size 1.3b $BENCH --quant int8 --compile-cache /tmp/ci
  done ;;
options) step options-old 150 python3 bench/gpu/serve_options.py .gpuwork/generate_old.py $S13 --compile-cache /tmp/cs
  step options-new 100 python3 bench/gpu/serve_options.py $W/gen.py $S13 --compile-cache /tmp/cs ;;
options124) step options124-old 100 python3 bench/gpu/serve_options.py .gpuwork/generate_old.py $S124 --compile-cache /tmp/cs124
  step options124-new 80 python3 bench/gpu/serve_options.py $W/gen.py $S124 --compile-cache /tmp/cs124 ;;
*) generate_part g32 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
