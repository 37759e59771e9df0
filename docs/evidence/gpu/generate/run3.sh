#!/usr/bin/env bash
# Issue 17, round 3 (one nvidia-h200 call): Inductor's coordinate-descent tuning for the decode
# step. With it on, Inductor rewrites a batch-1 mm/bmm as a multiply-and-sum reduction and tunes
# that reduction's block sizes (torch/_inductor/decomposition.py, "matrix vector multiplies only
# achieve peak bandwidth with coordinate descent tuning"; gpt-fast turns it on). The probe runs
# as shipped (no tuning), side by side, in the same call.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
EV=docs/evidence/gpu/generate; LOG=$OUT/run3.log; T0=$(date +%s); BUDGET=${BUDGET:-560}
W=/tmp/w; mkdir -p $W && cp templates/generate.py $W/gen.py  # what `envtool init --template generate` writes
BENCH="--seq-len 2048 --prompt-len 512 --max-new-tokens 300 --temperature 0 --repeat 3"
step() {  # step NAME TIMEOUT CMD...: skipped when the call's budget is spent
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  if (( left < 40 )); then echo "=== $name skipped (budget)" | tee -a $LOG; return; fi
  (( limit > left )) && limit=$left
  echo "=== $name: $*" >> $LOG
  local t0=$(date +%s)
  timeout $limit "$@" >> $LOG 2>&1; local rc=$?
  echo "=== $name rc=$rc wall=$(( $(date +%s) - t0 ))s" >> $LOG
  echo "$name rc=$rc wall=$(( $(date +%s) - t0 ))s"
}
CDT="env TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1"
{ nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'; } >> $LOG 2>&1
step probe-1.3b 100 python3 $EV/decode_probe.py 1.3b
step g13-sdpa-cdt 200 $CDT python3 $W/gen.py --size 1.3b $BENCH --decode-attn sdpa
step g13-math-cdt 170 $CDT python3 $W/gen.py --size 1.3b $BENCH --decode-attn math
step probe-124m 70 python3 $EV/decode_probe.py 124m
step g124-math-cdt 110 $CDT python3 $W/gen.py --size 124m $BENCH --decode-attn math
step g124-sdpa-cdt 110 $CDT python3 $W/gen.py --size 124m $BENCH --decode-attn sdpa
grep -E "^=== |^prefill|^decode|TTFT|compiled:|eager:|params|compile\+" $LOG | cut -c1-300 > $OUT/summary3.txt
cat $OUT/summary3.txt
