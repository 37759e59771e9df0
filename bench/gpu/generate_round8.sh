#!/usr/bin/env bash
# Issue 25 round 8, one nvidia-h200 call: the generate template (templates/generate.py as
# committed) beside ../shared/baselines/decode_probe.py (carried as .gpuwork/decode_probe.py),
# batch 1, as in round 7. New: int8 weights also read as int32 words (PACK 4, autotuned beside
# the per-byte loads; TRITON_PRINT_AUTOTUNING=1 logs which tile each shape gets); the restart
# after the sympy fix; and on a trained checkpoint (124M, bytes, the standard library's
# sources, 300 steps) the Triton decode's greedy tokens against the torch decode's, bf16 and
# int8, with the held-out loss.
# Which template commit each run measured (PACK 4 was dropped after run2, the 5-tile list after
# run3): docs/evidence/gpu/round8/README.md.
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
# the trained-checkpoint checks: a 124M byte-level model on the standard library's sources
L="--size 124m --data /tmp/train.txt --vocab-size 256 --seq-len 1024 --batch-size 16 --max-steps ${STEPS:-300} --warmup-steps 30 --log-every 100 --resume never --out-dir /tmp/lout"
for part in ${PARTS:-probe13 int13 g13 warm13 loss serve13}; do case $part in
probe13) step probe-1.3b 80 python3 $P 1.3b ;;
g13) step g13-cold 120 $G --size 1.3b $BENCH --compile-cache /tmp/cc ;;
warm13) step g13-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/cc ;;
int13) TRITON_PRINT_AUTOTUNING=1 step g13-int8 120 $G --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8
       step g13-int8-warm 50 $G --size 1.3b $BENCH --compile-cache /tmp/cc --quant int8 ;;
serve13) S="python3 bench/gpu/serve_ready.py $W/gen.py --size 1.3b --vocab-size 256 --seq-len 2048 --compile-cache /tmp/cs"
         step serve13-cold 120 $S
         step serve13-restart 40 $S
         step serve13-restart2 40 $S ;;
loss)
  stdlib_corpus
  step train-124m 120 python3 templates/lm.py $L
  # run2 on: a prompt of held-out text (run1's "def" gave 300 x "f" greedily: a weak check)
  PR=$(head -c 256 /tmp/heldout.txt | tr -cd '[:print:]\n')
  E="--ckpt /tmp/lout --eval-data /tmp/heldout.txt --eval-windows 128 --max-new-tokens 300 --repeat 1 --compile-cache /tmp/cl"
  step eval-bf16-triton 50 $G $E --prompt "$PR" --temperature 0
  step eval-bf16-torch 60 $G $E --prompt "$PR" --temperature 0 --decode-kernels torch
  step eval-int8-triton 60 $G $E --prompt "$PR" --temperature 0 --quant int8
  step eval-int8-torch 60 $G $E --prompt "$PR" --temperature 0 --quant int8 --decode-kernels torch
  step sample-bf16-triton 50 $G $E --prompt "$PR" --temperature 0.8
  step sample-bf16-torch 50 $G $E --prompt "$PR" --temperature 0.8 --decode-kernels torch ;;
loss8)  # run3: int8 on the trained checkpoint, Triton vs torch decode (run2's timed out tuning)
  stdlib_corpus
  step train-124m 120 python3 templates/lm.py $L
  PR=$(head -c 256 /tmp/heldout.txt | tr -cd '[:print:]\n')
  E="--ckpt /tmp/lout --eval-data /tmp/heldout.txt --eval-windows 128 --max-new-tokens 300 --repeat 1 --compile-cache /tmp/cl --prompt"
  step sample-int8-triton 90 $G $E "$PR" --temperature 0.8 --quant int8
  step sample-int8-torch 60 $G $E "$PR" --temperature 0.8 --quant int8 --decode-kernels torch
  step sample-bf16-triton 60 $G $E "$PR" --temperature 0.8 ;;
esac; done
summarize "^=== |^prefill|^decode|TTFT|^serv|compiled:|eager:|params|compile\+|^eval|Error|error|best config"
