#!/usr/bin/env bash
# GPU evidence, round 5 (nvidia-h200, one GPU): this session's doctor changes on a real H200 —
# healthy verdict, --fast time, the per-GPU driver floor (a 470 what-if must say "upgrade the
# driver for this GPU", not suggest a CUDA), and the GPU-only host-check test. Outputs in $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PY=$(command -v python3)
E() { python3 -m envtool "$@"; }
O=$OUT
{ nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv; python3 -c 'import torch;print(torch.__version__, torch.version.cuda)'; } > $O/host.txt 2>&1
E doctor --python "$PY" > $O/doctor.txt 2>&1; echo "rc=$?" >> $O/doctor.txt
E doctor --python "$PY" --json > $O/doctor.json 2>$O/doctor.err; echo "rc=$?" >> $O/doctor.err
for i in 1 2 3 4 5; do /usr/bin/time -f "%e s" python3 -m envtool doctor --python "$PY" --fast > /dev/null 2>> $O/doctor-fast-times.txt; done
E doctor --python "$PY" --driver 470.57.02 > $O/whatif-470.txt 2>&1; echo "rc=$?" >> $O/whatif-470.txt
E doctor --python "$PY" --driver 520.61.05 > $O/whatif-520.txt 2>&1; echo "rc=$?" >> $O/whatif-520.txt
python3 -m pytest -q -p no:cacheprovider tests/install/test_install.py -k test_host_check_on_this_gpu_host > $O/gpu-test.txt 2>&1; echo "rc=$?" >> $O/gpu-test.txt
tail -n 3 $O/*.txt
