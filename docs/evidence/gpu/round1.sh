#!/usr/bin/env bash
# GPU evidence, round 1 (nvidia-h200-x2): doctor (healthy, --deep, induced faults), probes vs
# nvidia-smi, the card's ceilings, a plain all-reduce baseline, and envtool launch of the ddp and
# lm templates. Run from the repo root on the device machine; everything lands in $OUT/ev.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
EV=/tmp/ev; mkdir -p $EV/runs
E() { python3 -m envtool "$@"; }
step() { echo "=== $1"; }
pack() { tar czf "$OUT/ev.tgz" -C /tmp ev; }
PY=$(command -v python3)

step env
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch,sys;print(sys.version);print(torch.__version__, torch.version.cuda, torch.cuda.device_count(), torch.cuda.get_arch_list())'; } > $EV/host.txt 2>&1
cat $EV/host.txt | head -40

step "doctor --json (healthy)"
E doctor --python "$PY" --json > $EV/doctor.json 2> $EV/doctor.err; echo "rc=$?" | tee $EV/doctor.rc
step "doctor --deep --record"
E doctor --python "$PY" --deep --verbose --record $EV/doctor-record > $EV/doctor-deep.txt 2>&1; echo "rc=$?" | tee -a $EV/doctor-deep.txt
cat $EV/doctor-deep.txt
step "doctor --fast"
( time E doctor --python "$PY" --fast ) > $EV/doctor-fast.txt 2>&1; tail -5 $EV/doctor-fast.txt
pack

step "fault 1: CUDA_VISIBLE_DEVICES=7"
CUDA_VISIBLE_DEVICES=7 E doctor --python "$PY" > $EV/fault-cvd7.txt 2>&1; echo "rc=$?" >> $EV/fault-cvd7.txt; cat $EV/fault-cvd7.txt
step "fault 2: LD_LIBRARY_PATH with a stray libcudart"
mkdir -p /tmp/stray
find / -name 'libcudart.so*' -not -path '/proc/*' 2>/dev/null | head -3 > $EV/libcudart-found.txt
src=$(head -1 $EV/libcudart-found.txt); cp -L "$src" /tmp/stray/ 2>/dev/null
LD_LIBRARY_PATH=/tmp/stray E doctor --python "$PY" > $EV/fault-ldpath.txt 2>&1; echo "rc=$?" >> $EV/fault-ldpath.txt; cat $EV/fault-ldpath.txt
step "fault 3: a venv without torch"
python3 -m venv --without-pip /tmp/notorch
E doctor --python /tmp/notorch/bin/python > $EV/fault-notorch.txt 2>&1; echo "rc=$?" >> $EV/fault-notorch.txt; cat $EV/fault-notorch.txt
step "fault 4: planning for a 470 driver (what-if)"
E doctor --python "$PY" --driver 470.182.03 > $EV/fault-driver470.txt 2>&1; echo "rc=$?" >> $EV/fault-driver470.txt; cat $EV/fault-driver470.txt
pack

step "probes vs nvidia-smi"
timeout 120 python3 docs/evidence/probes_gpu_check.py $EV/probes --python "$PY" > $EV/probes.txt 2>&1; echo "rc=$?" >> $EV/probes.txt; tail -15 $EV/probes.txt
step "ceilings"
timeout 120 python3 bench/gpu/ceiling.py --out $EV/ceiling.json 2>&1 | tail -3
step "all-reduce baseline (plain torch.distributed)"
timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 2 bench/gpu/allreduce_baseline.py --out $EV/allreduce-baseline.json 2>&1 | tail -3
pack

cd /tmp && mkdir -p w && cd w
step "init + launch ddp --gpus 2"
E init ddp.py --template ddp && E init lm.py --template lm
timeout 180 python3 -m envtool launch ddp.py --gpus 2 --python "$PY" --run-dir $EV/runs -- --max-steps 200 --log-every 50 > $EV/launch-ddp2.txt 2>&1; echo "rc=$?" >> $EV/launch-ddp2.txt; tail -6 $EV/launch-ddp2.txt
timeout 180 python3 -m envtool launch ddp.py --gpus 1 --python "$PY" --run-dir $EV/runs -- --max-steps 200 --log-every 50 > $EV/launch-ddp1.txt 2>&1; echo "rc=$?" >> $EV/launch-ddp1.txt; tail -3 $EV/launch-ddp1.txt
pack
for g in 2 1; do
  step "launch lm 124m --gpus $g (compile, bf16, batch 16)"
  timeout 200 python3 -m envtool launch lm.py --gpus $g --python "$PY" --run-dir $EV/runs -- --size 124m --batch-size 16 --compile --max-steps 60 --log-every 10 --out-dir /tmp/w/out124-$g > $EV/launch-lm124-$g.txt 2>&1; echo "rc=$?" >> $EV/launch-lm124-$g.txt; tail -4 $EV/launch-lm124-$g.txt
  pack
done
for g in 1 2; do
  step "launch lm 1.3b --gpus $g (compile, bf16, batch 8)"
  timeout 220 python3 -m envtool launch lm.py --gpus $g --python "$PY" --run-dir $EV/runs -- --size 1.3b --batch-size 8 --compile --max-steps 40 --log-every 10 --ckpt-every -1 --out-dir /tmp/w/out13-$g > $EV/launch-lm13-$g.txt 2>&1; echo "rc=$?" >> $EV/launch-lm13-$g.txt; tail -4 $EV/launch-lm13-$g.txt
  pack
done
step done
