# Sourced by the generate_round*.sh device scripts: the device's environment (NVLink multicast
# off, as the device README asks), the timed `step`, and the machine line at the top of $LOG.
# Needs LOG (the log file), T0 (the call's start, date +%s) and BUDGET (its seconds) set first.
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
