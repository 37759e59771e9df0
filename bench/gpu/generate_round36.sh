#!/usr/bin/env bash
# Issue 25 round 36: streamed requests and stop sequences without a sync a token. The server
# looks at each token on the host only for a stream or a stop sequence (OpenAI's chat UIs
# stream every reply); until now each step's token was read with .item() after the step, so
# the GPU idled while the host copied it, checked the stops, queued the chunk and launched the
# next step, never timed on a GPU. Now StepReader copies each token (and its logprobs row) to
# pinned memory on a stream of its own, behind the step that wrote it, and the host reads
# token i while step i + 1 runs (one step is computed past a stop and dropped). Here:
# stream_cost.py (the engine alone: 300 tokens plainly, with an on_token, with logprobs) and
# serve_options.py (streamed, a stop sequence never met, streamed with logprobs 5, beside the
# other options; each stream's reply checked against the whole one: STREAM_SAME), beside
# de15163's template (round 35's, carried as .gpuwork/generate_r35.py: `git show
# de15163:templates/generate.py > .gpuwork/generate_r35.py`) at 124M and 1.3B int8. Run with
# carry [".gpuwork"]: TAG=call5 BUDGET=330 PARTS="streamcost options124 options". Call 3 put
# READ_AHEAD = 2 in the old one's place (`sed 's/^READ_AHEAD = 1 /READ_AHEAD = 2 /'
# templates/generate.py > .gpuwork/generate_ahead2.py`; OLD=.gpuwork/generate_ahead2.py).
set -u
source "$(dirname "$0")/steps.sh"
OLD=${OLD:-.gpuwork/generate_r35.py}
need $OLD
generate_round g36 ${PARTS:-streamcost options124 options}
