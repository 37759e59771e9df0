#!/usr/bin/env bash
# GPU evidence for the generate template (issue 17), one nvidia-h200 call: variants of the
# decode step at 1.3B and 124M (batch 1, bf16, prompt 512, 300 new tokens, context 2048 like the
# probe), eager, the baseline decode_probe.py side by side, a profile, and serving via envtool launch.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
EV=docs/evidence/gpu/generate; LOG=$OUT/run1.log; PY=$(command -v python3)
W=/tmp/w; mkdir -p $W && python3 -m envtool init $W/gen.py --template generate --force >/dev/null
BENCH="--seq-len 2048 --prompt-len 512 --max-new-tokens 300 --temperature 0 --repeat 3"
step() {  # step NAME TIMEOUT CMD...: one run, its output in the log, RESULT lines summarised
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*" >> $LOG
  local t0=$(date +%s)
  timeout $limit "$@" >> $LOG 2>&1; local rc=$?
  echo "=== $name rc=$rc wall=$(( $(date +%s) - t0 ))s" >> $LOG
  echo "$name rc=$rc wall=$(( $(date +%s) - t0 ))s"
}
{ nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'; } >> $LOG 2>&1
step g13-math-mm 120 python3 $W/gen.py --size 1.3b $BENCH --decode-attn math
step g13-math-reduce 120 python3 $W/gen.py --size 1.3b $BENCH --decode-attn math --decode-linear reduce
step g13-sdpa-mm 120 python3 $W/gen.py --size 1.3b $BENCH --decode-attn sdpa
step probe-1.3b 120 python3 $EV/decode_probe.py 1.3b
step g124-math-mm 75 python3 $W/gen.py --size 124m $BENCH --decode-attn math
step g124-math-reduce 75 python3 $W/gen.py --size 124m $BENCH --decode-attn math --decode-linear reduce
step probe-124m 75 python3 $EV/decode_probe.py 124m
step g13-eager 60 python3 $W/gen.py --size 1.3b $BENCH --eager --repeat 1
step g124-eager 45 python3 $W/gen.py --size 124m $BENCH --eager --repeat 1
step g13-profile 60 python3 $W/gen.py --size 1.3b $BENCH --decode-attn math --repeat 1 --profile
# Serving through envtool launch (torchrun, WORLD_SIZE=1), then SIGTERM to envtool.
echo "=== serve" >> $LOG
( cd $W && exec python3 -m envtool launch --gpus 1 --python "$PY" --skip-checks --run-dir $W/runs \
    gen.py -- --size 124m --decode-attn math --serve 8765 >> $LOG 2>&1 ) & LPID=$!
timeout 120 python3 $EV/serve_smoke.py 8765 110 >> $LOG 2>&1; echo "smoke rc=$?" >> $LOG
kill -TERM $LPID; wait $LPID; echo "launch rc=$? after SIGTERM" >> $LOG
tail -n 4 $W/runs/*/torchrun/*/attempt_0/0/*.log >> $LOG 2>/dev/null
grep -E "^=== |^prefill|^decode|^RESULT|TTFT|compiled:|eager:|params|compile\+|HTTP|rc=" $LOG | cut -c1-400 > $OUT/summary.txt
cat $OUT/summary.txt
