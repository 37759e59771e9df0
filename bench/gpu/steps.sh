# Sourced by the generate_round*.sh device scripts: the device's environment (NVLink multicast
# off, as the device README asks), the timed `step`, and the machine line at the top of $LOG.
# TAG names the log ($OUT/$TAG.log), BUDGET is the seconds the call may use (both may be set
# before sourcing); T0 is the call's start.
TAG=${TAG:-run1}; LOG=$OUT/$TAG.log; T0=${T0:-$(date +%s)}; BUDGET=${BUDGET:-560}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
step() {  # step NAME TIMEOUT CMD...: skipped when the call's budget is spent
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  if (( left < 25 )); then echo "=== $name skipped (budget)" | tee -a $LOG; return; fi
  (( limit > left )) && limit=$left
  echo "=== $name: $*" >> $LOG
  local t0=$(date +%s.%N)
  timeout $limit "$@" >> $LOG 2>&1; local rc=$?
  local wall=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  echo "=== $name rc=$rc wall=${wall}s" >> $LOG
  echo "$name rc=$rc wall=${wall}s"
}
machine_line() {  # the GPU, torch and triton versions and their import time, into $LOG
  TIMEFORMAT="import torch+triton: %R s"
  { nvidia-smi -L; time python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'; } >> $LOG 2>&1
}
generate_setup() {  # W, G: the template copied as `envtool init --template generate` writes it;
  # P: the probe (carried as .gpuwork/decode_probe.py); BENCH: round 6 on's shapes, batch 1
  W=/tmp/w; mkdir -p $W && cp templates/generate.py $W/gen.py
  P=.gpuwork/decode_probe.py
  BENCH="--seq-len 2048 --prompt-len 512 --max-new-tokens 300 --temperature 0 --repeat ${REPEAT:-3}"
  G="python3 $W/gen.py"
}
stdlib_corpus() {  # /tmp/train.txt, /tmp/heldout.txt: the Python standard library's sources as
  # text, the last 400,000 bytes held out (the trained-checkpoint checks)
  local std; std=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  cat $std/*.py $std/*/*.py > /tmp/corpus.txt 2>/dev/null
  head -c -400000 /tmp/corpus.txt > /tmp/train.txt; tail -c 400000 /tmp/corpus.txt > /tmp/heldout.txt
  ls -l /tmp/train.txt /tmp/heldout.txt >> $LOG
}
summarize() {  # summarize REGEX: the log's lines that match, into $OUT/$TAG-summary.txt
  grep -E "$1" $LOG | cut -c1-300 > $OUT/$TAG-summary.txt
  cat $OUT/$TAG-summary.txt
}
