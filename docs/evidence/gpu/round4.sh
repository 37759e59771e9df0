#!/usr/bin/env bash
# GPU evidence, round 4 (nvidia-h200-x2, last of the session's device time): lm 1.3B with
# micro-batch 16 x accumulation 8 — the all-reduce (~21 ms for 5.25 GB fp32 grads at ~250 GB/s)
# and the optimizer step amortised over 128 sequences per GPU. Predicted scaling ~98%.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
EV=/tmp/ev; mkdir -p $EV/runs; PY=$(command -v python3)
cd /tmp && mkdir -p w && cd w && python3 -m envtool init lm.py --template lm --force >/dev/null
for g in 1 2; do
  echo "=== lm13-b16ga8-$g"
  timeout 110 python3 -m envtool launch --gpus $g --python "$PY" --run-dir $EV/runs --skip-checks lm.py -- \
    --size 1.3b --compile --ckpt-every -1 --batch-size 16 --grad-accum 8 --max-steps 12 --log-every 4 \
    --out-dir /tmp/w/o$g > $EV/lm13-b16ga8-$g.txt 2>&1; echo "rc=$?" >> $EV/lm13-b16ga8-$g.txt
  grep -E "RESULT|rc=" $EV/lm13-b16ga8-$g.txt; tar czf "$OUT/ev.tgz" -C /tmp ev
done
