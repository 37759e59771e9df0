#!/usr/bin/env bash
# Issue 25 round 20, one nvidia-h200 call: round 19 made X_ASM = 1 the template's default
# (attention's q, k, v and each product's x by PTX loads where the whole step's timing keeps
# them) after checking its products against torch, but target 2's other half, held-out loss
# within 1 % of bf16 on a trained checkpoint, was last run in round 17, before X_ASM; and int8
# met 2.5x by 2-3 tokens/s. This call runs both again with the template as committed:
#  - probe13 and newint8 (cold: tune_gemv, then the step), newint8w (a restart on the same
#    --compile-cache): target 2's speed and target 4 beside the probe;
#  - train, sampleint8, samplebf16: the `lm` template trains a 124M byte-level model on the
#    standard library's sources (1,000 steps), then `generate --ckpt --eval-data` scores the
#    last 400,000 bytes, 128 windows, with int8 and bf16 weights from the same checkpoint;
#  - new124, probe124, newbf16: the other sizes beside their probe;
#  - gemvload (and gemvloadw, its restart; gemvbf16, gemv124): X_ASM = 0 with ATTN_X_ASM = 1
#    (a sed copy): attention's q, k, v by PTX loads as round 19's X_ASM 1, the products by
#    tl.load without timing the twins. Round 19 found every 1.3B product kept its tl.load twin,
#    so the same kernels are expected at the same rate, ready ~10 s sooner cold (no twins
#    compiled and timed: X_ASM's tuning 34.5 s vs 26.7 s before);
#  - xasmcheck (last: left out if the budget is spent): every int8 tile the tuner tries, with
#    X_ASM = 2 (the option, not the default), checked against torch's product on the GPU.
# Run with carry [".gpuwork"] (the probe; gitignored), e.g. TAG=call1 BUDGET=480 (parts in the
# order below, the loss first: a spent budget leaves the last out). TAG names the log, PARTS
# picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
xasm() { sed "s/^X_ASM = [0-9]$/X_ASM = $1/" $W/gen.py > $2; grep -c "^X_ASM = $1$" $2 >> $LOG; }
xasm 0 $W/gen_gl.py; GL="python3 $W/gen_gl.py"  # the gemvload parts' template
for part in ${PARTS:-train sampleint8 samplebf16 probe13 newint8 gemvload newint8w gemvloadw probe124 new124 gemv124 newbf16 gemvbf16 xasmcheck}; do case $part in
gemvload) step g20-int8-gemvload 100 $GL --size 1.3b $BENCH --compile-cache /tmp/cigl --quant int8 ;;
gemvloadw) step g20-int8-gemvload-warm 40 $GL --size 1.3b $BENCH --compile-cache /tmp/cigl --quant int8 ;;
gemvbf16) step g20-bf16-gemvload 80 $GL --size 1.3b $BENCH --compile-cache /tmp/cbgl ;;
gemv124) step g20-124m-gemvload 50 $GL --size 124m $BENCH --compile-cache /tmp/c124gl ;;
xasmcheck) xasm 2 /tmp/gen_xv.py
  step check-int8-xasmvec 150 python3 bench/gpu/gemv_cost.py --sweep --head --quant int8 --tiles all --template /tmp/gen_xv.py ;;
*) generate_part g20 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
