#!/usr/bin/env bash
# Issue 16 evidence, one device call on nvidia-h200 (one GPU): nanoGPT (train.py @3adf61e1,
# unmodified, synthetic tokens) and the lm template side by side, same shape, micro-batch,
# accumulation, torch.compile and bf16; the template also with --fp8. Then fp8-vs-bf16 loss
# agreement on real byte-level text (Python stdlib sources). Each stage is skipped when the
# call's time is short, so the whole script ends inside one 10-minute command.
#
# Needs (carried, git-ignored): .fp8bench/nanogpt/{train,model,configurator}.py, .fp8bench/corpus.txt
# Usage (repo root): bash bench/gpu/fp8_round.sh [CPU]   # CPU: a --cpu --size tiny rehearsal
# Logs: $OUT/fp8.tgz (one log per run) and $OUT/summary.txt (bench/gpu/fp8_table.py).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
CPU=${1:-}
ROOT=$PWD
PY=${PY:-$(command -v python3)}
OUT=${OUT:-/tmp/fp8out}
EV=/tmp/fp8ev
rm -rf "$EV" && mkdir -p "$EV" "$OUT"
SECONDS=0

save() { tar czf "$OUT/fp8.tgz" -C /tmp fp8ev; }
# run NAME TIMEOUT_S SKIP_AFTER_S CMD...: skipped when SECONDS > SKIP_AFTER_S
run() {
  local name=$1 limit=$2 after=$3; shift 3
  if [ "$SECONDS" -gt "$after" ]; then echo "=== $name SKIPPED (t=${SECONDS}s)" | tee "$EV/$name.txt"; return; fi
  [ $((585 - SECONDS)) -lt "$limit" ] && limit=$((585 - SECONDS))  # the call's 600 s
  echo "=== $name (t=${SECONDS}s, limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" > "$EV/$name.txt" 2>&1
  local rc=$?
  echo "rc=$rc wall=$((SECONDS - t0))s" >> "$EV/$name.txt"
  grep -E "RESULT|rc=|Error|error:" "$EV/$name.txt" | tail -3
  save
}

{ nvidia-smi -L; $PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'; } > "$EV/env.txt" 2>&1
cat "$EV/env.txt"

# nanoGPT's synthetic dataset: random GPT-2 token ids (no meta.pkl: vocab 50304, as the template)
NG=/tmp/nanogpt && rm -rf $NG && cp -r "$ROOT/.fp8bench/nanogpt" $NG && mkdir -p $NG/data/synth
$PY -c "
import numpy as np
r = np.random.default_rng(0)
for s in ('train', 'val'):
    r.integers(0, 50257, 4_000_000, dtype=np.uint16).tofile('$NG/data/synth/' + s + '.bin')"

if [ -n "$CPU" ]; then  # rehearsal: every command below, tiny, on CPU
  NGX="--device=cpu --compile=False --dtype=float32 --n_layer=2 --n_head=2 --n_embd=64"
  TX="--cpu --size tiny"
  SH13="--batch-size 2 --grad-accum 2 --seq-len 64"; NS13="--batch_size=2 --gradient_accumulation_steps=2 --block_size=64"
  SH124="$SH13"; NS124="$NS13"; LOSS_STEPS=20; LOSS_SEQ=64
else
  NGX="--compile=True --dtype=bfloat16"
  TX="--compile"
  SH13="--size 1.3b --batch-size 16 --grad-accum 8 --seq-len 1024"
  NS13="--n_layer=24 --n_head=16 --n_embd=2048 --batch_size=16 --gradient_accumulation_steps=8 --block_size=1024"
  SH124="--size 124m --batch-size 16 --grad-accum 4 --seq-len 1024"
  NS124="--n_layer=12 --n_head=12 --n_embd=768 --batch_size=16 --gradient_accumulation_steps=4 --block_size=1024"
  LOSS_STEPS=300; LOSS_SEQ=1024
fi
# 12 optimizer steps, every one logged (a sync per step in both scripts: nanoGPT's loss.item())
NGC="--dataset=synth --max_iters=12 --eval_iters=1 --eval_interval=100000 --log_interval=1 --out_dir=/tmp/ngout --always_save_checkpoint=False"
T="--max-steps 12 --log-every 1 --warmup-steps 5 --ckpt-every -1 --resume never --out-dir /tmp/tout --vocab-size 50304"
TP=$ROOT/templates/lm.py

L="--size 124m --data $ROOT/.fp8bench/corpus.txt --vocab-size 256 --seq-len $LOSS_SEQ --batch-size 16 --max-steps $LOSS_STEPS --warmup-steps 30 --log-every 25 --ckpt-every -1 --resume never --out-dir /tmp/lout"
[ -n "$CPU" ] && L="$L --cpu --size tiny"
OLD=$ROOT/.fp8bench/lm_old.py  # optional: an earlier lm template, run beside this one
# RUNS: which runs, in order (each: NAME TIMEOUT SKIP_AFTER); the default is rounds 1-2's
for r in ${RUNS:-nanogpt-1.3b lm-1.3b-bf16 lm-1.3b-fp8 loss-fp8 loss-bf16 fsdp-tiny-fp8 lm-124m-fp8 nanogpt-124m lm-124m-bf16}; do
case $r in
nanogpt-1.3b) run $r 170 60  bash -c "cd $NG && $PY train.py $NGC $NGX $NS13" ;;
lm-1.3b-bf16) run $r 170 400 $PY $TP $T $TX $SH13 ;;
lm-1.3b-fp8) run $r 170 400 $PY $TP $T $TX $SH13 --fp8 ;;
lm-1.3b-fp8-old) run $r 170 400 $PY $OLD $T $TX $SH13 --fp8 ;;
lm-1.3b-bf16-old) run $r 170 400 $PY $OLD $T $TX $SH13 ;;
lm-1.3b-fp8-res) FP8_RESIDUAL=bf16 run $r 170 400 $PY $ROOT/bench/gpu/lm_run.py $TP $T $TX $SH13 --fp8 ;;
# bench-only switches through bench/gpu/lm_run.py: compiled autograd; a longer profile table
lm-1.3b-bf16-ca) COMPILED_AUTOGRAD=1 run $r 200 400 $PY $ROOT/bench/gpu/lm_run.py $TP $T $TX $SH13 ;;
lm-1.3b-bf16-prof) PROFILE_ROWS=60 run $r 170 450 $PY $ROOT/bench/gpu/lm_run.py $TP $T $TX $SH13 --profile-steps 1 ;;
# loss agreement: real text as bytes, 124M, eager, same seed -> same init and data order
loss-fp8) run $r 60 480 $PY $TP $L --fp8 ;;
loss-fp8-res) FP8_RESIDUAL=bf16 run $r 60 520 $PY $ROOT/bench/gpu/lm_run.py $TP $L --fp8 ;;
loss-bf16) run $r 60 520 $PY $TP $L ;;
loss-bf16-old) run $r 60 540 $PY $OLD $L ;;  # the same with the template in .fp8bench/lm_old.py
loss-fp8-seed2) run $r 60 520 $PY $TP $L --fp8 --seed 2 ;;  # the gap for another init and order
loss-bf16-seed2) run $r 60 540 $PY $TP $L --seed 2 ;;
# FSDP2 (one GPU) with per-block compile and --fp8, and a DCP checkpoint: does it compose?
fsdp-tiny-fp8) run $r 45 530 $PY $ROOT/templates/fsdp.py --size tiny --max-steps 6 --log-every 1 $TX --fp8 --ckpt-every 3 --out-dir /tmp/fout ;;
lm-124m-fp8) run $r 60 490 $PY $TP $T $TX $SH124 --fp8 ;;
nanogpt-124m) run $r 80 500 bash -c "cd $NG && $PY train.py $NGC $NGX $NS124" ;;
lm-124m-bf16) run $r 80 520 $PY $TP $T $TX $SH124 ;;
esac; done

$PY "$ROOT/bench/gpu/fp8_table.py" "$EV" | tee "$OUT/summary.txt"
cp "$OUT/summary.txt" "$EV/summary.txt"
save
echo "total ${SECONDS}s"
