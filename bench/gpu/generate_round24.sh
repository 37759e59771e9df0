#!/usr/bin/env bash
# Issue 25 round 24, one call on whichever one-GPU kind comes: attention asks the copy engine
# for proj's weights into L2 while it runs (ATTN_L2_NEXT = 1, a sed copy: l2.py). Round 23's
# attn_cost --parts found attention ~3.8 us of fixed latency a layer, with or without its cache
# loads and atomics: HBM is mostly idle for it, and proj (4.2 MB int8, 8.4 MB bf16) follows.
# Every program of attention's grid (the ones past pos, which do nothing else, too) asks for
# a 16-byte multiple of proj's weights (cp.async.bulk.prefetch.L2, one thread a program).
# Round 15's bulk prefetch lost 7.7 % when each product asked for its own weights just before
# reading them; here they are asked for a kernel ahead, in time attention spends waiting.
# Parts: probe13, newint8 / l2int8 (cold), their restarts, bf16 each way.
# Run with carry [".gpuwork"] (the probe; gitignored): TAG=call1 BUDGET=400 (PARTS picks).
set -u
source "$(dirname "$0")/steps.sh"; machine_line; generate_setup
sed "s/^ATTN_L2_NEXT = [0-9]$/ATTN_L2_NEXT = 1/" $W/gen.py > $W/l2.py
grep -c "^ATTN_L2_NEXT = 1$" $W/l2.py >> $LOG; L2="python3 $W/l2.py"
for part in ${PARTS:-probe13 newint8 l2int8 newint8w l2int8w l2bf16 newbf16}; do case $part in
l2int8) step g24-int8-l2 100 $L2 --size 1.3b $BENCH --compile-cache /tmp/cl2 --quant int8 ;;
l2int8w) step g24-int8-l2-warm 40 $L2 --size 1.3b $BENCH --compile-cache /tmp/cl2 --quant int8 ;;
l2bf16) step g24-bf16-l2 80 $L2 --size 1.3b $BENCH --compile-cache /tmp/cbl2 ;;
*) generate_part g24 $part || echo "unknown part: $part" ;;
esac; done
summarize "$GENERATE_SUMMARY"
