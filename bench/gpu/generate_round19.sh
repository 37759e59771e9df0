#!/usr/bin/env bash
# Issue 25 round 19, nvidia-h200 calls; 1b6d9d5's template (round 17's last: qkv's and the
# head's run accumulators; `git show 1b6d9d5:templates/generate.py > .gpuwork/generate_old.py`)
# runs beside the changed one, each on its own --compile-cache, and the probe.
# Call 1 (default PARTS): two changes of round 18 not yet run on a GPU.
#  - newint8: the template (refine_in_step on: each product's four fastest tiles timed again as
#    the whole step's graph); norefine: the same with STEP_TOP = 0 (a sed copy).
#  - xasm: X_ASM = 1 (a sed copy): _gemv_kernel reads x's chunks by PTX loads in the
#    weights' layout (_x_load), an element a load, not tl.load, whose layout Triton changes
#    through shared memory (2-16 barriers an iteration after the wait, in the SASS; the run
#    accumulators read x leaf by leaf); xasmvec: X_ASM = 2, eight bf16 a load where x allows
#    (where Triton gives a thread runs of 8: as first prepared, fc's and fc_proj's sums of x
#    and attention got copies packing elements far apart, wrong x; mended 2026-12-05, the
#    TTGIR checked at every tile by sass_count.py's "x8 apart");
#    xasmcap: X_ASM = 2 with GEMV_MAXNREG = 128 (Triton 3.6 gives some tiles more registers
#    with X_ASM, so fewer programs an SM: fc_proj's 8 x 2048 x 8 1 for 2; `sass_count.py
#    --all-tiles` run under 3.6 here, docs/evidence/gpu/round19/);
#    xasmlane0: X_ASM = 1 with qkv's accumulators one a weight again.
#    With X_ASM, refine_in_step also times each product's fastest tiles with x read by
#    tl.load (their twins, a fourth element 0 in RESULT's gemv_tiles), in the whole step: the
#    twins' step_us are X_ASM's worth product by product, and a product keeps whichever wins.
#    Greedy tokens must equal newint8's where the tiles are the same (the same arithmetic).
# The probe runs second, so a spent budget never leaves the call without it.
# Then (PARTS="xasmcheck newcap xasmbf16 newbf16 xasm124 new124 ncu"; xasmcheck: every int8
# tile the tuner tries, with X_ASM 2, checked against torch's product on the GPU (gemv_cost.py
# --sweep --tiles all, "WRONG" if not) and timed; newcap: the cap without X_ASM;
# xasmnoproj, X_ASM 2 but for proj, is left as a part: the twins above try that per product):
# the other sizes, and ncu's view of the int8 block products (barrier and memory stalls) with
# and without X_ASM.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
xasm() { sed "s/^X_ASM = [0-9]$/X_ASM = ${1:-1}/" $W/gen.py > $W/gen_xa.py; grep -c "^X_ASM = ${1:-1}$" $W/gen_xa.py >> $LOG; }
cap() { sed "s/^GEMV_MAXNREG = 0$/GEMV_MAXNREG = $1/" $2 > $3; grep -c "^GEMV_MAXNREG = $1$" $3 >> $LOG; }
NCU="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1) --clock-control none --launch-skip 40 --launch-count 6 --section SpeedOfLight --section WarpStateStats --section Occupancy"
for part in ${PARTS:-newint8 probe13 xasm xasmvec xasmcap norefine oldint8 xasmlane0}; do case $part in
norefine) sed "s/^STEP_TOP = 4 /STEP_TOP = 0 /" $W/gen.py > $W/gen_nr.py
  grep -c "^STEP_TOP = 0 " $W/gen_nr.py >> $LOG
  step g19-int8-norefine 100 python3 $W/gen_nr.py --size 1.3b $BENCH --compile-cache /tmp/cinr --quant int8 ;;
xasm) xasm; step g19-int8-xasm 100 python3 $W/gen_xa.py --size 1.3b $BENCH --compile-cache /tmp/cixa --quant int8 ;;
xasmvec) xasm 2; cp $W/gen_xa.py $W/gen_xv.py
  step g19-int8-xasmvec 100 python3 $W/gen_xv.py --size 1.3b $BENCH --compile-cache /tmp/cixv --quant int8 ;;
xasmcap) xasm 2; cap 128 $W/gen_xa.py $W/gen_xc.py
  step g19-int8-xasmcap 100 python3 $W/gen_xc.py --size 1.3b $BENCH --compile-cache /tmp/cixc --quant int8 ;;
xasmnoproj) xasm 2; sed "s/X_ASM=x_asm_for(x, K, tile or ()), \*\*fixed,/X_ASM=0 if heads else x_asm_for(x, K, tile or ()), **fixed,/" $W/gen_xa.py > $W/gen_xn.py
  grep -c "X_ASM=0 if heads else x_asm_for(x, K, tile or ())" $W/gen_xn.py >> $LOG
  step g19-int8-xasm-noproj 100 python3 $W/gen_xn.py --size 1.3b $BENCH --compile-cache /tmp/cixn --quant int8 ;;
xasmcheck) xasm 2; cp $W/gen_xa.py /tmp/gen_xv.py
  step check-int8-xasmvec 150 python3 bench/gpu/gemv_cost.py --sweep --head --quant int8 --tiles all --template /tmp/gen_xv.py ;;
newcap) cap 128 $W/gen.py $W/gen_c.py
  step g19-int8-cap 100 python3 $W/gen_c.py --size 1.3b $BENCH --compile-cache /tmp/cic --quant int8 ;;
xasmlane0) xasm; sed "s/gemv(x, a.qkv, ln=self.ln1, zero=a.sums, runs=True)/gemv(x, a.qkv, ln=self.ln1, zero=a.sums)/" $W/gen_xa.py > $W/gen_xa0.py
  grep -c "gemv(x, a.qkv, ln=self.ln1, zero=a.sums), a, pos)" $W/gen_xa0.py >> $LOG
  step g19-int8-xasm-lane0 100 python3 $W/gen_xa0.py --size 1.3b $BENCH --compile-cache /tmp/cixa0 --quant int8 ;;
xasmbf16) xasm; step g19-bf16-xasm 80 python3 $W/gen_xa.py --size 1.3b $BENCH --compile-cache /tmp/cbxa ;;
xasm124) xasm; step g19-124m-xasm 50 python3 $W/gen_xa.py --size 124m $BENCH --compile-cache /tmp/c124xa ;;
ncu) xasm; cp $W/gen_xa.py /tmp/gen_xa.py
  step ncu-int8 150 $NCU -k regex:_gemv_kernel python3 bench/gpu/gemv_cost.py --sweep --quant int8 --only fc_proj,fc,qkv --tiles 8x2048x8,32x512x8,8x1024x4
  step ncu-int8-xasm 150 $NCU -k regex:_gemv_kernel python3 bench/gpu/gemv_cost.py --sweep --quant int8 --only fc_proj,fc,qkv --tiles 8x2048x8,32x512x8,8x1024x4 --template /tmp/gen_xa.py ;;
*) generate_part g19 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY|Stall|Barrier|Long Scoreboard|Duration|Memory Throughput|Achieved Occupancy"
