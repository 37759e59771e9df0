#!/usr/bin/env bash
# Issue 25 round 10, one nvidia-h200 call: each decode product's tile picked in a CUDA graph
# over the model's layers (tune_gemv, Engine) instead of by Triton's autotuner, which times a
# tile alone (call 1's sweep: its picks ran 1.0-1.4x slower in the graph). The template before
# the change (`git show 8cdadd3:templates/generate.py`, carried as .gpuwork/generate_old.py)
# runs beside it, and the probe, as before; cold start and a restart with --compile-cache
# (the picks are kept there: gemv-tiles.json, printed into the log).
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
OLD="python3 .gpuwork/generate_old.py"
for part in ${PARTS:-probe13 new13 old13 newint8 oldint8}; do case $part in
probe13) step probe-1.3b 100 python3 $P 1.3b ;;
new13) step g13-tuned-cold 90 $G --size 1.3b $BENCH --compile-cache /tmp/cb
       step g13-tuned-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/cb
       cat /tmp/cb/gemv-tiles.json >> $LOG; echo >> $LOG ;;
old13) step g13-old 80 $OLD --size 1.3b $BENCH ;;
newint8) step g13-int8-tuned-cold 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8
         step g13-int8-tuned-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8
         cat /tmp/ci/gemv-tiles.json >> $LOG; echo >> $LOG ;;
oldint8) step g13-int8-old 100 $OLD --size 1.3b $BENCH --quant int8 ;;
probe124) step probe-124m 50 python3 $P 124m ;;
new124) step g124-tuned 50 $G --size 124m $BENCH --compile-cache /tmp/c124 ;;
old124) step g124-old 50 $OLD --size 124m $BENCH ;;
esac; done
summarize "^=== |^prefill|^decode|TTFT|Error|error|gemv_tiles"
