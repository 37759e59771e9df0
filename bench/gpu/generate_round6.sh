#!/usr/bin/env bash
# Issue 25, one nvidia-h200 call: the generate template's Triton decode kernels (bf16 and
# --quant int8) beside ../shared/baselines/decode_probe.py on the same shapes, batch 1; cold vs
# warm start through --compile-cache; held-out loss of int8 vs bf16 on a 124M byte-level model
# trained in the same call (the Python standard library's sources as text).
# Run from the repo root with .gpuwork/{generate.py,decode_probe.py} (the versions measured).
set -u
G=.gpuwork; BUDGET=${BUDGET:-570}
source "$(dirname "$0")/steps.sh"; machine_line
W=/tmp/w; mkdir -p $W && cp $G/generate.py $W/gen.py  # what `envtool init --template generate` writes
BENCH="--seq-len 2048 --prompt-len 512 --max-new-tokens 300 --temperature 0 --repeat 3"
for part in ${PARTS:-probe13 g13 int13 loss probe124 g124 warm13}; do case $part in
probe13) step probe-1.3b 80 python3 $G/decode_probe.py 1.3b ;;
g13) step g13-cold 140 python3 $W/gen.py --size 1.3b $BENCH --compile-cache /tmp/cc --profile ;;
warm13) step g13-warm 50 python3 $W/gen.py --size 1.3b $BENCH --compile-cache /tmp/cc ;;
int13) step g13-int8 100 python3 $W/gen.py --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8 --profile ;;
nopdl13) step g13-nopdl 90 python3 $W/gen.py --size 1.3b $BENCH --compile-cache /tmp/cc --no-pdl ;;
nopdl124) step g124-nopdl 50 python3 $W/gen.py --size 124m $BENCH --compile-cache /tmp/cc --no-pdl ;;
int13b) step g13-int8 100 python3 $W/gen.py --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8
        step g13-bf16 60 python3 $W/gen.py --size 1.3b $BENCH --compile-cache /tmp/cc ;;
probe124) step probe-124m 50 python3 $G/decode_probe.py 124m ;;
g124) step g124 60 python3 $W/gen.py --size 124m $BENCH --compile-cache /tmp/cc --profile
      step g124-int8 45 python3 $W/gen.py --size 124m $BENCH --compile-cache /tmp/cc --quant int8 ;;
loss)
  stdlib_corpus
  L="--size 124m --data /tmp/train.txt --vocab-size 256 --seq-len 1024 --batch-size 16 --max-steps 300 --warmup-steps 30 --log-every 50 --resume never --out-dir /tmp/lout"
  step train-124m 90 python3 templates/lm.py $L
  E="--ckpt /tmp/lout --eval-data /tmp/heldout.txt --eval-windows 128 --prompt def --max-new-tokens 300 --temperature 0 --compile-cache /tmp/cc"
  step eval-bf16 50 python3 $W/gen.py $E
  step eval-int8 50 python3 $W/gen.py $E --quant int8 ;;
esac; done
summarize "^=== |^prefill|^decode|TTFT|compiled:|eager:|params|compile\+|^eval|^step 300|RESULT \{\"step"
