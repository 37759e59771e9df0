"""Where a generate start goes before its first kernel: time each step of building the model
the way templates/generate.py's main does (124M shape, random weights on the GPU). Round 7 ran
it twice in one device call (docs/evidence/gpu/round7/startup-diag*.txt): building the model on
the meta device took 4.8-5.4 s there, torch._dynamo's import (fixed since: no init on meta).

    python bench/gpu/startup_diag.py   # from the repo root, on a CUDA machine
"""

import sys
import time

import torch
from template import load_template

_last = [time.time()]


def mark(what: str) -> None:
    """Print the seconds since the previous mark (the GPU synchronised first)."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    now = time.time()
    print(f"{what}: {now - _last[0]:.3f} s", flush=True)
    _last[0] = now


def main() -> None:
    mark("import torch")
    torch.zeros(1, device="cuda")
    mark("cuda context")
    g = load_template()
    mark("import template (triton)")
    s = g.ModelShape(12, 12, 768, 50304, 2048)
    with torch.device("meta"):
        m = g.GPT(s).to(torch.bfloat16)
    mark("meta model")
    g.materialize(m, torch.device("cuda"))
    mark("materialize")
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(1000, generator=gen, device="cuda")
    mark("first randn")
    (x * 0.02).to(torch.bfloat16)
    mark("mul + cast")
    sd = g.random_state_dict(s, 1, torch.device("cuda"), torch.bfloat16)
    mark("random_state_dict")
    m.head.weight = m.tok_emb.weight
    m.load_state_dict(g.shard(sd, s, 0, 1))
    mark("load_state_dict")
    m.setup_cache(torch.device("cuda"), torch.bfloat16)
    mark("setup_cache")
    print(
        "imported: torch._dynamo", "torch._dynamo" in sys.modules, "sympy", "sympy" in sys.modules
    )


if __name__ == "__main__":
    main()
