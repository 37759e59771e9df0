"""templates/generate.py as a module, the way the GPU scripts here drive its parts (run them
from the repo root: `python bench/gpu/NAME.py`)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_template(path: str = "templates/generate.py") -> ModuleType:
    """The generate template, imported without running its main (its argv set aside). A
    --template that is no file is a one-line usage error (exit 2), not a traceback."""
    if not Path(path).is_file():
        print(f"{path}: no such template file (--template takes a copy of templates/generate.py)",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    sys.argv = ["gen"]
    spec = importlib.util.spec_from_file_location("gen", path)
    g = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g)
    return g


def random_model(g: ModuleType, s, seed: int, quant: str = "none"):
    """The template's GPT of shape s on the GPU in bf16, random weights drawn as its own
    benchmark draws them (random_state_dict), quantized as --quant, with its KV cache."""
    import torch  # here: load_template's usage error stays a one-line exit, without torch

    dev, dt = torch.device("cuda"), torch.bfloat16
    with torch.device("meta"):
        m = g.GPT(s).to(dt)
    g.materialize(m, dev)
    m.head.weight = m.tok_emb.weight  # materialize unties: tie again
    m.load_state_dict(g.shard(g.random_state_dict(s, seed, dev, dt), s, 0, 1))
    m.eval().requires_grad_(False)
    if quant == "int8":
        g.quantize_int8(m)
    m.setup_cache(dev, dt)
    return m


def random_engine(g: ModuleType, size: str, seed: int = 0):
    """The template's serving Engine on the GPU (its defaults: Triton decode, CUDA graphs) for
    a random-weights model of a --size, byte-level vocabulary, context 2048."""
    import torch

    n_layer, n_head, d_model = g.SIZES[size]
    s = g.ModelShape(n_layer, n_head, d_model, 256, 2048)
    return g.Engine(random_model(g, s, seed), torch.device("cuda"), g.Config(), 0, 1)
