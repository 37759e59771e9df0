#!/usr/bin/env bash
# Issue 25 round 7, one nvidia-h200 call: the generate template (templates/generate.py as
# committed) beside ../shared/baselines/decode_probe.py (carried as .gpuwork/decode_probe.py) on
# the same shapes, batch 1. What is new: attention in one launch (the last chunk's program
# merges), the embeddings in one kernel, each matrix-vector kernel's first weight tile loaded
# before it waits on the kernel before it (pays under --pdl), and the prompt pass as its torch
# kernels in a CUDA graph (--prefill graph: no torch.compile anywhere) vs compiled.
# Round 7 run1: PARTS="probe13 g13 g13pdl warm13 g13c int13 int13pdl probe124 g124 g124pdl" (the
# old part names: --pdl opt-in then); run2 on: the defaults below.
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
for part in ${PARTS:-probe13 g13 warm13 g13nopdl int13 int13warm probe124 g124 g124nopdl}; do case $part in
probe13) step probe-1.3b 80 python3 $P 1.3b ;;
g13) step g13-cold 120 $G --size 1.3b $BENCH --compile-cache /tmp/cc ;;
warm13) step g13-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/cc ;;
g13nopdl) step g13-nopdl 90 $G --size 1.3b $BENCH --compile-cache /tmp/cc --no-pdl --profile ;;
g13pdl) step g13-pdl 90 $G --size 1.3b $BENCH --compile-cache /tmp/cc --pdl --profile ;;
g13c) step g13-prefill-compile 100 $G --size 1.3b $BENCH --compile-cache /tmp/cc --prefill compile ;;
int13) step g13-int8 120 $G --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8 ;;
int13warm) step g13-int8-warm 50 $G --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8 ;;
int13graph) step g13-int8-graph 50 $G --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8 --prefill graph ;;
probe124) step probe-124m 50 python3 $P 124m ;;
g124) step g124 50 $G --size 124m $BENCH --compile-cache /tmp/cc ;;
g124nopdl) step g124-nopdl 50 $G --size 124m $BENCH --compile-cache /tmp/cc --no-pdl --profile ;;
warm124) step g124-warm 40 $G --size 124m $BENCH --compile-cache /tmp/cc ;;
serve13) S="python3 bench/gpu/serve_ready.py $W/gen.py --size 1.3b --vocab-size 256 --seq-len 2048 --compile-cache /tmp/cs"
         step serve13-cold 120 $S
         step serve13-restart 40 $S
         step serve13-restart2 40 $S ;;
g124int8) step g124-int8 50 $G --size 124m $BENCH --compile-cache /tmp/cc --quant int8 ;;
esac; done
summarize "^=== |^prefill|^decode|TTFT|^serv|compiled:|eager:|params|compile\+|^eval|Error|error"
