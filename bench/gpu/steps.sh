# Sourced by the generate_round*.sh device scripts: the device's environment (NVLink multicast
# off, as the device README asks), the timed `step`, and the machine line at the top of $LOG.
# TAG names the log ($OUT/$TAG.log), BUDGET is the seconds the call may use (both may be set
# before sourcing); T0 is the call's start. DRY=1 (the tests, no GPU): each step only logged,
# so a script's sed copies of the template are checked before a device call.
TAG=${TAG:-run1}; LOG=$OUT/$TAG.log; T0=${T0:-$(date +%s)}; BUDGET=${BUDGET:-560}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
step() {  # step NAME TIMEOUT CMD...: skipped when the call's budget is spent
  local name=$1 limit=$2; shift 2
  if [[ -n "${DRY:-}" ]]; then echo "=== $name: $*" >> $LOG; echo "$name dry"; return; fi
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
need() {  # need FILE...: the files the call carries (.gpuwork), checked before any GPU work:
  # without them every step would fail at once, and the device time be spent on nothing
  local f missing=()
  for f in "$@"; do [[ -f $f ]] || missing+=("$f"); done
  (( ${#missing[@]} == 0 )) && return 0
  echo "missing: ${missing[*]} (carry [\".gpuwork\"]; the script's header says how each is made)" | tee -a $LOG >&2
  [[ -n "${DRY:-}" ]] || exit 2
}
machine_line() {  # the GPU, torch and triton versions and their import time, into $LOG
  [[ -n "${DRY:-}" ]] && return
  TIMEFORMAT="import torch+triton: %R s"
  { nvidia-smi -L; time python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'; } >> $LOG 2>&1
}
generate_setup() {  # W, G: the template copied as `envtool init --template generate` writes it;
  # P: the probe (carried as .gpuwork/decode_probe.py); BENCH: round 6 on's shapes, batch 1
  W=${W:-/tmp/w}; mkdir -p $W && cp templates/generate.py $W/gen.py
  P=.gpuwork/decode_probe.py
  BENCH="--seq-len 2048 --prompt-len 512 --max-new-tokens 300 --temperature 0 --repeat ${REPEAT:-3}"
  G="python3 $W/gen.py"
}
generate_part() {  # generate_part TAG PART: a step the rounds from 14 on share, its log names
  # prefixed by TAG (g14, g15). The new template is $G, the old one $OLD (by default
  # .gpuwork/generate_old.py); T8 (the int8 tiles the sweeps time) comes from the round's
  # script. Returns 1 for a PART it does not know, so the script can try its own.
  local t=$1 old="python3 ${OLD:-.gpuwork/generate_old.py}"
  local sw="python3 bench/gpu/gemv_cost.py --sweep --quant int8 --tiles ${T8:-}"
  local lm="--size 124m --data /tmp/train.txt --vocab-size 256 --seq-len 1024 --batch-size 16 --max-steps 1000 --warmup-steps 30 --log-every 100 --resume never --out-dir /tmp/lout"
  local ev="--ckpt /tmp/lout --eval-data /tmp/heldout.txt --eval-windows 128 --max-new-tokens 300 --repeat 1 --temperature 0.8 --compile-cache /tmp/cl"
  case $2 in
  newint8) step $t-int8 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
  newint8w) step $t-int8-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
  oldint8) step $t-int8-old 80 $old --size 1.3b $BENCH --compile-cache /tmp/cio --quant int8 ;;
  newbf16) step $t-bf16 80 $G --size 1.3b $BENCH --compile-cache /tmp/cb ;;
  oldbf16) step $t-bf16-old 70 $old --size 1.3b $BENCH --compile-cache /tmp/cbo ;;
  new124) step $t-124m 50 $G --size 124m $BENCH --compile-cache /tmp/c124 ;;
  old124) step $t-124m-old 50 $old --size 124m $BENCH --compile-cache /tmp/c124o ;;
  sweepnew) step sweep-new 120 $sw ;;
  sweepold) step sweep-old 120 $sw --template ${OLD:-.gpuwork/generate_old.py} ;;
  # old beside new on one set of picks: the old template's cold start, then restarts of each,
  # alternating, PAIRS times; serve_options.py on each (1.3B int8, 124M), old first (cold)
  oldcold) step $t-int8-old 100 $old --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
  pairs) local i; for i in $(seq ${PAIRS:-2}); do
      step $t-int8-new-$i 40 $G --size 1.3b $BENCH --quant int8 --compile-cache /tmp/ci
      step $t-int8-old-$i 40 $old --size 1.3b $BENCH --quant int8 --compile-cache /tmp/ci
    done ;;
  options) local s13="--size 1.3b --vocab-size 256 --seq-len 2048 --quant int8"
    step $t-options-old 150 python3 bench/gpu/serve_options.py ${OLD:-.gpuwork/generate_old.py} $s13 --compile-cache /tmp/cs
    step $t-options-new 100 python3 bench/gpu/serve_options.py $W/gen.py $s13 --compile-cache /tmp/cs ;;
  options124) local s124="--size 124m --vocab-size 256 --seq-len 2048"
    step $t-options124-old 100 python3 bench/gpu/serve_options.py ${OLD:-.gpuwork/generate_old.py} $s124 --compile-cache /tmp/cs124
    step $t-options124-new 80 python3 bench/gpu/serve_options.py $W/gen.py $s124 --compile-cache /tmp/cs124 ;;
  ready13) local r13="--size 1.3b --vocab-size 256 --seq-len 2048 --quant int8 --compile-cache /tmp/cr"
    step $t-ready-cold 150 python3 bench/gpu/serve_ready.py $W/gen.py $r13
    step $t-ready-restart 60 python3 bench/gpu/serve_ready.py $W/gen.py $r13 ;;
  ready13old) local r13="--size 1.3b --vocab-size 256 --seq-len 2048 --quant int8 --compile-cache /tmp/cro"
    step $t-ready-cold-old 150 python3 bench/gpu/serve_ready.py ${OLD:-.gpuwork/generate_old.py} $r13 ;;
  pickcheck) step $t-pick-check 120 python3 bench/gpu/pick_check.py $W/gen.py 124m ;;
  streamcost) step $t-stream-cost-old 90 python3 bench/gpu/stream_cost.py ${OLD:-.gpuwork/generate_old.py} 124m
    step $t-stream-cost 90 python3 bench/gpu/stream_cost.py $W/gen.py 124m ;;
  probe13) step probe-1.3b 90 python3 $P 1.3b ;;
  probe124) step probe-124m 50 python3 $P 124m ;;
  train) stdlib_corpus; step train-124m 120 python3 templates/lm.py $lm ;;
  sampleint8) step sample-int8 90 $G $ev --prompt "$(head -c 256 /tmp/heldout.txt | tr -cd '[:print:]\n')" --quant int8 ;;
  samplebf16) step sample-bf16 60 $G $ev --prompt "$(head -c 256 /tmp/heldout.txt | tr -cd '[:print:]\n')" ;;
  *) return 1 ;;
  esac
}
GENERATE_SUMMARY="^=== |^PICK_CHECK|^STREAM_SAME|^STEP_READER|^HEAD_VS|^ONE_PROGRAM|^serve:|^prefill|^decode|^eval|TTFT|Error|error|gemv_tiles|WRONG|^\| |autotuned|fit,|^PDL|: \(|us .* TB/s"
generate_round() {  # generate_round TAG PART...: a generate round's call, whole: the machine
  # line, the template's copy, each part (generate_part), the summary
  local t=$1 part; shift
  machine_line; generate_setup
  for part in "$@"; do generate_part $t $part || echo "unknown part: $part"; done
  summarize "$GENERATE_SUMMARY"
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
