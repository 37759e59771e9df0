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
TAG=${TAG:-run1}; LOG=$OUT/$TAG.log; T0=$(date +%s); BUDGET=${BUDGET:-560}
source "$(dirname "$0")/steps.sh"; machine_line
W=/tmp/w; mkdir -p $W && cp templates/generate.py $W/gen.py  # what `envtool init --template generate` writes
P=.gpuwork/decode_probe.py
BENCH="--seq-len 2048 --prompt-len 512 --max-new-tokens 300 --temperature 0 --repeat ${REPEAT:-3}"
G="python3 $W/gen.py"
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
  STD=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  cat $STD/*.py $STD/*/*.py > /tmp/corpus.txt 2>/dev/null
  head -c -400000 /tmp/corpus.txt > /tmp/train.txt; tail -c 400000 /tmp/corpus.txt > /tmp/heldout.txt
  ls -l /tmp/train.txt /tmp/heldout.txt >> $LOG
  L="--size 124m --data /tmp/train.txt --vocab-size 256 --seq-len 1024 --batch-size 16 --max-steps ${STEPS:-300} --warmup-steps 30 --log-every 100 --resume never --out-dir /tmp/lout"
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
  L="--size 124m --data /tmp/train.txt --vocab-size 256 --seq-len 1024 --batch-size 16 --max-steps ${STEPS:-300} --warmup-steps 30 --log-every 100 --resume never --out-dir /tmp/lout"
  STD=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  cat $STD/*.py $STD/*/*.py > /tmp/corpus.txt 2>/dev/null
  head -c -400000 /tmp/corpus.txt > /tmp/train.txt; tail -c 400000 /tmp/corpus.txt > /tmp/heldout.txt
  step train-124m 120 python3 templates/lm.py $L
  PR=$(head -c 256 /tmp/heldout.txt | tr -cd '[:print:]\n')
  E="--ckpt /tmp/lout --eval-data /tmp/heldout.txt --eval-windows 128 --max-new-tokens 300 --repeat 1 --compile-cache /tmp/cl --prompt"
  step sample-int8-triton 90 $G $E "$PR" --temperature 0.8 --quant int8
  step sample-int8-torch 60 $G $E "$PR" --temperature 0.8 --quant int8 --decode-kernels torch
  step sample-bf16-triton 60 $G $E "$PR" --temperature 0.8 ;;
esac; done
grep -E "^=== |^prefill|^decode|TTFT|^serv|compiled:|eager:|params|compile\+|^eval|Error|error|best config" $LOG | cut -c1-300 > $OUT/$TAG-summary.txt
cat $OUT/$TAG-summary.txt
