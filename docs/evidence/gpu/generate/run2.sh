#!/usr/bin/env bash
# GPU evidence, call 2 (nvidia-h200): what run1.sh's time limit cut off — serving through
# `envtool launch gen.py --gpus 1 -- --serve` (torchrun, WORLD_SIZE=1) with real requests and a
# SIGTERM to envtool — and a kernel profile of the 124M decode (where its time goes).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
EV=docs/evidence/gpu/generate; LOG=$OUT/run2.log; PY=$(command -v python3)
W=/tmp/w; mkdir -p $W && python3 -m envtool init $W/gen.py --template generate --force >/dev/null
echo "=== serve" >> $LOG
( cd $W && exec python3 -m envtool launch --gpus 1 --python "$PY" --skip-checks --run-dir $W/runs \
    gen.py -- --size 124m --seq-len 2048 --serve 8765 >> $LOG 2>&1 ) & LPID=$!
timeout 100 python3 $EV/serve_smoke.py 8765 90 >> $LOG 2>&1; echo "smoke rc=$?" >> $LOG
kill -TERM $LPID; wait $LPID; echo "launch rc=$? after SIGTERM" >> $LOG
tail -n 3 $W/runs/*/torchrun/*/attempt_0/0/stdout.log >> $LOG 2>/dev/null
echo "=== g124-profile" >> $LOG
timeout 90 python3 $W/gen.py --size 124m --seq-len 2048 --prompt-len 512 --max-new-tokens 300 \
    --temperature 0 --repeat 1 --profile >> $LOG 2>&1; echo "profile rc=$?" >> $LOG
grep -E "^=== |HTTP|rc=|^prefill|^decode|served" $LOG
