#!/usr/bin/env bash
# Issue 25 round 34: OpenAI's request options inside the decode step's CUDA graph. Top-p, penalties,
# logit_bias and logprobs ran as eager kernels after each decode step's graph (round 33: +11 %
# for top_p 0.9 at 1.3B int8, +90 % at 124M; logprobs 5 +7 % / +26 %). Now Picker.step does
# that work on the engine's buffers with its parameters read from the device, captured once a
# plan (call 1: a graph of its own after the step's; from call 2 inside it); its draw is the
# head's noise (Philox at the seed and position). Here: pick_check.py (requests graphed and
# eager on one engine; the head's draw against Picker's), then
# serve_options.py beside 6885ed6's template (round 33's, carried as .gpuwork/generate_r33.py:
# `git show 6885ed6:templates/generate.py > .gpuwork/generate_r33.py`) at 1.3B int8 and 124M,
# and greedy restarts alternating on one cold start's picks (nothing should change there).
# PARTS="ready13 options124" (call 4): the server's time to its first answer, cold and
# restarted, with the warm-up that now also compiles Picker's kernels; then (calls 5, 6)
# PARTS="ready13 ready13old": cold beside 6885ed6's on one machine.
# Run with carry [".gpuwork"]: TAG=call1 BUDGET=560.
set -u
source "$(dirname "$0")/steps.sh"
OLD=.gpuwork/generate_r33.py
need .gpuwork/generate_r33.py
PAIRS=${PAIRS:-2} generate_round g34 ${PARTS:-pickcheck options options124 oldcold pairs}
