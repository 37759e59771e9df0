#!/usr/bin/env bash
# GPU evidence, round 2 (nvidia-h200-x2): profile the lm template at 1.3B, then measure the
# changes predicted in docs/benchmarks.md (grad accumulation amortises optimizer + all-reduce;
# bf16 gradient compression halves all-reduce bytes), and the ddp template's scaling.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
EV=/tmp/ev; mkdir -p $EV/runs
PY=$(command -v python3)
pack() { tar czf "$OUT/ev.tgz" -C /tmp ev; }
L() {  # L NAME GPUS TIMEOUT SCRIPT ARGS...
  local name=$1 g=$2 t=$3; shift 3
  echo "=== $name (--gpus $g)"
  timeout "$t" python3 -m envtool launch --gpus "$g" --python "$PY" --run-dir $EV/runs --skip-checks "$@" \
    > $EV/$name.txt 2>&1; echo "rc=$?" >> $EV/$name.txt
  grep -E "RESULT|rc=|failed" $EV/$name.txt | tail -3; pack
}
cd /tmp && mkdir -p w && cd w
python3 -m envtool init lm.py --template lm --force >/dev/null && python3 -m envtool init ddp.py --template ddp --force >/dev/null
B13="--size 1.3b --batch-size 8 --compile --ckpt-every -1 --log-every 5"
# 1. profile: where does a 2-GPU step go?
L prof13-2 2 200 lm.py -- $B13 --max-steps 16 --profile-steps 2 --out-dir /tmp/w/p
grep -A 22 PROFILE $EV/prof13-2.txt | head -26
# 2. grad accumulation 4 (same micro-batch 8): 1 and 2 GPUs; then + bf16 compression
L lm13-ga4-1 1 200 lm.py -- $B13 --grad-accum 4 --max-steps 25 --out-dir /tmp/w/a
L lm13-ga4-2 2 200 lm.py -- $B13 --grad-accum 4 --max-steps 25 --out-dir /tmp/w/b
L lm13-ga4-2-bf16 2 200 lm.py -- $B13 --grad-accum 4 --grad-compress bf16 --max-steps 25 --out-dir /tmp/w/c
L lm13-ga1-2-bf16 2 200 lm.py -- $B13 --grad-compress bf16 --max-steps 40 --out-dir /tmp/w/d
# 3. ddp template at a size where scaling means something (8 x 4096 MLP, 134M params)
D="--hidden 4096 --depth 8 --batch-size 1024 --max-steps 300 --log-every 50 --ckpt-every -1"
L ddp-1 1 150 ddp.py -- $D --out-dir /tmp/w/e
L ddp-2 2 150 ddp.py -- $D --out-dir /tmp/w/f
echo "=== done"
