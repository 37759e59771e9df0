#!/usr/bin/env bash
# GPU evidence, round 3 (nvidia-h200-x2): the predicted fixes from round 2.
#  - lm 1.3B: micro-batch 16 x accumulation 4 (bigger GEMMs, optimizer + all-reduce once per 64
#    sequences) on 1 and 2 GPUs; 124M at the same shape; bucket 25 MB at accumulation 1 to see
#    whether smaller buckets overlap better.
#  - ddp: 4 DataLoader workers (round 2 was CPU-bound on per-sample collation).
#  - fsdp: the template's first GPU run (1.3B, FSDP2, bf16) on 2 GPUs.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
EV=/tmp/ev; mkdir -p $EV/runs
PY=$(command -v python3)
pack() { tar czf "$OUT/ev.tgz" -C /tmp ev; }
L() {  # L NAME GPUS TIMEOUT SCRIPT [-- ARGS...]
  local name=$1 g=$2 t=$3; shift 3
  echo "=== $name (--gpus $g)"
  timeout "$t" python3 -m envtool launch --gpus "$g" --python "$PY" --run-dir $EV/runs --skip-checks "$@" \
    > $EV/$name.txt 2>&1; echo "rc=$?" >> $EV/$name.txt
  grep -E "RESULT|rc=|failed" $EV/$name.txt | tail -3; pack
}
cd /tmp && mkdir -p w && cd w
for t in lm ddp fsdp; do python3 -m envtool init $t.py --template $t --force >/dev/null; done
B13="--size 1.3b --compile --ckpt-every -1 --log-every 5"
L lm13-b16ga4-1 1 100 lm.py -- $B13 --batch-size 16 --grad-accum 4 --max-steps 20 --out-dir /tmp/w/a
L lm13-b16ga4-2 2 100 lm.py -- $B13 --batch-size 16 --grad-accum 4 --max-steps 20 --out-dir /tmp/w/b
L lm13-b8ga1-2-bucket25 2 80 lm.py -- $B13 --batch-size 8 --bucket-cap-mb 25 --max-steps 30 --out-dir /tmp/w/c
B124="--size 124m --compile --ckpt-every -1 --log-every 5 --batch-size 16 --grad-accum 4 --max-steps 30"
L lm124-b16ga4-1 1 60 lm.py -- $B124 --out-dir /tmp/w/d
L lm124-b16ga4-2 2 60 lm.py -- $B124 --out-dir /tmp/w/e
D="--hidden 4096 --depth 8 --batch-size 1024 --max-steps 300 --log-every 50 --ckpt-every -1 --num-workers 4 --dataset-size 1000000"
L ddp-w4-1 1 45 ddp.py -- $D --out-dir /tmp/w/f
L ddp-w4-2 2 45 ddp.py -- $D --out-dir /tmp/w/g
L fsdp13-2 2 80 fsdp.py -- --size 1.3b --batch-size 8 --max-steps 20 --log-every 5 --ckpt-every -1 --out-dir /tmp/w/h
echo "=== done"
