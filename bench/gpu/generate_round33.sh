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
for part in ${PARTS:-probe13 oldcold pairs options options124}; do
  PAIRS=${PAIRS:-3} generate_part g33 $part || echo "unknown part: $part"
done
summarize "$GENERATE_SUMMARY"
