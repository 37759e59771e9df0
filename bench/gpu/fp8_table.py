"""Summarise bench/gpu/fp8_round.sh's logs: tokens/s from the mean time of the last 6 of 12
optimizer steps (nanoGPT: its `iter N: ... time T ms` lines; the lm template: its per-step
`tokens/s` lines with --log-every 1), the ratio to nanoGPT at the same shape, MFU against the
989 TFLOP/s dense bf16 peak (also for --fp8, so the numbers stay comparable), and the fp8-vs-bf16
loss agreement on byte-level text.

Usage: python bench/gpu/fp8_table.py LOG_DIR
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PEAK = 989e12
LAST = 6
SHAPES = {  # size: (n_layer, n_head, d_model, vocab, seq_len, tokens per optimizer step)
    "1.3b": (24, 16, 2048, 50304, 1024, 16 * 8 * 1024),
    "124m": (12, 12, 768, 50304, 1024, 16 * 4 * 1024),
}


def flops_per_token(n_layer: int, n_head: int, d: int, vocab: int, seq: int) -> float:
    """The templates' count: 6N + 12·L·H·Q·T, N without the position embedding, head tied."""
    n = n_layer * (12 * d * d + 2 * d) + d + vocab * d
    return 6 * n + 12 * n_layer * d * seq


def step_times(text: str) -> list[float]:
    """Seconds per optimizer step, in order (nanoGPT or template log)."""
    nano = [
        float(ms) / 1000 for ms in re.findall(r"^iter \d+: loss \S+, time ([\d.]+)ms", text, re.M)
    ]
    if nano:
        return nano
    return [
        1 / float(r) for r in re.findall(r"^step \d+ loss \S+ lr \S+ tokens/s (\d+)", text, re.M)
    ]


def main(log_dir: str) -> None:
    logs = Path(log_dir)
    rows, rate = [], {}
    for size, shape in SHAPES.items():
        n_layer, n_head, d, vocab, seq, tokens = shape
        fpt = flops_per_token(n_layer, n_head, d, vocab, seq)
        for who in (
            "nanogpt",
            "lm-bf16",
            "lm-bf16-old",
            "lm-bf16-ca",
            "lm-bf16-rounded",
            "lm-bf16-res",
            "lm-bf16-cdt",
            "lm-fp8",
            "lm-fp8-old",
            "lm-fp8-res",
        ):
            name = f"nanogpt-{size}" if who == "nanogpt" else f"lm-{size}-{who[3:]}"
            path = logs / f"{name}.txt"
            if not path.is_file():
                continue
            times = step_times(path.read_text())
            if who != "nanogpt":  # the template logs tokens/s: seconds per step = tokens / rate
                times = [tokens * t for t in times]
            if len(times) < LAST + 1:
                rows.append(
                    f"| {size} | {who} | not run / failed ({len(times)} steps logged) | | | |"
                )
                continue
            mean = sum(times[-LAST:]) / LAST
            rate[(size, who)] = tokens / mean
            base = rate.get((size, "nanogpt"))
            ratio = f"{rate[(size, who)] / base:.3f}" if base else "n/a"
            mfu = fpt * rate[(size, who)] / PEAK
            spread = (max(times[-LAST:]) - min(times[-LAST:])) / mean
            rows.append(
                f"| {size} | {who} | {mean * 1000:,.0f} ms (±{spread / 2:.1%}) "
                f"| {rate[(size, who)]:,.0f} | {ratio} | {mfu:.1%} |"
            )
    print(
        "| size | run | step time, mean of last 6 of 12 | tokens/s | vs nanoGPT | MFU (bf16 peak) |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))

    losses = {}
    for kind in ("bf16", "fp8", "bf16-old", "fp8-res"):
        path = logs / f"loss-{kind}.txt"
        if path.is_file():
            text = path.read_text()
            losses[kind] = {
                int(s): float(v) for s, v in re.findall(r"^step (\d+) loss (\S+)", text, re.M)
            }
    # fp8 against bf16; this template's bf16 against the earlier one (.fp8bench/lm_old.py)
    for base, other in (("bf16", "fp8"), ("bf16-old", "bf16"), ("bf16", "fp8-res")):
        if not (losses.get(base) and losses.get(other)):
            continue
        print(f"\n| step | {base} loss | {other} loss | {other} / {base} - 1 |")
        print("|---|---|---|---|")
        for step in sorted(set(losses[base]) & set(losses[other])):
            a, b = losses[base][step], losses[other][step]
            print(f"| {step} | {a:.4f} | {b:.4f} | {b / a - 1:+.2%} |")
    for path in sorted(logs.glob("*.txt")):
        results = [line for line in path.read_text().splitlines() if line.startswith("RESULT ")]
        if results:
            r = json.loads(results[-1][7:])
            print(f"{path.stem}: step {r['step']} loss {r['loss']:.4f} params {r['params']:,}")


if __name__ == "__main__":
    main(sys.argv[1])
