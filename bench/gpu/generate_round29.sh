#!/usr/bin/env bash
# Issue 25 round 29: the tuner's step timed at three cache lengths (tune_positions: the first
# decode's and two longer), not at the prompt's length alone, and attention's form picked in
# it (pick_attn_form: ATTN_SELECT flipped, beside qkv's near tiles). Round 28 ran the template
# 1.2 % faster on qkv 8 x 1024 x 4 than on 4 x 2048 x 4 (restarts, twice each), tiles its
# tuner had timed within 0.2 % at 512, and cef9ec7's attention (the select form) +3.6 % on
# the same pair. Here: two cold starts (does the tuner now pick what the decode runs
# fastest? RESULT's gemv_tiles has step_us and form_us), a restart on its own picks, then its
# picks with qkv set each of three ways and the form each way (set_pick.py), alternating;
# then the 8 x 1024 x 4 pair both ways at a prompt of 1,024 (is the select form's lead one of
# length?), and bf16 and 124M cold. Run with carry [".gpuwork"] (the probe): TAG=call1
# BUDGET=500.
set -u
source "$(dirname "$0")/steps.sh"
need .gpuwork/decode_probe.py
machine_line; generate_setup
LONG="--seq-len 2048 --prompt-len 1024 --max-new-tokens 300 --temperature 0 --repeat 3"
for part in ${PARTS:-probe13 newint8 picks pairs long cold2 restart newbf16 probe124 new124}; do case $part in
cold2) step g29-int8-b 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci2 --quant int8 ;;
restart) step g29-int8-restart 40 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
picks) for t in 8x1024x4x0 8x2048x8x0 4x2048x4x0; do  # n: the form without, o: the select form
    step pick-n$t 30 python3 bench/gpu/set_pick.py /tmp/ci /tmp/n$t --shape 6144x2048 --tile $t --form 0
  done
  step pick-o8x1024x4x0 30 python3 bench/gpu/set_pick.py /tmp/ci /tmp/o8x1024x4x0 --shape 6144x2048 --tile 8x1024x4x0 --form 1
  step pick-o4x2048x4x0 30 python3 bench/gpu/set_pick.py /tmp/ci /tmp/o4x2048x4x0 --shape 6144x2048 --tile 4x2048x4x0 --form 1 ;;
pairs) for i in 1 2; do
    for t in 8x1024x4x0 8x2048x8x0 4x2048x4x0; do
      step g29-new-$t-$i 40 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/n$t
    done
    for t in 8x1024x4x0 4x2048x4x0; do
      step g29-sel-$t-$i 40 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/o$t
    done
  done ;;
long) for i in 1 2; do
    step g29-long-new-$i 60 $G --size 1.3b $LONG --quant int8 --compile-cache /tmp/n8x1024x4x0
    step g29-long-sel-$i 60 $G --size 1.3b $LONG --quant int8 --compile-cache /tmp/o8x1024x4x0
  done ;;
*) generate_part g29 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
