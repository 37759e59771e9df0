#!/usr/bin/env bash
# Issue 25 round 11, one nvidia-h200 call: tensor-core (MMA) tiles for the decode products
# (int8 weights made fp16 by byte permutes, tl.dot against x as a 16-column operand; their loads
# stream through shared memory) and int8's FMA tiles converting by byte permute (no integer
# add). First the in-graph sweep of every product over the FMA tiles and a grid of MMA tiles,
# each checked against torch's product; then generate, which tunes over GEMV_TILES (now with
# MMA tiles) in the graph, beside the template before the change (418e150, carried as
# .gpuwork/generate_old.py) and the probe.
# Call 2 (PARTS="attn base13 attn13 baseint8 attnint8"): decode attention's cost by cache chunk
# and warps (attn_cost.py), then generate with the fastest (chunk, warps) patched into a copy of
# the template beside the template as committed, both on one --compile-cache (the same tiles).
# It ran with ATTN_WARPS = 4 in the template; since 0a9b1bc the template has 2, so the patch is a no-op.
# Run with carry [".gpuwork"] (the probe and the old template; gitignored).
# TAG names the log, PARTS picks the steps, BUDGET the seconds this call may use.
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
OLD="python3 .gpuwork/generate_old.py"
for part in ${PARTS:-sweep newint8 oldint8 new13 old13 probe13}; do case $part in
sweep) step gemv-sweep 240 python3 bench/gpu/gemv_cost.py --sweep ;;
probe13) step probe-1.3b 100 python3 $P 1.3b ;;
new13) step g13-cold 90 $G --size 1.3b $BENCH --compile-cache /tmp/cb
       step g13-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/cb ;;
old13) step g13-old 80 $OLD --size 1.3b $BENCH ;;
newint8) step g13-int8-cold 100 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8
         step g13-int8-warm 40 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
oldint8) step g13-int8-old 100 $OLD --size 1.3b $BENCH --quant int8 ;;
attn) step attn-cost 150 python3 bench/gpu/attn_cost.py
      best=$(python3 - $LOG <<'PY'
import sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| ") and "WRONG" not in l]
rows = [[c.strip() for c in r] for r in rows if r and r[0].strip().isdigit()]
best = min(rows, key=lambda r: sum(map(float, r[2:])))
print(best[0], best[1])
PY
)
      read CH WA <<< "$best"; echo "=== attention pick: chunk $CH warps $WA" | tee -a $LOG
      sed -e "s/^ATTN_CHUNK = 64 /ATTN_CHUNK = $CH /" -e "s/^ATTN_WARPS = 4 /ATTN_WARPS = $WA /" \
        $W/gen.py > $W/gen_attn.py
      diff $W/gen.py $W/gen_attn.py >> $LOG ;;
base13) step g13-base 90 $G --size 1.3b $BENCH --compile-cache /tmp/cb ;;
attn13) step g13-attn 90 python3 $W/gen_attn.py --size 1.3b $BENCH --compile-cache /tmp/cb ;;
baseint8) step g13-int8-base 90 $G --size 1.3b $BENCH --compile-cache /tmp/ci --quant int8 ;;
attnint8) step g13-int8-attn 90 python3 $W/gen_attn.py --size 1.3b $BENCH --compile-cache /tmp/ci \
            --quant int8 ;;
probe124) step probe-124m 50 python3 $P 124m ;;
new124) step g124 50 $G --size 124m $BENCH --compile-cache /tmp/c124 ;;
old124) step g124-old 50 $OLD --size 124m $BENCH ;;
esac; done
summarize "^=== |^prefill|^decode|TTFT|Error|error|gemv_tiles|WRONG|^\| |autotuned|fit,|^PDL"
