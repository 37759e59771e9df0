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
for part in ${PARTS:-oldcold pairs options options124}; do
  PAIRS=${PAIRS:-2} generate_part g32 $part || echo "unknown part: $part"
done
summarize "$GENERATE_SUMMARY"
