"""The generate template for real: a tiny byte-level model trained by the lm template on CPU,
sampled by generate (KV-cache decode checked against a full forward pass, greedy stable for a
seed, compiled == eager), served over HTTP with real requests (bad ones too) and stopped by
SIGTERM, and tensor-parallel over 2 gloo processes under torchrun. OMP_NUM_THREADS=1."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, run_envtool
from template_runs import child_env, top_level_imports

GENERATE = REPO / "templates" / "generate.py"
LM = REPO / "templates" / "lm.py"
# The model lm trains below: its default vocabulary (bytes), context 64 (generate reads both).
LM_ARGS = ["--cpu", "--size", "tiny", "--seq-len", "64"]
PROMPT = "the quick "
GREEDY = ["--prompt", PROMPT, "--max-new-tokens", "40", "--temperature", "0", "--repeat", "1"]


def generate(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(GENERATE), "--cpu", *args]
    return subprocess.run(
        argv, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout
    )


def result_of(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout  # rank 0 only, exactly once
    return json.loads(lines[0].removeprefix("RESULT "))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT dir of a tiny byte-level lm trained for 60 steps on a small text (a few seconds)."""
    cwd = tmp_path_factory.mktemp("lm")
    rng = random.Random(0)
    words = "the quick brown fox jumps over the lazy dog and then some more words".split()
    (cwd / "input.txt").write_text(" ".join(rng.choice(words) for _ in range(3000)))
    argv = [sys.executable, str(LM), *LM_ARGS, "--data", "input.txt", "--batch-size", "8"]
    argv += ["--max-steps", "60", "--lr", "1e-2", "--warmup-steps", "5", "--out-dir", "out"]
    proc = subprocess.run(
        argv, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (cwd / "out" / "ckpt.pt").is_file()
    return cwd / "out"


def lm_model(ckpt_dir: Path):
    """The lm template's own model with the checkpoint's weights, to recompute from scratch."""
    import torch

    spec = importlib.util.spec_from_file_location("lm_template", LM)
    lm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lm)
    model = lm.GPT(lm.parse_config(LM_ARGS))
    sd = torch.load(ckpt_dir / "ckpt.pt", map_location="cpu", weights_only=True)["model"]
    model.load_state_dict(sd)
    return model.eval()


def full_logits(model, ids: list[int]):
    """Logits (len(ids), V) of a full forward pass over ids: no cache."""
    import torch

    with torch.no_grad():
        idx = torch.tensor([ids])
        x = model.tok_emb(idx) + model.pos_emb(torch.arange(len(ids)))
        for block in model.blocks:
            x = block(x)
        return model.head(model.ln_f(x))[0].float()


def reference_greedy(
    ckpt_dir: Path, prompt: bytes, n: int, bias: dict | None = None, presence=0.0, freq=0.0
) -> list[int]:
    """What the lm template's own model predicts, recomputing the whole sequence (no cache)
    for every new token: the KV-cache decode must give the same tokens. bias, presence, freq:
    OpenAI's logit_bias and penalties, over the tokens generated so far."""
    model, ids, counts = lm_model(ckpt_dir), list(prompt), {}
    for _ in range(n):
        logits = full_logits(model, ids)[-1]
        for t, value in (bias or {}).items():
            logits[t] += value
        for t, c in counts.items():
            logits[t] -= freq * c + presence
        ids.append(int(logits.argmax()))
        counts[ids[-1]] = counts.get(ids[-1], 0) + 1
    return ids[len(prompt) :]


def reference_logprobs(ckpt_dir: Path, prompt: bytes, completion: list[int]):
    """log_softmax of the full forward pass at each completion token's position: row i is the
    distribution completion[i] was drawn from."""
    logits = full_logits(lm_model(ckpt_dir), [*prompt, *completion])
    return logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)].log_softmax(-1)


# --- static: what the user receives ---


def test_template_imports_only_torch_and_stdlib() -> None:
    tree = ast.parse(GENERATE.read_text())
    imported = top_level_imports(GENERATE)
    # triton ships inside torch's CUDA builds; the template imports it only under a guard
    assert imported - set(sys.stdlib_module_names) == {"torch", "triton"}
    guarded = [
        node
        for node in tree.body
        if isinstance(node, ast.Try)
        and any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)
    ]
    assert all(
        h.type is not None and ast.unparse(h.type) == "ImportError"
        for node in guarded
        for h in node.handlers
    )
    top = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    assert "triton" not in top  # never imported outside the try: CPU-only torch runs without
    text = GENERATE.read_text()
    assert text.index("torch.cuda.set_device(local_rank)") < text.index("init_process_group(")
    assert "finally:\n        dist.destroy_process_group()" in text
    for command in ("envtool launch gen.py --gpus 1 -- --ckpt out --serve 8000", "torchrun"):
        assert command in ast.get_docstring(tree)


@pytest.mark.integration
def test_envtool_init_writes_the_generate_template(tmp_path: Path) -> None:
    proc = run_envtool("init", "gen.py", "--template", "generate", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "gen.py").read_text() == GENERATE.read_text()
    listed = run_envtool("init", "--list", "--json", cwd=tmp_path, timeout=60)
    rows = {row["name"]: row for row in json.loads(listed.stdout)["templates"]}
    assert "RESULT" in rows["generate"]["prints"] and "--serve" in rows["generate"]["description"]


# --- one process, CPU ---


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--top-p", "0"], "--top-p must be in (0, 1]"),
        (["--temperature", "-1"], "--temperature must be >= 0"),
        (["--size", "7b"], "--size must be one of"),
        (["--cudagraphs"], "--cudagraphs needs a CUDA GPU"),  # a GPU-only feature, on CPU
        (["--ckpt", "nowhere"], "--ckpt nowhere: no such file or directory"),
        (["--size", "tiny", "--seq-len", "64", "--prompt-len", "60"], "exceeds the context (64)"),
        (["--max-new-tokens", "x"], "invalid int value"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str, tmp_path: Path) -> None:
    proc = generate(args, tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert says in proc.stderr


@pytest.mark.slow
@pytest.mark.integration
def test_a_checkpoint_of_another_shape_is_refused_in_one_line(tmp_path: Path) -> None:
    import torch

    torch.save({"model": {"tok_emb.weight": torch.zeros(256, 48)}}, tmp_path / "ckpt.pt")
    proc = generate(["--ckpt", str(tmp_path), *GREEDY, "--eager"], tmp_path, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "not an lm model" in proc.stderr


@pytest.mark.slow
@pytest.mark.integration
def test_greedy_decode_matches_a_full_forward_and_repeats_exactly(
    trained: Path, tmp_path: Path
) -> None:
    first = result_of(generate(["--ckpt", str(trained), *GREEDY, "--eager"], tmp_path))
    second = result_of(generate(["--ckpt", str(trained / "ckpt.pt"), *GREEDY, "--eager"], tmp_path))
    assert first["tokens"] == second["tokens"]
    assert first["tokens"] == reference_greedy(trained, PROMPT.encode(), 40)
    assert first["text"] == bytes(first["tokens"]).decode("utf-8", errors="replace")
    assert first["new_tokens"] == 40 and first["prompt_tokens"] == len(PROMPT)
    assert first["context"] == 64 and first["mbu"] is None  # no GPU: no bandwidth fraction


@pytest.mark.slow
@pytest.mark.integration
def test_sampling_is_reproducible_for_a_seed(trained: Path, tmp_path: Path) -> None:
    args = ["--ckpt", str(trained), "--prompt", PROMPT, "--max-new-tokens", "40", "--eager"]
    args += ["--temperature", "1.0", "--top-k", "50", "--top-p", "0.95", "--repeat", "1"]
    a = result_of(generate([*args, "--seed", "1"], tmp_path))["tokens"]
    b = result_of(generate([*args, "--seed", "1"], tmp_path))["tokens"]
    c = result_of(generate([*args, "--seed", "2"], tmp_path))["tokens"]
    assert a == b
    assert a != c  # 40 sampled bytes from a barely trained model: seeds 1 and 2 differ


@pytest.mark.slow
@pytest.mark.integration
def test_compiled_decode_equals_eager(trained: Path, tmp_path: Path) -> None:
    """torch.compile of prefill and decode on CPU, asked for with --compile (inductor's C++
    backend; ~35 s the first time on 2 busy cores, 265 s at load 19, seconds once its cache is
    warm). A small --cache-bucket makes the decode cross attention buckets: each its own
    compiled graph."""
    eager = result_of(generate(["--ckpt", str(trained), *GREEDY, "--eager"], tmp_path))
    args = ["--ckpt", str(trained), *GREEDY, "--cache-bucket", "32", "--decode-attn", "math"]
    compiled = result_of(generate([*args, "--compile"], tmp_path, timeout=600))
    assert compiled["mode"] == "compiled"
    assert compiled["tokens"] == eager["tokens"]


@pytest.mark.slow
@pytest.mark.integration
def test_int8_weights_keep_the_held_out_loss_and_read_a_quarter_of_the_bytes(
    trained: Path, tmp_path: Path
) -> None:
    """--quant int8 quantizes the trained fp32 weights at load (one scale per output row): the
    loss on text the model never saw moves by under 1 %, greedy decoding stays the model's, and
    a decode step reads about a quarter of the fp32 bytes (int8 + scales)."""
    rng = random.Random(1)  # held out: other word order than the training text
    words = "the quick brown fox jumps over the lazy dog and then some more words".split()
    (tmp_path / "heldout.txt").write_text(" ".join(rng.choice(words) for _ in range(600)))
    args = ["--ckpt", str(trained), *GREEDY, "--eager", "--eval-data", "heldout.txt"]
    full = result_of(generate(args, tmp_path, timeout=300))
    int8 = result_of(generate([*args, "--quant", "int8"], tmp_path, timeout=300))
    assert full["eval_tokens"] == int8["eval_tokens"] == 16 * 64
    assert full["eval_loss"] < 2.5  # trained: far under ln(256) = 5.5
    assert abs(int8["eval_loss"] / full["eval_loss"] - 1) < 0.01
    assert int8["quant"] == "int8" and full["quant"] == "none"
    assert int8["weight_bytes_per_token"] < 0.3 * full["weight_bytes_per_token"]
    same = sum(a == b for a, b in zip(int8["tokens"], full["tokens"], strict=True))
    assert same >= 30  # of 40 greedy tokens (a near-tie may flip one, and what follows it)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--decode-kernels", "triton"], "--decode-kernels triton needs"),
        (["--pdl"], "--pdl needs the Triton decode kernels"),
        (["--prefill", "graph"], "--prefill graph captures a CUDA graph"),
        (["--prefill", "jit"], "--prefill must be auto, compile or graph"),
        (["--quant", "int4"], "--quant must be none or int8"),
        (["--eval-data", "short.txt"], "shorter than the context (64 + 1 bytes)"),
    ],
)
def test_gpu_only_and_bad_quant_flags_are_refused_in_one_line(
    trained: Path, tmp_path: Path, args: list[str], says: str
) -> None:
    (tmp_path / "short.txt").write_text("too short")
    proc = generate(["--ckpt", str(trained), *GREEDY, "--eager", *args], tmp_path, timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr


TRITON_CHECK = """
import importlib.util, math, sys, torch
spec = importlib.util.spec_from_file_location("gen", sys.argv[1])
g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)
torch.manual_seed(0)
worst, worst_bf16, worst_magic, worst_wide, worst_step = 0.0, 0.0, 0.0, 0.0, 0.0
def err(a, b, bf16=False, magic=False, wide=False):
    global worst, worst_bf16, worst_magic, worst_wide
    assert torch.isfinite(a).all()
    e = float((a - b).norm() / b.norm())
    if wide:  # scores near 200: fp32 holds them to ~1e-5, on both sides
        worst_wide = max(worst_wide, e)
    elif bf16:  # the interpreter rounds the LayerNorm's bf16 output its own way (4e-3 off torch)
        worst_bf16 = max(worst_bf16, e)
    elif magic:  # int8 + bias, the bias taken off each lane's sum: ~2e-5 of rounding
        worst_magic = max(worst_magic, e)
    else:
        worst = max(worst, e)
for N, K, kind in ((96, 64, "fp32"), (100, 256, "int8"), (30, 100, "int8"), (72, 130, "bf16")):
    lin = torch.nn.Linear(K, N, bias=False)  # K 100, 130: the last tile of weights a part one
    layer = g.Int8Linear(lin.weight) if kind == "int8" else lin
    dt = torch.bfloat16 if kind == "bf16" else torch.float32
    layer.to(dt)
    ln = torch.nn.LayerNorm(K, bias=False, dtype=dt); ln.weight.data.uniform_(0.5, 1.5)
    x, r = (torch.randn(K) * 3 + 1).to(dt), torch.randn(N).to(dt)
    f32 = lambda v: layer.weight.float() @ v.float() if kind == "bf16" else layer(v[None])[0]
    err(g.gemv(x, layer, ln=ln, gelu=True, out_dtype=torch.float32),
        torch.nn.functional.gelu(f32(ln(x))), kind == "bf16")  # fp32 sums out: unrounded
    err(g.gemv(x, layer, res=r, out_dtype=torch.float32), f32(x) + r.float())
    plain = torch.nn.LayerNorm(K, bias=False, elementwise_affine=False)  # int8's, gains folded
    err(g.gemv(x, layer, ln=plain, out_dtype=torch.float32), f32(plain(x)), kind == "bf16")
# --quant int8 folds each LayerNorm's gains into the matrix after it: the same products
s = g.ModelShape(2, 2, 64, 256, 32)
m = g.GPT(s).eval().requires_grad_(False)
m.load_state_dict(g.shard(g.random_state_dict(s, 0, torch.device("cpu"), torch.float32), s, 0, 1))
m.setup_cache(torch.device("cpu"), torch.float32)
for ln in (m.ln_f, *(l for b in m.blocks for l in (b.ln1, b.ln2))):
    ln.weight.uniform_(0.2, 3.0)
idx = torch.randint(0, 256, (1, 32))
want = m.logits(idx)
g.quantize_int8(m)
assert m.ln_f.weight is None and all(b.ln1.weight is None and b.ln2.weight is None for b in m.blocks)
got = m.logits(idx)
assert float((got - want).norm() / want.norm()) < 0.02, float((got - want).norm() / want.norm())
lin = torch.nn.Linear(256, 40, bias=False); layer = g.Int8Linear(lin.weight)
# stored w + 128: what values() gives back is the weight to within half a step of its row
assert layer.weight.dtype == torch.uint8
step = layer.scale[:, None]
assert ((layer.values(torch.float32) * step - lin.weight).abs() <= step / 2 + 1e-7).all()
x = torch.randn(3, 256)
err(g.linear(layer, x, reduce=True), layer(x))  # the compiled decode's spelling of the product
def magic_product(xin, lane):  # layer's product by _gemv_kernel with MAGIC, as the GPU runs it
    y = torch.full((40,), float("nan"))
    g._gemv_kernel.fn[(5,)](xin, layer.weight, layer.scale, xin, y, y, y, y, y, y, y, 40, 256, 0, 0.0,
        HAS_SCALE=True, LN=False, GAIN=False, GELU=False, RES=False, ARGMAX=False, ZERO=False,
        ATTN_HD=0, PDL=False, COMPILED=False, K_LN=1, LANE=lane, X_ASM=1, BLOCK_N=8, BLOCK_K=64,
        MAGIC=True)
    return y
x = torch.randn(256) * 3 + 1  # sum(x) far from 0
err(magic_product(x, 0), layer(x[None])[0], magic=True)
xb = x.bfloat16()  # bf16 x, as on the GPU
want = (layer.values(torch.float32) @ xb.float()) * layer.scale
err(magic_product(xb, 0), want, magic=True)
# the head's and qkv's accumulator a 16-byte run (LANE 4): the bias comes off 16 at a time
worst_step = max(worst_step, float((magic_product(xb, 4) - want).norm() / want.norm()))
for M, N, K in ((1, 100, 256), (37, 130, 200), (70, 300, 64), (129, 40, 96), (1100, 130, 64)):
    # int8 prompt products: tile edges; 9 row blocks, so GROUP_M's last group is partial
    layer = g.Int8Linear(torch.nn.Linear(K, N, bias=False).weight)
    x = torch.randn(M, K)
    err(g.int8_matmul(x[None], layer.weight, layer.scale)[0], layer(x))
# 32-bit offsets: a tensor of 2**31 elements goes to torch's kernels, not past its end
assert g.int32_indexable(torch.empty(2**31 - 1, device="meta"))
assert not g.int32_indexable(torch.empty(4, 2**29, device="meta"))
m = g.GPT(g.ModelShape(2, 2, 64, 256, 200)).eval(); m.setup_cache(torch.device("cpu"), torch.float32)
a = m.blocks[0].attn
a.k_cache.normal_(); a.v_cache.normal_()
kc0, vc0 = a.k_cache.clone(), a.v_cache.clone()
proj, r = torch.nn.Linear(64, 48, bias=False), torch.randn(48)
cases = ((0, 0), (5, 0), (63, 0), (64, 0), (130, 0), (199, 0), (150, 200), (150, -200))
for g.ATTN_SELECT, (P, big) in [(sel, c) for sel in (0, 1) for c in cases]:
    # chunk edges (64 slots a chunk), the last slot; the first chunk's keys scoring 200 above
    # / below the new one (fp32's exp overflows past 88: the programs' sums are weighed in fp64);
    # both of attention's forms (this step's key and value put into the tiles or not)
    a.k_cache.copy_(kc0); a.v_cache.copy_(vc0)
    qkv = torch.randn(3 * 64)
    q, k, v = qkv.view(3, 2, 32)
    a.k_cache[0, :, :64] += (big * math.sqrt(32) * q / q.norm(dim=-1, keepdim=True) ** 2)[:, None]
    kc, vc = a.k_cache.clone(), vc0.clone()
    a.sums.fill_(float("nan"))
    g.gemv(torch.randn(64), torch.nn.Linear(64, 192, bias=False), zero=a.sums)
    assert torch.equal(a.sums, torch.zeros_like(a.sums))  # qkv's product clears the sums
    sums = g.decode_attention(qkv, a, torch.tensor([P]))
    kc[0, :, P], vc[0, :, P] = k, v
    att = (q[:, None, :] @ kc[0, :, : P + 1].transpose(-1, -2)) / math.sqrt(32)
    want = (att.softmax(-1) @ vc[0, :, : P + 1]).reshape(-1)
    err(g.attention_output(sums, 2, torch.float32), want, wide=big != 0)
    # the product after attention reads the sums as that output
    err(g.gemv(sums, proj, res=r, heads=2, out_dtype=torch.float32), proj(want) + r, wide=big != 0)
    assert torch.equal(a.k_cache, kc) and torch.equal(a.v_cache, vc)  # only slot P written
g.ATTN_SELECT = 0
try:  # a buffer longer than the product's rows would be left partly uncleared
    g.gemv(torch.randn(64), torch.nn.Linear(64, 8, bias=False), zero=a.sums)
    raise AssertionError("gemv cleared 8 of the sums and went on")
except ValueError as e:
    assert "more than the 8 outputs" in str(e), e
te, pe, x = torch.randn(50, 24), torch.randn(30, 24), torch.full((24,), float("nan"))
g._embed_kernel[(2,)](torch.tensor([[7]]), torch.tensor([11]), te, pe, x, 24, BLOCK=16, PDL=False)
assert torch.equal(x, te[7] + pe[11]), x
best = torch.full((1,), -(2**63), dtype=torch.long)
tok, pos, out = torch.zeros(1, 1, dtype=torch.long), torch.tensor([3]), torch.zeros(10, dtype=torch.long)
for sign, tie in ((1, True), (-1, False), (1, False)):  # the head's argmax, then the step's end
    head = torch.nn.Linear(64, 300, bias=False)
    x = torch.randn(64)
    w = head.weight.data
    if sign < 0:  # every logit negative: the key must order negative floats too
        w.copy_(-w.abs() * x.sign())
    if tie:  # rows 7 and 250 give the same, largest logit: the first wins, as torch.argmax
        w[7] = w[250] = x / x.norm() * 5
    logits = g.gemv(x, head, out_dtype=torch.float32, best=best)
    err(logits, head(x[None])[0])
    want = 7 if tie else int(logits.argmax())
    g._advance_kernel[(1,)](best, tok, pos, out, PDL=False)
    p = int(pos) - 1
    assert (tok.item(), out[p + 1].item()) == (want, want), (tok, out, want)
    assert best.item() == -(2**63)  # ready for the next step
assert pos.item() == 6
# whole decode steps in the kernels against the torch modules' steps, three tokens in a row
# (each step finds the sums the one before left: qkv's product must clear them)
for quant in ("none", "int8"):
    s = g.ModelShape(2, 2, 64, 256, 32)
    m = g.GPT(s).eval().requires_grad_(False)
    sd = g.random_state_dict(s, 3, torch.device("cpu"), torch.float32)
    m.load_state_dict(g.shard(sd, s, 0, 1))
    for ln in (m.ln_f, *(l for b in m.blocks for l in (b.ln1, b.ln2))):
        ln.weight.uniform_(0.5, 1.5)
    if quant == "int8":
        g.quantize_int8(m)
    m.setup_cache(torch.device("cpu"), torch.float32)
    m.prefill(torch.randint(0, 256, (1, 5)), torch.tensor([4]))
    # each product's first candidate tile, as a GPU's tuner might pick: int8 then runs as it
    # does there (MAGIC's bias, the head's accumulator a 16-byte run)
    g.GEMV_PICKS.clear()
    g.X_ASM, g._GEMV_RECORD["calls"] = 0, {}  # tl.load first (X_ASM's default is 1)
    calls = g._GEMV_RECORD["calls"]
    m.decode_fast(torch.tensor([[1]]), torch.tensor([5]))
    g._GEMV_RECORD["calls"] = None
    g.GEMV_PICKS.update({key: g.gemv_tiles(key)[0] for key in calls})
    # the same tiles for X_ASM's products (X_ASM is in the key: its tiles are timed apart)
    x_asm_calls = {}
    for g.X_ASM in (1, 2):
        g._GEMV_RECORD["calls"] = {}
        m.decode_fast(torch.tensor([[1]]), torch.tensor([5]))
        x_asm_calls.update(g._GEMV_RECORD["calls"])
    g.X_ASM, g._GEMV_RECORD["calls"] = 0, None
    assert x_asm_calls.keys().isdisjoint(calls)
    g.GEMV_PICKS.update({key: g.gemv_tiles(key)[0] for key in x_asm_calls})
    kv = lambda: [t for b in m.blocks for t in (b.attn.k_cache, b.attn.v_cache)]
    caches = [t.clone() for t in kv()]
    for P, t in ((5, 17), (6, 200), (7, 3)):
        tok, pos = torch.tensor([[t]]), torch.tensor([P])
        got = m.decode_fast(tok, pos).clone()
        # X_ASM's paths (tl.load here): x read leaf by leaf (_lane_tile), the gains read
        # after the wait, xs's x loaded apart (2): the same products
        for g.X_ASM in (1, 2):
            assert torch.equal(m.decode_fast(tok, pos), got), (quant, g.X_ASM)
        # and the tiles' tl.load twins (X_ASM 0 a product: refine_in_step's), the same again
        g.GEMV_PICKS.update({key: g.tl_load_twin(g.gemv_tiles(key)[0]) for key in x_asm_calls})
        assert torch.equal(m.decode_fast(tok, pos), got), quant
        g.GEMV_PICKS.update({key: g.gemv_tiles(key)[0] for key in x_asm_calls})
        g.X_ASM = 0
        fast = [t.clone() for t in kv()]
        for c, old in zip(kv(), caches):
            c.copy_(old)
        want = m.decode(tok, pos, 32)
        if quant == "int8":  # the head takes the bias off 16 products at a time (LANE): ~1e-4
            worst_step = max(worst_step, float((got - want).norm() / want.norm()))
        else:
            err(got, want)
        caches = [t.clone() for t in kv()]
        if quant == "int8":  # qkv takes the bias off 16 products at a time too: ~1e-4 of k, v
            worst_step = max(worst_step, *(float((a - b).norm() / b.norm()) for a, b in zip(fast, caches)))
        else:
            assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(fast, caches)), quant
g.GEMV_PICKS.clear()
assert worst_step < 1e-3, worst_step  # a weight against the wrong x, a bias left in: ~1
assert worst_bf16 < 1e-2, worst_bf16  # a weight against the wrong x would be ~1
assert worst_magic < 1e-4, worst_magic  # a bias left in would be ~1e3
assert worst_wide < 1e-4, worst_wide  # a chunk weighed wrong would be ~1
print("magic", worst_magic)
print("worst", worst)
"""


def triton_env() -> dict[str, str]:
    return {**child_env(), "TRITON_INTERPRET": "1"}


def run_bench(
    script: str, *args: str, env: dict[str, str], timeout: int = 300
) -> subprocess.CompletedProcess:
    """Run bench/gpu/SCRIPT from the repo root, as the device calls do."""
    return subprocess.run(
        [sys.executable, f"bench/gpu/{script}", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def run_with_template(
    tmp_path: Path, script: str, env: dict[str, str], timeout: int = 300
) -> subprocess.CompletedProcess:
    """Run a check script (its text) with the template's path as its argument."""
    (tmp_path / "check.py").write_text(script)
    return subprocess.run(
        [sys.executable, "check.py", str(GENERATE)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


NO_COMPILER = """
import runpy, sys
sys.argv = [sys.argv[1], "--size", "tiny", "--seq-len", "64", "--prompt-len", "8",
            "--max-new-tokens", "4", "--temperature", "0", "--repeat", "1", "--cpu"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("COMPILER", any(m in sys.modules for m in ("torch._dynamo", "sympy")))
"""


@pytest.mark.integration
def test_a_run_that_compiles_nothing_never_imports_the_compiler(tmp_path: Path) -> None:
    """torch._dynamo's import is seconds of a start (5 s on the H200 machine), sympy's 1-3 s:
    an eager run must pay neither (the model is built on the meta device, where an init of the
    embeddings imports the first and Module.to_empty the second). The GPU default (Triton
    decode, --prefill graph) builds the model the same way; it is not run here."""
    proc = run_with_template(tmp_path, NO_COMPILER, child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "COMPILER False", proc.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.integration
def test_triton_decode_kernels_compute_what_the_torch_modules_do(tmp_path: Path) -> None:
    """The GPU decode kernels, run by Triton's interpreter on the CPU against the torch code:
    the matrix-vector product with LayerNorm / GELU / residual fused (bf16-style and int8
    weights, both int8 conversions), split attention over the cache at chunk edges, its
    programs' sums added up in fp64 (also with scores e^200 apart) and read by the product
    after it, that qkv's product clears them, that it writes only this step's slot, the
    embedding lookup and the greedy argmax-and-advance kernel."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    proc = run_with_template(tmp_path, TRITON_CHECK, triton_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.split()[-1]) < 1e-5  # fp32 on both sides


DRAW_CHECK = """
import importlib.util, math, sys, torch, triton, triton.language as tl
spec = importlib.util.spec_from_file_location("gen", sys.argv[1])
g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)

@triton.jit
def uniform(seed_ptr, pos_ptr, out_ptr, N, BLOCK: tl.constexpr):  # drawn as the head does
    rn = tl.arange(0, BLOCK)
    at = (tl.load(pos_ptr) * N + rn).to(tl.uint32)
    tl.store(out_ptr + rn, tl.rand(tl.load(seed_ptr), at), mask=rn < N)

def gumbel(seed, pos, n):
    u = torch.empty(n)
    uniform[(1,)](torch.tensor([seed]), torch.tensor([pos]), u, n, BLOCK=triton.next_power_of_2(n))
    return -torch.log(-torch.log(u))

def chosen(key):
    return 0x7FFFFFFF - (int(key) & 0xFFFFFFFF)

# the head's product: without sample the argmax; with it argmax(y / T + Gumbel(seed, pos, n))
torch.manual_seed(0)
V, K = 6, 64
lin = torch.nn.Linear(K, V, bias=False)
x = torch.randn(K)
best, inv_t = torch.full((1,), g.LOWEST_KEY), torch.full((1,), 1 / 0.8)
seed, pos = torch.tensor([1234]), torch.tensor([0])
y = g.gemv(x, lin, out_dtype=torch.float32, best=best).clone()
assert chosen(best) == int(y.argmax())
counts = [0] * V
for p in range(1000):
    best.fill_(g.LOWEST_KEY); pos.fill_(p)
    got = g.gemv(x, lin, out_dtype=torch.float32, best=best, sample=(inv_t, seed, pos))
    assert torch.equal(got, y)  # the logits themselves stay the model's
    token = chosen(best)
    if p < 20:
        assert token == int((y / 0.8 + gumbel(1234, p, V)).argmax()), p
    counts[token] += 1
want = torch.softmax(y / 0.8, 0)
chi2 = sum((c - 1000 * float(q)) ** 2 / (1000 * float(q)) for c, q in zip(counts, want))
assert chi2 < 25, (chi2, counts, want)  # 5 degrees of freedom: p < 1e-4 by chance

# the Engine: temperature alone makes every step after the first the head's draw
s = g.ModelShape(2, 2, 64, 256, 48)
m = g.GPT(s).eval().requires_grad_(False)
m.load_state_dict(g.shard(g.random_state_dict(s, 0, torch.device("cpu"), torch.float32), s, 0, 1))
m.setup_cache(torch.device("cpu"), torch.float32)
cfg = g.Config(decode_kernels="triton", eager=True)
e = g.Engine(m, torch.device("cpu"), cfg, 0, 1)
assert e.fast
ids = [3, 141, 59, 26, 53]
calls, heads = [], []
real, real_gemv = g.Picker.step, g.gemv
def spy_step(self, logits, tok, pos, out, plan, fast):
    calls.append(plan.pick)
    return real(self, logits, tok, pos, out, plan, fast)
g.Picker.step = spy_step
def spy(*a, **k):
    if k.get("best") is not None:
        heads.append(k.get("sample") is not None)
    return real_gemv(*a, **k)
g.gemv = spy
out = e.generate(ids, 10, temperature=0.7, seed=99)["tokens"]
assert calls == [g.PICK_DRAW], calls  # the prompt's token only: nothing after a step
assert heads == [True] * 9, heads  # every step after it drew in the head
heads.clear(); calls.clear()
greedy = e.generate(ids, 10, temperature=0)["tokens"]  # greedy after a draw: no draw compiled in
assert heads == [False] * 9 and calls == [g.PICK_ARGMAX], (heads, calls)
calls.clear()
# a logit_bias that changes nothing takes the draw out of the head into Picker.step: the
# same noise, so the same tokens
none = {"bias": {7: 0.0}, "presence": 0.0, "freq": 0.0}
assert e.generate(ids, 10, temperature=0.7, seed=99, adjust=none)["tokens"] == out
assert calls == [g.PICK_DRAW] * 10, calls
g.Picker.step, g.gemv = real, real_gemv
def noise_at(j):
    return gumbel(99, len(ids) + j - 1, 256)  # the decode step's input position
for j in range(1, 10):
    logits = m.logits(torch.tensor([ids + out[:j]]))[0, -1]
    assert out[j] == int((logits / 0.7 + noise_at(j)).argmax()), j
assert e.generate(ids, 10, temperature=0.7, seed=99)["tokens"] == out  # a seed repeats
assert e.generate(ids, 10, temperature=0.7, seed=98)["tokens"] != out
for j in range(1, 10):
    assert greedy[j] == int(m.logits(torch.tensor([ids + greedy[:j]]))[0, -1].argmax())

# top-p, penalties and logprobs after the step (Picker.step): each token the reference's pick
# from the full forward pass's logits, with the head's noise at its position
inv_t = torch.tensor(1 / 0.7)
r = e.generate(ids, 12, temperature=0.7, seed=99, top_p=0.6, logprobs=3,
               adjust={"bias": {32: 2.0}, "presence": 0.5, "freq": 0.8})
toks, counts = r["tokens"], torch.zeros(256)
for j in range(12):
    logits = m.logits(torch.tensor([ids + toks[:j]]))[0, -1]
    y = (logits + torch.eye(256)[32] * 2.0 - 0.8 * counts - 0.5 * (counts > 0).float()) * inv_t
    ps, order = torch.sort(y, descending=True)
    p = ps.softmax(0)
    keep = order[(p.cumsum(0) - p) <= 0.6]
    assert toks[j] in keep.tolist(), j  # the first token's too (noise at the prompt's end)
    mask = torch.full((256,), float("-inf")); mask[keep] = 0
    assert toks[j] == int((y + mask + noise_at(j)).argmax()), j
    lp = logits.log_softmax(0)
    chosen, top = r["logprobs"][j]
    assert abs(chosen - float(lp[toks[j]])) < 1e-4, j
    assert [i for i, _ in top] == lp.topk(3).indices.tolist(), j
    counts[toks[j]] += 1
# that draw and those logprobs were one launch each (_pick_kernel, _keep_kernel): torch's
# sort, softmax, cumsum, log_softmax and top-k agree
g.SMALL_VOCAB = 0
again = e.generate(ids, 12, temperature=0.7, seed=99, top_p=0.6, logprobs=3,
                   adjust={"bias": {32: 2.0}, "presence": 0.5, "freq": 0.8})
assert again["tokens"] == toks, (again["tokens"], toks)
for (c1, top1), (c2, top2) in zip(r["logprobs"], again["logprobs"]):
    assert abs(c1 - c2) < 1e-5 and [i for i, _ in top1] == [i for i, _ in top2]
    assert max(abs(a - b) for (_, a), (_, b) in zip(top1, top2)) < 1e-5
# streaming and stops: on_token sees each token one step behind the decode (StepReader), the
# same tokens and rows in order; a stop at the fifth keeps five (the step past it dropped)
for stop_at in (5, 99):
    seen = []
    def on_token(t, row):
        seen.append((t, row))
        return len(seen) == stop_at
    cut = e.generate(ids, 12, temperature=0.7, seed=99, top_p=0.6, logprobs=3, on_token=on_token,
                     adjust={"bias": {32: 2.0}, "presence": 0.5, "freq": 0.8})
    assert [t for t, _ in seen] == cut["tokens"] == toks[:stop_at], (seen, cut["tokens"])
    assert [row for _, row in seen] == cut["logprobs"]
print("DRAWN", chi2)
"""


@pytest.mark.slow
@pytest.mark.integration
def test_the_triton_step_draws_a_sampled_token_itself(tmp_path: Path) -> None:
    """OpenAI's default request samples at temperature 1: the Triton decode step draws that
    token in the head's product (the Gumbel-max trick, Philox noise at the seed and position),
    no eager sampling a step; a greedy step's head has no draw in it. Run by Triton's
    interpreter: a draw is the argmax of logits / T plus the noise a test kernel draws the
    same way, for the head alone and for the Engine's steps; 1,000 draws follow
    softmax(logits / T); a seed repeats; greedy stays the argmax. Top-p, penalties and
    logit_bias pick after the step with the same noise (a bias of 0 gives the head's tokens),
    each pick the reference's from the full forward pass, with its logprobs."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    proc = run_with_template(tmp_path, DRAW_CHECK, triton_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2] == "DRAWN", proc.stdout[-2000:]


COMPILE_CHECK = """
import importlib.util, sys, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("gen", sys.argv[1])
g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)
HOPPER = GPUTarget("cuda", 90, 32)
def build(kernel, types, const, **options):
    fn = kernel.fn if hasattr(kernel, "configs") else kernel  # under @autotune
    sig = dict(types, **{k: "constexpr" for k in const})
    assert list(sig) == fn.arg_names, (list(sig), fn.arg_names)  # every argument named
    ix = {(fn.arg_names.index(k),): v for k, v in const.items()}
    triton.compile(ASTSource(fn=fn, signature=sig, constexprs=ix), target=HOPPER, options=options)
uses = (  # the products a decode step makes: qkv, proj / fc_proj, fc, the head
    dict(LN=True, GELU=False, RES=False, ARGMAX=False),
    dict(LN=False, GELU=False, RES=True, ARGMAX=False),
    dict(LN=True, GELU=True, RES=False, ARGMAX=False),
    dict(LN=True, GELU=False, RES=False, ARGMAX=True),
)
n = 0
for wt in ("bf16", "u8"):  # Int8Linear keeps w + 128 as uint8
    for i, c in enumerate(g._GEMV_CONFIGS):
        if c.kwargs["MAGIC"] != (wt == "u8"):  # each weight type its own tiles
            continue
        attn = not uses[i % 4]["LN"] and i % 3 == 0  # proj: x from attention's sums
        types = {"x_ptr": "*fp64" if attn else "*bf16", "w_ptr": "*" + wt, "s_ptr": "*fp32",
                 "g_ptr": "*fp64" if attn else "*bf16", "r_ptr": "*bf16", "y_ptr": "*bf16",
                 "best_ptr": "*i64", "z_ptr": "*fp64", "t_ptr": "*fp32", "seed_ptr": "*i64",
                 "pos_ptr": "*i64", "N": "i32", "K": "i32", "Z": "i32", "eps": "fp32"}
        const = dict(HAS_SCALE=wt == "u8", PDL=bool(i % 2), COMPILED=True, **uses[i % 4],
                     GAIN=wt != "u8",  # int8 folds the gains into W
                     ZERO=uses[i % 4]["LN"] and not uses[i % 4]["GELU"], ATTN_HD=128 if attn else 0,
                     K_LN=2048 if uses[i % 4]["LN"] else 1,
                     # qkv's and the head's accumulators: one a 16-byte run
                     LANE=(4 if wt == "u8" else 3) if uses[i % 4]["LN"] and not uses[i % 4]["GELU"]
                     else 0, X_ASM=i % 3, **c.kwargs,  # x by tl.load, PTX, PTX x 8
                     SAMPLE=uses[i % 4]["ARGMAX"])  # the head draws the token (sampling)
        const = {k: const[k] for k in g._gemv_kernel.fn.arg_names if k in const}
        cap = {"maxnreg": 128} if wt == "u8" and i % 4 == 1 else {}  # GEMV_MAXNREG's option
        build(g._gemv_kernel, types, const, num_warps=c.num_warps, num_stages=c.num_stages, **cap)
        n += 1
for pdl in (False, True):
    build(g._attn_kernel, {"qkv_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16",
          "pos_ptr": "*i64", "acc_ptr": "*fp64", "T": "i32", "scale": "fp32"},
          dict(C=2048, HD=128, CHUNK=g.ATTN_CHUNK, PDL=pdl, COMPILED=True, X_ASM=1 + pdl,
               SELECT=0))
    if pdl:  # attention's other form (ATTN_SELECT), as the step would run it
        build(g._attn_kernel, {"qkv_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16",
              "pos_ptr": "*i64", "acc_ptr": "*fp64", "T": "i32", "scale": "fp32"},
              dict(C=2048, HD=128, CHUNK=g.ATTN_CHUNK, PDL=1, COMPILED=True, X_ASM=1, SELECT=1))
        n += 1
    build(g._embed_kernel, {"tok_ptr": "*i64", "pos_ptr": "*i64", "te_ptr": "*bf16",
          "pe_ptr": "*bf16", "x_ptr": "*bf16", "C": "i32"}, dict(BLOCK=1024, PDL=pdl))
    build(g._advance_kernel, {"best_ptr": "*i64", "tok_ptr": "*i64", "pos_ptr": "*i64",
          "out_ptr": "*i64"}, dict(PDL=pdl))
    n += 3
# Picker's kernels: the pick (argmax or draw; bias, penalties, top-p) and the logprobs at a
# byte vocabulary and the largest, the noise and penalties of a larger one
for block in (256, g.SMALL_VOCAB):
    picks = ((0, 0, 1, 1), (1, 1, 1, 1)) if block > 256 else (  # ADJUST, PENALTIES, DRAW,
        (1, 0, 0, 0), (1, 1, 0, 0), (0, 0, 1, 0), (1, 0, 1, 0), (0, 0, 1, 1), (1, 1, 1, 1))  # TOP_P
    for adjust, penalties, draw, top_p in picks:
        build(g._pick_kernel, {"y_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32",
              "pres_ptr": "*fp32", "freq_ptr": "*fp32", "t_ptr": "*fp32", "p_ptr": "*fp32",
              "seed_ptr": "*i64", "pos_ptr": "*i64", "tok_ptr": "*i64", "out_ptr": "*i64",
              "N": "i32"}, dict(ADJUST=adjust, PENALTIES=penalties, DRAW=draw, TOP_P=top_p,
              BLOCK=block), num_warps=4)
        n += 1
    for top in (False, True):
        build(g._keep_kernel, {"x_ptr": "*fp32", "tok_ptr": "*i64", "pos_ptr": "*i64",
              "c_ptr": "*fp32", "v_ptr": "*fp32", "i_ptr": "*i64", "N": "i32"},
              dict(K=20, TOP=top, BLOCK=block), num_warps=4)
build(g._gumbel_kernel, {"y_ptr": "*fp32", "seed_ptr": "*i64", "pos_ptr": "*i64", "N": "i32"},
      dict(BLOCK=1024))
build(g._adjust_kernel, {"x_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32",
      "pres_ptr": "*fp32", "freq_ptr": "*fp32", "y_ptr": "*fp32", "N": "i32"}, dict(BLOCK=1024))
n += 6
for bm in (16, 64, 128):  # int8_matmul's tiles
    build(g._int8_mm_kernel, {"a_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*fp32",
          "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32"},
          dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_M=8), num_warps=8 if bm == 128 else 4,
          num_stages=3)
    n += 1
print("compiled", n)
"""


TUNE_CHECK = """
import importlib.util, sys, torch
from triton.runtime.errors import OutOfResources
spec = importlib.util.spec_from_file_location("gen", sys.argv[1])
g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)
torch.manual_seed(0)
s = g.ModelShape(1, 2, 64, 128, 64)  # a small head: the interpreter runs every int8 tile
cpu = torch.device("cpu")
FAILS = ((64, 256, 8), (64, 512, 16))  # as a GPU short of registers would refuse them
def cost(key, tile):  # a made-up time per (product, tile), different winners per product
    return (g.gemv_tiles(key).index(tile) * 7 + key[0] + key[1]) % 11
for quant in ("none", "int8"):
    g.GEMV_PICKS.clear()
    # int8 with X_ASM (its PTX loads run only on a GPU; the key and the tl.load twins count)
    g.X_ASM = 2 if quant == "int8" else 0
    m = g.GPT(s).eval().requires_grad_(False)
    m.load_state_dict(g.shard(g.random_state_dict(s, 0, cpu, torch.float32), s, 0, 1))
    if quant == "int8":
        g.quantize_int8(m)
    m.setup_cache(cpu, torch.float32)
    tok, pos = torch.tensor([[5]]), torch.tensor([3])
    want = m.decode_fast(tok, pos).clone()
    timed = {}
    def timer(fn, key, tile):
        assert g.GEMV_PICKS[key] == tile  # the product runs with the tile being timed
        if key[12]:  # proj reads attention's sums: a step's, not ones qkv's timing cleared
            assert (m.blocks[0].attn.sums[-2:] > 0).all(), m.blocks[0].attn.sums[-2:]
        if tile in FAILS:
            raise OutOfResources(300, 255, "registers")
        if quant == "int8":  # each tile really runs (the interpreter is slow: one weight type)
            fn()
        timed.setdefault(key, []).append(tile)
        return cost(key, tile)
    times = {}
    picks = g.tune_gemv(lambda: m.decode_fast(tok, pos), timer=timer, times=times)
    assert len(picks) == 5, picks  # qkv, proj, fc, fc_proj, the head
    for key, tile in picks.items():  # each candidate's time a call (the timer's / 1 layer)
        assert times[key][0] == (cost(key, tile), tile), times[key]
        assert sorted(times[key]) == times[key] and len(times[key]) == len(timed[key])
    assert {k[2] for k in picks} == {"torch.uint8" if quant == "int8" else "torch.float32"}
    for key, tile in picks.items():
        ok = [t for t in g.gemv_tiles(key) if t not in FAILS]
        assert timed[key] == ok and tile == min(ok, key=lambda t: cost(key, t)), (key, tile)
    assert g.GEMV_PICKS == picks
    m.work["best"].fill_(g.LOWEST_KEY)
    tol = 1e-4 if quant == "int8" else 1e-5  # int8 tiles add a bias and take it off (MAGIC)
    assert torch.allclose(m.decode_fast(tok, pos), want, rtol=tol, atol=tol)
    # refine_in_step: the step's graph (a stand-in timer here) decides among each product's
    # few fastest (with X_ASM, each also with x read by tl.load); a tile wins only by more
    # than the margin, a refused one is passed over
    keys = list(times)
    second = {k: times[k][1][1] for k in keys}
    twin = g.tl_load_twin(picks[keys[3]])
    x = torch.zeros(64, dtype=torch.bfloat16)  # what the kernel is told: the twin's X_ASM 0
    assert g.x_asm_for(x, 64, twin) == 0 and g.x_asm_for(x, 64, picks[keys[3]]) == g.X_ASM
    # attention's own setting, whatever the products': eight a load only where runs allow
    assert g.x_asm_for(x, 64, want=2) == 2 and g.x_asm_for(x, 63, want=2) == 1
    assert g.x_asm_for(x, 64, want=0) == 0 and g.x_asm_for(x[1:], 64, want=2) == 1
    def step_time():
        t = 1e-3
        for k in keys:
            if g.GEMV_PICKS[k] in refused:
                raise OutOfResources(300, 255, "registers")
            if g.GEMV_PICKS[k] == second[k]:  # qkv's second is 1 % faster in the step,
                t *= 0.99 if k == keys[0] else 0.999  # proj's only 0.1 %: noise, kept out
            if k == keys[3] and g.GEMV_PICKS[k] == twin:  # fc_proj's, x by tl.load: 1 %
                t *= 0.99
        return t
    refused = [times[keys[2]][2][1]]  # fc's third fails in the step
    in_step = g.refine_in_step(step_time, times, top=3, timer=step_time)
    def tried(k, n):  # the tiles refine_in_step should time, past the pick
        top = [t for _, t in times[k][:3]]
        return top[:n] + ([g.tl_load_twin(t) for t in top] if quant == "int8" else [])
    assert g.GEMV_PICKS[keys[0]] == second[keys[0]], in_step[keys[0]]
    assert g.GEMV_PICKS[keys[3]] == (twin if quant == "int8" else picks[keys[3]]), in_step
    assert all(g.GEMV_PICKS[k] == picks[k] for k in (keys[1], keys[2], keys[4])), in_step
    for k, n in ((keys[0], 3), (keys[2], 2)):  # the first pass (a second one follows)
        assert [t for _, t in in_step[k]][: len(tried(k, n))] == tried(k, n), in_step[k]
    assert abs(in_step[keys[1]][1][0] - 0.99e-3 * 0.999) < 1e-12, in_step[keys[1]]
    m.work["best"].fill_(g.LOWEST_KEY)  # a twin computes what its tile did
    assert torch.allclose(m.decode_fast(tok, pos), want, rtol=tol, atol=tol)
    # Engine.tune times the step at longer cache lengths too (tune_positions): the slots it
    # writes there are past pos, so the step at pos computes what it did
    far = g.tune_positions(int(pos), s.seq_len)
    assert far[0] == int(pos) and far[-1] > int(pos) and far[-1] < s.seq_len, far
    assert g.tune_positions(s.seq_len - 4, s.seq_len) == [s.seq_len - 4, s.seq_len - 1]
    for p in far[1:]:
        m.decode_fast(torch.tensor([[7]]), torch.tensor([p]))
    m.work["best"].fill_(g.LOWEST_KEY)
    assert torch.allclose(m.decode_fast(tok, pos), want, rtol=tol, atol=tol)
    g.GEMV_PICKS.update(picks)
    def no_timer(fn, key, tile):
        raise AssertionError("a known pick was timed again")
    assert g.tune_gemv(lambda: m.decode_fast(tok, pos), timer=no_timer, known=picks) == picks
    bad = dict(picks)
    odd = next(iter(bad))
    bad[odd] = (3, 3, 3)  # not a candidate (a crafted cache): timed again, the rest taken
    timed.clear()
    assert g.tune_gemv(lambda: m.decode_fast(tok, pos), timer=timer, known=bad) == picks
    assert list(timed) == [odd]
    # a restart takes a twin it saved, where the key has X_ASM (without, it is no candidate)
    timed.clear()
    got = g.tune_gemv(lambda: m.decode_fast(tok, pos), timer=timer,
                      known={**picks, odd: g.tl_load_twin(picks[odd])})  # fmt: skip
    assert got[odd] == (g.tl_load_twin(picks[odd]) if quant == "int8" else picks[odd])
    assert list(timed) == ([] if quant == "int8" else [odd])
    floats = {k: tuple(float(v) for v in t) for k, t in picks.items()}  # JSON's 16.0 == 16
    got = g.tune_gemv(lambda: m.decode_fast(tok, pos), timer=no_timer, known=floats)
    assert all(type(v) is int for t in got.values() for v in t), got  # the candidates' own ints
    def broken(fn, key, tile):  # not a tile the GPU refuses: a real error stops the tuning
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    try:
        g.tune_gemv(lambda: m.decode_fast(tok, pos), timer=broken)
        raise AssertionError("a CUDA error was taken for a refused tile")
    except RuntimeError as e:
        assert "illegal memory access" in str(e)
print("tuned")
"""


@pytest.mark.slow
@pytest.mark.integration
def test_each_product_gets_the_tile_that_timed_fastest_and_computes_the_same(
    tmp_path: Path,
) -> None:
    """tune_gemv (Engine, before the decode graph is captured) records the products of a real
    decode step, times every candidate tile of each with the product actually run that way
    (Triton's interpreter; the timer stands in for the CUDA graph), keeps the fastest, skips a
    tile the GPU refuses, and the step then computes what it did before. A restart's picks
    are taken as they are, but one that is not a candidate is timed again."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    # ~1 min alone: the interpreter runs every int8 tile of every product (a hang guard)
    proc = run_with_template(tmp_path, TUNE_CHECK, triton_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "tuned"


def test_an_early_products_tile_is_timed_again_once_the_later_ones_are_picked(
    gen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """refine_in_step decides the products in order, each in the step as the later ones still
    run their first tiles. Where a tile of an earlier product is faster only beside a later
    product's pick (the first pass decided qkv in a step ~40 % slower than the final one), the
    second pass finds it; a tile the first pass found far slower is not timed again."""
    a, b = (("qkv",) + (None,) * 14 + (False,)), (("fc",) + (None,) * 14 + (False,))
    monkeypatch.setitem(gen.GEMV_PICKS, a, "a1")
    monkeypatch.setitem(gen.GEMV_PICKS, b, "b1")
    times = {a: [(1.0, "a1"), (1.01, "a2"), (1.1, "a3")], b: [(1.0, "b1"), (1.01, "b2")]}
    calls = []

    def step() -> float:
        pa, pb = gen.GEMV_PICKS[a], gen.GEMV_PICKS[b]
        calls.append((pa, pb))
        s = 0.95 if pb == "b2" else 1.0  # fc's second tile: the step 5 % faster
        if pa == "a2":  # qkv's second: 2 % faster beside fc's second, 2 % slower before it
            s *= 0.98 if pb == "b2" else 1.02
        return s * (1.04 if pa == "a3" else 1.0)

    got = gen.refine_in_step(step, times, top=3, timer=step)
    assert (gen.GEMV_PICKS[a], gen.GEMV_PICKS[b]) == ("a2", "b2"), got
    assert calls.count(("a3", "b1")) == 1 and ("a3", "b2") not in calls, calls
    assert got[a][-1] == (pytest.approx(0.95 * 0.98), "a2"), got[a]


def test_the_tuners_form_pick_times_the_other_form_beside_the_tile_the_step_kept(
    gen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Engine.tune's chain: refine_in_step's times go to pick_attn_form. Where qkv keeps its
    first tile through both passes, in_step holds that tile's time from the first pass only,
    taken while fc still ran its slow first tile; the other form must still be timed beside
    it (round 30: the select form 1.8 % faster on the pick, never timed there)."""
    qkv = ("qkv",) + (None,) * 10 + (True,) + (None,) * 3 + (False,)  # key[11]: clears sums
    fc = ("fc",) + (None,) * 10 + (False,) + (None,) * 3 + (False,)
    monkeypatch.setattr(gen, "ATTN_SELECT", 0)
    monkeypatch.setitem(gen.GEMV_PICKS, qkv, "q1")
    monkeypatch.setitem(gen.GEMV_PICKS, fc, "f1")
    times = {qkv: [(1.0, "q1"), (1.005, "q2")], fc: [(1.0, "f1"), (1.01, "f2")]}

    def step() -> float:
        s = 0.7 if gen.GEMV_PICKS[fc] == "f2" else 1.0  # fc's second tile: far faster
        s *= 1.004 if gen.GEMV_PICKS[qkv] == "q2" else 1.0
        if gen.ATTN_SELECT:  # the select form: faster after q1, slower after q2
            s *= 0.98 if gen.GEMV_PICKS[qkv] == "q1" else 1.02
        return s

    in_step = gen.refine_in_step(step, times, top=2, timer=step)
    assert (gen.GEMV_PICKS[qkv], gen.GEMV_PICKS[fc]) == ("q1", "f2"), in_step
    assert [s for s, t in in_step[qkv] if t == "q1"] == [1.0], in_step  # the first pass's only
    tried = gen.pick_attn_form(step, in_step)
    assert (gen.ATTN_SELECT, gen.GEMV_PICKS[qkv]) == (1, "q1"), tried


def test_attention_takes_the_other_form_only_where_the_step_is_faster_with_it(
    gen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pick_attn_form times the step with attention's other form beside qkv's pick and each of
    its near tiles (the pair is what counts: round 28), and takes a form and tile only by the
    margin; a tile the GPU refuses is passed over; a far-slower qkv tile is not timed."""
    qkv = ("qkv",) + (None,) * 10 + (True,) + (None,) * 3 + (False,)  # key[11]: clears sums
    fc = ("fc",) + (None,) * 10 + (False,) + (None,) * 3 + (False,)
    monkeypatch.setattr(gen, "ATTN_SELECT", 0)
    monkeypatch.setitem(gen.GEMV_PICKS, qkv, "q1")
    # q1, the pick, as refine_in_step leaves it: its one time from the first pass, when the
    # later products still ran their first tiles (the second pass times the others beside it)
    in_step = {fc: [(1.0, "f1")], qkv: [(1.4, "q1"), (1.0, "q2"), (1.01, "q3"), (1.2, "q4")]}
    cost = {(0, "q1"): 1.0, (1, "q1"): 1.002, (1, "q2"): 0.98, (1, "q3"): 0.97}
    calls = []

    def timer() -> float:
        calls.append((gen.ATTN_SELECT, gen.GEMV_PICKS[qkv]))
        if calls[-1] == (1, "q3"):
            raise gen.TILE_ERRORS[0](300, 255, "registers")
        return cost[calls[-1]]

    tried = gen.pick_attn_form(timer, in_step)
    assert (gen.ATTN_SELECT, gen.GEMV_PICKS[qkv]) == (1, "q2"), tried
    assert calls == [(0, "q1"), (1, "q1"), (1, "q2"), (1, "q3")], calls  # q4: not near
    assert [t[1:] for t in tried] == [(0, "q1"), (1, "q1"), (1, "q2")], tried
    cost[(1, "q2")] = 0.999  # within the margin: the form and tile stay as they were
    monkeypatch.setattr(gen, "ATTN_SELECT", 0)
    gen.GEMV_PICKS[qkv] = "q1"
    gen.pick_attn_form(timer, in_step)
    assert (gen.ATTN_SELECT, gen.GEMV_PICKS[qkv]) == (0, "q1")
    # a restart takes the saved form as the template writes it, and nothing else
    key = ("attention", 16, 128, "torch.bfloat16", True)
    for saved, want in (((1,), 1), ((1.0,), 1), ((True,), 1), ((0,), 0), ((2,), None),
                        (("1",), None), (([1],), None), ((), None), (None, None)):  # fmt: skip
        got = gen.known_attn_form({key: saved} if saved is not None else {}, key)
        assert got == want and type(got) is type(want), (saved, got)


def test_saved_tile_picks_come_back_and_anything_else_in_their_place_is_ignored(
    gen, tmp_path: Path
) -> None:
    """--compile-cache keeps tune_gemv's picks for a restart. What comes back is exactly what
    was written, for the same GPU and Triton; another stamp, a link, a FIFO (no hang), an
    oversized or malformed file gives nothing (the restart tunes again), never an error."""
    stamp = {"gpu": "NVIDIA H200", "triton": "3.9.0"}
    picks = {(6144, 2048, "torch.uint8", True, True, False, False, False, "torch.bfloat16", True):
             (16, 512, 4)}  # fmt: skip
    path = tmp_path / "cache" / gen.TILE_PICKS_FILE
    gen.write_tile_picks(path, picks, stamp)
    assert gen.read_tile_picks(path, stamp) == picks
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    assert gen.read_tile_picks(path, {**stamp, "gpu": "NVIDIA A100"}) == {}
    link = tmp_path / "link.json"
    link.symlink_to(path)
    assert gen.read_tile_picks(link, stamp) == {}
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert gen.read_tile_picks(fifo, stamp) == {}
    assert gen.read_tile_picks(tmp_path / "missing.json", stamp) == {}
    for body in (
        "not json", "[]", '{"stamp": 1}', json.dumps({"stamp": stamp, "picks": 7}),
        json.dumps({"stamp": stamp, "picks": [[1]]}), json.dumps({"stamp": stamp, "picks": [7]}),
        json.dumps({"stamp": stamp, "picks": [[[[1]], [1]]]}),
        json.dumps({"stamp": stamp, "picks": []}) + " " * 70000,
        "[" * 30000 + "]" * 30000,  # nested past the parser's recursion limit
    ):  # fmt: skip
        path.write_text(body)
        assert gen.read_tile_picks(path, stamp) == {}, body
    victim = tmp_path / "victim.txt"  # a link planted where the temporary file goes
    victim.write_text("keep")
    (path.parent / f".{path.name}.{os.getpid()}.tmp").symlink_to(victim)
    gen.write_tile_picks(path, {}, stamp)
    assert victim.read_text() == "keep" and gen.read_tile_picks(path, stamp) == {}
    blocked = tmp_path / "a-file"  # a cache folder that cannot be made (root ignores modes)
    blocked.write_text("")
    gen.write_tile_picks(blocked / gen.TILE_PICKS_FILE, picks, stamp)  # no error: next start tunes
    assert blocked.read_text() == ""


def test_set_pick_copies_a_caches_picks_with_one_tile_replaced(gen, tmp_path: Path) -> None:
    """bench/gpu/set_pick.py makes the cache a paired run starts from: the source's picks and
    stamp, one product's tile replaced, read back by the template as a start would. A tile
    that is no candidate, a shape the cache does not hold, or a cache with no picks is a
    one-line usage error, and nothing is written."""
    stamp = {"gpu": "NVIDIA H100 80GB HBM3", "triton": "3.9.0"}
    int8 = ("torch.uint8", True, True, False, False, False, "torch.bfloat16", True)
    qkv = (6144, 2048, *int8, "torch.bfloat16", True, 0, True, True, 1, 0)
    proj = (2048, 2048, *int8, "torch.float64", False, 16, False, False, 1, 0)
    attn = ("attention", 16, 128, "torch.bfloat16", True)  # attention's form (ATTN_SELECT)
    picks = {qkv: (4, 2048, 4, 0), attn: (0,), proj: (8, 1024, 8, 0)}
    src, dst = tmp_path / "src", tmp_path / "dst"
    gen.write_tile_picks(src / gen.TILE_PICKS_FILE, picks, stamp)
    args = [str(src), str(dst), "--shape", "6144x2048"]
    proc = run_bench("set_pick.py", *args, "--tile", "8x1024x4x0", env=child_env())
    assert proc.returncode == 0, proc.stderr
    got = gen.read_tile_picks(dst / gen.TILE_PICKS_FILE, stamp)
    assert got == {qkv: (8, 1024, 4, 0), attn: (0,), proj: (8, 1024, 8, 0)}, got
    proc = run_bench("set_pick.py", *args, "--tile", "8x1024x4x0", "--form", "1", env=child_env())
    got = gen.read_tile_picks(dst / gen.TILE_PICKS_FILE, stamp)
    assert got == {qkv: (8, 1024, 4, 0), attn: (1,), proj: (8, 1024, 8, 0)}, proc.stderr
    proc = run_bench("set_pick.py", str(src), str(dst), "--form", "1", env=child_env())
    got = gen.read_tile_picks(dst / gen.TILE_PICKS_FILE, stamp)
    assert got == {**picks, attn: (1,)} and gen.known_attn_form(got, attn) == 1, proc.stderr
    for bad, why in (
        (["--tile", "8x1024x3"], "--tile 8x1024x3: not a candidate"),
        (["--tile", "8xbig"], "--tile 8xbig: not a candidate"),
        (["--shape", "50304x2048", "--tile", "8x1024x4"], "--shape 50304x2048: 0 products"),
        (["--shape", "6144x2048"], "give --shape and --tile"),
        (["--form", "2"], "--form: invalid choice"),
    ):
        out = tmp_path / "never"
        argv = [str(src), str(out), *(args[2:] if bad[0] == "--tile" else []), *bad]
        proc = run_bench("set_pick.py", *argv, env=child_env())
        assert proc.returncode == 2 and why in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and not out.exists(), proc.stderr
    proc = run_bench("set_pick.py", str(tmp_path), str(dst), *args[2:], "--tile", "8x1024x4",
                     env=child_env())  # fmt: skip
    assert proc.returncode == 2 and "no tile picks there" in proc.stderr, proc.stderr
    crafted = tmp_path / "crafted"  # a key of that shape no start of the template wrote
    gen.write_tile_picks(crafted / gen.TILE_PICKS_FILE, {(6144, 2048): (8, 1024, 4)}, stamp)
    proc = run_bench("set_pick.py", str(crafted), str(tmp_path / "never"), *args[2:], "--tile",
                     "8x1024x4", env=child_env())  # fmt: skip
    assert proc.returncode == 2 and "not a product of" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "never").exists()
    # no attention entry (an older template's cache): nothing to set
    proc = run_bench(
        "set_pick.py", str(crafted), str(tmp_path / "never"), "--form", "1", env=child_env()
    )
    assert proc.returncode == 2 and "0 attention entries" in proc.stderr, proc.stderr
    assert not (tmp_path / "never").exists()


def test_gemv_cost_sweep_checks_every_forced_tile_against_the_autotuned_product() -> None:
    """bench/gpu/gemv_cost.py --sweep launches the template's own kernel with each tile in
    place of the autotuner and times it only if its product matches: under the interpreter
    (--smoke) every block product, both weight types, runs and passes that check. It breaks
    here, not on a device call, when the kernel's arguments change."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    proc = run_bench("gemv_cost.py", "--smoke", "--sweep", env=triton_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    checked = [line for line in proc.stdout.splitlines() if "tiles checked" in line]
    assert len(checked) == 8, proc.stdout
    assert all(c.endswith("; 2 tiles checked (2 launches)") for c in checked), proc.stdout
    assert "WRONG" not in proc.stdout and "Error" not in proc.stdout, proc.stdout


def test_gemv_cost_sweeps_only_the_products_asked_for_and_the_head_with_head() -> None:
    """--only picks products by name and --head adds the head's tiles to --sweep: the head of
    both weight types, checked against torch's product, and nothing else."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    proc = run_bench(
        "gemv_cost.py", "--smoke", "--sweep", "--head", "--only", "head", env=triton_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    checked = [line for line in proc.stdout.splitlines() if "tiles checked" in line]
    assert [c.split(":")[0].strip() for c in checked] == ["head int8", "head bf16"], proc.stdout
    assert all(c.endswith("; 2 tiles checked (2 launches)") for c in checked), proc.stdout


def test_gemv_cost_refuses_an_unknown_product_name() -> None:
    """--only with a misspelt product is a usage error naming it, before any GPU work."""
    proc = run_bench("gemv_cost.py", "--smoke", "--only", "head,qvk", env=child_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "no product qvk" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_boundary_cost_runs_its_chain_and_counts_every_barrier_arrival() -> None:
    """bench/gpu/boundary_cost.py under the interpreter (--smoke, one program): the chain of
    kernels and the persistent kernel's barriers (next step's bytes loaded after and before
    the wait) run, and the script checks the counter holds every arrival and each program
    summed every step's bytes."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    proc = run_bench("boundary_cost.py", "--smoke", env=triton_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| 1 | ran | - | ran | ran | |" in proc.stdout, proc.stdout


def test_sass_count_compiles_the_products_each_way_and_x_asm_drops_the_barriers() -> None:
    """bench/gpu/sass_count.py compiles int8 products for sm_90 (no GPU) with x read by
    tl.load and by X_ASM's PTX loads (1 and 2). X_ASM exists to take x's layout change (a store, a
    barrier, a load, a barrier each time) out of the products' K loop: if a Triton version stops
    letting the PTX loads take the weights' layout, this says so (Triton 3.6, the device's,
    and 3.9 both leave none in the loop)."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    proc = run_bench("sass_count.py", "--only", "proj,qkv,attention", env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = sass_rows(proc.stdout)  # (the |---| line is not "| ")
    names = {r["product, tile"].split()[0] for r in rows}
    assert len(rows) == 9 and names == {"proj", "qkv", "attention"}, proc.stdout
    cell = {(r["product, tile"].split()[0], r["X_ASM"]): r for r in rows}
    for name in ("proj", "qkv"):
        plain, asm = cell[name, "0"], [cell[name, "1"], cell[name, "2"]]
        assert int(plain["BAR in loop"]) > 0 and all(c["BAR in loop"] == "0" for c in asm), (
            proc.stdout
        )
        assert all(2 * int(c["BAR"]) <= int(plain["BAR"]) for c in asm), proc.stdout
        assert all(0 < int(c["programs an SM"]) <= 16 for c in (plain, *asm)), proc.stdout
    for name in ("proj", "qkv", "attention"):  # x's PTX loads stay after the wait
        early = {cell[name, m]["LDG before wait"] for m in "012"}
        assert len(early) == 1 and int(early.pop()) > 0, proc.stdout


def sass_rows(stdout: str) -> list[dict[str, str]]:
    """sass_count.py's table as one dict a row, by its header."""
    table = [[c.strip() for c in r.split("|")[1:-1]] for r in stdout.splitlines() if r[:2] == "| "]
    return [dict(zip(table[0], r, strict=True)) for r in table[1:]]


@pytest.mark.parametrize("weights", ["int8", "bf16"])
def test_x_asm_eight_a_load_packs_only_neighbouring_elements(gen, weights: str) -> None:
    """X_ASM 2 loads eight 16-bit elements of x at once from the first one's address, and
    Triton packs the eight from the elements a thread holds: right only in a layout where
    they lie together. Triton copies a pure op into whatever layout another use wants (a
    carried sum, attention's q and k), so every X_ASM 2 kernel, at every tile the tuner
    tries, is compiled for sm_90 and its TTGIR read: no packed load apart (the template
    before round 19's prep had one in every int8 fc and fc_proj tile, and in attention),
    and no barrier left in the K loop, X_ASM's purpose."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    only = "fc,fc_proj,attention" if weights == "int8" else "fc,fc_proj"
    args = ["--all-tiles", "--x-asm", "2", "--weights", weights, "--only", only]
    proc = run_bench("sass_count.py", *args, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = sass_rows(proc.stdout)
    tiles = len(gen.GEMV_TILES["int8" if weights == "int8" else "float"])
    assert len(rows) == 2 * tiles + (weights == "int8"), proc.stdout
    assert all(r["x8 apart"] == "0" and r["BAR in loop"] == "0" for r in rows), proc.stdout


def latest_round_script() -> Path:
    """The generate round script with the highest number: the one the next device call runs."""
    return max(
        (REPO / "bench/gpu").glob("generate_round*.sh"),
        key=lambda p: int(re.search(r"(\d+)\.sh$", p.name).group(1)),
    )


def test_the_latest_round_script_finds_every_text_it_edits_in_the_template(tmp_path: Path) -> None:
    """A round's device script makes its variants as sed copies of the template, each checked by
    a `grep -c` into the log: a pattern the template no longer holds would make a copy that is
    the template itself, and its figure a false pair, found only after the device call. Run dry
    (DRY=1: steps logged, not run), every part of the latest round must find its text once."""
    script = latest_round_script()
    text = script.read_text()
    parts = re.search(r"\$\{PARTS:-([^}]*)\}", text).group(1).split()  # the first call's
    parts += " ".join(re.findall(r'PARTS="([^"]*)"', text)).split()  # any next call's
    parts += re.findall(r"^(\w+)\) ", text, re.M)  # and any other the script knows
    env = {**os.environ, "DRY": "1", "OUT": str(tmp_path), "W": str(tmp_path / "w"), "TAG": "dry"}
    env["PARTS"] = " ".join(dict.fromkeys(parts))
    proc = subprocess.run(
        ["bash", str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "unknown part" not in proc.stdout, proc.stdout + proc.stderr
    log = (tmp_path / "dry.log").read_text().splitlines()
    checks = [line for line in log if line.strip().isdigit()]
    assert len(checks) == text.count("grep -c"), "\n".join(log)  # each check logged once
    assert all(c.strip() == "1" for c in checks), "\n".join(log)
    ran = [line for line in log if line.startswith("=== ")]
    assert len(ran) >= len(dict.fromkeys(parts)), "\n".join(log)  # every part logs its steps


def test_the_latest_round_script_stops_before_the_gpu_without_its_carried_files(
    tmp_path: Path,
) -> None:
    """A device call that forgot carry [".gpuwork"] (the probe, the template before) would spend
    its minutes on steps failing one by one: the script names what is missing and exits 2
    before it asks anything of the GPU."""
    script = latest_round_script()
    if ".gpuwork/" not in script.read_text():
        pytest.skip(f"{script.name} carries nothing")
    work = tmp_path / "checkout"
    (work / "bench/gpu").mkdir(parents=True)
    for name in (script.name, "steps.sh"):
        (work / "bench/gpu" / name).write_text((REPO / "bench/gpu" / name).read_text())
    env = {k: v for k, v in os.environ.items() if k != "DRY"}
    env.update(OUT=str(tmp_path), TAG="nocarry", W=str(tmp_path / "w"))
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    (tmp_path / "bin").mkdir()
    spy = tmp_path / "bin" / "nvidia-smi"  # any GPU query would leave its mark
    spy.write_text(f"#!/bin/sh\ntouch {tmp_path / 'asked-the-gpu'}\n")
    spy.chmod(0o755)
    proc = subprocess.run(
        ["bash", f"bench/gpu/{script.name}"], cwd=work, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "missing: .gpuwork/" in proc.stderr, proc.stderr
    assert not (tmp_path / "asked-the-gpu").exists() and "===" not in proc.stdout


@pytest.mark.parametrize("tiles", ["16x512", "8x3x4", "16x512x4,x", "0x512x4"])
def test_gemv_cost_refuses_a_malformed_tile_list_in_one_line(tiles: str) -> None:
    """--tiles is parsed before any GPU work: a tile Triton cannot build (not three powers of
    2) is a usage error naming the value, not a traceback after the model is made."""
    proc = run_bench("gemv_cost.py", "--smoke", "--tiles", tiles, env=child_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert repr(tiles) in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("script", ["attn_cost.py", "gemv_cost.py", "attn_profile.py"])
def test_a_bench_script_given_no_template_file_says_so_in_one_line(script: str) -> None:
    """--template (and the default) name a file to import: a wrong path is a usage error
    naming it, exit 2, before any kernel runs, not an import traceback."""
    args = ["--template", "/nonexistent/gen.py"] if script != "attn_profile.py" else []
    env = {**triton_env(), "PWD": "/"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench/gpu" / script), "--smoke", *args],
        cwd="/", env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "no such template file" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("pos", ["63", "127"])
def test_attn_profile_checks_the_attention_it_launches_for_a_profiler(pos: str) -> None:
    """bench/gpu/attn_profile.py launches the template's decode attention alone for ncu, and
    checks the last launch against torch's attention first: under the interpreter, at a chunk's
    last slot and the cache's, it agrees and says so; a position off the cache is a usage
    error naming it, before anything runs."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    proc = run_bench(
        "attn_profile.py", "--smoke", "--pos", pos, "--launches", "2", env=triton_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = float(re.search(r"rel err (\S+)", proc.stdout).group(1))
    assert f"at pos {pos}:" in proc.stdout and err < 1e-5, proc.stdout
    off = run_bench("attn_profile.py", "--smoke", "--pos", str(int(pos) + 65), env=triton_env())
    assert off.returncode == 2 and "0 to 127" in off.stderr, off.stderr


@pytest.mark.parametrize("mode", [[], ["--parts"]])
def test_attn_cost_runs_the_templates_attention_and_finds_the_text_its_parts_replace(
    mode: list[str],
) -> None:
    """bench/gpu/attn_cost.py checks each (chunk, warps) against torch's attention, and
    --parts patches the template's kernel text (the ticket, the cache loads, the counter's
    reset): under the interpreter every chunk passes, and every part still finds its text, so
    an edit to the kernel breaks the script here, not on a device call."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    proc = run_bench("attn_cost.py", "--smoke", *mode, env=triton_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [
        line for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line
    ]
    mark, n_rows = ("ran", 5) if mode else ("ok", 3)  # a header row, then 4 parts or 2 chunks
    assert len(rows) == n_rows and all(r.count(mark) == 2 for r in rows[1:]), proc.stdout


def test_triton_decode_kernels_compile_for_hopper(tmp_path: Path) -> None:
    """The interpreter runs a kernel as Python, so it accepts code Triton's compiler refuses
    (round 8's first int8 variant: an early return inside a constexpr if compiled to a shape
    error on the GPU). Every decode kernel, every autotuned tile, bf16 and int8 weights and
    with / without PDL, and Picker's (the one-program sorts at 256 and 1,024 words), is
    compiled here to sm_90 machine code (Triton's own ptxas; no GPU)."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    env = {**child_env(), "TRITON_CACHE_DIR": str(tmp_path / "triton-cache")}
    proc = run_with_template(tmp_path, COMPILE_CHECK, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # GEMV_TILES, attention, embedding and advance, int8 prefill, Picker's
    assert proc.stdout.split()[-1] == str(11 + 10 + 6 + 1 + 3 + 6 + 8), proc.stdout


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("quant", ["none", "int8"])
def test_triton_decode_gives_the_torch_decode_tokens(
    trained: Path, tmp_path: Path, quant: str
) -> None:
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    args = ["--cpu", "--ckpt", str(trained), "--prompt", PROMPT, "--max-new-tokens", "5"]
    args += ["--temperature", "0", "--repeat", "1", "--eager", "--quant", quant]
    runs = {}
    for kernels in ("torch", "triton"):
        proc = subprocess.run(
            [sys.executable, str(GENERATE), *args, "--decode-kernels", kernels],
            cwd=tmp_path, env=triton_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        runs[kernels] = result_of(proc)["tokens"]
    assert runs["triton"] == runs["torch"] and len(runs["torch"]) == 5


@pytest.mark.slow
@pytest.mark.integration
def test_an_fsdp_checkpoint_samples_like_the_same_weights_saved_by_torch(tmp_path: Path) -> None:
    """fsdp saves DCP shards behind OUT/latest; generate reads them whole. The same weights
    converted to a plain ckpt.pt (the lm format) must give the same tokens."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    (tmp_path / "input.txt").write_text("the lazy dog sleeps " * 200)
    argv = [sys.executable, str(REPO / "templates" / "fsdp.py"), *LM_ARGS, "--data", "input.txt"]
    argv += ["--batch-size", "8", "--max-steps", "10", "--warmup-steps", "2", "--out-dir", "out"]
    proc = subprocess.run(
        argv, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    step_dir = tmp_path / "out" / (tmp_path / "out" / "latest").read_text().strip()
    dcp_to_torch_save(step_dir, tmp_path / "ckpt.pt")
    from_dcp = result_of(generate(["--ckpt", "out", *GREEDY, "--eager"], tmp_path))
    from_torch = result_of(generate(["--ckpt", "ckpt.pt", *GREEDY, "--eager"], tmp_path))
    assert from_dcp["tokens"] == from_torch["tokens"] and len(from_dcp["tokens"]) == 40


# --- tensor parallel: torchrun, 2 processes, gloo ---


@pytest.mark.slow
@pytest.mark.integration
def test_tensor_parallel_over_two_processes_gives_the_single_process_tokens(
    trained: Path, tmp_path: Path
) -> None:
    single = result_of(generate(["--ckpt", str(trained), *GREEDY, "--eager"], tmp_path))
    argv = [*TORCHRUN, "2", str(GENERATE), "--cpu", "--ckpt", str(trained), *GREEDY, "--eager"]
    proc = subprocess.run(
        argv, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=120
    )
    tp = result_of(proc)
    assert tp["world_size"] == 2
    assert tp["tokens"] == single["tokens"]
    # each rank holds half of every block's matrices (the embeddings/head stay whole)
    assert tp["weight_bytes_per_token"] < single["weight_bytes_per_token"]


TP_TUNE_CHECK = """
import importlib.util, sys, torch, torch.distributed as dist
spec = importlib.util.spec_from_file_location("gen", sys.argv[1])
g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
s, cpu = g.ModelShape(1, 2, 64, 256, 64), torch.device("cpu")
m = g.GPT(s, world).eval().requires_grad_(False)
m.load_state_dict(g.shard(g.random_state_dict(s, 0, cpu, torch.float32), s, rank, world))
m.setup_cache(cpu, torch.float32)
tok, pos = torch.tensor([[5]]), torch.tensor([3])
def timer(fn, key, tile):  # each rank finds another tile fastest, as two GPUs may
    return (g.gemv_tiles(key).index(tile) + 3 * rank) % 7
own = g.tune_gemv(lambda: m.decode_fast(tok, pos), timer=timer)
picks = g.agree_tile_picks(own)
every = [None] * world
dist.all_gather_object(every, (own, picks, dict(g.GEMV_PICKS)))
if rank == 0:
    assert every[0][0] != every[1][0]  # they did pick differently
    assert all(p == every[0][0] and gp == p for _, p, gp in every), every  # rank 0's, everywhere
    print("agreed", len(picks))
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.integration
def test_tensor_parallel_ranks_take_rank_0s_tiles(tmp_path: Path) -> None:
    """Each rank computes the head whole and takes its own argmax: with tiles of their own, a
    near tie could give the ranks different tokens. After tuning, every rank runs rank 0's."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    (tmp_path / "check.py").write_text(TP_TUNE_CHECK)
    proc = subprocess.run(
        [*TORCHRUN, "2", "check.py", str(GENERATE)],
        cwd=tmp_path, env=triton_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "agreed 5" in proc.stdout, proc.stdout[-2000:]


# --- serving ---


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]


class Server:
    """generate.py --serve 0 (any free port) as a child, or under torchrun with `ranks`
    processes; the port is read off rank 0's first line. Its own process group, so that a
    hung run can be killed whole."""

    def __init__(
        self,
        args: list[str],
        cwd: Path,
        ranks: int = 0,
        guard_s: float = 120,
        env: dict[str, str] | None = None,
    ) -> None:
        launcher = [*TORCHRUN, str(ranks)] if ranks else [sys.executable]
        argv = [*launcher, str(GENERATE), "--cpu", *args, "--serve", "0"]
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**child_env(), **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.guard = threading.Timer(guard_s, self.kill)  # a hung server fails, not hangs
        self.guard.start()
        line = self.proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line + self.proc.stderr.read()
        assert "s since the process started" in line, line  # how long a (re)start took
        self.base = line.split()[1].removesuffix("/generate")

    def post(self, body: bytes, headers: dict | None = None) -> tuple[int, list[dict]]:
        req = urllib.request.Request(
            self.base + "/generate", data=body, method="POST", headers=headers or {}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as reply:
                return reply.status, [json.loads(x) for x in reply.read().splitlines()]
        except urllib.error.HTTPError as exc:
            return exc.code, [json.loads(x) for x in exc.read().splitlines()]

    def stop(self, sig: signal.Signals) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=60)
        self.guard.cancel()
        return self.proc.returncode, out, err

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        self.guard.cancel()
        if self.proc.poll() is None:
            self.kill()
            self.proc.communicate()


@pytest.fixture
def server(trained: Path, tmp_path: Path):
    s = Server(["--ckpt", str(trained), "--eager", "--max-body", "4096"], tmp_path)
    yield s
    s.close()


@pytest.mark.integration
def test_http_generate_answers_streams_and_refuses_bad_requests(
    server: Server, trained: Path
) -> None:
    good = {"prompt": PROMPT, "max_new_tokens": 20, "temperature": 0}
    status, [reply] = server.post(json.dumps(good).encode())
    assert status == 200
    assert reply["tokens"] == reference_greedy(trained, PROMPT.encode(), 20)
    assert reply["text"] == bytes(reply["tokens"]).decode("utf-8", errors="replace")

    status, lines = server.post(json.dumps({**good, "stream": True}).encode())
    assert status == 200
    assert [line["token"] for line in lines[:-1]] == reply["tokens"]  # one line per token
    assert "".join(line["text"] for line in lines[:-1]) == reply["text"]
    assert lines[-1]["done"] is True and lines[-1]["tokens"] == reply["tokens"]

    sampled = {**good, "temperature": 0.9, "top_k": 40, "top_p": 0.9, "seed": 3}
    runs = [server.post(json.dumps(sampled).encode()) for _ in range(2)]
    assert runs[0][1][0]["tokens"] == runs[1][1][0]["tokens"]  # a seed: the same sample

    bad = [
        (b'{"prompt": "the",', 400, "malformed JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({**good, "max_new_tokens": "20"}).encode(), 400, "max_new_tokens must be int"),
        (json.dumps({**good, "stream": 1}).encode(), 400, "stream must be bool"),
        (json.dumps({**good, "temperature": True}).encode(), 400, "temperature must be"),
        (json.dumps({**good, "prompt": 5}).encode(), 400, "prompt must be str"),
        (json.dumps({**good, "max_new_tokens": 0}).encode(), 400, "max_new_tokens must be >= 1"),
        (json.dumps({**good, "top_p": 0}).encode(), 400, "top_p must be in"),
        (json.dumps({**good, "temperature": 1e999}).encode(), 400, "is not JSON"),  # Infinity
        (json.dumps({**good, "colour": "red"}).encode(), 400, "unknown field"),
        (json.dumps({**good, "prompt": ""}).encode(), 400, "must not be empty"),
        (json.dumps({**good, "prompt": "x" * 60}).encode(), 413, "exceeds the context (64)"),
        (json.dumps({**good, "prompt": "x" * 5000}).encode(), 413, "body over 4096 bytes"),
    ]
    for body, code, says in bad:
        status, [error] = server.post(body)
        assert (status, code) == (code, code) and says in error["error"], (body[:60], error)

    status, [again] = server.post(json.dumps(good).encode())  # still serving, same answer
    assert status == 200 and again["tokens"] == reply["tokens"]


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_shuts_the_server_down_cleanly(server: Server, sig: signal.Signals) -> None:
    status, _ = server.post(json.dumps({"prompt": PROMPT, "max_new_tokens": 5}).encode())
    assert status == 200
    code, out, err = server.stop(sig)
    assert code == 0, err[-3000:]
    assert "Traceback" not in err
    result = json.loads(out.splitlines()[-1].removeprefix("RESULT "))
    assert result["stopped"] == sig.name and result["served"] == 1  # the warm-up is not counted


@pytest.mark.slow
@pytest.mark.integration
def test_tensor_parallel_server_answers_like_one_process_and_stops_on_sigterm(
    trained: Path, tmp_path: Path
) -> None:
    """Under torchrun with 2 ranks: rank 0 serves and hands each request to rank 1 (both run
    every step); SIGTERM to torchrun reaches both, rank 0 tells rank 1 to stop, both exit."""
    import torch

    s = Server(["--ckpt", str(trained), "--eager"], tmp_path, ranks=2)
    try:
        good = {"prompt": PROMPT, "max_new_tokens": 20, "temperature": 0, "stream": True}
        status, lines = s.post(json.dumps(good).encode())
        assert status == 200
        assert lines[-1]["tokens"] == reference_greedy(trained, PROMPT.encode(), 20)
        # OpenAI's n: rank 1 runs every choice too, or the next step's all-reduce would hang;
        # and echo's scoring pass (its all-reduces too), penalties and a bias alike
        many = {"prompt": PROMPT, "max_tokens": 5, "n": 2, "seed": 4, "echo": True}
        many |= {"logprobs": 2, "frequency_penalty": 1, "logit_bias": {"120": 3}}
        req = urllib.request.Request(s.base + "/v1/completions", json.dumps(many).encode())
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=120) as reply:
            choices = json.load(reply)["choices"]
        assert [c["index"] for c in choices] == [0, 1]
        ids = list(PROMPT.encode())
        want = reference_logprobs(trained, ids[:1], ids[1:]).gather(
            1, torch.tensor(ids[1:])[:, None]
        )
        for c in choices:  # the prompt's log-probabilities: the full model's, not a shard's
            scored = c["logprobs"]["token_logprobs"][1 : len(ids)]
            assert scored == pytest.approx(want[:, 0].tolist(), abs=1e-3)
        _, out, err = s.stop(signal.SIGTERM)  # torchrun itself exits 1 (its SignalException)
        result = json.loads(out.splitlines()[-1].removeprefix("RESULT "))
        assert result == {**result, "stopped": "SIGTERM", "served": 2, "failed": 0}, err[-3000:]
        with pytest.raises(ProcessLookupError):  # no rank left behind
            os.killpg(s.proc.pid, 0)
    finally:
        s.close()


# --- issue 21 item 4: CPU defaults, the checkpoint's vocabulary ---


@pytest.mark.slow
@pytest.mark.integration
def test_on_cpu_it_runs_eager_unless_asked_and_prints_the_checkpoints_text(
    trained: Path, tmp_path: Path
) -> None:
    """No flag on a CPU: eager (a CPU compile cost 94 s for a 3M model), and lm's default
    vocabulary is bytes, recorded in the checkpoint, so the sample prints as text."""
    import torch

    assert torch.load(trained / "ckpt.pt", weights_only=True)["vocab"] == "bytes"
    proc = generate(["--ckpt", str(trained), *GREEDY], tmp_path)
    result = result_of(proc)
    assert result["mode"] == "eager"
    assert result["text"] == bytes(result["tokens"]).decode("utf-8", errors="replace")
    assert f"---\n{result['text']}\n---" in proc.stdout
    both = generate(["--ckpt", str(trained), *GREEDY, "--compile", "--eager"], tmp_path)
    assert both.returncode == 2 and "contradict" in both.stderr


@pytest.mark.slow
@pytest.mark.integration
def test_a_prompt_is_sampled_once_and_a_benchmark_times_three(
    trained: Path, tmp_path: Path
) -> None:
    """`--prompt` is a user's sample: one generation (eager on a CPU: no warm-up, nothing to
    compile); no prompt is a benchmark: a warm-up and three timed runs, the median reported."""
    sample = ["--ckpt", str(trained), "--prompt", PROMPT, "--max-new-tokens", "8"]
    once = result_of(generate(sample, tmp_path))
    assert once["mode"] == "eager" and once["generations"] == 1 and once["warmup_s"] == 0
    bench = ["--size", "tiny", "--seq-len", "64", "--prompt-len", "8", "--max-new-tokens", "8"]
    timed = result_of(generate(bench, tmp_path))
    assert timed["generations"] == 4 and timed["warmup_s"] > 0
    # where the time to be ready went, from the process start (Linux's /proc), in order
    start = timed["startup"]
    assert list(start) == ["imports_s", "cuda_s", "weights_s", "engine_s", "warmup_s"]
    assert start["imports_s"] > 0 and all(v >= 0 for v in start.values()), start
    assert (timed["prefill"], timed["decode"]) == ("eager", "eager")
    asked = result_of(generate([*sample, "--repeat", "2"], tmp_path))
    assert asked["generations"] == 2


@pytest.mark.slow
@pytest.mark.integration
def test_a_checkpoint_of_token_ids_prints_numbers_and_is_not_served(tmp_path: Path) -> None:
    """lm on synthetic ids (--vocab-size 300) records "ids": generate prints no text for them
    (some ids are bytes by chance: they are still ids), and --serve, whose prompts are
    UTF-8 bytes, refuses it in one line."""
    argv = [sys.executable, str(LM), "--cpu", "--size", "tiny", "--seq-len", "32"]
    argv += ["--vocab-size", "300", "--batch-size", "2", "--max-steps", "2", "--out-dir", "ids"]
    proc = subprocess.run(
        argv, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    args = ["--ckpt", "ids", "--prompt-len", "4", "--max-new-tokens", "8", "--repeat", "1"]
    result = result_of(generate(args, tmp_path))
    assert result["text"] is None and len(result["tokens"]) == 8
    served = generate(["--ckpt", "ids", "--serve", "0"], tmp_path)
    assert served.returncode == 2 and "byte-level" in served.stderr
    assert len(served.stderr.strip().splitlines()) == 1, served.stderr


# --- pure parts of the server (in process) ---


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("generate_template", GENERATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prefill_auto_takes_the_graph_where_int8_products_have_their_kernel(gen) -> None:
    """--prefill auto: the CUDA graph under the Triton decode, int8 included (ready in 6 s
    warm, not 15 s); compile where graphs cannot run, and for an int8 model in 32 bits, whose
    graph would widen every matrix per prompt. An explicit choice is kept."""
    assert gen.pick_prefill("auto", graph_ok=True, int8_widens=False) == "graph"
    assert gen.pick_prefill("auto", graph_ok=True, int8_widens=True) == "compile"
    assert gen.pick_prefill("auto", graph_ok=False, int8_widens=False) == "compile"
    assert gen.pick_prefill("compile", graph_ok=True, int8_widens=False) == "compile"
    assert gen.pick_prefill("graph", graph_ok=True, int8_widens=True) == "graph"


def test_streamed_pieces_add_up_to_the_text_and_never_show_a_stop(gen) -> None:
    """Byte by byte, multi-byte characters split across tokens, a stop sequence that begins
    like the text around it: the pieces join to the non-streamed text, cut at the stop."""
    data = "naïve café — le chat\nuser: more".encode()
    for stops in ([], [b"\nuser:"], [b"chat", b"caf"], [b"\xc3"]):
        stream = gen.StreamText(stops)
        pieces = [stream.feed(b) for b in data] + [stream.finish()]
        cut = next(
            (i + 1 - len(s) for i in range(len(data)) for s in stops if data[: i + 1].endswith(s)),
            len(data),
        )
        assert "".join(pieces) == data[:cut].decode("utf-8", errors="replace"), stops
        assert all(s.decode("utf-8", "replace") not in "".join(pieces) for s in stops if len(s) > 1)


def test_openai_requests_are_checked_field_by_field(gen) -> None:
    def parse(obj: dict, path: str = "/v1/completions") -> dict:
        return gen.parse_openai(json.dumps(obj).encode(), path, 64, "tiny")

    spec = parse({"model": "tiny", "prompt": "hi", "stop": "\n", "seed": 3})
    assert spec["ids"] == list(b"hi") and spec["max_new_tokens"] == 16  # OpenAI's default
    assert spec["stop"] == [b"\n"] and spec["seed"] == 3 and spec["temperature"] == 1.0
    chat = parse(
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            ]
        },
        "/v1/chat/completions",
    )
    assert bytes(chat["ids"]) == b"system: be brief\nuser: hi\nassistant: "
    assert chat["max_new_tokens"] == 64 - len(chat["ids"])  # chat: the rest of the context
    assert set(gen.CHAT_STOPS) <= set(chat["stop"])
    assert parse({"prompt": "x", "top_p": 0})["temperature"] == 0.0  # top_p 0: greedy
    assert (
        spec["n"],
        parse({"prompt": "x", "n": 3})["n"],
        parse({"prompt": "x", "n": None})["n"],
    ) == (1, 3, 1)
    bad = [
        ({"prompt": "x", "n": 17}, 400, "n"),  # past MAX_CHOICES
        ({"prompt": "x", "n": 0}, 400, "n"),
        ({"prompt": "x", "n": True}, 400, "n"),
        ({"prompt": "x", "best_of": 3}, 400, "best_of"),
        ({"prompt": "x", "logprobs": 6}, 400, "logprobs"),  # OpenAI's bound: 5
        ({"prompt": "x", "logit_bias": {"abc": 1}}, 400, "logit_bias"),
        ({"prompt": "x", "logit_bias": {"256": 1}}, 400, "logit_bias"),  # past the vocabulary
        ({"prompt": "x", "logit_bias": {"-1": 1}}, 400, "logit_bias"),
        ({"prompt": "x", "logit_bias": {"65": 101}}, 400, "logit_bias"),
        ({"prompt": "x", "logit_bias": {"65": True}}, 400, "logit_bias"),
        ({"prompt": "x", "presence_penalty": 2.5}, 400, "presence_penalty"),
        ({"prompt": "x", "frequency_penalty": -3}, 400, "frequency_penalty"),
        ({"prompt": "x", "logprobs": True}, 400, "logprobs"),  # a completion's is a count
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": 2}, 400, "logprobs"),
        (
            {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
            400,
            "top_logprobs",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400, "top_logprobs"),
        ({"prompt": "x", "model": "gpt-4"}, 404, "model"),
        ({"prompt": "x", "max_tokens": 64}, 400, "prompt"),  # context_length_exceeded
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": -1, "echo": True}, 400, "max_tokens"),
        ({"prompt": "x" * 64}, 400, "prompt"),  # full without max_tokens: the context, not 0
        (
            {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
            400,
            "max_completion_tokens",
        ),
        ({"prompt": "x", "temperature": 2.5}, 400, "temperature"),
        ({"prompt": "x", "temperature": True}, 400, "temperature"),
        ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ({"prompt": "x", "stop": [""]}, 400, "stop"),
        ({"prompt": "\ud800"}, 400, "prompt"),
        ({"prompt": ["a", "b"]}, 400, "prompt"),
        ({"prompt": [104, 256]}, 400, "prompt"),  # past the vocabulary
        ({"prompt": [True]}, 400, "prompt"),
        ({"prompt": [[104], [105]]}, 400, "prompt"),
        ({"prompt": []}, 400, "prompt"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"prompt": "x", "functions": []}, 400, "functions"),
        ({"messages": "hi"}, 400, "messages"),
    ]
    for body, status, param in bad:
        with pytest.raises(gen.BadRequest) as caught:
            parse(body, "/v1/chat/completions" if "messages" in body else "/v1/completions")
        assert (caught.value.status, caught.value.param) == (status, param), body
    with pytest.raises(gen.BadRequest) as caught:
        parse({"messages": [{"role": "tool", "content": "x"}]}, "/v1/chat/completions")
    assert caught.value.status == 400 and "role" in str(caught.value)
    with pytest.raises(gen.BadRequest) as caught:
        parse({"prompt": "x" * 64})
    assert caught.value.code == "context_length_exceeded"
    assert parse({"prompt": "x", "seed": -5})["seed"] == 2**63 - 5  # any 64-bit seed, as OpenAI
    asked = {"messages": [{"role": "user", "content": "x"}]}
    chat_path = "/v1/chat/completions"
    assert [
        spec["logprobs"],
        parse({"prompt": "x", "logprobs": 0})["logprobs"],
        parse({"prompt": "x", "logprobs": 5})["logprobs"],
        parse(asked, chat_path)["logprobs"],
        parse({**asked, "logprobs": False}, chat_path)["logprobs"],
        parse({**asked, "logprobs": True}, chat_path)["logprobs"],
        parse({**asked, "logprobs": True, "top_logprobs": 20}, chat_path)["logprobs"],
    ] == [None, 0, 5, None, None, 0, 20]
    with pytest.raises(gen.BadRequest) as caught:  # 1e400 parses as inf
        gen.parse_openai(b'{"prompt": "x", "logit_bias": {"65": 1e400}}', "/v1/completions", 64, "")
    assert caught.value.param == "logit_bias"
    few = json.dumps({**asked, "logprobs": True, "top_logprobs": 12}).encode()
    with pytest.raises(gen.BadRequest) as caught:  # a model of 10 words has no 12 likeliest
        gen.parse_openai(few, chat_path, 64, "", vocab=10)
    assert caught.value.param == "top_logprobs" and "[0, 10]" in str(caught.value)
    adjusted = parse({"prompt": "x", "logit_bias": {"65": -100, "255": 5}, "frequency_penalty": 1})
    assert adjusted["adjust"] == {"bias": {65: -100.0, 255: 5.0}, "presence": 0.0, "freq": 1.0}
    zeros = {"prompt": "x", "logit_bias": {}, "presence_penalty": 0, "frequency_penalty": None}
    assert spec["adjust"] is None and parse(zeros)["adjust"] is None  # nothing to do
    for tokens in ([104, 105], [[104, 105]], ["hi"]):  # OpenAI's array of tokens, or of one
        assert parse({"prompt": tokens})["ids"] == list(b"hi"), tokens
    scoring = parse({"prompt": "x", "echo": True, "max_tokens": 0, "logprobs": 1})
    assert (scoring["echo"], scoring["max_new_tokens"], spec["echo"]) == (True, 0, False)


def test_a_step_reader_hands_over_each_token_and_row_in_order(gen) -> None:
    """Streaming reads token i while step i + 1 runs: StepReader's slots hold the copies of
    out[pos] and logprobs row pos queued behind each step, each token handed over once, in
    order, with Logprobs.rows' own row; a send with every slot untaken (it would overwrite a
    token not yet read) is refused."""
    import torch

    out = torch.zeros(9, dtype=torch.int64)
    kept = gen.Logprobs(9, 3, torch.device("cpu"))
    kept.keep(0, torch.randn(9, 256), torch.arange(9))  # rows 0..8
    reader = gen.StepReader(out, kept, 2)
    got = []
    for pos in range(9):
        out[pos] = 100 + pos  # the step writes its token at its position
        reader.send(pos)
        out[pos] = -1  # the copy holds what the step wrote, whatever comes after
        if pos:  # one step behind
            got.append(reader.take())
    got.append(reader.take())
    assert [t for t, _ in got] == list(range(100, 109))
    assert [row for _, row in got] == kept.rows(0, 9, 2)
    assert all(len(top) == 2 for _, (_, top) in got)
    for pos in range(gen.READ_AHEAD + 1):  # a slot each
        reader.send(pos)
    with pytest.raises(RuntimeError, match="take"):
        reader.send(0)
    bare = gen.StepReader(out, None, None)
    bare.send(3)
    assert bare.take() == (-1, None)


def test_logprobs_cover_the_tokens_of_the_text_and_never_a_stops(gen) -> None:
    """The tokens whose log-probabilities a reply carries are those of its text: every one when
    nothing stops it (tokens past the bytes too), none of a stop sequence's or after it; their
    names and text offsets are OpenAI's (a byte that is no character alone: bytes:\\xNN)."""
    stream = gen.StreamText([b"!!"])
    kept = []
    for t in [*b"a\xc3\xa9", 300, *b"b!", 301, *b"!c"]:
        stream.feed(t)
        kept.append(stream.kept())
    stream.finish()
    # "a", "é" (2 bytes: each out of the stream's buffer as it comes), token 300, "b"; then
    # "!" may begin the stop and waits, and so does token 301 after it; "!!" stops
    assert kept == [1, 2, 3, 4, 5, 5, 5, 5, 5] and stream.kept() == 5
    plain = gen.StreamText([])
    assert [plain.feed(t) for t in [*b"hi", 300]] == ["h", "i", ""] and plain.kept() == 3

    out = gen.LogprobsOut(chat=False)
    rows = [(-0.5, [(97, -0.5)]), (-1.0, [(98, -0.1)]), (-2.0, [(1, -0.3)]), (-3.0, [])]
    first = out.render(list(zip([97, 0xC3, 0xA9, 300], rows, strict=True))[:2])
    rest = out.render(list(zip([0xA9, 300], rows[2:], strict=True)))
    assert first["tokens"] == ["a", "bytes:\\xc3"] and rest["tokens"] == [
        "bytes:\\xa9",
        "token_id:300",
    ]
    assert first["text_offset"] + rest["text_offset"] == [0, 1, 1, 2]  # "é" is one character
    assert first["top_logprobs"][1] == {"b": -0.1, "bytes:\\xc3": -1.0}  # the k and the chosen
    chat = gen.LogprobsOut(chat=True).render([(300, (float("-inf"), [(7, -1e-3)]))])
    [entry] = chat["content"]
    assert entry == {
        "token": "token_id:300",
        "logprob": -9999.0,  # no -inf in JSON: OpenAI's floor
        "bytes": None,
        "top_logprobs": [{"token": "\x07", "logprob": -1e-3, "bytes": [7]}],
    }
    # a NaN (logits that overflowed) is no JSON either: the floor, not "NaN" in the reply
    nan = gen.LogprobsOut(chat=False).render([(98, (float("nan"), [(99, float("nan"))]))])
    assert json.loads(json.dumps(nan, allow_nan=False))["top_logprobs"] == [
        {"c": -9999.0, "b": -9999.0}
    ]


def test_a_stream_holds_back_exactly_the_bytes_that_may_begin_a_stop(gen) -> None:
    """held() runs after every byte of a reply with stops: however it is made fast, it is the
    longest end of the text that is a stop's proper beginning, and the text ends where the
    first stop completes (random stops and texts); a stop as long as a request allows costs a
    byte no more than a short one."""
    rng = random.Random(0)
    for _ in range(300):
        stops = [
            bytes(rng.choice(b"ab\n") for _ in range(rng.randint(1, 5)))
            for _ in range(rng.randint(1, 3))
        ]
        stream = gen.StreamText(stops)
        for b in bytes(rng.choice(b"abc\n") for _ in range(30)):
            stream.feed(b)
            done = [len(stream.buf) - len(s) for s in stops if stream.buf.endswith(s)]
            assert stream.end == (min(done) if done else None), (stops, bytes(stream.buf))
            if done:  # the first stop completed ends the text, before it
                break
            ends = [k for s in stops for k in range(1, len(s)) if stream.buf.endswith(s[:k])]
            assert stream.held() == max(ends, default=0), (stops, bytes(stream.buf))
    # a stop as long as a request body may be (64 KB): what a byte costs does not grow with
    # it (looking back over its 50,000 prefixes copied 1.25 GB a byte, minutes for these;
    # keeping them all held as much); 3,000 bytes that may begin it are held back, and a byte
    # that cannot begin it sends them
    stream = gen.StreamText([b"a" * 50_000 + b"b"])
    assert "".join(stream.feed(ord("a")) for _ in range(3000)) == ""
    assert stream.held() == 3000
    assert stream.feed(ord("c")) == "a" * 3000 + "c" and stream.held() == 0


def test_a_chat_stream_holds_back_only_what_may_begin_a_stop(gen) -> None:
    """Chat's stops are "\nuser:" and the like: text that cannot begin one goes out at once
    (it used to wait for 10 more bytes, so a short answer came in one piece at the end)."""
    stream = gen.StreamText(gen.CHAT_STOPS)
    assert [stream.feed(b) for b in b"hello"] == list("hello")
    assert stream.feed(ord("\n")) == "" and stream.feed(ord("u")) == ""  # "\nu" may be "\nuser:"
    assert stream.feed(ord("x")) == "\nux"
    assert [stream.feed(b) for b in b"\nuser:"] == [""] * 6 and stream.finish() == ""


def test_the_server_binds_ipv6_hosts(gen) -> None:
    import socket

    try:  # the machine's own IPv6 loopback, asked apart from the server under test
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    state = gen.ServerState(gen.Config(), 64, "m", True)
    server = gen.Server(("::1", 0), state)  # it bound IPv4 only: "address family not supported"
    try:
        assert server.address_family == socket.AF_INET6
        assert server.server_address[0] == "::1"
    finally:
        server.server_close()
    legacy = gen.Server(("localhost", 0), state)  # a name stays IPv4, as before
    try:
        assert legacy.address_family == socket.AF_INET
    finally:
        legacy.server_close()


# --- issue 23 item 7, issue 24 item 4: the server under attack, the OpenAI API ---


def raw_request(base: str, data: bytes) -> tuple[int | None, bytes]:
    """Send bytes as they are, read the answer to the end: (status, body); None: no status
    line came back (a reset, or a bare close)."""
    import socket

    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(data)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    first = head.split(b"\r\n")[0].split()
    ok = len(first) >= 2 and first[0].startswith(b"HTTP/") and first[1].isdigit()
    return (int(first[1]) if ok else None), body


def post_bytes(path: str, body: bytes, headers: bytes = b"") -> bytes:
    size = b"Content-Length: %d\r\n" % len(body)
    return b"POST " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n" + size + headers + b"\r\n" + body


@pytest.mark.slow
@pytest.mark.integration
def test_crafted_requests_each_get_a_status_and_leave_no_traceback(trained: Path) -> None:
    """The four requests that got no HTTP answer (issue 23 item 7), their neighbours, and
    clients that hang up mid-answer: every request gets a status, stderr stays empty (no
    BrokenPipe tracebacks), and the server goes on answering."""
    import socket
    import struct

    s = Server(["--ckpt", str(trained), "--max-body", "100000"], trained.parent)
    bias = {str(i % 256) + "0" * (i // 256): 1 for i in range(2000)}  # 2,000 keys, one past V
    huge_bias = json.dumps({"prompt": "x", "logit_bias": bias}).encode()
    try:
        cases = [
            (post_bytes("/generate", b'{"prompt": "\\ud800 x"}'), 400, b"lone surrogate"),
            (post_bytes("/v1/completions", b'{"prompt": "\\udfff"}'), 400, b'"param": "prompt"'),
            (post_bytes("/generate", b"[" * 30_000 + b"]" * 30_000), 400, b"nested too deeply"),
            ("POST /generate HTTP/1.1\r\nContent-Length: ²\r\n\r\n{}".encode(), 400, b"bad"),
            (
                b"POST /generate HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n{}",
                413,
                b"body over",
            ),
            (
                b"POST /generate HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                400,
                b"Content-Length",
            ),
            (b"POST /generate HTTP/1.1\r\nHost: t\r\n\r\n", 411, b"Content-Length required"),
            (b"GARBAGE\r\n\r\n", 400, b"Bad request syntax"),
            (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, b"error"),
            (b"DELETE /generate HTTP/1.1\r\n\r\n", 501, b"error"),
            (b"GET /generate HTTP/1.1\r\n\r\n", 405, b"takes POST"),
            (post_bytes("/metrics", b"{}"), 405, b"error"),
            (post_bytes("/nowhere", b"{}"), 404, b"error"),
            (
                post_bytes("/v1/completions", b'{"prompt": "x", "n": 99}'),
                400,
                b'"type": "invalid_request_error"',
            ),
            # the sampling and scoring fields, crafted: each a 400 naming its field
            *(
                (post_bytes("/v1/completions", body), 400, b'"param": "%s"' % param)
                for body, param in (
                    (huge_bias, b"logit_bias"),
                    (b'{"prompt": "x", "logit_bias": {"65": 1e999}}', b"logit_bias"),
                    (b'{"prompt": "x", "logprobs": 99999999999999999999}', b"logprobs"),
                    (b'{"prompt": [1e308], "echo": true}', b"prompt"),
                    (b'{"prompt": "x", "echo": true, "max_tokens": -5}', b"max_tokens"),
                )
            ),
        ]
        for data, status, says in cases:
            got, body = raw_request(s.base, data)
            assert (got, says in body) == (status, True), (data[:50], got, body[:300])
        # Hang up: before reading a word, mid-stream (a reset), and halfway through the body.
        stream = json.dumps({"prompt": PROMPT, "max_new_tokens": 50, "stream": True}).encode()
        host, port = s.base.removeprefix("http://").split(":")
        for data, read, reset in (
            (post_bytes("/generate", stream), 0, False),
            (post_bytes("/v1/completions", stream.replace(b"max_new_", b"max_")), 200, True),
            (post_bytes("/generate", stream)[:-20], 0, False),
        ):
            with socket.create_connection((host, int(port)), timeout=60) as sock:
                sock.sendall(data)
                if read:
                    sock.recv(read)
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        status, [reply] = s.post(json.dumps({"prompt": PROMPT, "max_new_tokens": 5}).encode())
        assert status == 200 and len(reply["tokens"]) == 5  # still serving
        code, _, err = s.stop(signal.SIGTERM)
        assert code == 0 and err == "", err[-3000:]
    finally:
        s.close()


@pytest.mark.slow
@pytest.mark.integration
def test_slow_idle_and_departed_clients_cost_the_server_nothing(tmp_path: Path) -> None:
    """A client that trickles its request, a flood of idle connections, a client that leaves
    a long plain (not streamed) request, one idle connection at SIGTERM; and the API key, HEAD,
    405's Allow, /v1/models/ID and the /generate stream's last piece of a cut character."""
    import http.client
    import socket

    key = "test-key-123"
    args = ["--size", "tiny", "--vocab-size", "256", "--seq-len", "2048", "--max-queue", "1"]
    # 3 s: long enough that the 70 connections below are all open before the first is cut,
    # on a loaded 2-core CI box too
    s = Server([*args, "--request-timeout", "3"], tmp_path, env={"GENERATE_API_KEY": key})
    host, port = s.base.removeprefix("http://").split(":")
    auth = b"Authorization: Bearer " + key.encode() + b"\r\n"

    def get(path: str, headers: bytes = b"", method: bytes = b"GET") -> tuple[int | None, bytes]:
        return raw_request(
            s.base, method + b" " + path.encode() + b" HTTP/1.1\r\n" + headers + b"\r\n"
        )

    def metric(name: str) -> float:
        text = urllib.request.urlopen(s.base + "/metrics").read().decode()
        return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(name))

    try:
        # the key: /v1 and /generate need it, the probes do not
        status, body = get("/v1/models")
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
        assert get("/v1/models", b"Authorization: Bearer wrong\r\n")[0] == 401
        status, body = get("/v1/models/random-tiny", auth)
        assert status == 200 and json.loads(body)["id"] == "random-tiny"
        assert get("/v1/models/other", auth)[0] == 404
        assert raw_request(s.base, post_bytes("/generate", b'{"prompt": "a"}'))[0] == 401
        assert get("/health")[0] == 200
        # HEAD: GET's status and headers, no body; a wrong method names the right one
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("HEAD", "/health")
        head = conn.getresponse()
        assert head.status == 200 and head.read() == b"" and head.getheader("Content-Length")
        conn.close()
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/health", body=b"{}")
        refused = conn.getresponse()
        assert refused.status == 405 and refused.getheader("Allow") == "GET, HEAD"
        conn.close()

        # a request that never finishes arriving: 408 after --request-timeout, not a held thread
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"POST /generate HTTP/1.1\r\nContent-Length: 100\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.0 408")

        # idle connections beyond the cap (64 at --max-queue 1) are refused at once (503);
        # the rest are cut at --request-timeout, and the server answers again
        idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(70)]
        try:
            statuses = []
            for sock in idle:
                sock.sendall(b"GET /health HTTP/1.1\r\n")  # no blank line: never complete
            for sock in idle:
                statuses.append(sock.recv(12)[9:12])
            # each one answered, at once (503: over the cap) or at the deadline (408)
            assert statuses.count(b"503") + statuses.count(b"408") == 70, statuses
            assert statuses.count(b"503") >= 1 and statuses.count(b"408") <= 64, statuses
        finally:
            for sock in idle:
                sock.close()
        assert get("/health")[0] == 200

        # a plain request whose client leaves: generation stops (no answer: 499), and the
        # next request does not wait behind it
        before = metric("generate_tokens_generated_total")
        body = json.dumps({"prompt": "a", "max_tokens": 2000, "temperature": 0}).encode()
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(post_bytes("/v1/completions", body, auth))
            time.sleep(0.3)
        short = json.dumps({"prompt": "a", "max_tokens": 1}).encode()
        status, reply = raw_request(s.base, post_bytes("/v1/completions", short, auth))
        assert status == 200 and json.loads(reply)["choices"][0]["finish_reason"] == "length"
        assert metric('generate_requests_total{endpoint="/v1/completions",status="499"}') == 1
        # stopped within about half a second of the hang-up (~800 tokens here), not at 2,000
        assert metric("generate_tokens_generated_total") - before < 1500

        # /generate's stream: pieces add up to the text, a cut character's U+FFFD included
        tails = 0
        for seed in range(40):
            ask = {"prompt": "ab", "max_new_tokens": 7, "temperature": 1, "top_k": 0}
            data = json.dumps({**ask, "seed": seed, "stream": True}).encode()
            status, reply = raw_request(s.base, post_bytes("/generate", data, auth))
            lines = [json.loads(x) for x in reply.splitlines()]
            assert status == 200 and lines[-1]["done"] is True
            assert "".join(x["text"] for x in lines[:-1]) == lines[-1]["text"], lines
            tails += any(x["token"] is None for x in lines[:-1])
        assert tails > 0  # the case was met: 10 seeds of 40 end inside a character

        # SIGTERM with a connection that never sends its request: cut at once, not waited on
        # for the whole --grace (30 s)
        with socket.create_connection((host, int(port)), timeout=30):
            s.proc.send_signal(signal.SIGTERM)
            out, err = s.proc.communicate(timeout=15)
        assert s.proc.returncode == 0 and "Traceback" not in err, err[-3000:]
    finally:
        s.close()


def read_stream_lines(response) -> list[bytes]:
    return [line for line in response.read().split(b"\n") if line]


@pytest.mark.slow
@pytest.mark.integration
def test_a_full_queue_answers_503_while_the_request_in_flight_still_runs(tmp_path: Path) -> None:
    """--max-queue 1: one request generating, one waiting; the third is refused (503, OpenAI
    error shape on /v1) before the first finishes: admission never waits for the worker. The
    streaming client then hangs up: its generation stops, and the waiting one is answered."""
    import http.client

    args = ["--size", "tiny", "--vocab-size", "256", "--seq-len", "1024", "--max-queue", "1"]
    s = Server(args, tmp_path)
    host, port = s.base.removeprefix("http://").split(":")
    try:
        first = http.client.HTTPConnection(host, int(port), timeout=120)
        long_job = {"prompt": "a", "max_new_tokens": 1000, "stream": True, "temperature": 0}
        first.request("POST", "/generate", json.dumps(long_job))
        streaming = first.getresponse()
        assert json.loads(streaming.readline())["token"] >= 0  # generating now
        waiting: dict = {}

        def wait_in_queue() -> None:
            waiting["status"], waiting["body"] = s.post(
                json.dumps({"prompt": "b", "max_new_tokens": 3}).encode()
            )

        queued = threading.Thread(target=wait_in_queue)
        queued.start()
        while b"generate_queue_depth 1" not in urllib.request.urlopen(s.base + "/metrics").read():
            time.sleep(0.05)
        third = http.client.HTTPConnection(host, int(port), timeout=120)
        third.request("POST", "/v1/completions", json.dumps({"prompt": "c", "max_tokens": 2}))
        refused = third.getresponse()
        error = json.loads(refused.read())["error"]
        assert refused.status == 503 and error["code"] == "busy" and error["type"] == "server_error"
        assert refused.getheader("Retry-After") == "1"
        assert not streaming.isclosed() and b"done" not in streaming.read1(65536)  # still going
        streaming.close()  # the streaming client hangs up mid-answer
        queued.join(timeout=120)
        assert waiting["status"] == 200 and len(waiting["body"][0]["tokens"]) == 3
        code, out, err = s.stop(signal.SIGTERM)
        result = json.loads(out.splitlines()[-1].removeprefix("RESULT "))
        assert code == 0 and err == "" and result["served"] == 2  # the cut one counts
    finally:
        s.close()


@pytest.mark.slow
@pytest.mark.integration
def test_sigterm_finishes_the_request_in_flight_and_refuses_the_queued_ones(
    tmp_path: Path,
) -> None:
    """SIGTERM while one request generates, four wait and more keep coming: the one in flight
    gets its whole answer, every other client an HTTP 503 (none a reset), exit 0."""
    import http.client

    args = ["--size", "tiny", "--vocab-size", "256", "--seq-len", "2048", "--max-queue", "4"]
    s = Server(args, tmp_path, guard_s=300)
    host, port = s.base.removeprefix("http://").split(":")
    outcomes: dict[int, object] = {}

    def client(i: int, body: dict) -> None:
        try:
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            conn.request("POST", "/generate", json.dumps(body))
            reply = conn.getresponse()
            lines = read_stream_lines(reply)
            outcomes[i] = (reply.status, json.loads(lines[-1]))
        except Exception as exc:  # a reset or a bare close: what the drain must not do
            outcomes[i] = type(exc).__name__

    try:
        first = http.client.HTTPConnection(host, int(port), timeout=120)
        body = {"prompt": "a", "max_new_tokens": 2000, "temperature": 0, "stream": True}
        first.request("POST", "/generate", json.dumps(body))
        streaming = first.getresponse()
        streaming.readline()  # in flight
        threads = [
            threading.Thread(target=client, args=(i, {"prompt": "b", "max_new_tokens": 4}))
            for i in range(10)
        ]
        for t in threads:
            t.start()
        # The window is the in-flight request's length: on a loaded box a 400-token one ended
        # before four clients had queued, and the poll spun until the guard killed the server.
        while b"generate_queue_depth 4" not in urllib.request.urlopen(s.base + "/metrics").read():
            served = [o for o in outcomes.values() if isinstance(o, tuple) and o[0] == 200]
            assert not served, f"the in-flight request ended before four clients queued: {outcomes}"
            time.sleep(0.05)
        s.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=120)
        lines = read_stream_lines(streaming)
        done = json.loads(lines[-1])
        assert done["done"] is True and len(done["tokens"]) == 2000  # the whole answer
        assert sorted(o[0] for o in outcomes.values()) == [503] * 10, outcomes
        reasons = [o[1]["error"] for o in outcomes.values()]
        assert reasons.count("server shutting down") >= 4  # the queued ones, and any late one
        out, err = s.proc.communicate(timeout=60)
        assert s.proc.returncode == 0 and err == "", err[-3000:]
        assert json.loads(out.splitlines()[-1].removeprefix("RESULT "))["served"] == 1
    finally:
        s.close()


def prometheus_samples(text: str) -> dict:
    parser = pytest.importorskip("prometheus_client.parser")
    samples = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


@pytest.mark.slow
@pytest.mark.integration
def test_the_openai_client_completes_chats_and_streams(server: Server, trained: Path) -> None:
    """The real `openai` client against the server: completions and chat, whole and streamed
    (server-sent events), a stop sequence, the error shape; the texts are the model's greedy
    tokens, which a full forward pass recomputes. Then /metrics counts what happened."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    [model] = client.models.list().data
    assert model.id == trained.name and model.owned_by == "envtool"
    expected = bytes(reference_greedy(trained, PROMPT.encode(), 20)).decode()

    done = client.completions.create(model=model.id, prompt=PROMPT, max_tokens=20, temperature=0)
    assert done.choices[0].text == expected and done.choices[0].finish_reason == "length"
    assert done.object == "text_completion" and done.id.startswith("cmpl-")
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (len(PROMPT), 20)
    chunks = list(
        client.completions.create(
            model=model.id, prompt=PROMPT, max_tokens=20, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "length"

    stop = expected[5:8]  # a stop sequence the greedy text reaches: the text ends before it
    cut = client.completions.create(
        model=model.id, prompt=PROMPT, max_tokens=20, temperature=0, stop=[stop]
    )
    assert cut.choices[0].text == expected[: expected.index(stop)]
    assert cut.choices[0].finish_reason == "stop"

    messages = [{"role": "user", "content": "the lazy"}]
    prompt = b"user: the lazy\nassistant: "
    want = bytes(reference_greedy(trained, prompt, 64 - len(prompt)))
    ends = [want.find(s) for s in (b"\nuser:", b"\nsystem:", b"\nassistant:") if s in want]
    want_text = want[: min(ends)].decode() if ends else want.decode()
    chat = client.chat.completions.create(model=model.id, messages=messages, temperature=0)
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == want_text
    assert chat.usage.prompt_tokens == len(prompt)
    streamed = list(
        client.chat.completions.create(
            model=model.id,
            messages=messages,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == want_text
    assert streamed[-1].usage.total_tokens == chat.usage.total_tokens

    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=model.id, prompt=PROMPT, n=17)
    assert caught.value.body["param"] == "n" and caught.value.status_code == 400
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="gpt-4", prompt=PROMPT)
    assert caught.value.body["code"] == "model_not_found"

    metrics = urllib.request.urlopen(server.base + "/metrics")
    assert metrics.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = prometheus_samples(metrics.read().decode())
    completions = ("endpoint", "/v1/completions")
    assert samples["generate_requests_total", (completions, ("status", "200"))] == 3
    assert samples["generate_requests_total", (completions, ("status", "400"))] == 1
    assert samples["generate_requests_total", (completions, ("status", "404"))] == 1
    assert (
        samples[
            "generate_requests_total", (("endpoint", "/v1/chat/completions"), ("status", "200"))
        ]
        == 2
    )
    assert cut.usage.completion_tokens == expected.index(stop) + len(stop)  # the stop ran
    generated = 2 * 20 + cut.usage.completion_tokens + 2 * chat.usage.completion_tokens
    assert samples["generate_tokens_generated_total", ()] == generated
    assert samples["generate_time_to_first_token_seconds_count", ()] == 5
    assert samples["generate_time_to_first_token_seconds_bucket", (("le", "+Inf"),)] == 5
    assert samples["generate_queue_depth", ()] == 0


@pytest.mark.integration
def test_n_choices_are_the_samples_of_seed_seed_plus_one_and_so_on(server: Server) -> None:
    """OpenAI's n: n choices of one prompt, the i-th the sample a request with seed + i gets,
    whole or streamed (each chunk names its choice), completions and chat; usage counts the
    prompt once and every choice's tokens; /metrics one request, its first token once."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    ask = {"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 1.0, "top_p": 0.9}
    alone = [client.completions.create(**ask, seed=7 + i).choices[0].text for i in range(3)]
    assert len(set(alone)) > 1  # three seeds, not one sample thrice (the check below bites)
    many = client.completions.create(**ask, seed=7, n=3)
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert [c.text for c in many.choices] == alone
    assert {c.finish_reason for c in many.choices} == {"length"}
    assert (many.usage.prompt_tokens, many.usage.completion_tokens) == (len(PROMPT), 3 * 12)
    chunks = list(client.completions.create(**ask, seed=7, n=3, stream=True))
    for i in range(3):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(c.text for c in mine) == alone[i]
        assert [c.finish_reason for c in mine][-1] == "length"

    messages = [{"role": "user", "content": "the lazy"}]
    chat = {"model": model, "messages": messages, "max_completion_tokens": 10}
    want = [client.chat.completions.create(**chat, seed=1 + i).choices[0].message.content
            for i in range(2)]  # fmt: skip
    both = client.chat.completions.create(**chat, seed=1, n=2)
    assert [c.message.content for c in both.choices] == want
    streamed = list(client.chat.completions.create(
        **chat, seed=1, n=2, stream=True, stream_options={"include_usage": True}))  # fmt: skip
    for i in range(2):
        mine = [c.choices[0] for c in streamed if c.choices and c.choices[0].index == i]
        assert mine[0].delta.role == "assistant"  # each choice's first chunk names the role
        assert "".join(c.delta.content or "" for c in mine) == want[i]
    assert streamed[-1].usage.completion_tokens == both.usage.completion_tokens

    samples = prometheus_samples(urllib.request.urlopen(server.base + "/metrics").read().decode())
    requests = 5 + 4  # completions, chats: each observed once, whatever its n
    assert samples["generate_time_to_first_token_seconds_count", ()] == requests
    # three times each set of choices: alone, whole, streamed
    generated = 3 * (3 * 12) + 3 * both.usage.completion_tokens
    assert samples["generate_tokens_generated_total", ()] == generated


@pytest.mark.integration
def test_logprobs_are_the_models_own_distribution_whole_and_streamed(
    server: Server, trained: Path
) -> None:
    """OpenAI's logprobs through the real client: each chosen token's log-probability and the
    k likeliest are those a full forward pass over prompt + completion gives (sampled tokens
    too: the model's distribution, not the tempered one); chat's content and a completion's
    tokens spell the text, a stop sequence's tokens left out; a stream carries the same."""
    import torch

    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    ask = {"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 1.5, "seed": 3}
    done = client.completions.create(**ask, logprobs=3).choices[0]
    tokens = list(done.text.encode())
    assert "".join(done.logprobs.tokens) == done.text and len(tokens) == 12  # ASCII text
    ref = reference_logprobs(trained, PROMPT.encode(), tokens)
    want = ref.gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()
    assert done.logprobs.token_logprobs == pytest.approx(want, abs=1e-3)
    assert done.logprobs.text_offset == list(range(12))
    for i, top in enumerate(done.logprobs.top_logprobs):
        likeliest = ref[i].topk(3).indices.tolist()
        assert set(top) == {chr(t) for t in [*likeliest, tokens[i]]}
        assert [top[chr(t)] for t in likeliest] == pytest.approx(
            ref[i, likeliest].tolist(), abs=1e-3
        )
    assert max(want) - min(want) > 0.5  # sampled at 1.5: not always the likeliest

    chunks = list(client.completions.create(**ask, logprobs=3, stream=True))
    streamed = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
    assert sum((lp.token_logprobs for lp in streamed), []) == done.logprobs.token_logprobs
    assert sum((lp.text_offset for lp in streamed), []) == done.logprobs.text_offset

    messages = [{"role": "user", "content": "the lazy"}]
    chat = {"model": model, "messages": messages, "temperature": 0, "max_completion_tokens": 30}
    reply = client.chat.completions.create(**chat, logprobs=True, top_logprobs=2).choices[0]
    content = reply.logprobs.content
    assert "".join(e.token for e in content) == reply.message.content
    assert all(len(e.top_logprobs) == 2 for e in content)
    assert all(e.top_logprobs[0].token == e.token for e in content)  # greedy: the likeliest
    assert all(e.bytes == list(e.token.encode()) for e in content)
    parts = list(client.chat.completions.create(**chat, logprobs=True, top_logprobs=2, stream=True))
    got = [
        e
        for c in parts
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [(e.token, e.logprob) for e in got] == [(e.token, e.logprob) for e in content]
    plain = client.chat.completions.create(**chat).choices[0]
    assert plain.logprobs is None and plain.message.content == reply.message.content

    text = client.completions.create(**ask).choices[0].text
    stop = text[4:6]  # a stop the sample reaches: its tokens and those after it have no logprobs
    cut = client.completions.create(**ask, logprobs=0, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop" and cut.logprobs.tokens == list(text[: text.index(stop)])
    assert all(len(top) == 1 for top in cut.logprobs.top_logprobs)  # k = 0: the chosen alone


@pytest.mark.integration
def test_echo_scores_the_prompt_as_an_evaluation_harness_asks(
    server: Server, trained: Path
) -> None:
    """echo with logprobs, as lm-evaluation-harness's completions model asks to score a text:
    the reply's text begins with the prompt, and its tokens' log-probabilities are a full
    forward pass's (the first token's null); max_tokens 0 scores alone, 1 adds the next token;
    streamed, the prompt is the first chunk; each of n choices begins with it."""
    import torch

    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    text = "the lazy dog and the quick fox"
    ids = list(text.encode())
    ref = reference_logprobs(trained, ids[:1], ids[1:])
    want = ref.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
    ask = {"model": model, "prompt": text, "echo": True, "logprobs": 1, "temperature": 0}

    scored = client.completions.create(**ask, max_tokens=0).choices[0]
    assert scored.text == text and scored.logprobs.tokens == list(text)
    assert scored.logprobs.token_logprobs[0] is None and scored.logprobs.top_logprobs[0] is None
    assert scored.logprobs.token_logprobs[1:] == pytest.approx(want, abs=1e-3)
    assert scored.logprobs.text_offset == list(range(len(text)))
    for i, top in enumerate(scored.logprobs.top_logprobs[1:]):  # the likeliest, and the token
        assert set(top) == {text[i + 1], chr(int(ref[i].argmax()))}

    one = client.completions.create(**ask, max_tokens=1)
    [choice] = one.choices
    nxt = reference_greedy(trained, text.encode(), 1)
    assert choice.text == text + chr(nxt[0]) and one.usage.completion_tokens == 1
    assert choice.logprobs.token_logprobs[:-1] == scored.logprobs.token_logprobs
    assert choice.logprobs.token_logprobs[-1] == pytest.approx(
        float(reference_logprobs(trained, text.encode(), nxt)[0, nxt[0]]), abs=1e-3
    )
    chunks = list(client.completions.create(**ask, max_tokens=3, stream=True))
    assert chunks[0].choices[0].text == text  # the prompt first
    got = [x for c in chunks if c.choices[0].logprobs for x in c.choices[0].logprobs.token_logprobs]
    whole = client.completions.create(**ask, max_tokens=3).choices[0]
    assert got == whole.logprobs.token_logprobs
    assert "".join(c.choices[0].text for c in chunks) == whole.text
    many = client.completions.create(**{**ask, "temperature": 1}, max_tokens=4, n=2, seed=5)
    assert [c.text[: len(text)] for c in many.choices] == [text, text]
    plain = client.completions.create(model=model, prompt=text, echo=True, max_tokens=2)
    assert plain.choices[0].text.startswith(text) and plain.choices[0].logprobs is None
    tokens = client.completions.create(**{**ask, "prompt": ids}, max_tokens=0).choices[0]
    assert tokens.text == text and tokens.logprobs.token_logprobs == scored.logprobs.token_logprobs


@pytest.mark.slow
@pytest.mark.integration
def test_a_triton_server_picks_top_p_penalties_and_logprobs_as_the_model_says(
    trained: Path, tmp_path: Path
) -> None:
    """The GPU's path, run by Triton's interpreter: a server whose decode is the Triton step
    starts (its warm-up compiles Picker's kernels: top-p's one-program draw, logprobs,
    penalties) and answers through the OpenAI client as the model says: penalties' greedy
    tokens the reference's, top-p's tokens each inside the nucleus of a full forward pass,
    logprobs the model's own, a seed repeated the same tokens."""
    import torch

    pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch)")
    openai = pytest.importorskip("openai")
    args = ["--ckpt", str(trained), "--eager", "--decode-kernels", "triton"]
    server = Server(args, tmp_path, guard_s=400, env={"TRITON_INTERPRET": "1"})
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        ask = {"model": model, "prompt": PROMPT, "max_tokens": 10}
        penalties = {"frequency_penalty": 1.5, "presence_penalty": 0.5, "temperature": 0}
        want = reference_greedy(trained, PROMPT.encode(), 10, presence=0.5, freq=1.5)
        got = client.completions.create(**ask, **penalties).choices[0].text
        assert list(got.encode()) == want

        nucleus = {"temperature": 1.0, "top_p": 0.5, "seed": 11, "logprobs": 3}
        done = client.completions.create(**ask, **nucleus).choices[0]
        tokens = list(done.text.encode())
        ref = reference_logprobs(trained, PROMPT.encode(), tokens)
        for i, t in enumerate(tokens):
            p, order = ref[i].exp().sort(descending=True)
            inside = order[(p.cumsum(0) - p) <= 0.5 + 1e-4].tolist()
            assert t in inside, (i, t, inside)
        want = ref.gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()
        assert done.logprobs.token_logprobs == pytest.approx(want, abs=1e-3)
        for i, top in enumerate(done.logprobs.top_logprobs):
            assert {chr(t) for t in ref[i].topk(3).indices.tolist()} <= set(top)
        again = client.completions.create(**ask, **nucleus).choices[0]
        assert again.text == done.text and again.logprobs == done.logprobs
    finally:
        server.close()


@pytest.mark.integration
def test_logit_bias_and_penalties_steer_the_tokens_as_a_full_forward_pass_says(
    server: Server, trained: Path
) -> None:
    """logit_bias and presence/frequency penalties: the greedy tokens are the argmax of the
    adjusted logits of a full forward pass, counting what was generated so far; a +100 bias
    makes one byte the whole text; logprobs stay the model's own, not the adjusted ones."""
    import torch

    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    ask = {"model": model, "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    plain = reference_greedy(trained, PROMPT.encode(), 16)
    x = ord("x")
    forced = client.completions.create(**ask, logit_bias={str(x): 100}, logprobs=0).choices[0]
    assert forced.text == "x" * 16
    raw = reference_logprobs(trained, PROMPT.encode(), [x] * 16)[:, x].tolist()
    assert forced.logprobs.token_logprobs == pytest.approx(raw, abs=1e-3)
    assert max(raw) < -1  # the model's own: far from the adjusted ~0

    penalties = {"frequency_penalty": 1.5, "presence_penalty": 0.5}
    want = reference_greedy(trained, PROMPT.encode(), 16, presence=0.5, freq=1.5)
    assert want != plain  # the penalties change the text: the check below bites
    got = client.completions.create(**ask, **penalties).choices[0].text
    assert list(got.encode()) == want
    ban = {str(plain[0]): -100}
    want = reference_greedy(trained, PROMPT.encode(), 16, bias={plain[0]: -100})
    assert want[0] != plain[0]
    banned = client.completions.create(**ask, logit_bias=ban).choices[0].text
    assert list(banned.encode()) == want
    streamed = client.completions.create(**ask, logit_bias=ban, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == banned
    assert torch.tensor(want).max() < 256  # bytes: the text spells every token


@pytest.mark.slow
@pytest.mark.integration
def test_server_sent_events_on_the_wire(server: Server, trained: Path) -> None:
    """The exact wire format, without a client library: text/event-stream, one `data: {json}`
    event per chunk, a blank line after each, `data: [DONE]` last."""
    import http.client

    host, port = server.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    reply = conn.getresponse()
    assert reply.status == 200 and reply.getheader("Content-Type") == "text/event-stream"
    raw = reply.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: {") for e in events[:-2])
    assert {c["object"] for c in chunks} == {"text_completion"} and len(
        {c["id"] for c in chunks}
    ) == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert {c["model"] for c in chunks} == {trained.name}
    assert "".join(c["choices"][0]["text"] for c in chunks) == bytes(
        reference_greedy(trained, PROMPT.encode(), 6)
    ).decode("utf-8", errors="replace")
