#!/usr/bin/env bash
# Issue 25 round 31: the tuner's form pick with qkv's own pick among the tiles it tries.
# Round 30 ran cef9ec7's select form, written line for line (ATTN_SELECT 1), 1.8 % faster than
# the form without on qkv 8 x 1024 x 4 (1,398.5 vs 1,373.4 tokens/s, restarts, twice each),
# but both cold starts kept form 0: pick_attn_form tried the select form with qkv's near tiles
# from in_step, where the pick held only its first-pass time, so never with the pick itself.
# Here: a cold start (does it take form 1 now?), restarts on its picks with the form set each
# way (set_pick.py --form, qkv as it picked), twice, alternating: whether the step's timing
# and the decode agree; a second cold start, bf16 and 124M cold (the form is tried there
# too). Run with carry [".gpuwork"] (the probe): TAG=call1 BUDGET=400. Call 2: the 124M probe
# beside a 124M cold start, and what OpenAI's request options cost a served 1.3B int8 model
# (serve_options.py): PARTS="probe124 new124 options" TAG=call2 BUDGET=400. Call 3: what
# sampling (OpenAI's default temperature 1) costs there and at 124M: PARTS="options options124".
set -u
source "$(dirname "$0")/steps.sh"
need .gpuwork/decode_probe.py
machine_line; generate_setup
for part in ${PARTS:-probe13 newint8 picks pairs cold2 newbf16 new124}; do case $part in
picks) for f in 0 1; do step pick-f$f 30 python3 bench/gpu/set_pick.py /tmp/ci /tmp/f$f --form $f; done ;;
pairs) for i in 1 2; do for f in 0 1; do
    step g31-form$f-$i 40 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/f$f
  done; done ;;
cold2) step g31-int8-b 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci2 --quant int8 ;;
options) step serve-options 240 python3 bench/gpu/serve_options.py $W/gen.py --size 1.3b \
    --vocab-size 256 --seq-len 2048 --quant int8 --compile-cache /tmp/cs ;;
options124) step serve-options-124m 240 python3 bench/gpu/serve_options.py $W/gen.py \
    --size 124m --vocab-size 256 --seq-len 2048 --compile-cache /tmp/cs124 ;;
*) generate_part g31 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
