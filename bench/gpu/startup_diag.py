import time, sys
t0 = time.time()
import torch
def mark(what, t=[time.time()]):
    torch.cuda.synchronize() if torch.cuda.is_initialized() else None
    now = time.time(); print(f"{what}: {now - t[0]:.3f} s", flush=True); t[0] = now
mark("import torch")
torch.zeros(1, device="cuda"); mark("cuda context")
sys.argv = ["gen"]; import importlib.util
spec = importlib.util.spec_from_file_location("gen", "templates/generate.py"); g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g); mark("import template (triton)")
s = g.ModelShape(12, 12, 768, 50304, 2048)
with torch.device("meta"): m = g.GPT(s).to(torch.bfloat16)
mark("meta model")
m = m.to_empty(device="cuda"); mark("to_empty")
gen = torch.Generator(device="cuda").manual_seed(1); mark("generator")
x = torch.randn(1000, generator=gen, device="cuda"); mark("first randn")
y = (x * 0.02).to(torch.bfloat16); mark("mul + cast")
sd = g.random_state_dict(s, 1, torch.device("cuda"), torch.bfloat16); mark("random_state_dict")
m.head.weight = m.tok_emb.weight
m.load_state_dict(g.shard(sd, s, 0, 1)); mark("load_state_dict")
m.setup_cache(torch.device("cuda"), torch.bfloat16); mark("setup_cache")
