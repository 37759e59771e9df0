"""Picker.step in the decode step's CUDA graph against the same steps run eagerly, on a GPU
(issue 25 round 34).

Each request (top-p, penalties, logit_bias, logprobs; two a plan, the second with other
parameters than the graph was captured with) runs with the engine's graphs, then with them
off (the same kernels on the same tile picks, launched one by one): the tokens must be the
same and the logprobs within 1e-4. Then how many tokens a request whose logit_bias changes
nothing (so Picker.step draws) shares with the same request drawn by the head (the same
Philox noise: all of them, unless a fused multiply-add rounds a near-tie apart), and for how
many of the requests the one-program kernels (_pick_kernel: bias, penalties, sort, softmax,
cumulative sum, the draw; _keep_kernel: log-softmax, top-k) and torch's kernels give the same
tokens (a sum rounded otherwise may move the nucleus's edge), and their logprobs. Random
weights, byte-level vocabulary.

    python bench/gpu/pick_check.py GEN.py [SIZE]
"""

import sys

from template import load_template, random_engine  # bench/gpu: the script's own folder


def main() -> int:
    size = sys.argv[2] if len(sys.argv) > 2 else "124m"
    g = load_template(sys.argv[1])  # sets argv aside
    e = random_engine(g, size)
    assert e.fast and e.graphs, "needs the Triton decode and CUDA graphs"
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
            temperature=1.3, adjust={"bias": {32: -5.0}, "presence": 0.0, "freq": 0.0}, logprobs=2
        ),
        dict(temperature=1.0, seed=3, logprobs=5),  # the head draws, Picker keeps the logprobs
        dict(temperature=1.0, seed=4, logprobs=20),
        dict(temperature=0.0, logprobs=0),
        dict(temperature=0.0, logprobs=3),
        dict(temperature=1.0, top_p=0.9, seed=5, adjust=pen, logprobs=5),
        dict(temperature=0.6, top_p=0.95, seed=6, adjust=pen, logprobs=1),
    ]
    bad, worst = [], 0.0
    for ask in asks:
        graphed = e.generate(ids, 200, **ask)
        e.graphs = False
        eager = e.generate(ids, 200, **ask)
        e.graphs = True
        if graphed["tokens"] != eager["tokens"]:
            bad.append(ask)
        for a, b in zip(graphed.get("logprobs", []), eager.get("logprobs", []), strict=True):
            worst = max(
                worst,
                abs(a[0] - b[0]),
                *(abs(x[1] - y[1]) for x, y in zip(a[1], b[1], strict=True)),
            )
            if [x[0] for x in a[1]] != [y[0] for y in b[1]]:
                bad.append(("top ids", ask))
    plans = [k for k in e.decode_graphs if isinstance(k, tuple)]
    print(f"PICK_CHECK {len(asks)} requests, {len(plans)} step graphs with a plan, "
          f"{len(bad)} differing {bad[:3]}; logprobs at most {worst:.2e} apart", flush=True)  # fmt: skip
    # the one-program kernels (_pick_kernel, _keep_kernel) against torch's kernels
    small = asks  # every one picks or keeps (_pick_kernel, _keep_kernel)
    kernel = [e.generate(ids, 200, **ask) for ask in small]
    g.SMALL_VOCAB = 0  # and the graphs captured with them dropped: captured again without
    e.decode_graphs = {k: v for k, v in e.decode_graphs.items() if not isinstance(k, tuple)}
    torch_k = [e.generate(ids, 200, **ask) for ask in small]
    alike = [a["tokens"] == b["tokens"] for a, b in zip(kernel, torch_k, strict=True)]
    apart = 0.0
    for a, b, ok in zip(kernel, torch_k, alike, strict=True):
        for x, y in zip(a.get("logprobs", []) if ok else [], b.get("logprobs", []), strict=False):
            apart = max(
                apart,
                abs(x[0] - y[0]),
                *(abs(p[1] - q[1]) for p, q in zip(x[1], y[1], strict=True)),
            )
    print(f"ONE_PROGRAM_VS_TORCH {sum(alike)} of {len(small)} requests the same 200 tokens; "
          f"logprobs at most {apart:.2e} apart")  # fmt: skip
    same = []
    for seed in range(1, 6):
        head = e.generate(ids, 300, temperature=1.0, seed=seed)["tokens"]
        none = {"bias": {0: 0.0}, "presence": 0.0, "freq": 0.0}
        picked = e.generate(ids, 300, temperature=1.0, seed=seed, adjust=none)["tokens"]
        pairs = enumerate(zip(head, picked, strict=True))
        same.append(next((i for i, (a, b) in pairs if a != b), len(head)))
    print(f"HEAD_VS_PICKER tokens shared before the first difference (of 300): {same}")
    return 1 if bad or worst > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
