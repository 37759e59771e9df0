#!/usr/bin/env bash
# Issue 25 round 22, one nvidia-h200 call: int8's weights as 32-bit words, a tile ahead
# (GEMV_PREFETCH; runs against 4eb8b67's template: the option lost 4.3 % and was taken back). Compiled here (bench/gpu/sass_count.py), an int8 product's K loop is
# ~3 instructions a weight and has no load in flight while it computes: a program asks for
# its tile, waits ~1 us, then computes, so an SM with 1-2 programs of 16 KB tiles reads ~3 TB/s.
# Carrying the next tile through the loop as uint8 costs a register a byte and ~3x the
# permutes (round 9's streaming loss, seen in the SASS); as words it costs 16 registers, and
# an accumulator a word (not a weight) frees more than that (fc_proj 162 -> 100 registers,
# 1 -> 2 programs an SM). Parts:
#  - check: every int8 tile, words, checked against torch's product on the GPU (and timed);
#  - probe13, pf (X_ASM 0, GEMV_PREFETCH 1, cold: the tuner picks each product's tile),
#    gl (X_ASM 0, GEMV_PREFETCH 0: round 20's gemvload, the same tuner without words),
#    pfw / glw (each restarted from its --compile-cache: a second sample);
#  - pfx (X_ASM 1 with words: the default's PTX loads of x, their tl.load twins timed).
# Run with carry [".gpuwork"] (the probe; gitignored): TAG=call1 BUDGET=540 (PARTS picks).
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
variant() {  # variant X_ASM PREFETCH FILE: the template with those settings
  sed "s/^X_ASM = [0-9]$/X_ASM = $1/; s/^GEMV_PREFETCH = [0-9]$/GEMV_PREFETCH = $2/" $W/gen.py > $3
  grep -c "^X_ASM = $1$" $3 >> $LOG; grep -c "^GEMV_PREFETCH = $2$" $3 >> $LOG
}
variant 0 1 $W/pf.py; variant 0 0 $W/gl.py; variant 1 1 $W/pfx.py
for part in ${PARTS:-probe13 pf gl pfw glw check pfx}; do case $part in
check) step check-int8-words 170 python3 bench/gpu/gemv_cost.py --sweep --head --quant int8 --tiles all --template $W/pf.py ;;
pf) step g22-int8-words 100 python3 $W/pf.py --size 1.3b $BENCH --compile-cache /tmp/cpf --quant int8 ;;
gl) step g22-int8-bytes 100 python3 $W/gl.py --size 1.3b $BENCH --compile-cache /tmp/cgl --quant int8 ;;
pfw) step g22-int8-words-warm 40 python3 $W/pf.py --size 1.3b $BENCH --compile-cache /tmp/cpf --quant int8 ;;
glw) step g22-int8-bytes-warm 40 python3 $W/gl.py --size 1.3b $BENCH --compile-cache /tmp/cgl --quant int8 ;;
pfx) step g22-int8-words-xasm 110 python3 $W/pfx.py --size 1.3b $BENCH --compile-cache /tmp/cpfx --quant int8 ;;
*) generate_part g22 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
