#!/usr/bin/env bash
# Issue 25 round 35: the pick and the logprobs in one Triton program each. Round 34 put
# OpenAI's request options inside the decode step's CUDA graph; top-p 0.9 still cost +8 % at
# 1.3B int8 and +28 % at 124M (a byte vocabulary: fifteen small kernels a token, the sort
# among them, each a few us of a ~175 us step), logprobs 5 +22 %, penalties and logit_bias
# +6 % at 124M. Now a vocabulary of at most 1,024 words (the template's own byte-level
# models) picks in _pick_kernel (bias and penalties; the argmax, or drawn: logits / T sorted
# as int64 keys carrying their index, softmax, cumulative sum, the nucleus kept, the head's
# Gumbel noise, the argmax; -> tok, out[pos], its count) and keeps logprobs in _keep_kernel
# (log-softmax, the chosen's, the sort's first k). Here: pick_check.py (graphed against
# eager, the head's draw against Picker's, the one-program kernels against torch's), then
# serve_options.py beside c50d7c0's template (round 34's, carried as .gpuwork/generate_r34.py:
# `git show c50d7c0:templates/generate.py > .gpuwork/generate_r34.py`) at 124M and 1.3B
# int8, and greedy restarts alternating (the first token is now _pick_kernel's argmax: TTFT
# should not move). Run with carry [".gpuwork"]: TAG=call1 BUDGET=480.
set -u
source "$(dirname "$0")/steps.sh"
OLD=.gpuwork/generate_r34.py
need .gpuwork/generate_r34.py
PAIRS=${PAIRS:-2} generate_round g35 ${PARTS:-pickcheck options124 options oldcold pairs}
