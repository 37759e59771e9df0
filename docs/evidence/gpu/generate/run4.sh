#!/usr/bin/env bash
# One nvidia-h200 call: (issue 17) the generate template's new defaults (--tune: Inductor's
# coordinate-descent tuning, --decode-attn math) at 1.3B beside the probe; (issue 16) the fp8
# loss run on byte-level text with the weights cast once per optimizer step, and lm --fp8 at 124M.
# Needs .fp8bench/corpus.txt (carried, git-ignored; see bench/gpu/fp8_round.sh).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
EV=docs/evidence/gpu/generate; LOG=$OUT/run4.log; T0=$(date +%s); BUDGET=${BUDGET:-540}
W=/tmp/w; mkdir -p $W && cp templates/generate.py $W/gen.py  # what `envtool init --template generate` writes
BENCH="--seq-len 2048 --prompt-len 512 --max-new-tokens 300 --temperature 0 --repeat 3"
step() {  # step NAME TIMEOUT CMD...: skipped when the call's budget is spent
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  if (( left < 30 )); then echo "=== $name skipped (budget)" | tee -a $LOG; return; fi
  (( limit > left )) && limit=$left
  echo "=== $name: $*" >> $LOG
  local t0=$(date +%s)
  timeout $limit "$@" >> $LOG 2>&1; local rc=$?
  echo "=== $name rc=$rc wall=$(( $(date +%s) - t0 ))s" >> $LOG
  echo "$name rc=$rc wall=$(( $(date +%s) - t0 ))s"
}
{ nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'; } >> $LOG 2>&1
step probe-1.3b 90 python3 $EV/decode_probe.py 1.3b
step g13-default 200 python3 $W/gen.py --size 1.3b $BENCH
L="--size 124m --data .fp8bench/corpus.txt --vocab-size 256 --seq-len 1024 --batch-size 16 --max-steps 300 --warmup-steps 30 --log-every 25 --ckpt-every -1 --resume never --out-dir /tmp/lout"
step loss-fp8 60 python3 templates/lm.py $L --fp8
T="--max-steps 12 --log-every 1 --warmup-steps 5 --ckpt-every -1 --resume never --out-dir /tmp/tout --compile"
step lm-124m-fp8 150 python3 templates/lm.py $T --size 124m --batch-size 16 --grad-accum 4 --seq-len 1024 --fp8
grep -E "^=== |^prefill|^decode|TTFT|compiled:|eager:|params|compile\+|^step 300|tokens/s" $LOG | cut -c1-300 > $OUT/summary4.txt
cat $OUT/summary4.txt
