#!/usr/bin/env bash
# Issue 25 round 28, prepared in round 27's session (its device time spent): is qkv's tile
# worth 3.5 % beside the old attention only? Round 26's call 1 ran the old template (cef9ec7:
# attention with this step's key in its tile) at 1,411.8 tokens/s on its tuner's qkv tile
# (8 x 1024 x 4, x by tl.load), and call 2 ran it at 1,359 on the new template's (4 x 2048 x 4);
# round 27 timed those qkv tiles within 0.8 % of each other in the new template's final step.
# Either the pair is an interaction (qkv's tail and the old attention's start overlap under
# PDL) or 1,411.8 was one lucky start. Here one cold start tunes (newint8), set_pick.py copies
# its picks with qkv set each way into four caches, and both templates run on both tiles,
# twice, alternating (restarts: nothing timed, nothing else different).
# Then what round 27 left out: the tuner's second pass at bf16 and 124M, each way cold (the
# template without it is d07fcb3's, carried as .gpuwork/generate_pass1.py).
# The old template is cef9ec7's, carried as .gpuwork/generate_old.py
# (`git show cef9ec7:templates/generate.py`; `git show d07fcb3:templates/generate.py` for
# generate_pass1.py). Run with carry [".gpuwork"]: TAG=call1 BUDGET=560.
set -u
source "$(dirname "$0")/steps.sh"
need .gpuwork/decode_probe.py .gpuwork/generate_old.py .gpuwork/generate_pass1.py
machine_line; generate_setup
OLD="python3 .gpuwork/generate_old.py" P1="python3 .gpuwork/generate_pass1.py"
for part in ${PARTS:-probe13 newint8 picks pairs newbf16 p1bf16 probe124 new124 p1124}; do case $part in
picks) for t in 8x1024x4x0 4x2048x4x0; do for who in n o; do
    step pick-$who$t 30 python3 bench/gpu/set_pick.py /tmp/ci /tmp/$who$t --shape 6144x2048 --tile $t
  done; done ;;
pairs) for i in 1 2; do for t in 8x1024x4x0 4x2048x4x0; do
    step g28-new-$t-$i 60 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/n$t
    step g28-old-$t-$i 60 $OLD --size 1.3b $BENCH --quant int8 --compile-cache /tmp/o$t
  done; done ;;
p1bf16) step g28-bf16-pass1 80 $P1 --size 1.3b $BENCH --compile-cache /tmp/cb1 ;;
p1124) step g28-124m-pass1 50 $P1 --size 124m $BENCH --compile-cache /tmp/c1241 ;;
*) generate_part g28 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
