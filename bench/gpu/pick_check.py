"""Picker.step's CUDA graphs against the same work run eagerly, on a GPU (issue 25 round 34).

Every pick after a decode step (top-p, penalties, logit_bias, logprobs) runs both ways on the
same logits and state: eagerly first, then the state put back and the graph replayed (captured
on a plan's first use, by the request before). tok, out, the counts and the logprobs rows must
agree bit for bit, for requests whose parameters differ from the one each graph was captured
in. Then how many tokens a request whose logit_bias changes nothing (so Picker.step draws)
shares with the same request drawn by the head (the same Philox noise: all of them, unless a
fused multiply-add rounds a near-tie apart). Random weights, byte-level vocabulary.

    python bench/gpu/pick_check.py GEN.py [SIZE]
"""

import sys

import torch
from template import load_template, random_model  # bench/gpu: the script's own folder


def main() -> int:
    size = sys.argv[2] if len(sys.argv) > 2 else "124m"
    g = load_template(sys.argv[1])  # sets argv aside
    dev = torch.device("cuda")
    n_layer, n_head, d_model = g.SIZES[size]
    s = g.ModelShape(n_layer, n_head, d_model, 256, 2048)
    m = random_model(g, s, 0)
    e = g.Engine(m, dev, g.Config(), 0, 1)
    assert e.fast and e.graphs, "needs the Triton decode and CUDA graphs"
    p = e.picker
    for t in (p.kept.chosen, p.kept.values, p.kept.ids):
        t.zero_()  # rows never written compare equal
    names = ("tok", "out", "row", "counts", "chosen", "values", "ids")
    real = g.Engine.run_pick
    seen = {"checked": 0, "plans": set(), "bad": []}

    def both(self, plan, logits) -> None:
        kept = p.kept
        state = (self.tok, self.out, p.row, p.adjust.counts, kept.chosen, kept.values, kept.ids)
        before = [t.clone() for t in state]
        p.step(logits, self.tok, self.pos, self.out, plan, True)
        eager = [t.clone() for t in state]
        for t, b in zip(state, before, strict=True):
            t.copy_(b)
        real(self, plan, logits)
        for name, t, want in zip(names, state, eager, strict=True):
            if not torch.equal(t, want):
                seen["bad"].append((plan, name))
        seen["checked"] += 1
        seen["plans"].add(plan)

    g.Engine.run_pick = both
    ids = list(b"the quick brown fox jumps over the lazy dog; " * 8)
    pen = {"bias": {}, "presence": 0.5, "freq": 0.5}
    asks = [  # two requests a plan, with other parameters the second time
        dict(temperature=1.0, top_p=0.9, seed=1),
        dict(temperature=0.7, top_p=0.5, seed=2),
        dict(temperature=0.0, adjust=pen),
        dict(temperature=0.0, adjust={"bias": {101: 3.0}, "presence": 0.0, "freq": 1.5}),
        dict(
            temperature=0.8, adjust={"bias": {120: 1.0}, "presence": 0.0, "freq": 0.0}, logprobs=5
        ),
        dict(
            temperature=1.3, adjust={"bias": {32: -5.0}, "presence": 0.2, "freq": 0.0}, logprobs=2
        ),
        dict(temperature=1.0, seed=3, logprobs=5),  # the head draws, Picker keeps the logprobs
        dict(temperature=1.0, seed=4, logprobs=20),
        dict(temperature=0.0, logprobs=0),
        dict(temperature=0.0, logprobs=3),
        dict(temperature=1.0, top_p=0.9, seed=5, adjust=pen, logprobs=5),
        dict(temperature=0.6, top_p=0.95, seed=6, adjust=pen, logprobs=1),
    ]
    for ask in asks:
        e.generate(ids, 100, **ask)
    g.Engine.run_pick = real
    print(f"PICK_CHECK checked {seen['checked']} steps, {len(seen['plans'])} plans, "
          f"{len(seen['bad'])} mismatches {seen['bad'][:5]}", flush=True)  # fmt: skip
    same = []
    for seed in range(1, 6):
        head = e.generate(ids, 300, temperature=1.0, seed=seed)["tokens"]
        none = {"bias": {0: 0.0}, "presence": 0.0, "freq": 0.0}
        picked = e.generate(ids, 300, temperature=1.0, seed=seed, adjust=none)["tokens"]
        pairs = enumerate(zip(head, picked, strict=True))
        same.append(next((i for i, (a, b) in pairs if a != b), len(head)))
    print(f"HEAD_VS_PICKER tokens shared before the first difference (of 300): {same}")
    return 1 if seen["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
