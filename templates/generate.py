"""Generate text from an lm (or fsdp) checkpoint: static KV cache, compiled decode, HTTP serving.

One file, torch + the Python standard library only: it is yours now, edit it freely.
Reads top to bottom: config -> checkpoint -> model (tensor-parallel aware) -> engine (prefill,
decode, sampling, CUDA graphs) -> benchmark -> HTTP server -> main.

Run it:
    python gen.py --ckpt out --prompt "Once upon a time"    # sample the model lm.py trained
    python gen.py --size 1.3b --seq-len 2048 --prompt-len 512 --max-new-tokens 300 --temperature 0
                                                            # random 1.3B weights: a benchmark
    python gen.py --size tiny --seq-len 128 --prompt-len 16 --max-new-tokens 32   # CPU smoke test
    python gen.py --ckpt out --serve 8000                   # HTTP on 127.0.0.1 (OpenAI API too)
    GENERATE_API_KEY=KEY python gen.py --ckpt out --serve 8000 --host 0.0.0.0  # others, a key
    envtool launch gen.py --gpus 1 -- --ckpt out --serve 8000   # the same, through envtool
    torchrun --standalone --nproc-per-node 4 gen.py --ckpt out  # tensor-parallel over 4 GPUs
    envtool launch gen.py --gpus 4 -- --ckpt out                # the same, through envtool

Tokens are bytes (vocabulary 0..255), as lm.py reads text by default; the checkpoint records
it, and a model lm trained on synthetic token ids (--vocab-size 50304) prints numbers instead.

How it is fast at batch 1 (decode is bound by reading the weights once per token):
  - on a GPU the decode step is Triton kernels (triton ships with torch's CUDA builds), five a
    layer: LayerNorm fused into the next matrix-vector product, GELU and the residual add into
    its epilogue, attention in one launch (split over the cache chunks, the last chunk's
    program merges), reading the length from device memory, so one CUDA graph serves every
    length; the head's argmax rides in its product's epilogue. On Hopper and newer each kernel
    starts reading its weights (and attention its older cache slots) while the one before ends
    (programmatic dependent launch; --no-pdl turns it off). --decode-kernels torch (and the
    CPU) use the torch modules instead: torch.compile of the step, attending over the first S
    cache slots (one graph per --cache-bucket);
  - --quant int8: weight-only int8 with one scale per output row, made at load from the
    checkpoint (each LayerNorm's gains folded into the matrix after it first): half the bytes of
    bf16 per token, held-out loss unchanged (docs/benchmarks-gpu.md);
  - each product's tile (rows x columns a program, warps) is picked before the decode step is
    captured, by timing the candidates over the model's own layers in a CUDA graph, with PDL,
    as the step runs them (Triton's autotuner times a tile alone: up to 1.4x slower picks);
  - bf16 weights on GPU; a static KV cache allocated once; the prompt pass (one per
    power-of-two prompt bucket; right-padded, which causal attention never sees) captured in a
    CUDA graph as torch's kernels (--prefill graph, the default with the Triton decode: nothing
    is compiled through torch; int8's products are one Triton kernel that widens W tile by
    tile) or torch.compiled (--prefill compile);
    --compile-cache DIR keeps Triton's (and Inductor's) kernels and the tile picks for a
    restart;
  - no host sync per token unless streaming; the head reads only the last prompt position.

Measured on one H200 (torch 2.11, batch 1, 512-token prompt, beside decode_probe.py at 628-641
and 2,031-2,044 tokens/s; docs/benchmarks-gpu.md, rounds 7 to 19):
    --size 1.3b   1,165 tokens/s decode (1.85x the probe, 64% of 4.8 TB/s), 3.5 ms to the
                  first token; ready 30 s after the process starts on a cold cache, 6.7 s on a
                  warm --compile-cache; --quant int8 1,580 (2.50x), 6.3-6.5 ms to the first
                  token, ready 37 s cold, 1.4 s warm
    --size 124m   5,500-5,734 tokens/s (2.70-2.81x), 1.0-1.2 ms to the first token
Where the rest goes: each kernel has a fixed cost of ~2 us (~123 kernels a token): its last
programs' round trips to memory after the kernel before ends; the matrix-vector kernels read
bf16 at ~4.5 TB/s and int8 at ~3.4 TB/s beyond it; attention is ~4.1-4.5 us a layer (round
15: 6.2-6.8 with a merge pass); the LayerNorm prologues ~40 us a token (round 16); the head
(many waves of programs) and qkv keep an accumulator a 16-byte run (int8: ~8 and ~5 us a token,
round 17). On CPU it
runs eager by default and starts at once; --compile there costs ~30 s (94 s for a 3M model on a
laptop) before the first token.

What it prints (rank 0 only):
    prefill N tokens: TTFT X ms
    decode N tokens: X tokens/s, weights Y GB/token, Z GB/s = W% of peak (GPU name)
    RESULT {"ttft_ms": ..., "decode_tokens_per_s": ..., "mbu": ..., "tokens": [...], ...}

--serve PORT answers POST /generate with JSON {"prompt": str, "max_new_tokens": int,
"temperature": float, "top_k": int, "top_p": float, "seed": int|null, "stream": bool}; the reply
is one JSON object, or with "stream": true one JSON object per line (application/x-ndjson) per
token and a final {"done": true, ...}. It speaks the OpenAI API too: POST /v1/completions and
/v1/chat/completions (stream: server-sent events), GET /v1/models; GET /metrics (Prometheus
text), GET /health. Chat messages become plain text, "ROLE: CONTENT\n" each, then "assistant: "
(CHAT_ROLES below). One worker (the main thread) owns the model; requests wait in a bounded
queue (full: 503 at once). Every request gets an HTTP status. SIGTERM/SIGINT drains: the request
in progress finishes, queued and new ones get 503, answers are written (--grace bounds the wait
for slow clients), then the socket closes and it exits 0. docs/serving.md has the details.
"""

import argparse
import bisect
import codecs
import contextlib
import dataclasses
import datetime
import errno
import functools
import hmac
import http
import http.server
import importlib
import json
import math
import os
import queue
import random
import select
import signal
import socket
import stat
import statistics
import sys
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

STARTED = time.time()  # after the imports: --serve/benchmark report the time to be ready


def since_start(after_imports_s: float) -> str:
    """' (N s since the process started)' where the imports' time is known."""
    if IMPORTS_S is None:
        return ""
    return f" ({IMPORTS_S + after_imports_s:.1f} s since the process started)"


def process_age() -> float | None:
    """Seconds since this process started, Python's start and imports included (Linux's
    /proc; None elsewhere)."""
    try:
        start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


IMPORTS_S = process_age()  # what starting Python and importing torch (+ triton) took
MARKS: dict[str, float] = {}  # main's stages: when each ended (time.time())
# --- CONFIG ---
SIZES = {  # name: (n_layer, n_head, d_model); the same shapes as lm.py
    "tiny": (2, 2, 64),
    "124m": (12, 12, 768),
    "350m": (24, 16, 1024),
    "1.3b": (24, 16, 2048),
}
# Peak memory bandwidth in bytes/s by GPU name (datasheets); the first key found in the name wins,
# so the specific names (PCIe, NVL, 40GB) come before the general ones.
PEAK_BANDWIDTH = (
    ("GH200", None),  # HBM3 or HBM3e: ambiguous, pass --peak-bw
    ("H200", 4.8e12),
    ("H100 PCIE", 2.0e12),
    ("H100 NVL", 3.9e12),
    ("H100", 3.35e12),
    ("H800", 3.35e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIE", 1.935e12),
    ("A100", 1.555e12),  # the 40 GB parts
    ("B200", 8.0e12),
    ("L40S", 0.864e12),
    ("4090", 1.008e12),
)


@dataclass
class Config:
    ckpt: str | None = field(
        default=None,
        metadata={"type": str, "help": "lm/ddp: OUT dir or its ckpt.pt; fsdp: OUT dir (latest)"},
    )
    size: str = field(default="124m", metadata={"help": "random weights: " + "|".join(SIZES)})
    n_head: int | None = field(
        default=None, metadata={"type": int, "help": "heads, if the checkpoint's is no preset's"}
    )
    vocab_size: int = field(default=50304, metadata={"help": "random weights: vocabulary"})
    seq_len: int = field(default=1024, metadata={"help": "random weights: context length"})
    prompt: str | None = field(
        default=None, metadata={"type": str, "help": "prompt text (bytes are the tokens)"}
    )
    prompt_len: int = field(default=512, metadata={"help": "no --prompt: random prompt tokens"})
    max_new_tokens: int = field(default=200, metadata={"help": "tokens to generate"})
    temperature: float = field(default=0.8, metadata={"help": "0: greedy (argmax)"})
    top_k: int = field(default=200, metadata={"help": "sample from the k likeliest (0: off)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass (1: off)"})
    seed: int = field(default=1337, metadata={"help": "same seed -> same tokens"})
    eager: bool = field(default=False, metadata={"help": "no torch.compile, no CUDA graphs"})
    cudagraphs: bool | None = field(
        default=None, metadata={"help": "CUDA graphs (None: on when compiled on a GPU)"}
    )
    cpu: bool = field(default=False, metadata={"help": "force CPU + gloo (auto without CUDA)"})
    dtype: str = field(
        default="auto",
        metadata={"help": "auto (GPU bf16, CPU fp32)|bfloat16|float16|float32|float64"},
    )
    cache_bucket: int = field(
        default=256, metadata={"help": "decode reads the cache in N-slot steps"}
    )
    decode_attn: str = field(default="sdpa", metadata={"help": "sdpa|math (decode attention)"})
    decode_linear: str = field(
        default="mm", metadata={"help": "mm|reduce: decode matmuls as cuBLAS or fused reductions"}
    )
    tune: bool = field(
        default=False,
        metadata={"help": "GPU: tune the compiled kernels (+14-18%% decode, minutes of warm-up)"},
    )
    prefill: str = field(
        default="auto",
        metadata={
            "help": "auto|compile|graph: the prompt pass torch.compiled, or its torch kernels "
            "captured in a CUDA graph as they are (no compile: ready in seconds; int8 products "
            "in one Triton kernel). auto: graph under the Triton decode, else compile"
        },
    )
    decode_kernels: str = field(
        default="auto",
        metadata={"help": "auto|torch|triton: decode steps in Triton kernels (auto: on a GPU)"},
    )
    pdl: bool | None = field(
        default=None,
        metadata={
            "help": "Triton decode: each kernel starts reading its weights while the one before "
            "ends (None: on where it runs, Hopper and newer)"
        },
    )
    quant: str = field(
        default="none", metadata={"help": "none|int8: weight-only int8 matrices, made at load"}
    )
    eval_data: str | None = field(
        default=None,
        metadata={"type": str, "help": "FILE: also report the model's loss on this text (bytes)"},
    )
    eval_windows: int = field(default=16, metadata={"help": "--eval-data: context-long windows"})
    compile_cache: str | None = field(
        default=None,
        metadata={"type": str, "help": "DIR: keep compiled kernels here (fast restarts)"},
    )
    repeat: int | None = field(
        default=None,
        metadata={
            "type": int,
            "help": "timed generations after the warm-up (default: 1 for a --prompt sample, "
            "3 for a benchmark)",
        },
    )
    profile: bool = field(default=False, metadata={"help": "print the top kernels of a decode"})
    peak_bw: float | None = field(
        default=None, metadata={"type": float, "help": "peak memory TB/s (None: by GPU name)"}
    )
    serve: int | None = field(
        default=None, metadata={"type": int, "help": "PORT: serve POST /generate (0: any port)"}
    )
    host: str = field(default="127.0.0.1", metadata={"help": "--serve: address to bind"})
    max_body: int = field(default=65536, metadata={"help": "--serve: request size cap, bytes"})
    max_queue: int = field(default=16, metadata={"help": "--serve: requests waiting, at most"})
    grace: float = field(
        default=30.0, metadata={"help": "--serve: seconds a stop signal waits for answers"}
    )
    request_timeout: float = field(
        default=60.0,
        metadata={"help": "--serve: seconds a request (line, headers, body) has to arrive"},
    )
    model_name: str | None = field(
        default=None,
        metadata={"type": str, "help": "--serve: the OpenAI model id (None: the ckpt dir's name)"},
    )
    api_key: str | None = field(
        default=None,
        metadata={
            "type": str,
            "help": "--serve: require `Authorization: Bearer KEY` on /generate and /v1/ (None: "
            "$GENERATE_API_KEY; the variable keeps it out of `ps`)",
        },
    )
    compile: bool | None = field(
        default=None,
        metadata={"help": "torch.compile the steps (None: on a GPU; on CPU eager starts at once)"},
    )
    vocab: str = field(
        default="auto",
        metadata={"help": "auto (as the checkpoint records)|bytes (print text)|ids (numbers)"},
    )


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints the whole usage)
        self.exit(2, f"{self.prog}: error: {message}\n")


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit 2."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def parse_config(argv: list[str] | None = None) -> Config:
    parser = OneLineParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "")
        if "(default" not in helptext:  # a help that says its default itself keeps it
            helptext += f" (default: {f.default})"
        if f.type in (bool, "bool", bool | None, "bool | None"):
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=f.default, help=helptext
            )
        else:
            kind = f.metadata.get("type", type(f.default))
            parser.add_argument(flag, type=kind, default=f.default, help=helptext)
    cfg = Config(**vars(parser.parse_args(argv)))
    if cfg.size not in SIZES:
        fail(f"--size must be one of {', '.join(SIZES)}")
    if cfg.dtype not in ("auto", "bfloat16", "float16", "float32", "float64"):
        fail("--dtype must be auto, bfloat16, float16, float32 or float64")
    if cfg.decode_attn not in ("sdpa", "math"):
        fail("--decode-attn must be sdpa or math")
    if cfg.decode_linear not in ("mm", "reduce"):
        fail("--decode-linear must be mm or reduce")
    if cfg.prefill not in ("auto", "compile", "graph"):
        fail("--prefill must be auto, compile or graph")
    if cfg.decode_kernels not in ("auto", "torch", "triton"):
        fail("--decode-kernels must be auto, torch or triton")
    if cfg.quant not in ("none", "int8"):
        fail("--quant must be none or int8")
    if cfg.eval_data and not Path(cfg.eval_data).is_file():
        fail(f"--eval-data {cfg.eval_data}: no such file")
    for name, low in (
        ("max_new_tokens", 1),
        ("prompt_len", 1),
        ("cache_bucket", 1),
        ("repeat", 1),
        ("seq_len", 2),
        ("vocab_size", 2),
        ("max_queue", 1),
        ("max_body", 2),
        ("top_k", 0),
        ("eval_windows", 1),
    ):
        if getattr(cfg, name) is not None and getattr(cfg, name) < low:
            fail(f"--{name.replace('_', '-')} must be >= {low}")
    if not (cfg.temperature >= 0 and math.isfinite(cfg.temperature)):
        fail("--temperature must be >= 0 (0: greedy)")
    if not 0 < cfg.top_p <= 1:
        fail("--top-p must be in (0, 1]")
    if cfg.serve is not None and not 0 <= cfg.serve <= 65535:
        fail("--serve PORT must be 0..65535")
    if cfg.vocab not in ("auto", "bytes", "ids"):
        fail("--vocab must be auto, bytes or ids")
    if not (cfg.grace >= 0 and math.isfinite(cfg.grace)):
        fail("--grace must be >= 0 seconds")
    if not (cfg.request_timeout > 0 and math.isfinite(cfg.request_timeout)):
        fail("--request-timeout must be > 0 seconds")
    if cfg.model_name is not None and not (
        0 < len(cfg.model_name) <= 128 and cfg.model_name.isprintable()
    ):
        fail("--model-name must be 1-128 printable characters")
    if cfg.compile and cfg.eager:
        fail("--compile and --eager contradict each other: pass one")
    if cfg.ckpt and not Path(cfg.ckpt).exists():
        fail(f"--ckpt {cfg.ckpt}: no such file or directory")
    return cfg


# --- CHECKPOINT ---
def find_checkpoint(path: Path) -> tuple[str, Path]:
    """('torch', ckpt.pt) for lm/ddp, ('dcp', step dir) for fsdp."""
    if path.is_file():
        return "torch", path
    if (path / "ckpt.pt").is_file():
        return "torch", path / "ckpt.pt"
    if (path / "latest").is_file():  # fsdp: OUT/latest names the newest complete step dir
        step_dir = path / (path / "latest").read_text().strip()
        if not (step_dir / ".metadata").is_file():
            fail(f"{path / 'latest'} names {step_dir}, which is not a complete checkpoint")
        return "dcp", step_dir
    if (path / ".metadata").is_file():  # an fsdp step-N directory given directly
        return "dcp", path
    fail(f"--ckpt {path}: no ckpt.pt, latest or DCP checkpoint in it")
    raise AssertionError  # unreachable: fail exits


def clean_key(key: str) -> str:
    # torch.compile and DDP wrappers prefix the names; the model underneath is the same
    for prefix in ("_orig_mod.", "module."):
        key = key.replace(prefix, "")
    return key


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The model's full (unsharded) weights on the CPU, from an lm/ddp or fsdp checkpoint."""
    kind, where = find_checkpoint(path)
    try:
        if kind == "torch":
            ckpt = torch.load(where, map_location="cpu", weights_only=True, mmap=True)
            if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
                fail(f"{where}: not an lm/ddp checkpoint (no 'model' state dict)")
            return {clean_key(k): v for k, v in ckpt["model"].items()}
        import torch.distributed.checkpoint as dcp

        meta = dcp.FileSystemReader(str(where)).read_metadata().state_dict_metadata
        state = {
            k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
            for k, m in meta.items()
            if k.startswith("model.") and hasattr(m, "size")
        }
        if not state:
            fail(f"{where}: no model weights in this DCP checkpoint")
        dcp.load({"model": {k[len("model.") :]: v for k, v in state.items()}}, checkpoint_id=where)
        return {clean_key(k[len("model.") :]): v for k, v in state.items()}
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        fail(f"{where}: could not be read as a checkpoint ({type(exc).__name__}: {exc})")
        raise  # unreachable: fail exits


def read_vocab(path: Path, vocab_size: int) -> str:
    """What the checkpoint's tokens are, as lm/fsdp record it: "bytes" (text) or "ids"
    (synthetic tokens); older checkpoints record nothing: bytes when the vocabulary is 256,
    else "auto" (text when every token is a byte)."""
    kind, where = find_checkpoint(path)
    state = where if kind == "torch" else where / "train_state.pt"
    try:
        recorded = torch.load(state, map_location="cpu", weights_only=True, mmap=True).get("vocab")
    except (OSError, RuntimeError, AttributeError, ValueError):
        recorded = None
    if recorded in ("bytes", "ids"):
        return recorded
    return "bytes" if vocab_size == 256 else "auto"


@dataclass
class ModelShape:
    n_layer: int
    n_head: int
    d_model: int
    vocab_size: int
    seq_len: int


def shape_of(sd: dict[str, torch.Tensor], n_head: int | None, source: str) -> ModelShape:
    """lm.py saves weights only: layers, width, vocabulary and context come from the tensor
    shapes; the head count does not show in any shape, so it is the preset's with that shape."""
    try:
        vocab, d_model = sd["tok_emb.weight"].shape
        seq_len = sd["pos_emb.weight"].shape[0]
    except KeyError:
        fail(f"{source}: not an lm model (no tok_emb/pos_emb weights)")
    n_layer = sum(1 for k in sd if k.startswith("blocks.") and k.endswith(".ln1.weight"))
    if not n_head:
        n_head = next((h for ly, h, d in SIZES.values() if (ly, d) == (n_layer, d_model)), None)
        n_head = n_head or next((h for _, h, d in SIZES.values() if d == d_model), None)
    if not n_head or d_model % n_head:
        fail(f"{source}: d_model {d_model} matches no preset: pass --n-head (trained with)")
    return ModelShape(n_layer, n_head, d_model, vocab, seq_len)


def shard(sd: dict[str, torch.Tensor], s: ModelShape, rank: int, world: int) -> dict:
    """Tensor parallelism (Megatron): qkv and fc split by output rows (column-parallel: each
    rank owns n_head/world heads and 4d/world hidden units), proj and fc_proj by input columns
    (row-parallel: partial sums, one all-reduce each). Embeddings, norms and the head are kept
    whole on every rank, so every rank ends a step with the same logits."""
    if world == 1:
        return sd
    d, hl = s.d_model, s.n_head // world
    hd = d // s.n_head
    out = {}
    for key, w in sd.items():
        if key.endswith("attn.qkv.weight"):  # rows: [q heads | k heads | v heads]
            parts = w.split(d, dim=0)
            out[key] = torch.cat([p[rank * hl * hd : (rank + 1) * hl * hd] for p in parts])
        elif key.endswith("attn.proj.weight"):
            out[key] = w[:, rank * hl * hd : (rank + 1) * hl * hd]
        elif key.endswith(".fc.weight"):
            out[key] = w.chunk(world, dim=0)[rank]
        elif key.endswith("fc_proj.weight"):
            out[key] = w.chunk(world, dim=1)[rank]
        else:
            out[key] = w
    return {k: v.contiguous() for k, v in out.items()}


# --- MODEL ---
# The same module names as lm.py, so its state dict loads as is; KV cache added.
def linear(layer: nn.Linear, x, reduce: bool):
    """x @ W.T. reduce (compiled decode only): spelled as a multiply-and-sum that the compiler
    turns into one bandwidth-bound kernel with the neighbouring elementwise work fused in, in
    place of a cuBLAS call; fp32 accumulation either way."""
    if not reduce:
        return layer(x)
    scale = getattr(layer, "scale", None)  # Int8Linear
    w = layer.weight.float() if scale is None else layer.values(torch.float32)
    y = (x.unsqueeze(-2).float() * w).sum(-1)
    return (y if scale is None else y * scale).to(x.dtype)


INT8_OFFSET = 128  # Int8Linear keeps w + 128 as uint8: the decode kernel's byte permute takes it
# as it is (a signed byte needed an xor first, a quarter of an instruction a weight)


class Int8Linear(nn.Module):
    """--quant int8: weight-only int8, one scale per output row (absmax / 127), made at load from
    the checkpoint's weights and kept offset, w + INT8_OFFSET as uint8. A decode step reads half
    the bytes of bf16; activations, the accumulation and the output stay in the model's dtype /
    fp32."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        w = weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        q = torch.round(w / scale[:, None]).clamp(-127, 127) + INT8_OFFSET
        self.register_buffer("weight", q.to(torch.uint8))
        self.register_buffer("scale", scale)

    def values(self, dtype: torch.dtype) -> torch.Tensor:
        """The int8 values w (-127..127), in dtype (exact in bf16 and wider)."""
        return self.weight.to(dtype) - INT8_OFFSET

    def forward(self, x):
        if int8_mm_usable(x, self.weight):  # the prompt pass outside torch.compile (graph, eager)
            return int8_matmul(x, self.weight, self.scale)
        return (F.linear(x, self.values(x.dtype)).float() * self.scale).to(x.dtype)


def quantize_int8(model: nn.Module) -> None:
    """Every block matrix and the head become Int8Linear; the head gets its own int8 copy of
    the tied embedding (the embedding lookup keeps the full-precision table). Each LayerNorm's
    gains are folded into the one matrix it feeds first, W diag(g) quantized (the same product:
    qkv after ln1, fc after ln2, the head after ln_f), and the LayerNorm keeps none: the decode
    kernel then normalises x without loading gains (round 16)."""
    for b in model.blocks:
        for ln, parent, name in ((b.ln1, b.attn, "qkv"), (None, b.attn, "proj"),
                                 (b.ln2, b, "fc"), (None, b, "fc_proj")):  # fmt: skip
            setattr(parent, name, Int8Linear(fold_gains(getattr(parent, name).weight, ln)))
    model.head = Int8Linear(fold_gains(model.tok_emb.weight, model.ln_f))


def fold_gains(weight: torch.Tensor, ln: nn.LayerNorm | None) -> torch.Tensor:
    """weight (N, K) times the gains of the LayerNorm before it, along K (fp32), and the
    LayerNorm left without gains; weight as it is without one (or one already folded)."""
    if ln is None or ln.weight is None:
        return weight
    folded = weight.detach().float() * ln.weight.detach().float()
    ln.weight = None  # F.layer_norm without gains: the torch paths compute the same
    return folded


class CausalSelfAttention(nn.Module):
    def __init__(self, s: ModelShape, world: int, decode_attn: str):
        super().__init__()
        self.n_head, self.head_dim = s.n_head // world, s.d_model // s.n_head
        self.world, self.decode_attn = world, decode_attn
        self.reduce_linear = False  # set by Engine: only where the decode step is compiled
        width = self.n_head * self.head_dim
        self.qkv = nn.Linear(s.d_model, 3 * width, bias=False)  # column-parallel
        self.proj = nn.Linear(width, s.d_model, bias=False)  # row-parallel
        # Non-persistent buffers (not in the state dict), set by GPT.setup_cache.
        self.register_buffer("k_cache", None, persistent=False)
        self.register_buffer("v_cache", None, persistent=False)
        self.register_buffer("sums", None, persistent=False)  # decode_attention's, fp64

    def forward(self, x, pos, mask):
        """x (1, T, C). Prefill (mask None): positions 0..T-1, causal. Decode (T=1): position
        pos (a (1,) tensor), attending over the cache slots the mask's length covers."""
        B, T, _ = x.shape
        red = self.reduce_linear and mask is not None
        q, k, v = linear(self.qkv, x, red).split(self.n_head * self.head_dim, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if mask is None:
            self.k_cache[:, :, :T].copy_(k)
            self.v_cache[:, :, :T].copy_(v)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            self.k_cache.index_copy_(2, pos, k)
            self.v_cache.index_copy_(2, pos, v)
            S = mask.shape[-1]
            kc, vc = self.k_cache[:, :, :S], self.v_cache[:, :, :S]
            if self.decode_attn == "sdpa":
                y = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
            else:  # spelled out: the compiler fuses scale, mask and softmax into one kernel
                att = (q @ kc.transpose(-2, -1)).float() * (1.0 / math.sqrt(self.head_dim))
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = att.to(vc.dtype) @ vc
        y = linear(self.proj, y.transpose(1, 2).reshape(B, T, -1), red)
        if self.world > 1:
            dist.all_reduce(y)  # row-parallel partial sums
        return y


class Block(nn.Module):
    def __init__(self, s: ModelShape, world: int, decode_attn: str):
        super().__init__()
        self.world = world
        self.ln1 = nn.LayerNorm(s.d_model, bias=False)
        self.attn = CausalSelfAttention(s, world, decode_attn)
        self.ln2 = nn.LayerNorm(s.d_model, bias=False)
        self.fc = nn.Linear(s.d_model, 4 * s.d_model // world, bias=False)
        self.fc_proj = nn.Linear(4 * s.d_model // world, s.d_model, bias=False)

    def forward(self, x, pos, mask):
        x = x + self.attn(self.ln1(x), pos, mask)
        red = self.attn.reduce_linear and mask is not None
        h = linear(self.fc_proj, F.gelu(linear(self.fc, self.ln2(x), red)), red)
        if self.world > 1:
            dist.all_reduce(h)
        return x + h

    def decode_fast(self, x, pos):
        """forward for one decode token x (C,) in five Triton launches (Engine picks it on a
        GPU)."""
        a = self.attn
        sums = decode_attention(gemv(x, a.qkv, ln=self.ln1, zero=a.sums, runs=True), a, pos)
        if self.world == 1:  # residual adds fused into the row-parallel products
            x = gemv(sums, a.proj, res=x, heads=a.n_head, out_dtype=x.dtype)
            return gemv(gemv(x, self.fc, ln=self.ln2, gelu=True), self.fc_proj, res=x)
        y = gemv(sums, a.proj, heads=a.n_head, out_dtype=x.dtype)
        dist.all_reduce(y)
        x = x + y
        h = gemv(gemv(x, self.fc, ln=self.ln2, gelu=True), self.fc_proj)
        dist.all_reduce(h)
        return x + h


class GPT(nn.Module):
    def __init__(self, s: ModelShape, world: int = 1, decode_attn: str = "sdpa"):
        super().__init__()
        self.shape = s
        # Tables given, so no init runs: every path loads weights into them, and an init on
        # the meta device (normal_) imports torch._dynamo, 1.5-5 s of a start.
        self.tok_emb = nn.Embedding(
            s.vocab_size, s.d_model, _weight=torch.empty(s.vocab_size, s.d_model)
        )
        self.pos_emb = nn.Embedding(s.seq_len, s.d_model, _weight=torch.empty(s.seq_len, s.d_model))
        self.blocks = nn.ModuleList(Block(s, world, decode_attn) for _ in range(s.n_layer))
        self.ln_f = nn.LayerNorm(s.d_model, bias=False)
        self.head = nn.Linear(s.d_model, s.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied, as in lm.py

    def setup_cache(self, device: torch.device, dtype: torch.dtype) -> None:
        for b in self.blocks:
            a = b.attn
            shape = (1, a.n_head, self.shape.seq_len, a.head_dim)
            a.k_cache = torch.zeros(shape, device=device, dtype=dtype)
            a.v_cache = torch.zeros(shape, device=device, dtype=dtype)
            a.sums = attention_sums(a.n_head, a.head_dim, device)
        self.work = {
            # the head's argmax as one key (_gemv_kernel's ARGMAX); _advance_kernel resets it
            "best": torch.full((1,), LOWEST_KEY, device=device, dtype=torch.int64),
            # the Triton step's draw (_gemv_kernel's SAMPLE): 1 / temperature (0: greedy), seed
            "inv_t": torch.zeros(1, device=device),
            "seed": torch.zeros(1, device=device, dtype=torch.int64),
        }

    def trunk(self, idx):
        """idx (1, P) -> the last block's output (1, P, C); fills cache slots 0..P-1."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for b in self.blocks:
            x = b(x, None, None)
        return x

    def logits(self, idx):
        """idx (1, P) -> logits (1, P, V) at every position (--eval-data)."""
        return self.head(self.ln_f(self.trunk(idx))).float()

    def prefill(self, idx, last):
        """idx (1, P) right-padded prompt; last (1,) its last real position -> logits (1, V)."""
        # the head (50k x d) only for the token that is sampled
        x = self.trunk(idx).index_select(1, last)
        return self.head(self.ln_f(x)).float().view(1, -1)

    def decode(self, tok, pos, S: int):
        """tok (1, 1) at position pos (1,) -> logits (1, V); attends over cache slots < S."""
        x = self.tok_emb(tok) + self.pos_emb(pos)
        mask = (torch.arange(S, device=tok.device) <= pos).view(1, 1, 1, S)
        for b in self.blocks:
            x = b(x, pos, mask)
        return (
            linear(self.head, self.ln_f(x), self.blocks[0].attn.reduce_linear).float().view(1, -1)
        )

    def decode_fast(self, tok, pos, draw: bool = False):
        """decode in Triton kernels: the cache length is read from pos on the device, so one
        CUDA graph serves every length. draw: the head draws the token (_gemv_kernel's SAMPLE;
        a graph of its own, so a greedy step runs none of it)."""
        te, pe = self.tok_emb.weight, self.pos_emb.weight
        x = torch.empty(te.shape[1], device=te.device, dtype=te.dtype)
        _embed_kernel[(triton.cdiv(x.numel(), 256),)](
            tok, pos, te, pe, x, x.numel(), BLOCK=256, **pdl_args()
        )
        for b in self.blocks:
            x = b.decode_fast(x, pos)
        w = self.work
        head = gemv(
            x, self.head, ln=self.ln_f, out_dtype=torch.float32, best=w["best"], runs=True,
            sample=(w["inv_t"], w["seed"], pos) if draw else None,
        )  # fmt: skip
        return head.view(1, -1)


def materialize(model: nn.Module, device: torch.device) -> None:
    """Give a model built on the meta device uninitialised storage on device (its weights are
    loaded next). Module.to_empty does this through torch._refs.empty_like, whose import pulls
    in sympy: 1-3 s of every start."""
    for m in model.modules():
        for name, p in m.named_parameters(recurse=False):
            empty = torch.empty(p.shape, device=device, dtype=p.dtype)
            m._parameters[name] = nn.Parameter(empty, requires_grad=p.requires_grad)
        for name, b in m.named_buffers(recurse=False):
            m._buffers[name] = torch.empty(b.shape, device=device, dtype=b.dtype)


def random_state_dict(s: ModelShape, seed: int, device: torch.device, dtype) -> dict:
    """Full (unsharded) weights drawn as lm.py initialises them, for benchmarks without a
    checkpoint; drawn on the device (fast for 1.3B), the same on every rank for a seed."""
    g = torch.Generator(device=device).manual_seed(seed)
    sd = {}
    with torch.device("meta"):
        ref = GPT(s)
    for name, p in ref.state_dict().items():
        if p.dim() == 1:  # LayerNorm weights
            sd[name] = torch.ones(p.shape, device=device, dtype=dtype)
        elif name == "head.weight":
            sd[name] = sd["tok_emb.weight"]  # tied
        else:
            std = 0.02 / math.sqrt(2 * s.n_layer) if name.endswith("proj.weight") else 0.02
            w = torch.randn(p.shape, generator=g, device=device, dtype=torch.float32) * std
            sd[name] = w.to(dtype)
    return sd


def full_params(s: ModelShape) -> int:
    """Parameters of the whole model (tied head counted once), whatever the sharding."""
    d = s.d_model
    return s.n_layer * (12 * d * d + 2 * d) + (s.vocab_size + s.seq_len + 1) * d


def prefill_step(model: GPT, idx, last):
    return model.prefill(idx, last)


def decode_step(model: GPT, tok, pos, out, S: int):
    """One greedy decode step, in place: logits, then tok <- argmax (the next input), out[pos+1]
    <- it, pos <- pos + 1. In place so one CUDA graph replay is the whole step."""
    return advance(model.decode(tok, pos, S), tok, pos, out)


DRAW = -1  # decode_step_fast's S for the step that draws a sampled token (GPT.decode_fast)


def decode_step_fast(model: GPT, tok, pos, out, S: int):
    """decode_step in Triton kernels, not compiled: captured as it is in one CUDA graph, one
    for every length (S 0), and one more that draws a sampled token (S DRAW)."""
    logits = model.decode_fast(tok, pos, draw=S == DRAW)
    _advance_kernel[(1,)](model.work["best"], tok, pos, out, **pdl_args())
    return logits


def advance(logits, tok, pos, out):
    nxt = logits.argmax(dim=-1)
    out.index_copy_(0, pos + 1, nxt)
    tok.copy_(nxt.view(1, 1))
    pos.add_(1)
    return logits


def weight_bytes_per_token(model: GPT) -> int:
    """Bytes of weights one decode step reads on this rank: every matrix once with its scales
    (a tied head counts once), the norms; of the embeddings one row each (left out)."""
    seen, total = set(), 0
    for m in model.modules():
        if isinstance(m, nn.Embedding) and m.weight is not model.head.weight:
            continue
        kept = [b for n, b in m.named_buffers(recurse=False) if n not in ("k_cache", "v_cache")]
        for t in (*m.parameters(recurse=False), *kept):
            if id(t) in seen:
                continue
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def peak_bandwidth(device: torch.device, override_tb: float | None) -> tuple[float | None, str]:
    if override_tb:
        return override_tb * 1e12, "--peak-bw"
    if device.type != "cuda":
        return None, "cpu"
    name = torch.cuda.get_device_name(device)
    for key, bw in PEAK_BANDWIDTH:
        if key in name.upper():
            return bw, name
    return None, name  # unknown GPU: no fraction rather than a wrong one


LOWEST_KEY = -(2**63)  # below every argmax key (_gemv_kernel's ARGMAX): "no maximum yet"
INT8_BIAS = 2**15 + INT8_OFFSET  # _int8_biased: stored w + 128 -> fp32 w + INT8_BIAS, a permute


# --- GPU DECODE KERNELS (Triton) ---
# Batch-1 decode reads every weight once per token: what counts is bytes at full bandwidth and
# few kernels, each overlapping the one before. Five launches a layer (LayerNorm fused into
# the next matrix-vector product, GELU and the residual add into its epilogue; attention split
# over the cache, its programs' sums added up in fp64 and divided by the product after it,
# reading the length from device memory, so one CUDA graph serves every length); under
# programmatic dependent launch (PDL) every kernel loads
# what does not depend on the kernel before it (weights, older cache slots) before it waits on
# it. Triton ships with torch's CUDA builds; without it (or a GPU) the torch code runs.
try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only torch: the torch paths below run instead
    triton = None
try:  # programmatic dependent launch (Hopper+): the next kernel starts while this one ends
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # an older Triton (or none): launched one after the other
    gdc_launch_dependents = gdc_wait = None

# _gemv_kernel's tiles, (BLOCK_N, BLOCK_K, num_warps), for float and for int8 weights (int8
# converts with MAGIC): the in-graph sweep's fastest at 1.3B on H200 (round 10,
# bench/gpu/gemv_cost.py --sweep) and neighbours for other shapes and GPUs. Engine times each
# product's candidates inside a CUDA graph over the model's own layers (tune_gemv): the
# autotuner times a tile alone, and its picks ran up to 1.4x slower in the decode graph.
# (Tensor-core tiles, tl.dot against x as a 16-column operand, lost to these on every product
# in round 11's sweep.)
GEMV_TILES = {
    "float": (
        (16, 512, 8), (16, 512, 4), (8, 512, 4), (8, 1024, 4), (4, 1024, 4), (4, 2048, 4),
        (2, 2048, 4), (4, 2048, 8), (8, 2048, 8), (32, 256, 8), (64, 256, 8),
    ),
    "int8": (
        (16, 512, 4), (32, 512, 8), (16, 512, 8), (8, 1024, 4), (8, 1024, 8), (4, 2048, 4),
        (4, 2048, 8), (8, 2048, 8), (2, 2048, 4), (64, 512, 16),
    ),
}  # fmt: skip

if triton is not None:
    _GEMV_CONFIGS = [  # the autotuner's list: a product not tuned (no CUDA graphs, scripts)
        triton.Config(
            {"BLOCK_N": n, "BLOCK_K": k, "MAGIC": kind == "int8"}, num_warps=w, num_stages=2
        )
        for kind, tiles in GEMV_TILES.items()
        for n, k, w in tiles
    ]
    _tune = (
        {"cache_results": True} if "cache_results" in triton.autotune.__code__.co_varnames else {}
    )

    def _int8_only_magic(configs, nargs, **kwargs):  # each weight type its own tiles
        int8 = nargs["w_ptr"].dtype == torch.uint8
        return [c for c in configs if c.kwargs["MAGIC"] == int8]

    # 4 stored weights (one 32-bit word of w + 128) -> 4 fp32 values 2**15 + 128 + w, exact:
    # each byte put in the second byte of 2**15's bits (its mantissa's unit is 1 there) by one
    # byte permute. The bias is not subtracted weight by weight: the product takes
    # INT8_BIAS * sum(x) off once (_gemv_kernel).
    _INT8X4_F32 = tl.constexpr("""{
        prmt.b32 $0, $4, 0x47000000, 0x7404;
        prmt.b32 $1, $4, 0x47000000, 0x7414;
        prmt.b32 $2, $4, 0x47000000, 0x7424;
        prmt.b32 $3, $4, 0x47000000, 0x7434;
    }""")
    _INT8_BIAS = tl.constexpr(INT8_BIAS)
    _INT8_OFFSET = tl.constexpr(INT8_OFFSET)

    @triton.jit
    def _gumbel_log(seed, pos, N, n):
        """log(-log u), u Philox's uniform at (seed, pos * N + n): y minus it is y plus Gumbel
        noise, whose argmax is a draw from softmax(y) (the Gumbel-max trick). The head's draw
        and Picker's take their noise here: a seed and a position give the same numbers."""
        return tl.log(-tl.log(tl.rand(seed, (pos * N + n).to(tl.uint32))))

    @triton.jit
    def _int8_biased(w, COMPILED: tl.constexpr):
        """Stored w + INT8_OFFSET -> fp32 w + INT8_BIAS without the conversion instruction (a
        quarter of the FMA rate) or a subtraction: a byte permute a weight."""
        if COMPILED:
            return tl.inline_asm_elementwise(
                _INT8X4_F32, "=r,=r,=r,=r,r", [w], dtype=tl.float32, is_pure=True, pack=4
            )
        else:  # Triton's interpreter runs no PTX: the same value
            return (w.to(tl.int32) + (_INT8_BIAS - _INT8_OFFSET)).to(tl.float32)

    @triton.jit
    def _gdc_wait_dep(PDL: tl.constexpr, COMPILED: tl.constexpr, X_ASM: tl.constexpr):
        """gdc_wait (under PDL) -> 0. With X_ASM (compiled) the 0 is made after the wait by
        the same PTX: the x loads (_x_load) take it as an operand, so the compiler cannot move
        them above the wait (tl.load's are ordered by gdc_wait itself)."""
        if PDL and COMPILED and X_ASM:
            return tl.inline_asm_elementwise(
                "griddepcontrol.wait; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False,
                pack=1,
            )  # fmt: skip
        else:
            if PDL:
                gdc_wait()
            return 0

    @triton.jit
    def _x_load(ptr, rk, kmask, K, dep, COMPILED: tl.constexpr, X_ASM: tl.constexpr):
        """ptr[rk] (0 past K). X_ASM (compiled): by PTX loads, not tl.load (1: an element a
        load; 2: eight 16-bit elements a load). Triton gives a tl.load of x the layout of x
        alone (8 bf16 a thread) and moves it into the weights' (16 int8 columns a thread)
        through shared memory, 2-16 barriers an iteration after the wait (round 18, in the
        SASS: bench/gpu/sass_count.py); an elementwise op takes the layout of its use, so
        each thread reads the elements it multiplies, from L1. Addresses are clamped into x
        and the masked elements zeroed after."""
        if COMPILED and X_ASM:
            ty = ptr.dtype.element_ty
            WIDE: tl.constexpr = X_ASM == 2 and ty.primitive_bitwidth == 16
            # a vector's 8 addresses stay in x: an aligned 8 past K reads x's last 8. Only a
            # vector's: proj's fp64 weight sums (16 a layer) clamped to K - 8 read head 8's
            # for heads 9-15 (round 20's check, every proj tile WRONG with X_ASM 2)
            at = [ptr + tl.minimum(rk, K - (8 if WIDE else 1)), dep]
            if WIDE:  # 8 at a time (gemv: K % 8 == 0,
                # x 16-byte aligned); a thread's 8 neighbouring elements are its 8 neighbours
                # in x in the products' layouts (8-16 columns a thread): one 16-byte load
                v = tl.inline_asm_elementwise(
                    "ld.global.v4.b32 {$0, $1, $2, $3}, [$4];",
                    "=r,=r,=r,=r,l,l,l,l,l,l,l,l,r,r,r,r,r,r,r,r", at, dtype=ty, is_pure=True,
                    pack=8,
                )  # fmt: skip
            elif ty.primitive_bitwidth == 16:
                v = tl.inline_asm_elementwise(
                    "ld.global.b16 $0, [$1];", "=h,l,r", at, dtype=ty, is_pure=True, pack=1
                )
            elif ty == tl.float32:
                v = tl.inline_asm_elementwise(
                    "ld.global.f32 $0, [$1];", "=f,l,r", at, dtype=ty, is_pure=True, pack=1
                )
            else:  # attention's fp64 sums
                v = tl.inline_asm_elementwise(
                    "ld.global.f64 $0, [$1];", "=d,l,r", at, dtype=ty, is_pure=True, pack=1
                )
            return tl.where(kmask, v, 0.0)
        else:
            return tl.load(ptr + rk, mask=kmask, other=0.0)

    @triton.jit
    def _x_chunk(
        x_ptr, l_ptr, rk, kmask, K, dep, ATTN_HD: tl.constexpr, DT: tl.constexpr,
        COMPILED: tl.constexpr, X_ASM: tl.constexpr,
    ):  # fmt: skip
        """x[rk] (_x_load); ATTN_HD: attention's output there, each head's sum of values over
        its sum of weights (fp64, _attn_kernel), rounded as torch's attention output would be.
        Both sums are first scaled by the weights' power of 2 (exact; their ratio is a mean of
        values), then divided in fp32: an fp64 division is a dozen dependent instructions."""
        if ATTN_HD > 0:
            o = _x_load(x_ptr, rk, kmask, K, dep, COMPILED, X_ASM)
            wsum = _x_load(l_ptr, rk // ATTN_HD, kmask, K // ATTN_HD, dep, COMPILED, X_ASM)
            wsum = tl.where(kmask, wsum, 1.0)
            e = (wsum.to(tl.int64, bitcast=True) >> 52) & 0x7FF  # its biased exponent
            down = ((2046 - e) << 52).to(tl.float64, bitcast=True)  # 2^-(e - 1023)
            return ((o * down).to(tl.float32) / (wsum * down).to(tl.float32)).to(DT)
        else:
            return _x_load(x_ptr, rk, kmask, K, dep, COMPILED, X_ASM)

    @triton.jit
    def _add_pair(a, b, c, d):
        return a + c, b + d

    @triton.jit
    def _exp_f64(t):
        """e^t in fp64 for fp32 t, which fp32 overflows past 88: 2^n made from its bits, the
        fraction's 2^r in fp32 (t far below -708 underflows to 0)."""
        u = t * 1.4426950408889634
        n = tl.minimum(tl.maximum(tl.floor(u), -1022.0), 1023.0)
        two_n = ((n.to(tl.int64) + 1023) << 52).to(tl.float64, bitcast=True)
        return tl.exp2(u - n).to(tl.float64) * two_n

    @triton.jit
    def _fma_chain(acc, w, x, LEVELS: tl.constexpr):
        """acc + the sum over the last LEVELS axes (each of size 2) of w * x, as one chain of
        multiply-adds (tl.sum's tree would take a multiply and an add a weight)."""
        if LEVELS == 0:
            return acc + w * x
        else:
            w0, w1 = tl.split(w)
            x0, x1 = tl.split(x)
            return _fma_chain(_fma_chain(acc, w0, x0, LEVELS - 1), w1, x1, LEVELS - 1)

    @triton.jit
    def _w_float(w, MAGIC: tl.constexpr, COMPILED: tl.constexpr):
        """A tile of weights as fp32: MAGIC, w + INT8_BIAS (byte permutes); else w."""
        if MAGIC:
            return _int8_biased(w, COMPILED)
        elif w.dtype == tl.uint8:  # Int8Linear's offset weights, converted as numbers
            return w.to(tl.float32) - _INT8_OFFSET
        else:
            return w.to(tl.float32)

    @triton.jit
    def _x_prologue(
        x_ptr, g_ptr, idx, K, dep, mean, rstd, LN: tl.constexpr, GAIN: tl.constexpr,
        ATTN_HD: tl.constexpr, DT: tl.constexpr, COMPILED: tl.constexpr,
    ):  # fmt: skip
        """prologue(x)[idx] as fp32 (X_ASM's loads): the LayerNorm's output rounded to x's
        dtype, as _gemv_tile's."""
        xm = idx < K
        xk = _x_chunk(x_ptr, g_ptr, idx, xm, K, dep, ATTN_HD, DT, COMPILED, 1)
        if LN:
            xn = (xk.to(tl.float32) - mean) * rstd
            if GAIN:
                xn = xn * _x_load(g_ptr, idx, xm, K, dep, COMPILED, 1).to(tl.float32)
            else:
                xn = tl.where(xm, xn, 0.0)
            xk = xn.to(xk.dtype)
        return xk.to(tl.float32)

    @triton.jit
    def _lane_leaves(
        part, xrun, w, x_ptr, g_ptr, idx, K, dep, mean, rstd, LN: tl.constexpr,
        GAIN: tl.constexpr, ATTN_HD: tl.constexpr, DT: tl.constexpr, COMPILED: tl.constexpr,
        LEVELS: tl.constexpr, STRIDE: tl.constexpr,
    ):  # fmt: skip
        """_fma_chain(part, w, x, LEVELS) and x's sum alongside, each leaf's x read at its own
        index (idx + its offset): x is never reshaped or split, so its loads take the layout
        of the leaf of weights they multiply (a split x was moved through shared memory)."""
        if LEVELS == 0:
            xf = _x_prologue(
                x_ptr, g_ptr, idx, K, dep, mean, rstd, LN, GAIN, ATTN_HD, DT, COMPILED
            )  # fmt: skip
            return part + w * xf, xrun + xf
        else:
            w0, w1 = tl.split(w)
            part, xrun = _lane_leaves(
                part, xrun, w0, x_ptr, g_ptr, idx, K, dep, mean, rstd, LN, GAIN, ATTN_HD, DT,
                COMPILED, LEVELS - 1, STRIDE * 2,
            )  # fmt: skip
            return _lane_leaves(
                part, xrun, w1, x_ptr, g_ptr, idx + STRIDE, K, dep, mean, rstd, LN, GAIN,
                ATTN_HD, DT, COMPILED, LEVELS - 1, STRIDE * 2,
            )  # fmt: skip

    @triton.jit
    def _lane_tile(
        acc, w, x_ptr, g_ptr, k0, K, dep, mean, rstd, LN: tl.constexpr, GAIN: tl.constexpr,
        MAGIC: tl.constexpr, ATTN_HD: tl.constexpr, DT: tl.constexpr, COMPILED: tl.constexpr,
        LANE: tl.constexpr,
    ):  # fmt: skip
        """_gemv_tile's LANE path with x read by X_ASM's loads leaf by leaf (_lane_leaves):
        the same products in the same order."""
        BLOCK_N: tl.constexpr = w.shape[0]
        RUNS: tl.constexpr = w.shape[1] >> LANE
        wr = tl.reshape(_w_float(w, MAGIC, COMPILED), [BLOCK_N, RUNS] + [2] * LANE)
        idx = k0 + (tl.arange(0, RUNS) << LANE)[None, :]
        part, xrun = _lane_leaves(
            tl.zeros([BLOCK_N, RUNS], tl.float32), tl.zeros([1, RUNS], tl.float32), wr, x_ptr,
            g_ptr, idx, K, dep, mean, rstd, LN, GAIN, ATTN_HD, DT, COMPILED, LANE, 1,
        )  # fmt: skip
        if MAGIC:
            part -= _INT8_BIAS * xrun
        return acc + part

    @triton.jit
    def _prologue(xk, gk, kmask, mean, rstd, LN: tl.constexpr, GAIN: tl.constexpr):
        """x's chunk as the product takes it, fp32: with LN, normalised (gains gk where GAIN)
        and rounded to x's dtype, as the LayerNorm module's output would be."""
        if LN:
            xn = (xk.to(tl.float32) - mean) * rstd
            if GAIN:  # 0 past K (masked gains), as x is
                xn = xn * gk.to(tl.float32)
            else:
                xn = tl.where(kmask, xn, 0.0)
            xk = xn.to(xk.dtype)
        return xk.to(tl.float32)

    @triton.jit
    def _gemv_tile(
        acc, xs, w, xk, xsk, gk, kmask, mean, rstd, LN: tl.constexpr, GAIN: tl.constexpr,
        MAGIC: tl.constexpr, COMPILED: tl.constexpr, LANE: tl.constexpr,
    ):  # fmt: skip
        """(acc + w * prologue(x), xs + prologue(x)) for one (BLOCK_N, BLOCK_K) tile of weights,
        x's chunk xk (kmask: its elements within K; xsk: the same chunk for xs, loaded apart
        or xk itself) and the LayerNorm's gains gk (GAIN; int8 folds them into W); MAGIC:
        w + INT8_BIAS in place of w (xs lets the bias be taken off once). LANE > 0: acc
        (BLOCK_N, BLOCK_K >> LANE) gets each run of 2**LANE neighbouring weights' products (a
        thread's one 16-byte load) summed, the bias taken off each run's sum (xs unused): an
        accumulator a run, not a weight, and a short sum over lanes at the end. The head's and
        qkv's (round 17: the int8 head 41.7 -> 33.5 us in the graph, qkv 5.89 -> 5.68); the
        bias then comes off 16 products at a time, ~1e-4 of the logits, not ~1e-6. proj, fc
        and fc_proj keep LANE 0 (all products with it: 4.3 % slower, round 17)."""
        xf = _prologue(xk, gk, kmask, mean, rstd, LN, GAIN)
        wf = _w_float(w, MAGIC, COMPILED)
        if LANE == 0:
            if MAGIC:  # the same values as xf (xsk is xk, or the same elements loaded apart)
                xs += _prologue(xsk, gk, kmask, mean, rstd, LN, GAIN)
            return acc + wf * xf[None, :], xs
        else:
            BLOCK_N: tl.constexpr = w.shape[0]
            RUNS: tl.constexpr = w.shape[1] >> LANE
            xr = tl.reshape(xf, [1, RUNS] + [2] * LANE)
            zero = tl.zeros([BLOCK_N, RUNS], tl.float32)
            part = _fma_chain(zero, tl.reshape(wf, [BLOCK_N, RUNS] + [2] * LANE), xr, LANE)
            if MAGIC:  # (w + bias) x is exact for bf16 x (16 + 8 significant bits): the bias
                # comes off a run's 16 products while their sum is small
                ones = tl.full(xr.shape, 1.0, tl.float32)
                xrun = _fma_chain(tl.zeros([1, RUNS], tl.float32), xr, ones, LANE)
                part -= _INT8_BIAS * xrun
            return acc + part, xs

    @triton.autotune(
        configs=_GEMV_CONFIGS,
        key=["N", "K"],
        prune_configs_by={"early_config_prune": _int8_only_magic},
        **_tune,
    )
    @triton.jit
    def _gemv_kernel(
        x_ptr, w_ptr, s_ptr, g_ptr, r_ptr, y_ptr, best_ptr, z_ptr, t_ptr, seed_ptr, pos_ptr,
        N, K, Z, eps,
        HAS_SCALE: tl.constexpr, LN: tl.constexpr, GAIN: tl.constexpr, GELU: tl.constexpr,
        RES: tl.constexpr, ARGMAX: tl.constexpr, ZERO: tl.constexpr, ATTN_HD: tl.constexpr,
        PDL: tl.constexpr, COMPILED: tl.constexpr, K_LN: tl.constexpr, LANE: tl.constexpr,
        X_ASM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MAGIC: tl.constexpr,
        SAMPLE: tl.constexpr = False,
    ):  # fmt: skip
        """y[n] = epilogue(scale[n] * sum_k W[n, k] * prologue(x)[k]); W (N, K) bf16, or int8
        stored w + 128 (Int8Linear). MAGIC: int8 weights, made floats w + INT8_BIAS by byte
        permutes (PTX, when COMPILED for the GPU, not run by Triton's interpreter) instead of the
        conversion instruction, which issues at a quarter of the FMA rate; the bias comes off
        once, INT8_BIAS * sum(x) a lane (round 13: +2.3 % int8 tokens/s against a subtraction a
        weight, same tiles).
        ARGMAX (the head): also best <- max(best, key of this program's largest y), a key that
        orders as (y, -n), so the maximum names the first of equal maxima, as torch.argmax.
        SAMPLE (with ARGMAX): the key is y * t[0] (1 / temperature) plus Gumbel noise instead,
        whose argmax is a draw from softmax(y / temperature) (the Gumbel-max trick); the noise
        is Philox's at (seed[0], pos[0] * N + n): the same on every rank, no kernel and no host
        work a step. y itself is stored unchanged. A greedy step is compiled without it (round
        32: compiled in and skipped at run time, it cost greedy decode 0.2-0.3 %).
        ZERO: also z[:Z] <- 0 (qkv's product clears its layer's attention sums, which the
        attention after it adds into). ATTN_HD: x is attention's sums (_attn_kernel), o (K,)
        then, at g_ptr, l (K / ATTN_HD,): x = o / l, rounded to y's dtype.
        K_LN: the power of 2 at or above K where LN (x's statistics in one load), else 1.
        LANE: see _gemv_tile (the head and qkv, round 17). X_ASM: see _x_load."""
        if PDL:
            gdc_launch_dependents()
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = rn < N
        # What never depends on the kernel before this one is loaded before waiting for it
        # (under PDL these reads overlap its tail): the first tile of weights, the row scales,
        # the LayerNorm's first gains.
        rk0 = tl.arange(0, BLOCK_K)
        k0mask = rk0 < K
        w = tl.load(
            w_ptr + rn[:, None] * K + rk0[None, :],
            mask=nmask[:, None] & k0mask[None, :],
            other=0.0,
            eviction_policy="evict_first",  # read once: keep L2 for x and the cache
        )
        if HAS_SCALE:
            scale = tl.load(s_ptr + rn, mask=nmask, other=0.0).to(tl.float32)
        # X_ASM's run accumulators read x leaf by leaf (_lane_tile), not as a chunk
        LEAVES: tl.constexpr = X_ASM > 0 and LANE > 0
        GAINS: tl.constexpr = LN and GAIN and not LEAVES  # bf16's (int8 folds them into W)
        g0 = tl.load(g_ptr + rk0, mask=k0mask, other=0.0) if GAINS and not X_ASM else w
        if ARGMAX:  # the best key so far, read now and not at the end (a round trip there):
            # stale, it only lets more programs try their atomic. _advance_kernel, which reset
            # it, launches nothing early, so it has ended before this step's kernels start.
            seen = tl.load(best_ptr)
        if SAMPLE:  # the draw's scalars, now too (a round trip at the end otherwise); pos is
            # _advance_kernel's, which ended before this step began, as best's
            inv_t, seed, pos = tl.load(t_ptr), tl.load(seed_ptr), tl.load(pos_ptr)
        dep = _gdc_wait_dep(PDL, COMPILED, X_ASM)  # the wait; x's loads take dep after it
        # Then everything that does, asked for at once: x's first chunk, all of x for the
        # LayerNorm's sums, the residual. Loaded where they are used, each would be one more
        # round trip to L2 on the way to this kernel's end.
        DT: tl.constexpr = y_ptr.dtype.element_ty
        # X_ASM 2's loads (eight elements a load, packed) are right only in a layout where a
        # thread's eight lie together in x. Triton keeps xs (MAGIC's sum of x, a 1D carried
        # value) in a layout of its own, one element a thread, and gave it a copy of the load
        # there, whose packs join elements far apart (round 19's prep, in the TTGIR: fc and
        # fc_proj at every tile). xs takes its x by tl.load, in a layout Triton picks for it.
        X8: tl.constexpr = X_ASM == 2 and x_ptr.dtype.element_ty.primitive_bitwidth == 16
        XS_APART: tl.constexpr = X8 and MAGIC and LANE == 0
        if GAINS and X_ASM:  # in the weights' layout too (a tl.load of them: its own, and
            # x's prologue moved through shared memory in the loop), after the wait (dep)
            g0 = _x_load(g_ptr, rk0, k0mask, K, dep, COMPILED, 1)
        if not LEAVES:
            x0 = _x_chunk(x_ptr, g_ptr, rk0, k0mask, K, dep, ATTN_HD, DT, COMPILED, X_ASM)
            s0 = (
                _x_chunk(x_ptr, g_ptr, rk0, k0mask, K, dep, ATTN_HD, DT, COMPILED, 0)
                if XS_APART
                else x0
            )
        if ZERO:  # after the wait: the product that read the sums last step has ended
            tl.store(z_ptr + rn, tl.zeros([BLOCK_N], tl.float64), mask=rn < Z)
        if RES:
            r = tl.load(r_ptr + rn, mask=nmask, other=0.0).to(tl.float32)
        mean = 0.0
        rstd = 1.0
        if LN:  # every program normalises x itself: all K elements in one load
            rx = tl.arange(0, K_LN)
            xa = tl.load(x_ptr + rx, mask=rx < K, other=0.0).to(tl.float32)
            # both sums in one reduction: one trip through shared memory, not one a sum
            sx, sxx = tl.reduce((xa, xa * xa), 0, _add_pair)
            mean = sx / K
            rstd = 1.0 / tl.sqrt(tl.maximum(sxx / K - mean * mean, 0.0) + eps)
        acc = tl.zeros([BLOCK_N, BLOCK_K >> LANE], tl.float32)
        xs = tl.zeros([BLOCK_K], tl.float32)
        if LEAVES:
            acc = _lane_tile(
                acc, w, x_ptr, g_ptr, 0, K, dep, mean, rstd, LN, GAIN, MAGIC, ATTN_HD, DT,
                COMPILED, LANE,
            )  # fmt: skip
        else:
            acc, xs = _gemv_tile(
                acc, xs, w, x0, s0, g0, k0mask, mean, rstd, LN, GAIN, MAGIC, COMPILED, LANE
            )  # fmt: skip
        for k0 in range(BLOCK_K, K, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            kmask = rk < K
            w = tl.load(
                w_ptr + rn[:, None] * K + rk[None, :],
                mask=nmask[:, None] & kmask[None, :],
                other=0.0,
                eviction_policy="evict_first",
            )
            if LEAVES:
                acc = _lane_tile(
                    acc, w, x_ptr, g_ptr, k0, K, dep, mean, rstd, LN, GAIN, MAGIC, ATTN_HD, DT,
                    COMPILED, LANE,
                )  # fmt: skip
            else:
                xk = _x_chunk(x_ptr, g_ptr, rk, kmask, K, dep, ATTN_HD, DT, COMPILED, X_ASM)
                sk = (
                    _x_chunk(x_ptr, g_ptr, rk, kmask, K, dep, ATTN_HD, DT, COMPILED, 0)
                    if XS_APART
                    else xk
                )
                if GAINS and X_ASM:
                    gk = _x_load(g_ptr, rk, kmask, K, dep, COMPILED, 1)
                else:
                    gk = tl.load(g_ptr + rk, mask=kmask, other=0.0) if GAINS else w
                acc, xs = _gemv_tile(
                    acc, xs, w, xk, sk, gk, kmask, mean, rstd, LN, GAIN, MAGIC, COMPILED, LANE
                )  # fmt: skip
        if MAGIC and LANE == 0:  # the bias off each lane's K / BLOCK_K products before the sum
            # over lanes, while they are small: (w + bias) x is exact for bf16 x (16 + 8 bits)
            acc -= _INT8_BIAS * xs[None, :]
        y = tl.sum(acc, 1)
        if HAS_SCALE:
            y = y * scale
        if GELU:  # exact (erf) GELU, as F.gelu
            y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
        if RES:
            y = y + r
        tl.store(y_ptr + rn, y.to(y_ptr.dtype.element_ty), mask=nmask)
        if ARGMAX:
            y = tl.where(nmask, y, float("-inf"))
            if SAMPLE:
                y = y * inv_t - _gumbel_log(seed, pos, N, rn)
            top = tl.max(y, 0)
            n = tl.program_id(0) * BLOCK_N + tl.argmax(y, 0, tie_break_left=True)
            bits = top.to(tl.int32, bitcast=True)
            order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # as a signed int: y's order
            key = (order.to(tl.int64) << 32) + (0x7FFFFFFF - n).to(tl.int64)
            if key > seen:  # most programs skip the atomic; relaxed: _advance_kernel, which
                # reads it, starts after this kernel ends (no fence at a program's end)
                tl.atomic_max(best_ptr, key, sem="relaxed")

    @triton.jit
    def _attn_kernel(
        qkv_ptr, kc_ptr, vc_ptr, pos_ptr, acc_ptr, T, scale, C: tl.constexpr, HD: tl.constexpr,
        CHUNK: tl.constexpr, PDL: tl.constexpr, COMPILED: tl.constexpr = False,
        X_ASM: tl.constexpr = 0, SELECT: tl.constexpr = 0,
    ):  # fmt: skip
        """Flash-decoding, one (head, chunk of CHUNK cache slots) per program: softmax weights
        over slots <= pos and their values summed, then added into acc (fp64): o (C,) and the
        weights' sums l (heads,); the product after (proj, _x_chunk) reads o / l. Every
        program weighs its slots against the same score, the new key's, so the sums add up
        as they arrive: no merge pass, no ticket, no last program to wait for (round 12:
        ~2.5 us of the ~6.5 a layer took). fp64 sums keep the result independent of the
        order the programs add in, to far below bf16's rounding. The new key/value (this
        step's) come from qkv, and the program whose chunk holds pos writes them to the
        cache: no other program reads that slot. qkv's product cleared acc (ZERO)."""
        if PDL:
            gdc_launch_dependents()
        h = tl.program_id(0)
        sp = tl.program_id(1)
        # pos and the cache's older slots may be read before the wait: the step's last kernel
        # (_advance_kernel) wrote pos and lets nothing after it launch early, and older slots
        # were written by earlier steps. Only qkv comes from the kernel just before.
        pos = tl.load(pos_ptr)
        start = sp * CHUNK
        if start <= pos:
            d = tl.arange(0, HD)
            idx = start + tl.arange(0, CHUNK)
            old = (idx < pos)[:, None]
            if SELECT:  # where cef9ec7 put it: the order is the form (below)
                new = (idx == pos)[:, None]
            off = h * T * HD + idx[:, None] * HD + d[None, :]
            k = tl.load(kc_ptr + off, mask=old, other=0.0)  # 0 at pos and past it
            v = tl.load(vc_ptr + off, mask=old, other=0.0)
            # this step's q, k, v, after the wait (with X_ASM in the layout the tile uses),
            # an element a load: Triton gives them copies in layouts of 1-2 elements a thread
            # together, where eight packed (X_ASM 2) would join elements far apart (the TTGIR)
            dep = _gdc_wait_dep(PDL, COMPILED, X_ASM)
            dm = d < HD
            XA: tl.constexpr = min(X_ASM, 1)
            q = _x_load(qkv_ptr + h * HD, d, dm, HD, dep, COMPILED, XA).to(tl.float32)
            kn = _x_load(qkv_ptr + C + h * HD, d, dm, HD, dep, COMPILED, XA)
            vn = _x_load(qkv_ptr + 2 * C + h * HD, d, dm, HD, dep, COMPILED, XA)
            if SELECT:  # ATTN_SELECT: cef9ec7's form, line for line (its order is its speed:
                # round 29 timed the same selects with ref first 2.7 % slower a step)
                k = tl.where(new, kn[None, :], k).to(tl.float32)
                s = tl.sum(k * q[None, :], 1) * scale
                s = tl.where(idx <= pos, s, float("-inf"))
                m = tl.max(s, 0)
                p = tl.exp(s - m)
                v = tl.where(new, vn[None, :], v).to(tl.float32)
                o = tl.sum(p[:, None] * v, 0)
                ref = tl.sum(kn.to(tl.float32) * q, 0) * scale
            else:
                # the shared reference: the new key's score, computed alike by every program.
                # The new key and value are not put into the tile (a select an element: 1,928
                # -> 1,608 sm_90 instructions, all on the path after the wait): its score is
                # ref, its value added after the sum over slots
                ref = tl.sum(kn.to(tl.float32) * q, 0) * scale
                s = tl.sum(k.to(tl.float32) * q[None, :], 1) * scale
                s = tl.where(idx == pos, ref, s)
                s = tl.where(idx <= pos, s, float("-inf"))
                m = tl.max(s, 0)
                p = tl.exp(s - m)
                o = tl.sum(p[:, None] * v.to(tl.float32), 0)  # v is 0 at pos
                if pos < start + CHUNK:  # this chunk holds pos: the new value, weighed as its p
                    o += tl.exp(ref - m) * vn.to(tl.float32)
            f = _exp_f64(m - ref)
            tl.atomic_add(acc_ptr + h * HD + d, o.to(tl.float64) * f, sem="relaxed")
            tl.atomic_add(acc_ptr + C + h, tl.sum(p, 0).to(tl.float64) * f, sem="relaxed")
            if pos < start + CHUNK:
                tl.store(kc_ptr + h * T * HD + pos * HD + d, kn)
                tl.store(vc_ptr + h * T * HD + pos * HD + d, vn)

    @triton.jit
    def _embed_kernel(
        tok_ptr, pos_ptr, te_ptr, pe_ptr, x_ptr, C, BLOCK: tl.constexpr, PDL: tl.constexpr
    ):
        """x <- tok_emb[tok] + pos_emb[pos], reading both from device memory (one launch)."""
        if PDL:
            gdc_launch_dependents()
            gdc_wait()
        tok = tl.load(tok_ptr)
        pos = tl.load(pos_ptr)
        rc = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        cm = rc < C
        e = tl.load(te_ptr + tok * C + rc, mask=cm, other=0.0).to(tl.float32)
        e += tl.load(pe_ptr + pos * C + rc, mask=cm, other=0.0).to(tl.float32)
        tl.store(x_ptr + rc, e.to(x_ptr.dtype.element_ty), mask=cm)

    _LOWEST_KEY = tl.constexpr(LOWEST_KEY)  # a jit function reads constexpr globals only

    @triton.jit
    def _advance_kernel(best_ptr, tok_ptr, pos_ptr, out_ptr, PDL: tl.constexpr):
        """Greedy step's end: tok <- the head's argmax (its key in best), out[pos + 1] <- tok,
        pos <- pos + 1; best back to the smallest key for the next step."""
        if PDL:
            gdc_wait()
        key = tl.load(best_ptr)
        tok = (0x7FFFFFFF - (key & 0xFFFFFFFF)).to(tl.int64)
        pos = tl.load(pos_ptr)
        tl.store(tok_ptr, tok)
        tl.store(out_ptr + pos + 1, tok)
        tl.store(pos_ptr, pos + 1)
        tl.store(best_ptr, tl.full((), _LOWEST_KEY, tl.int64))

    @triton.jit
    def _adjusted(x, b_ptr, c_ptr, pres_ptr, freq_ptr, rn, mask, PENALTIES: tl.constexpr):
        """x + bias - freq * counts - presence * (counts > 0) at rn (LogitAdjust's sum)."""
        y = x + tl.load(b_ptr + rn, mask=mask, other=0.0)
        if PENALTIES:
            c = tl.load(c_ptr + rn, mask=mask, other=0.0)
            y = y - tl.load(freq_ptr) * c - tl.load(pres_ptr) * (c > 0).to(tl.float32)
        return y

    @triton.jit
    def _adjust_kernel(x_ptr, b_ptr, c_ptr, pres_ptr, freq_ptr, y_ptr, N, BLOCK: tl.constexpr):
        """y = _adjusted(x) with the penalties: LogitAdjust in one launch."""
        rn = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = rn < N
        x = tl.load(x_ptr + rn, mask=mask)
        tl.store(
            y_ptr + rn, _adjusted(x, b_ptr, c_ptr, pres_ptr, freq_ptr, rn, mask, True), mask=mask
        )

    @triton.jit
    def _sort_desc(y, rn):
        """y (fp32, one program's) -> (y sorted descending, each value's index rn), ties the
        lower index first: one sort of int64 keys (the head's argmax keys) carries both."""
        bits = y.to(tl.int32, bitcast=True)
        order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # as a signed int: y's order
        key = tl.sort((order.to(tl.int64) << 32) + (0x7FFFFFFF - rn).to(tl.int64), descending=True)
        o = (key >> 32).to(tl.int32)
        v = tl.where(o >= 0, o, o ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)
        return v, 0x7FFFFFFF - (key & 0xFFFFFFFF).to(tl.int32)

    @triton.jit
    def _pick_kernel(
        y_ptr, b_ptr, c_ptr, pres_ptr, freq_ptr, t_ptr, p_ptr, seed_ptr, pos_ptr, tok_ptr,
        out_ptr, N, ADJUST: tl.constexpr, PENALTIES: tl.constexpr, DRAW: tl.constexpr,
        TOP_P: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        """Picker.step's pick in one program, for a vocabulary of at most BLOCK: the logits
        plus logit_bias (ADJUST) less the penalties (PENALTIES: _adjusted's sum), then
        their argmax, or (DRAW) times 1 / T, the top-p nucleus kept (TOP_P: sorted by
        _sort_desc, the smallest prefix with mass top_p, as nucleus), each kept token's
        Gumbel noise added (the head's, at its index), the argmax -> tok, out[pos], its count."""
        rn = tl.arange(0, BLOCK)
        mask = rn < N
        y = tl.load(y_ptr + rn, mask=mask, other=float("-inf"))
        if ADJUST:
            y = _adjusted(y, b_ptr, c_ptr, pres_ptr, freq_ptr, rn, mask, PENALTIES)
        pos = tl.load(pos_ptr)
        if DRAW:
            y = y * tl.load(t_ptr)
            n = rn
            keep = mask
            if TOP_P:
                y, n = _sort_desc(y, rn)
                e = tl.exp(y - tl.max(y, 0))
                p = e / tl.sum(e, 0)
                keep = (tl.cumsum(p, 0) - p <= tl.load(p_ptr)) & (n < N)
            g = _gumbel_log(tl.load(seed_ptr), pos - 1, N, n)
            tok = tl.sum(
                tl.where(rn == tl.argmax(tl.where(keep, y - g, float("-inf")), 0), n, 0), 0
            )
        else:
            tok = tl.argmax(y, 0, tie_break_left=True)
        tok = tok.to(tl.int64)
        tl.store(tok_ptr, tok)
        tl.store(out_ptr + pos, tok)
        if ADJUST:  # one program: no other reads or writes the count
            tl.store(c_ptr + tok, tl.load(c_ptr + tok) + 1.0)

    @triton.jit
    def _keep_kernel(
        x_ptr,
        tok_ptr,
        pos_ptr,
        c_ptr,
        v_ptr,
        i_ptr,
        N,
        K: tl.constexpr,
        TOP: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        """Logprobs.keep in one program, for a vocabulary of at most BLOCK: row pos of the
        chosen token's log-probability and (TOP) the K likeliest tokens' and their ids, the
        logits sorted by _sort_desc, as _pick_kernel's (ties: the lower index first)."""
        rn = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + rn, mask=rn < N, other=float("-inf"))
        m = tl.max(x, 0)
        lse = m + tl.log(tl.sum(tl.exp(x - m), 0))
        pos = tl.load(pos_ptr)
        tl.store(c_ptr + pos, tl.sum(tl.where(rn == tl.load(tok_ptr), x, 0.0), 0) - lse)
        if TOP:
            v, n = _sort_desc(x, rn)
            tl.store(v_ptr + pos * K + rn, v - lse, mask=rn < K)
            tl.store(i_ptr + pos * K + rn, n.to(tl.int64), mask=rn < K)

    @triton.jit
    def _gumbel_kernel(y_ptr, seed_ptr, pos_ptr, N, BLOCK: tl.constexpr):
        """y += the Gumbel noise _gemv_kernel's SAMPLE adds in the step whose input is at
        pos - 1 (pos advanced past it): the same Philox numbers, so the same draw."""
        rn = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = rn < N
        y = tl.load(y_ptr + rn, mask=mask)
        g = _gumbel_log(tl.load(seed_ptr), tl.load(pos_ptr) - 1, N, rn)
        tl.store(y_ptr + rn, y - g, mask=mask)

    @triton.jit
    def _int8_mm_kernel(
        a_ptr, w_ptr, s_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ):  # fmt: skip
        """C (M, N) = (A (M, K) @ W (N, K).T) * scale[n] with W int8 (stored w + 128), widened to
        A's dtype a tile at a time in registers: a prompt pass never writes a bf16 copy of W."""
        pid = tl.program_id(0)
        grid_m = tl.cdiv(M, BLOCK_M)
        width = GROUP_M * tl.cdiv(N, BLOCK_N)
        # GROUP_M row blocks in a row take the same columns of W, while they are in L2
        first_m = (pid // width) * GROUP_M
        size_m = tl.minimum(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % width) % size_m
        pid_n = (pid % width) // size_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(
                a_ptr + rm[:, None] * K + rk[None, :],
                mask=(rm < M)[:, None] & (rk < K)[None, :],
                other=0.0,
            )
            w = tl.load(
                w_ptr + rn[None, :] * K + rk[:, None],
                mask=(rn < N)[None, :] & (rk < K)[:, None],
                other=0,
            )
            # w + 128 back to w by flipping its top bit: then the widening is the compiler's
            # packed int8 one (a subtraction after an int -> float conversion was ~20 % more
            # instructions a loop, TTFT 6.5 -> 7.4 ms at 1.3B)
            acc = tl.dot(a, (w ^ _INT8_OFFSET).to(tl.int8, bitcast=True).to(a.dtype), acc)
        acc *= tl.load(s_ptr + rn, mask=rn < N, other=0.0)[None, :]
        tl.store(
            c_ptr + rm[:, None] * N + rn[None, :],
            acc.to(c_ptr.dtype.element_ty),
            mask=(rm < M)[:, None] & (rn < N)[None, :],
        )


# The products' x read by PTX loads in the weights' layout (_x_load): 0 tl.load, 1 an element
# a load, 2 eight bf16 a load where x allows (right only where Triton gives a thread runs of 8
# neighbours: bench/gpu/sass_count.py's "x8 apart", a test's). With it, refine_in_step times
# each product's fastest tiles both ways (tl_load_twin); in round 19 (H200) every 1.3B product
# kept its tl.load twin, so 2 adds nothing over 1
X_ASM = 1
# Attention's q, k, v read so (0 or 1): round 19 (H200), ~0.5 us a layer off (int8 1,550 ->
# 1,580 tok/s, bf16 1,146 -> 1,165)
ATTN_X_ASM = 1
# A cap on a tuned product's registers a thread (ptxas's .maxnreg; 0: Triton's choice). With
# X_ASM, Triton 3.6 gives some int8 tiles more registers than without, so fewer programs an SM
# (fc_proj's 8 x 2048 x 8: 1 for 2); at 128 they spill 0-3 stores (bench/gpu/sass_count.py
# --maxnreg), but ptxas also takes more where it took fewer (proj's 8 x 1024 x 8: 80 -> 108).
# Not yet run on a GPU, so 0.
GEMV_MAXNREG = 0
ATTN_CHUNK = 64  # cache slots per attention program
ATTN_WARPS = 2  # warps per attention program (round 11: +2.3 % bf16, +3.9 % int8 over 4)
ATTN_SELECT = 0  # 1: this step's key and value put into attention's tiles (cef9ec7's form)
PDL = {"on": False}  # set by Engine (--pdl / --no-pdl; on by default where it runs)


def pdl_args() -> dict:
    """Launch arguments: each decode kernel lets the next one launch early (it waits in
    gdc_wait for this one's results)."""
    return {"PDL": True, "launch_pdl": True} if PDL["on"] else {"PDL": False}


def pdl_usable(device: torch.device) -> bool:
    return (
        gdc_wait is not None
        and device.type == "cuda"
        and torch.cuda.get_device_capability(device) >= (9, 0)
    )


def triton_usable(device: torch.device) -> bool:
    """Triton decode kernels run here: a CUDA GPU, or Triton's interpreter (TRITON_INTERPRET=1,
    tests on CPU)."""
    if triton is None:
        return False
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


# What a tile this GPU cannot take raises while it is built (before any graph is captured);
# anything else (a CUDA error, a bug) is no reason to try the next tile.
TILE_ERRORS = tuple(
    getattr(importlib.import_module(m), name)
    for m in ("triton.runtime.errors", "triton.compiler.errors")
    for name in ("TritonError", "OutOfResources", "PTXASError", "CompilationError")
    if triton is not None and hasattr(importlib.import_module(m), name)
) or (RuntimeError,)
GEMV_PICKS: dict[tuple, tuple[int, ...]] = {}  # gemv_key -> tile (tune_gemv's choice)
_GEMV_RECORD: dict = {"calls": None}  # tune_gemv: each product's arguments, by gemv_key


def x_asm_for(x: torch.Tensor, k: int, tile: tuple = (), want: int | None = None) -> int:
    """How a kernel reading x in runs of k reads it: `want` (X_ASM if None), but its
    eight-a-load form (2) only where every run starts 16-byte aligned (k % 8 == 0, x aligned).
    A tile's fourth element, where it has one, is its own X_ASM (0: the twin refine_in_step
    tries, x read by tl.load)."""
    want = X_ASM if want is None else want
    return min(tile[3] if len(tile) > 3 else want, 1 if k % 8 or x.data_ptr() % 16 else 2)


def gemv_key(
    N: int, K: int, w, scale, ln, gelu: bool, res, best, x, y, zero, heads, runs: bool
) -> tuple:
    """What a product's fastest tile may depend on: its shape, weight, output and input types,
    the work fused into it, its accumulators, how it reads x (X_ASM), its register cap
    (GEMV_MAXNREG) and PDL."""
    return (N, K, str(w.dtype), scale is not None, ln is not None, gelu, res is not None,
            best is not None, str(y.dtype), PDL["on"], str(x.dtype), zero is not None,
            heads, ln is not None and ln.weight is None, runs, X_ASM, GEMV_MAXNREG)  # fmt: skip


def gemv_tiles(key: tuple) -> tuple:
    return GEMV_TILES["int8" if key[2] == "torch.uint8" else "float"]


def tl_load_twin(tile: tuple) -> tuple:
    """The tile with x read by tl.load (X_ASM 0): with X_ASM, refine_in_step times a
    product's fastest tiles each way in the whole step, so x's PTX loads are kept only in the
    products where the step is faster with them (on Triton 3.6 they cost some tiles
    registers, and so programs an SM: round 19's prep)."""
    return (*tile[:3], 0)


def gemv_candidates(key: tuple) -> tuple:
    """Every tile a product may run with: gemv_tiles', and with X_ASM (the key's) their
    tl.load twins."""
    tiles = gemv_tiles(key)
    return tiles + tuple(map(tl_load_twin, tiles)) if key[15] else tiles  # key[15]: X_ASM


def gemv(
    x, layer: nn.Module, ln: nn.LayerNorm | None = None, gelu=False, res=None, out_dtype=None,
    best=None, zero=None, heads: int = 0, runs: bool = False, sample=None,
):  # fmt: skip
    """Batch-1 x (..., K) @ W.T for an nn.Linear or Int8Linear, with an optional LayerNorm on x
    before it, and GELU or a residual add after it, in one kernel -> (N,). best: an int64 (1,)
    that also gets the argmax's key (the head, _advance_kernel reads it). zero: a tensor the
    kernel also fills with 0 (attention's sums, by qkv). heads: x is decode_attention's sums
    of that many heads, (K + heads,) fp64, and the product takes their output (out_dtype's).
    runs: one accumulator a 16-byte run of weights, not a weight (_gemv_tile's LANE; round 17
    measured it faster for the head and qkv, slower for proj, fc and fc_proj).
    sample: with best, (t, seed, pos) device tensors that make the argmax a draw (_gemv_kernel's
    SAMPLE): the head of every Triton decode step, greedy (t 0) or not.
    Its tile: tune_gemv's pick for this product, else the autotuner's (else a fixed one under
    the interpreter)."""
    w = layer.weight
    scale = getattr(layer, "scale", None)
    N, K = w.shape
    if zero is not None and zero.numel() > N:  # each program clears its rows' share
        raise ValueError(f"gemv: zero has {zero.numel()} elements, more than the {N} outputs")
    given = x
    x, wsum = (x[:K], x[K:]) if heads else (x.reshape(K), None)
    y = torch.empty(N, device=x.device, dtype=out_dtype or x.dtype)
    key = gemv_key(N, K, w, scale, ln, gelu, res, best, x, y, zero, heads, runs)
    calls = _GEMV_RECORD["calls"]
    if calls is not None:
        calls.setdefault(key, []).append(
            (given, layer, ln, gelu, res, out_dtype, best, zero, heads, runs, sample)
        )
    tile = GEMV_PICKS.get(key) or (gemv_tiles(key)[0] if calls is not None else None)
    int8 = w.dtype == torch.uint8
    kernel, fixed = _gemv_kernel, {**pdl_args(), "COMPILED": x.device.type == "cuda"}
    if tile is not None:
        n, k, warps = tile[:3]
        kernel = _gemv_kernel.fn
        fixed = {**fixed, "BLOCK_N": n, "BLOCK_K": k, "MAGIC": int8}
        if x.device.type == "cuda":
            fixed.update(num_warps=warps, num_stages=2)
            if GEMV_MAXNREG:
                fixed.update(maxnreg=GEMV_MAXNREG)
    elif x.device.type != "cuda":  # Triton's interpreter (tests): no autotuning there
        kernel = _gemv_kernel.fn
        fixed = {"BLOCK_N": 16, "BLOCK_K": 64, "MAGIC": False, "PDL": False, "COMPILED": False}
    gain = ln is not None and ln.weight is not None  # int8 folds it into W (fold_gains)
    g = ln.weight if gain else wsum if wsum is not None else x
    kernel[lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)](
        x, w, scale if scale is not None else w, g, res.reshape(N) if res is not None else y, y,
        best if best is not None else y, zero if zero is not None else y,
        *(sample if sample is not None else (y, y, y)), N, K,
        zero.numel() if zero is not None else 0, ln.eps if ln is not None else 0.0,
        HAS_SCALE=scale is not None, LN=ln is not None, GAIN=gain, GELU=gelu, RES=res is not None,
        ARGMAX=best is not None, ZERO=zero is not None, ATTN_HD=K // heads if heads else 0,
        K_LN=triton.next_power_of_2(K) if ln is not None else 1,
        LANE=(16 // w.element_size()).bit_length() - 1 if runs else 0,
        X_ASM=x_asm_for(x, K, tile or ()), SAMPLE=sample is not None, **fixed,
    )  # fmt: skip
    return y


def graph_seconds(step, reps: int, points=None) -> float:
    """Median seconds of one replay of a CUDA graph of step() (run twice first, uncaptured:
    compiles, autotuning). points: calls that each set the state the graph reads (pos); the
    graph is timed reps times after each, and the medians are summed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total = 0.0
    for point in points or [lambda: None]:
        point()
        times = []
        for _ in range(reps):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        total += statistics.median(times)
    return total


def _run_calls(group: list) -> None:
    for call in group:
        gemv(*call)


def tune_gemv(
    step, timer=None, known: dict | None = None, times: dict | None = None
) -> dict[tuple, tuple[int, ...]]:
    """Pick the tile of every product step() makes: step runs once with its products recorded
    (each with its candidates' first tile); then per product, each tile of gemv_tiles runs it
    over every layer's matrix in turn (the step's own order, more bytes than L2 holds), timed
    by timer(fn, key, tile) (graph_seconds: in a CUDA graph, with PDL as the step has it).
    The fastest goes into GEMV_PICKS. known: picks to take as they are (a restart's, from the
    cache). A tile that fails to build (too many registers on this GPU) is skipped. times:
    gets each timed product's [(seconds a call, tile)], fastest first."""
    timer = timer or (lambda fn, key, tile: graph_seconds(fn, 20))
    calls: dict[tuple, list] = {}
    _GEMV_RECORD["calls"] = calls
    try:
        step()
    finally:
        _GEMV_RECORD["calls"] = None
    for key in calls:  # until timed, a product runs with its first candidate (step() below)
        GEMV_PICKS.setdefault(key, gemv_tiles(key)[0])
    for key, group in calls.items():
        tiles, allowed = gemv_tiles(key), gemv_candidates(key)
        if known and known.get(key) in allowed:  # the candidate itself, not the file's copy
            GEMV_PICKS[key] = allowed[allowed.index(known[key])]  # (16.0 == 16, not to Triton)
            continue
        timed = []
        for tile in tiles:
            GEMV_PICKS[key] = tile
            try:
                run = functools.partial(_run_calls, group)
                timed.append((timer(run, key, tile), tile))
            except TILE_ERRORS:  # this GPU cannot build or run it (registers, shared memory)
                continue
        if timed:
            GEMV_PICKS[key] = min(timed)[1]
            if times is not None:
                times[key] = sorted((t / len(group), tile) for t, tile in timed)
        else:
            del GEMV_PICKS[key]
        # Timed alone, a product leaves state no step would (qkv's product clears attention's
        # sums, which proj's then reads as 0 / 0): one real step puts it back, so the next
        # product is timed on what a step gives it.
        step()
    return {key: GEMV_PICKS[key] for key in calls if key in GEMV_PICKS}


STEP_TOP = 4  # refine_in_step: each product's fastest tiles in tune_gemv's graph retimed
STEP_NEAR = 0.03  # and in its second pass, the tiles the first found this close to the best
STEP_REPS = 14  # replays a cache length (three lengths: the 40 one length had, about)


def tune_positions(pos: int, ctx: int) -> list[int]:
    """The cache lengths refine_in_step times the step at: the first decode's and two longer,
    as a decode goes on. One length misleads: at 512 (a chunk's edge) attention took 3.27 us
    a layer, at 662 3.73 (round 26), and two qkv tiles timed within 0.2 % at 512 ran 1.2 %
    apart over a decode from 512 to 812 (round 28)."""
    return sorted({min(ctx - 1, pos + ctx * i // 8) for i in range(3)})


def refine_in_step(
    step,
    times: dict,
    top: int = STEP_TOP,
    timer=None,
    margin: float = 0.003,
    near: float = STEP_NEAR,
) -> dict[tuple, list]:
    """Each product's `top` fastest tiles in tune_gemv's graph (times), timed again as the
    whole step's graph, one product at a time with the others at their picks; a tile replaces
    the pick only if the step is `margin` faster with it. tune_gemv times a product after
    copies of itself; in the step it follows attention or another product, whose end it
    overlaps under PDL, and its tile's fastest there may differ (round 17: a proj tile 12 %
    faster in tune_gemv's graph left the step's rate unchanged). With X_ASM (the key's),
    each of them also with x read by tl.load (tl_load_twin). Then a second pass: each
    product's tiles that were within `near` of its fastest, timed again with every other
    product at its final pick: the first pass decides qkv in a step whose later products
    still run their first, slower tiles (~1,000 us, not ~725; round 27: the second pass
    changed qkv's tile in both cold starts, +0.2 %, ~1 s). -> per product, [(seconds a
    step, tile)] as timed, both passes."""
    timer = timer or (lambda: graph_seconds(step, 40))
    out: dict[tuple, list] = {}

    def retime(key, tiles, best_s: float) -> float:
        pick, tried = GEMV_PICKS[key], out.setdefault(key, [])
        if not tried:
            tried.append((best_s, pick))
        for tile in tiles:
            if tile == pick:
                continue
            GEMV_PICKS[key] = tile
            try:
                tried.append((timer(), tile))
            except TILE_ERRORS:
                continue
            if tried[-1][0] < best_s * (1 - margin):
                best_s, pick = tried[-1]
        GEMV_PICKS[key] = pick
        return best_s

    best_s = timer()
    for key, timed in times.items():
        fastest = [tile for _, tile in timed[:top]]
        twins = [tl_load_twin(t) for t in fastest] if key[15] else []
        best_s = retime(key, fastest + twins, best_s)
    best_s = timer()  # the step as picked: the second pass's bar
    for key, tried in out.items():  # the first pass's times (taken before retime adds to them)
        fastest = min(s for s, _ in tried)
        close = [tile for s, tile in sorted(tried) if s <= fastest * (1 + near)]
        best_s = retime(key, close, best_s)
    return out


ATTN_FORMS = ((0,), (1,))  # ATTN_SELECT's values, as the tile picks keep attention's


def attn_form_key(attn: nn.Module) -> tuple:
    """Attention's entry in the tile picks (its form, ATTN_SELECT): its heads, their width,
    the cache's type, PDL."""
    return ("attention", attn.n_head, attn.head_dim, str(attn.k_cache.dtype), PDL["on"])


def known_attn_form(known: dict, key: tuple) -> int | None:
    """The form a restart's picks (read_tile_picks) hold for attention, as ATTN_FORMS writes
    it (1, not a file's 1.0 or true: Triton would compile those as other constants), or None:
    no entry, or one that is not a form."""
    tile = known.get(key)
    return ATTN_FORMS[ATTN_FORMS.index(tile)][0] if tile in ATTN_FORMS else None


def pick_attn_form(timer, in_step: dict, margin: float = 0.003, near: float = STEP_NEAR) -> list:
    """Attention's other form (ATTN_SELECT flipped), timed in the whole step with qkv's pick
    and each of its tiles that refine_in_step (in_step) found within `near` of its fastest:
    attention follows qkv, whose end it overlaps under PDL, and the pair is what counts (round
    28, restarts: the select form 3.6 % faster after qkv 8 x 1024 x 4 than after 4 x 2048 x 4,
    the form without 1.2 %; the select form 1.8 % ahead on the one, 0.6 % behind on the
    other). The other form with a tile replaces the form and qkv's pick only if the step is
    `margin` faster. -> [(seconds a step, form, qkv's tile)] as timed, the picks' first."""
    global ATTN_SELECT
    qkv = next((k for k in in_step if k[11]), None)  # key[11]: it clears attention's sums
    if qkv is None:
        return []
    first = min(s for s, _ in in_step[qkv])
    close = [tile for s, tile in sorted(in_step[qkv]) if s <= first * (1 + near)]
    best = (timer(), ATTN_SELECT, GEMV_PICKS[qkv])
    tried = [best]
    ATTN_SELECT = 1 - ATTN_SELECT
    # the pick first: in_step may hold only its first-pass time (the second pass times the
    # others beside it), which is far above the rest (round 30: the pick never tried)
    for tile in dict.fromkeys([GEMV_PICKS[qkv], *close]):
        GEMV_PICKS[qkv] = tile
        try:
            tried.append((timer(), ATTN_SELECT, tile))
        except TILE_ERRORS:
            continue
        if tried[-1][0] < best[0] * (1 - margin):
            best = tried[-1]
    _, ATTN_SELECT, GEMV_PICKS[qkv] = best
    return tried


def _tile_times_us(times: dict[tuple, list]) -> list:
    """{key: [(seconds, tile)]} as JSON lists, in us."""
    return [[list(k), [[list(t), round(s * 1e6, 2)] for s, t in v]] for k, v in times.items()]


def agree_tile_picks(picks: dict[tuple, tuple]) -> dict[tuple, tuple]:
    """Tensor parallelism: every rank takes rank 0's tiles (the ranks' shards have the same
    shapes, so the same products). Each rank computes the head whole and takes its own argmax:
    with tiles of its own, a near tie could give ranks different tokens, and they would part."""
    box = [picks]
    dist.broadcast_object_list(box, src=0)
    GEMV_PICKS.update(box[0])
    return box[0]


TILE_PICKS_FILE = "gemv-tiles.json"  # in --compile-cache: tune_gemv's picks for a restart


def tile_picks_stamp(device: torch.device) -> dict:
    """What picks were timed on: another GPU or Triton retunes."""
    return {"gpu": torch.cuda.get_device_name(device), "triton": triton.__version__}


def read_tile_picks(path: Path, stamp: dict) -> dict[tuple, tuple]:
    """The picks a previous start saved under the same stamp, or {} (none, another GPU or
    Triton, or a file that is not what write_tile_picks writes: nothing in it is trusted,
    tune_gemv takes a pick only if it is one of its own candidates)."""
    saved, picks = read_tile_picks_file(path)
    return picks if saved == stamp else {}


def read_tile_picks_file(path: Path) -> tuple[dict | None, dict[tuple, tuple]]:
    """(the stamp, the picks) as write_tile_picks wrote them, or (None, {})."""
    try:
        # no link followed, no wait on a FIFO: a regular file or nothing
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None, {}
            raw = f.read(65537)
        if len(raw) > 65536:  # far more than any model's picks: not ours
            return None, {}
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("stamp"), dict):
            return None, {}
        picks = {}
        for entry in data.get("picks", [])[:1000]:
            key, tile = entry
            picks[tuple(key)] = tuple(tile)
        return data["stamp"], picks
    except (OSError, ValueError, TypeError, RecursionError):  # missing, not JSON, too deep
        return None, {}


def write_tile_picks(path: Path, picks: dict[tuple, tuple], stamp: dict) -> None:
    """Whole or not at all (a temporary file renamed over the old one); a cache that cannot be
    written only costs the next start its tuning."""
    body = json.dumps({"stamp": stamp, "picks": [[list(k), list(t)] for k, t in picks.items()]})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(tmp, flags, 0o644), "w") as f:  # never through a planted link
            f.write(body)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def int32_indexable(*tensors: torch.Tensor) -> bool:
    """The Triton kernels here compute offsets in 32 bits: a tensor they read or write must hold
    fewer than 2**31 elements, or they would reach outside it (larger: torch's kernels run)."""
    return all(t.numel() < 2**31 for t in tensors)


INT8_MM_DTYPES = (torch.bfloat16, torch.float16)  # _int8_mm_kernel's activations


def int8_mm_usable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Int8Linear's Triton product applies: a GPU, 16-bit activations (fp32 would go through
    tf32 on the tensor cores), not inside torch.compile (Inductor fuses the widening), and
    x, the weight and the product within 32-bit offsets."""
    return (
        triton is not None
        and x.is_cuda
        and x.dtype in INT8_MM_DTYPES
        and not torch.compiler.is_compiling()
        and int32_indexable(x, weight)
        and x.numel() // weight.shape[1] * weight.shape[0] < 2**31
    )


def int8_matmul(x, weight, scale):
    """x (..., K) @ weight.T * scale -> (..., N) in x's dtype; weight Int8Linear's (N, K) uint8
    (w + INT8_OFFSET), scale (N,)."""
    N, K = weight.shape
    a = x.reshape(-1, K).contiguous()
    M = a.shape[0]
    c = torch.empty(M, N, device=x.device, dtype=x.dtype)
    bm = 16 if M <= 16 else 64 if M <= 64 else 128  # tensor cores need 16 rows
    launch = {"num_warps": 8 if bm == 128 else 4, "num_stages": 3} if x.is_cuda else {}
    _int8_mm_kernel[(triton.cdiv(M, bm) * triton.cdiv(N, 128),)](
        a, weight, scale, c, M, N, K, BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, **launch
    )
    return c.reshape(*x.shape[:-1], N)


def attention_sums(n_head: int, head_dim: int, device: torch.device) -> torch.Tensor:
    """A layer's decode_attention output as sums: values weighted (n_head * head_dim,), then
    the weights (n_head,), fp64 (_attn_kernel)."""
    return torch.zeros(n_head * (head_dim + 1), device=device, dtype=torch.float64)


def attention_output(sums: torch.Tensor, n_head: int, dtype: torch.dtype) -> torch.Tensor:
    """(C,) attention output from a layer's sums: what the product after it reads (that one
    divides in fp32, _x_chunk)."""
    o, wsum = sums[:-n_head].view(n_head, -1), sums[-n_head:, None]
    return (o / wsum).float().to(dtype).reshape(-1)


def decode_attention(qkv, attn: nn.Module, pos):
    """One decode step's attention for all heads: qkv (3C,) of the token at pos; adds its
    output into attn.sums as sums (cleared before: gemv's zero) and returns them; writes this
    step's key and value into the cache."""
    H, HD = attn.n_head, attn.head_dim
    T = attn.k_cache.shape[2]
    _attn_kernel[(H, triton.cdiv(T, ATTN_CHUNK))](
        qkv, attn.k_cache, attn.v_cache, pos, attn.sums, T, 1.0 / math.sqrt(HD), C=H * HD, HD=HD,
        CHUNK=ATTN_CHUNK, **pdl_args(), **({"num_warps": ATTN_WARPS} if qkv.is_cuda else {}),
        COMPILED=qkv.is_cuda, X_ASM=x_asm_for(qkv, HD, want=ATTN_X_ASM), SELECT=ATTN_SELECT,
    )  # fmt: skip
    return attn.sums


# --- SAMPLING ---
def nucleus(logits, top_k: int, top_p):
    """logits / T (1, V) -> the same with the tokens outside the top_k likeliest (0: off) and
    outside the top-p nucleus at -inf. top_p: a float, a (1,) device tensor (Picker's graph
    reads it there) or None (off)."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs > top_p  # keep the smallest prefix with mass top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


SMALL_VOCAB = 1024  # the largest vocabulary Picker's one-program kernels take whole
# (_pick_kernel, _keep_kernel: their sort grows as V log² V; past it, torch's kernels)


def gumbel(y, seed, pos) -> torch.Tensor:
    """y (1, V) fp32, contiguous, the caller's own: += the Gumbel noise _gemv_kernel's SAMPLE
    draws for the step whose input is at pos - 1 (Philox at the seed), in place: argmax of
    the sum = the head's draw. No sync."""
    N = y.numel()
    _gumbel_kernel[(triton.cdiv(N, 1024),)](y, seed, pos, N, BLOCK=1024)
    return y


class LogitAdjust:
    """OpenAI's logit_bias and presence/frequency penalties, on the device before sampling:
    logits + bias - frequency * count - presence * (count > 0), count being how often each
    token was generated so far in this completion (the prompt's are not counted, as vLLM).
    The engine's buffers, set per request: a graph of Picker.step reads them where they are."""

    def __init__(self, vocab: int, device: torch.device):
        self.bias = torch.zeros(vocab, device=device)
        self.counts = torch.zeros(vocab, device=device)
        self.presence, self.freq = torch.zeros(1, device=device), torch.zeros(1, device=device)
        self.one = torch.ones(1, device=device)

    def set(self, bias: dict, presence: float, freq: float) -> None:
        host = torch.zeros(self.bias.shape[0])
        for token, value in bias.items():
            host[token] = value
        self.bias.copy_(host)
        self.counts.zero_()
        self.presence.fill_(presence)
        self.freq.fill_(freq)

    def __call__(self, logits, penalties: bool = True, fast: bool = False):
        """penalties False: the bias alone (a request without them: fewer kernels a step).
        fast: one Triton kernel (_adjust_kernel) for the penalties' six torch ones."""
        if not penalties:
            return logits + self.bias
        if fast:
            y = torch.empty_like(logits)
            N = y.numel()
            _adjust_kernel[(triton.cdiv(N, 1024),)](
                logits, self.bias, self.counts, self.presence, self.freq, y, N, BLOCK=1024
            )
            return y
        penalty = self.freq * self.counts + self.presence * (self.counts > 0).float()
        return logits + self.bias - penalty

    def count(self, tok) -> None:
        self.counts.index_add_(0, tok.view(1), self.one)


class Logprobs:
    """A generation's log-probabilities (OpenAI's logprobs), kept on the device as the steps
    run: each step's chosen token's and its k likeliest tokens'. They are the model's own
    (log_softmax of the logits, before temperature and top_p, as vLLM reports by default)."""

    def __init__(self, steps: int, k: int, device: torch.device):
        self.chosen = torch.empty(steps, device=device)
        self.values = torch.empty(steps, k, device=device)
        self.ids = torch.empty(steps, k, device=device, dtype=torch.int64)

    def keep(self, at, logits, tok, top: bool = True) -> None:
        """Rows at..at+m-1: logits (m, V) and the tokens they chose, tok (m elements). at: an
        int, or a (1,) device tensor (m 1: Picker's graph reads the row there). top False:
        the chosen tokens' alone (no top-k over the vocabulary). No sync."""
        m = tok.numel()
        if not isinstance(at, torch.Tensor):
            at = torch.arange(at, at + m, device=self.chosen.device)
        lp = logits.float().view(m, -1).log_softmax(dim=-1)
        self.chosen.index_copy_(0, at, lp.gather(1, tok.view(m, 1)).view(m))
        if top and self.ids.shape[1]:
            likeliest = lp.topk(self.ids.shape[1])
            self.values.index_copy_(0, at, likeliest.values)
            self.ids.index_copy_(0, at, likeliest.indices)

    def rows(self, start: int, stop: int, k: int | None = None) -> list:
        """Steps start..stop-1 as (chosen's, [(id, logprob) of the k likeliest, likeliest
        first]) (k: all kept); one sync."""
        return self.as_rows(*self.sources(start, stop, k))

    def sources(self, start: int, stop: int, k: int | None) -> list:
        """The device slices rows start..stop-1 are read from: chosen, ids, values."""
        return [self.chosen[start:stop], self.ids[start:stop, :k], self.values[start:stop, :k]]

    @staticmethod
    def as_rows(chosen, ids, values) -> list:
        chosen, ids, values = chosen.tolist(), ids.tolist(), values.tolist()
        return [
            (c, list(zip(i, v, strict=True))) for c, i, v in zip(chosen, ids, values, strict=True)
        ]


READ_AHEAD = 1  # decode steps queued beyond the token the host reads (streams, stops)


class StepReader:
    """Each step's token (and its logprobs row) copied to the host behind the step, read while
    the next step runs: streaming and stop sequences see every token without the GPU idling
    for a sync each token (a .item() waits for the whole queue, and nothing is queued behind
    it until the host has looked). send(pos) queues the copies of out[pos] and logprobs row
    pos on a stream of their own (stream), behind the step that wrote them: on the decode's
    stream each copy was a gap between two steps' graphs (~10 us a token at 124M, round 36).
    Those entries are written once a request, so a later step cannot race the copy. take()
    returns the oldest sent, waiting for its own copies alone (an event). Engine.generate
    keeps READ_AHEAD + 1 sends untaken at most: a slot each."""

    def __init__(self, out, kept: Logprobs | None, k: int | None, stream=None):
        self.out, self.kept, self.k, self.stream = out, kept, k, stream
        self.slots = []
        for _ in range(READ_AHEAD + 1):
            # pinned: the copies run asynchronously, off the host's path
            pin = stream is not None
            bufs = [torch.empty(t.shape, dtype=t.dtype, pin_memory=pin) for t in self.sources(0)]
            self.slots.append((bufs, torch.cuda.Event() if pin else None))
        self.sent = self.taken = 0

    def sources(self, pos: int) -> list:
        rows = self.kept.sources(pos, pos + 1, self.k) if self.kept is not None else []
        return [self.out[pos : pos + 1], *rows]

    def send(self, pos: int) -> None:
        """Queue the copies of out[pos] and logprobs row pos (the step just launched wrote
        them)."""
        if self.sent - self.taken >= len(self.slots):  # it would overwrite an untaken token
            raise RuntimeError("StepReader: take() the oldest token before another send()")
        bufs, event = self.slots[self.sent % len(self.slots)]
        pairs = zip(bufs, self.sources(pos), strict=True)
        if self.stream is None:  # a CPU: plain copies
            for buf, src in pairs:
                buf.copy_(src)
        else:
            self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
            with torch.cuda.stream(self.stream):
                for buf, src in pairs:
                    buf.copy_(src, non_blocking=True)
                event.record(self.stream)
        self.sent += 1

    def take(self) -> tuple[int, tuple | None]:
        """The oldest sent step's (token, its Logprobs row or None)."""
        bufs, event = self.slots[self.taken % len(self.slots)]
        if event is not None:
            event.synchronize()
        self.taken += 1
        row = Logprobs.as_rows(*bufs[1:])[0] if self.kept is not None else None
        return int(bufs[0].item()), row


PICK_NONE, PICK_ARGMAX, PICK_DRAW = 0, 1, 2
ADJUST_BIAS, ADJUST_PENALTIES = 1, 2
KEEP_CHOSEN, KEEP_TOP = 1, 2


class Plan(NamedTuple):
    """What Picker.step does after a step: the shape of a request's options (a key of the
    step's CUDA graphs; the values themselves are read from the device)."""

    pick: int  # PICK_NONE (the step's own argmax or draw stands), PICK_ARGMAX or PICK_DRAW
    top_k: int  # 0: off
    top_p: bool
    adjust: int  # 0, ADJUST_BIAS (logit_bias alone) or ADJUST_PENALTIES (with penalties)
    keep: int  # logprobs: 0, KEEP_CHOSEN (the chosen token's) or KEEP_TOP (and the likeliest)

    def works(self) -> bool:
        """Anything to do after the step (another token, or logprobs)."""
        return self.pick != PICK_NONE or self.keep != 0


class Picker:
    """What a decode step leaves to do after it, for OpenAI's request options: the token that
    top-k, top-p, logit_bias or penalties choose instead of the step's own, and the logprobs
    kept. In place on the engine's buffers (tok, out[pos], the counts, logprobs row pos),
    its parameters read from the device (temperature, seed and top-p set per request), so
    one CUDA graph of a step and a plan serves every request with that plan (run_decode).
    Its draw is the head's (gumbel, Philox at the seed and position) where the decode is
    Triton, so a seed picks the same tokens either way; elsewhere torch's generator's."""

    def __init__(self, vocab: int, ctx: int, k: int, work: dict, device: torch.device):
        self.inv_t, self.seed = work["inv_t"], work["seed"]  # the head's draw reads them too
        self.top_p = torch.ones(1, device=device)
        self.adjust = LogitAdjust(vocab, device)
        self.kept = Logprobs(ctx + 1, k, device)  # a row a position, as out
        self.gen: torch.Generator | None = None  # torch's draw (no Triton): the request's

    def set(self, temperature: float, seed: int, top_p: float, adjust: dict | None) -> None:
        """A request's parameters (a few copies to the device, once per request)."""
        self.inv_t.fill_(1.0 / temperature if temperature > 0 else 0.0)
        self.seed.fill_(seed)
        self.top_p.fill_(top_p)
        if adjust:
            self.adjust.set(**adjust)
        self.gen = torch.Generator(device=self.inv_t.device).manual_seed(seed)

    def step(self, logits, tok, pos, out, plan: Plan, fast: bool) -> None:
        """logits (1, V) of the token whose position pos now holds (pos advanced past its
        input): tok and out[pos] <- the plan's token, its count, its logprobs row. No sync."""
        pick, top_k, top_p, adjusted, keep = plan
        N = logits.shape[-1]
        small = fast and N <= SMALL_VOCAB  # one program a job (round 35), past it torch's
        if pick != PICK_NONE and small and not top_k:
            a = self.adjust
            _pick_kernel[(1,)](  # one launch for up to twenty below
                logits, a.bias, a.counts, a.presence, a.freq, self.inv_t, self.top_p, self.seed,
                pos, tok, out, N, ADJUST=bool(adjusted), PENALTIES=adjusted == ADJUST_PENALTIES,
                DRAW=pick == PICK_DRAW, TOP_P=bool(top_p),
                BLOCK=max(32, triton.next_power_of_2(N)), num_warps=4,
            )  # fmt: skip
        elif pick != PICK_NONE:
            y = self.adjust(logits, adjusted == ADJUST_PENALTIES, fast) if adjusted else logits
            if pick == PICK_DRAW:
                y = nucleus(y * self.inv_t, top_k, self.top_p if top_p else None)  # a new tensor
                if fast:
                    y = gumbel(y, self.seed, pos)
                else:  # the same race, with torch's noise: -log Exp(1) is Gumbel
                    noise = torch.empty_like(y).exponential_(1.0, generator=self.gen)
                    y = y - noise.log()
            nxt = y.argmax(dim=-1)
            tok.copy_(nxt.view(1, 1))
            out.index_copy_(0, pos, nxt)
            if adjusted:
                self.adjust.count(tok)
        if keep and small:
            k = self.kept
            _keep_kernel[(1,)](  # one launch for log_softmax, gather, top-k and five copies
                logits, tok, pos, k.chosen, k.values, k.ids, N, K=k.ids.shape[1],
                TOP=keep == KEEP_TOP, BLOCK=max(32, triton.next_power_of_2(N)), num_warps=4,
            )  # fmt: skip
        elif keep:
            self.kept.keep(pos, logits, tok, keep == KEEP_TOP)


# --- ENGINE ---
def pick_prefill(asked: str, graph_ok: bool, int8_widens: bool) -> str:
    """--prefill's answer: as asked, or for auto the CUDA graph where the decode is Triton and
    graphs run (graph_ok), else compile. int8 takes the graph too, measured at 1.3B (round 9):
    its products in _int8_mm_kernel, TTFT 6.5 ms vs 4.4 compiled, but ready 42 s cold vs 69 s
    and a restart 6.0 s vs 15.5 s; not when that kernel does not apply (a 32/64-bit model:
    the graph would widen every matrix per prompt, round 7's 8.8 ms path)."""
    if asked != "auto":
        return asked
    return "graph" if graph_ok and not int8_widens else "compile"


class Engine:
    """Owns the model, its KV cache and the compiled / captured steps. Not thread-safe: one
    thread calls generate (the server's worker)."""

    def __init__(self, model: GPT, device: torch.device, cfg: Config, rank: int, world: int):
        self.model, self.device, self.cfg = model, device, cfg
        self.rank, self.world = rank, world
        self.ctx = model.shape.seq_len
        self.graphs = not cfg.eager and device.type == "cuda" and cfg.cudagraphs is not False
        self.tok = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.out = torch.zeros(self.ctx + 1, dtype=torch.long, device=device)
        # StepReader's copies of each token to the host, beside the decode's stream
        self.copies = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.prefill_fn, self.decode_fn = prefill_step, decode_step
        # Triton decode kernels: asked for, or on a GPU unless --eager (the plain torch path)
        attn = model.blocks[0].attn
        pow2 = attn.head_dim & (attn.head_dim - 1) == 0
        caches = [t for b in model.blocks for t in (b.attn.k_cache, b.attn.v_cache)]
        small = int32_indexable(*model.parameters(), *model.buffers(), *caches)
        missing = next(
            (
                why
                for ok, why in (
                    (triton_usable(device), "Triton + a GPU"),
                    (pow2, "a head size that is a power of 2"),
                    (small, "tensors of fewer than 2**31 elements (its kernels index in 32 bits)"),
                )
                if not ok
            ),
            None,
        )
        fast = cfg.decode_kernels == "triton" or (
            cfg.decode_kernels == "auto" and not cfg.eager and missing is None
        )
        if cfg.decode_kernels == "triton" and missing:
            raise ValueError(f"--decode-kernels triton needs {missing}: use --decode-kernels torch")
        self.fast = fast
        if cfg.pdl and not (fast and pdl_usable(device)):
            raise ValueError("--pdl needs the Triton decode kernels on a Hopper or newer GPU")
        # measured on H200 (round 7, same call): +17 % decode at 1.3B, +11 % at 124M; int8 +9 %
        PDL["on"] = (fast and pdl_usable(device)) if cfg.pdl is None else cfg.pdl
        # The prompt pass: torch.compile (Inductor fuses its elementwise work; a compile per
        # prompt bucket, tens of seconds cold), or its torch kernels as they are, captured in a
        # CUDA graph (cuBLAS and flash attention do the work; nothing to compile). auto: the
        # graph when the decode step is Triton, so nothing in the process compiles through torch.
        if cfg.prefill == "graph" and not self.graphs:
            raise ValueError("--prefill graph captures a CUDA graph: it needs a GPU, no --eager")
        dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
        widens = cfg.quant == "int8" and dtype not in INT8_MM_DTYPES
        prefill = pick_prefill(cfg.prefill, fast and self.graphs, widens)
        self.prefill_mode = "eager" if cfg.eager else prefill
        compile_prefill = not cfg.eager and prefill == "compile"
        compile_decode = not cfg.eager and not fast
        if compile_prefill or compile_decode:
            cache = importlib.import_module("torch._dynamo.config")
            for name in ("recompile_limit", "cache_size_limit"):  # one graph per bucket
                if hasattr(cache, name):
                    setattr(cache, name, 64)
            if cfg.tune and device.type == "cuda":
                # Inductor then writes each batch-1 matmul as a reduction it tunes (its own
                # comment: matrix-vector products reach peak bandwidth only with this; gpt-fast
                # turns it on). Measured at 1.3B on H200: +14-18 % decode over cuBLAS's kernels,
                # but 2-3+ minutes of warm-up on a cold cache, and again for each new cache
                # bucket a server meets mid-flight: opt-in, not the default.
                importlib.import_module("torch._inductor.config").coordinate_descent_tuning = True
        # Separate compiles: prefill is matrix-bound (one per prompt bucket), decode is
        # bandwidth-bound (one per cache bucket S); static shapes so each can be captured.
        if compile_prefill:
            self.prefill_fn = torch.compile(prefill_step, dynamic=False, fullgraph=True)
        if compile_decode:
            for b in model.blocks:
                b.attn.reduce_linear = cfg.decode_linear == "reduce"
            self.decode_fn = torch.compile(decode_step, dynamic=False, fullgraph=True)
        if fast:  # not compiled: the Triton kernels are the step; captured in one graph
            self.decode_fn = decode_step_fast
        self.prefill_graphs: dict[int, tuple] = {}
        self.decode_graphs: dict[int | tuple, tuple] = {}
        vocab = model.shape.vocab_size
        top = min(max(MAX_LOGPROBS.values()), vocab)  # topk's k: at most the vocabulary
        self.picker = Picker(vocab, self.ctx, top, model.work, device)
        self.tuned = not (fast and self.graphs and device.type == "cuda")
        self.tiles: dict | None = None  # tune's picks and time

    def tune(self) -> None:
        """Once, before the decode step is captured: each product's tile, timed in a CUDA graph
        over the model's layers (tune_gemv), then in the whole step (refine_in_step), and
        attention's form (pick_attn_form). With --compile-cache the picks are kept there, so
        a restart times nothing."""
        cache = self.cfg.compile_cache
        path = Path(cache).resolve() / TILE_PICKS_FILE if cache else None
        stamp = tile_picks_stamp(self.device)
        known = read_tile_picks(path, stamp) if path else {}
        if self.world > 1:  # rank 0's file for all: every rank then times the same products,
            # and each timing ends in a step, with its all-reduces (a file read between two
            # ranks' reads could otherwise leave them waiting on each other)
            box = [known]
            dist.broadcast_object_list(box, src=0)
            known = box[0]
        global ATTN_SELECT
        akey = attn_form_key(self.model.blocks[0].attn)
        saved = known_attn_form(known, akey) if self.world == 1 else None
        if saved is not None:  # the form the picks were timed with
            ATTN_SELECT = saved
        t0 = time.perf_counter()
        times: dict = {}
        step = functools.partial(self.model.decode_fast, self.tok, self.pos)
        picks = tune_gemv(step, known=known, times=times)
        in_step, forms = {}, []
        if self.world > 1:  # every rank the default form: no file's, no timing of its own
            picks = agree_tile_picks(picks)
        elif times:  # products timed this start (a restart's picks come from the file)
            first = int(self.pos.item())
            points = [functools.partial(self.pos.fill_, p) for p in tune_positions(first, self.ctx)]

            def timer() -> float:
                return graph_seconds(step, STEP_REPS, points)

            in_step = refine_in_step(step, times, timer=timer)
            forms = pick_attn_form(timer, in_step)
            self.pos.fill_(first)  # the cache slots the step wrote past it: rewritten before read
            picks = {k: GEMV_PICKS[k] for k in picks}
        if self.world == 1:
            picks[akey] = (ATTN_SELECT,)
        self.model.work["best"].fill_(LOWEST_KEY)  # the timed heads' argmax keys
        self.tuned = True
        self.tiles = {  # for the benchmark's RESULT line
            "seconds": time.perf_counter() - t0,
            "from_cache": sum(known.get(k) == t for k, t in picks.items()),
            "picks": [[list(k), list(t)] for k, t in picks.items()],
            # each candidate's time in the graph, us a call (the products tuned this start)
            "us": _tile_times_us(times),
            # the step's time with each product's few fastest there (refine_in_step), us
            "step_us": _tile_times_us(in_step),
            # the step's time with each form of attention and qkv tile (pick_attn_form), us
            "form_us": [[f, list(t), round(s * 1e6, 2)] for s, f, t in forms],
        }
        if path and self.rank == 0 and any(known.get(k) != t for k, t in picks.items()):
            write_tile_picks(path, {**known, **picks}, stamp)  # other models' picks stay

    def prefill_bucket(self, n: int) -> int:
        return min(self.ctx, max(16, 1 << (n - 1).bit_length()))

    def decode_bucket(self, n: int) -> int:
        b = self.cfg.cache_bucket
        return min(self.ctx, -(-n // b) * b)

    def _capture(self, fn, reset=None):
        """Warm up (compiles, cuBLAS handles) on a side stream, then capture one replayable
        graph; returns (graph, its static output). reset() undoes a warm-up run's effects."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
                if reset:
                    reset()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = fn()
        return graph, static_out

    def run_prefill(self, ids: list[int]):
        P = len(ids)
        Pb = self.prefill_bucket(P)
        host = torch.zeros(1, Pb, dtype=torch.long)
        host[0, :P] = torch.tensor(ids, dtype=torch.long)
        last = torch.tensor([P - 1], dtype=torch.long)
        if not self.graphs:
            return self.prefill_fn(self.model, host.to(self.device), last.to(self.device))
        if Pb not in self.prefill_graphs:
            idx = host.to(self.device)
            lastd = last.to(self.device)
            graph, out = self._capture(lambda: self.prefill_fn(self.model, idx, lastd))
            self.prefill_graphs[Pb] = (graph, out, idx, lastd)
        graph, out, idx, lastd = self.prefill_graphs[Pb]
        idx.copy_(host, non_blocking=True)
        lastd.copy_(last, non_blocking=True)
        graph.replay()
        return out

    def run_decode(self, S: int, draw: bool = False, plan: Plan | None = None):
        """One decode step (tok, pos, out advanced), then Picker.step's plan where it has work
        (another token, logprobs): in the step's CUDA graph where the decode is Triton (a
        graph a plan, captured on its first request: a few ms), else eagerly after it."""
        if self.fast:  # one graph for every length (the kernels read it from pos), one more
            S = DRAW if draw else 0  # for a step that draws its token (generate's drawn)
        after = plan is not None and plan.works()
        inside = after and self.fast  # its draw reads everything from the device
        picker = self.picker

        def step():
            logits = self.decode_fn(self.model, self.tok, self.pos, self.out, S)
            if inside:
                picker.step(logits, self.tok, self.pos, self.out, plan, True)
            return logits

        if not self.graphs:
            logits = step()
        else:
            if not self.tuned:
                self.tune()
            key = (S, plan) if inside else S
            if key not in self.decode_graphs:
                # Warm-up runs the step for real: put back what it moved on (the cache, out and
                # logprobs rows it wrote are written again by the replay, harmless)
                state = (self.tok, self.pos, picker.adjust.counts)
                saved = [t.clone() for t in state]

                def reset() -> None:
                    for t, v in zip(state, saved, strict=True):
                        t.copy_(v)

                self.decode_graphs[key] = self._capture(step, reset)
            graph, logits = self.decode_graphs[key]
            graph.replay()
        if after and not inside:
            picker.step(logits, self.tok, self.pos, self.out, plan, self.fast)
        return logits

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.no_grad()
    def score(self, ids: list[int], k: int) -> list:
        """The prompt's own log-probabilities (OpenAI's echo): token i's from the logits at
        i - 1 of one full forward pass (eager: a request's, not a step's); token 0 has none.
        -> [None, Logprobs rows of tokens 1..]. Fills the cache slots the prefill refills."""
        idx = torch.tensor([ids], device=self.device)
        kept = Logprobs(len(ids) - 1, k, self.device)
        if len(ids) > 1:
            kept.keep(0, self.model.logits(idx[:, :-1]), idx[0, 1:])
        return [None, *kept.rows(0, len(ids) - 1)]

    @torch.no_grad()
    def generate(
        self,
        ids: list[int],
        max_new: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        on_token=None,
        cancelled=None,
        logprobs: int | None = None,
        adjust: dict | None = None,
    ) -> dict:
        """Prompt ids -> {"tokens", "ttft_s", "decode_s"}. on_token(id, row) is called per
        token, while the next token's step runs (StepReader), row its Logprobs row or None;
        returning True from it stops early (the step computed past it is dropped).
        cancelled() is asked every step, without a sync: True stops early too. logprobs: keep
        each token's log-probability and its k likeliest tokens' ("logprobs" in the result:
        Logprobs.rows). adjust: LogitAdjust's bias, presence and freq (greedy then takes the
        adjusted argmax, not the step's own)."""
        P = len(ids)
        if P < 1 or P + max_new > self.ctx:
            raise ValueError(f"prompt {P} + new tokens {max_new} must fit the context {self.ctx}")
        picker = self.picker
        kept = picker.kept if logprobs is not None else None
        if kept and logprobs > kept.ids.shape[1]:
            raise ValueError(f"logprobs {logprobs}: at most {kept.ids.shape[1]}")
        greedy = temperature <= 0 or top_k == 1
        top_k = 0 if greedy or not 0 < top_k < self.model.shape.vocab_size else top_k
        top_p_on = not greedy and top_p < 1
        picker.set(temperature, seed, top_p, adjust)
        # Temperature alone (OpenAI's default request): the Triton step draws the token itself
        # (_gemv_kernel's SAMPLE, a graph of its own); top-k, top-p, bias and penalties pick
        # another after it (Picker.step, in the step's graph), as they pick the first token
        drawn = self.fast and not greedy and not adjust and not (top_k or top_p_on)
        adjusted = 0
        if adjust:
            penalties = adjust["presence"] or adjust["freq"]
            adjusted = ADJUST_PENALTIES if penalties else ADJUST_BIAS
        keep = 0 if kept is None else KEEP_TOP if logprobs else KEEP_CHOSEN
        first = Plan(PICK_ARGMAX if greedy else PICK_DRAW, top_k, top_p_on, adjusted, keep)
        plan = first._replace(pick=PICK_NONE) if drawn or (greedy and not adjust) else first

        # on_token sees token i while steps i + 1 .. i + READ_AHEAD run (computed past a stop)
        reader = StepReader(self.out, kept, logprobs, self.copies) if on_token else None

        def told() -> bool:  # on_token of the oldest token not yet told
            return on_token(*reader.take())

        self.sync()
        t0 = time.perf_counter()
        logits = self.run_prefill(ids)
        self.pos.fill_(P)  # the first token's position: Picker.step writes out[P] and tok
        picker.step(logits, self.tok, self.pos, self.out, first, self.fast)
        self.tok.item()  # the sync that ends time-to-first-token
        ttft = time.perf_counter() - t0
        stop = False
        if reader:
            reader.send(P)
            stop = told()
        t1 = time.perf_counter()
        n = said = 1  # tokens generated, tokens on_token saw
        while n < max_new and not stop and not (cancelled and cancelled()):
            pos = P + n - 1  # the input token's position
            self.run_decode(self.decode_bucket(pos + 1), drawn, plan)
            if reader:
                reader.send(pos + 1)  # token n and its logprobs row, at position P + n
            n += 1
            if reader and n - said > READ_AHEAD:  # the oldest's step is done; the rest run on
                stop, said = told(), said + 1
        while reader and not stop and said < n:  # the last ones (or a client gone)
            stop, said = told(), said + 1
        if reader:
            n = said  # a token computed past the stop is not the request's
        tokens = self.out[P : P + n].tolist()  # syncs
        result = {"tokens": tokens, "ttft_s": ttft, "decode_s": time.perf_counter() - t1}
        if kept:
            result["logprobs"] = kept.rows(P, P + n, logprobs)
        return result


# --- BENCHMARK / ONE-SHOT GENERATION ---
@torch.no_grad()
def eval_loss(model: GPT, cfg: Config, device: torch.device) -> tuple[float, int]:
    """Mean next-byte cross-entropy of the model on --eval-data: up to --eval-windows windows
    of the context length, from the start of the file (hold it out of training yourself)."""
    data = Path(cfg.eval_data).read_bytes()
    T, V = model.shape.seq_len, model.shape.vocab_size
    n = min(cfg.eval_windows, (len(data) - 1) // T)
    if n < 1:
        fail(f"--eval-data {cfg.eval_data}: shorter than the context ({T} + 1 bytes)")
    if V < 256 and max(data) >= V:
        fail(f"--eval-data {cfg.eval_data}: bytes >= the vocabulary size {V}")
    ids = torch.frombuffer(bytearray(data[: n * T + 1]), dtype=torch.uint8).long().to(device)
    total = 0.0
    for i in range(n):
        window = ids[i * T : i * T + T + 1]
        logits = model.logits(window[None, :-1])
        total += F.cross_entropy(logits.view(T, V), window[1:], reduction="sum").item()
    return total / (n * T), n * T


def to_text(tokens: list[int], byte_level: bool | None) -> str | None:
    """Tokens as text when they are bytes (None: not known, then when all of them are)."""
    if byte_level is False or (byte_level is None and any(t > 255 for t in tokens)):
        return None  # token ids of another vocabulary: printed as numbers
    return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")


def run_benchmark(engine: Engine, cfg: Config, prompt: list[int], master: bool) -> dict:
    model, s = engine.model, engine.model.shape
    kwargs = dict(temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p, seed=cfg.seed)
    sample = cfg.prompt is not None  # a user's sample, not a benchmark: generate it once
    repeat = cfg.repeat if cfg.repeat is not None else (1 if sample else 3)
    warm = not (sample and cfg.eager)  # eager has nothing to compile or capture first
    t = time.perf_counter()
    if warm:
        engine.generate(prompt, cfg.max_new_tokens, **kwargs)  # compiles, captures graphs
    warmup_s = time.perf_counter() - t if warm else 0.0
    ready_s = time.time() - STARTED
    cuda_at, weights_at = MARKS.get("cuda", STARTED), MARKS.get("weights", STARTED)
    startup = {  # where the time to be ready went, in order
        "imports_s": IMPORTS_S,
        "cuda_s": cuda_at - STARTED,  # CUDA context, process group
        "weights_s": weights_at - cuda_at,  # checkpoint or random weights, quantizing, cache
        "engine_s": ready_s - warmup_s - (weights_at - STARTED),  # and the prompt
        "warmup_s": warmup_s,  # the first generation: kernels loaded or compiled, graphs
    }
    runs = [engine.generate(prompt, cfg.max_new_tokens, **kwargs) for _ in range(repeat)]
    runs.sort(key=lambda r: r["decode_s"])
    mid = runs[len(runs) // 2]  # the median run
    ttft = sorted(r["ttft_s"] for r in runs)[len(runs) // 2]
    steps = len(mid["tokens"]) - 1
    tps = steps / mid["decode_s"] if steps else None
    wbytes = weight_bytes_per_token(model)
    peak, gpu = peak_bandwidth(engine.device, cfg.peak_bw)
    bw = wbytes * tps if tps else None
    mbu = bw / peak if bw and peak else None
    # KV bytes a decode step also reads: 2 (k, v) x layers x S slots x local width, mean over S
    width = model.blocks[0].attn.n_head * model.blocks[0].attn.head_dim
    elt = model.blocks[0].attn.k_cache.element_size()
    slots = [engine.decode_bucket(len(prompt) + i + 1) for i in range(steps)] or [0]
    kv_bytes = 2 * s.n_layer * width * elt * sum(slots) / len(slots)
    if cfg.profile:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if engine.device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            engine.generate(prompt, cfg.max_new_tokens, **kwargs)
        if master:
            key = (
                "self_device_time_total" if engine.device.type == "cuda" else "self_cpu_time_total"
            )
            print("PROFILE one generation (prefill + decode)", flush=True)
            print(prof.key_averages().table(sort_by=key, row_limit=20), flush=True)
    mode = "eager" if cfg.eager else ("compiled+cudagraphs" if engine.graphs else "compiled")
    steps_how = {"prefill": engine.prefill_mode, "decode": "triton" if engine.fast else mode}
    result = {
        "mode": mode,
        "device": gpu,
        "world_size": engine.world,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "params": full_params(s),
        "n_layer": s.n_layer,
        "d_model": s.d_model,
        "context": s.seq_len,
        "prompt_tokens": len(prompt),
        "new_tokens": len(mid["tokens"]),
        "ttft_ms": ttft * 1e3,
        "decode_tokens_per_s": tps,
        "weight_bytes_per_token": wbytes,
        "kv_bytes_per_token": kv_bytes,
        "bandwidth_gb_s": bw / 1e9 if bw else None,
        "peak_bw_tb_s": peak / 1e12 if peak else None,
        "mbu": mbu,
        "warmup_s": warmup_s,
        "ready_s": ready_s,
        "startup": startup,
        **steps_how,
        "gemv_tiles": engine.tiles,
        "generations": repeat + warm,
        "tokens": mid["tokens"],
        "text": to_text(mid["tokens"], {"bytes": True, "ids": False}.get(cfg.vocab)),
    }
    if master:
        print(f"prefill {len(prompt)} tokens: TTFT {ttft * 1e3:.2f} ms", flush=True)
        frac = f" = {mbu:.1%} of peak ({gpu})" if mbu is not None else ""
        rate = f"{tps:.1f}" if tps else "n/a"
        gbs = f"{bw / 1e9:.1f} GB/s" if bw else "n/a"
        print(
            f"decode {steps} tokens: {rate} tokens/s, weights {wbytes / 1e9:.3f} GB/token, "
            f"{gbs}{frac} [{mode}, warm-up {warmup_s:.1f} s, ready {ready_s:.1f} s"
            f"{since_start(ready_s)}]",
            flush=True,
        )
        if result["text"] is not None:
            print("---\n" + result["text"] + "\n---", flush=True)
    return result


# --- SERVING ---
# POST /generate (this template's own JSON), POST /v1/completions and /v1/chat/completions (the
# OpenAI API, so the `openai` client and tools built on it work), GET /v1/models, /health and
# /metrics (Prometheus text). The main thread is the one worker that touches the model; handler
# threads (one per connection) parse, admit into a bounded queue and write the answers.
POST_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")
GET_PATHS = ("/health", "/v1/models", "/metrics")
LINGER_S, LINGER_BYTES = 2.0, 1 << 20  # closing: what a client still sends is read, this much


def connection_cap(max_queue: int) -> int:
    """Connections served at once; more get an immediate 503. Each is a thread and a file: a
    flood of idle ones must not exhaust the process's files (then accept() fails in a loop)."""
    return max(64, 8 * max_queue)


class BadRequest(Exception):
    """A request answered with an error status; param and code fill OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.status, self.param, self.code, self.headers = status, param, code, headers


def read_json(body: bytes) -> dict:
    """A request body -> its JSON object; BadRequest(400) for anything else."""

    def no_constants(name: str):
        raise BadRequest(400, f"{name} is not JSON")

    try:
        data = json.loads(body, parse_constant=no_constants)
    except RecursionError:  # [[[[... 30,000 deep: the parser's recursion, not a crash
        raise BadRequest(400, "malformed JSON: nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise BadRequest(400, f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "the body must be a JSON object")
    return data


def encode_text(text: str, name: str) -> bytes:
    """Text -> its UTF-8 bytes (the tokens); JSON can carry a lone surrogate, which has none."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(400, f"{name} is not valid Unicode (a lone surrogate)", name) from None


FIELDS = {  # /generate: name: (types, default); bool is refused where a number is meant
    "prompt": ((str,), None),
    "max_new_tokens": ((int,), 64),
    "temperature": ((int, float), 0.8),
    "top_k": ((int,), 200),
    "top_p": ((int, float), 1.0),
    "seed": ((int, type(None)), None),
    "stream": ((bool,), False),
}


def type_error(name: str, value, types: tuple) -> BadRequest | None:
    wrong = not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
    if not wrong:
        return None
    kinds = "/".join("null" if t is type(None) else t.__name__ for t in types)
    return BadRequest(400, f"{name} must be {kinds}, got {type(value).__name__}", name)


def parse_request(body: bytes, ctx: int) -> dict:
    """A /generate body -> a checked job spec; BadRequest(4xx) otherwise."""
    data = read_json(body)
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise BadRequest(400, f"unknown field(s): {', '.join(unknown)}")
    spec = {}
    for name, (types, default) in FIELDS.items():
        value = data.get(name, default)
        if err := type_error(name, value, types):
            raise err
        spec[name] = value
    ids = list(encode_text(spec.pop("prompt"), "prompt"))
    if not ids:
        raise BadRequest(400, "prompt must not be empty")
    n = spec["max_new_tokens"]
    if n < 1:
        raise BadRequest(400, "max_new_tokens must be >= 1")
    if len(ids) + n > ctx:
        raise BadRequest(
            413, f"prompt ({len(ids)} bytes) + max_new_tokens ({n}) exceeds the context ({ctx})"
        )
    if not 0 <= spec["temperature"] <= 100:
        raise BadRequest(400, "temperature must be in [0, 100]")
    if spec["top_k"] < 0:
        raise BadRequest(400, "top_k must be >= 0")
    if not 0 < spec["top_p"] <= 1:
        raise BadRequest(400, "top_p must be in (0, 1]")
    spec["seed"] = check_seed(spec["seed"])
    return {**spec, "ids": ids, "stop": []}


def check_seed(seed: int | None) -> int:
    if seed is None:
        return random.randrange(2**62)
    if not -(2**63) <= seed < 2**64:  # OpenAI's and vLLM's: any 64-bit integer
        raise BadRequest(400, "seed must be a 64-bit integer", "seed")
    return seed % 2**63


# The chat template. A byte-level model has no special tokens, so a conversation is plain text:
# each message as "ROLE: CONTENT\n" (system, user or assistant; OpenAI's "developer" is written
# as system), then "assistant: ", which the model continues. Its reply ends at the next turn:
# CHAT_STOPS are stop sequences of every chat request, besides the request's own.
CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
CHAT_STOPS = [b"\nuser:", b"\nsystem:", b"\nassistant:"]


def render_chat(messages) -> str:
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, "messages must be a non-empty list", "messages")
    turns = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise BadRequest(400, f"{where} must be an object", "messages")
        role, content = message.get("role"), message.get("content")
        if role not in CHAT_ROLES:
            raise BadRequest(
                400, f"{where}.role must be one of {', '.join(CHAT_ROLES)}", "messages"
            )
        if isinstance(content, list):  # content parts: text only
            texts = [
                p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"
            ]
            if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
                raise BadRequest(400, f"{where}.content: only text parts are supported", "messages")
            content = "".join(texts)
        if not isinstance(content, str):
            raise BadRequest(400, f"{where}.content must be a string", "messages")
        turns.append(f"{CHAT_ROLES[role]}: {content}\n")
    return "".join(turns) + "assistant: "


# OpenAI request fields: name -> types. None (JSON null) means the default for every field.
OPENAI_FIELDS = {
    "model": (str,),
    "max_tokens": (int,),
    "temperature": (int, float),
    "top_p": (int, float),
    "stop": (str, list),
    "n": (int,),
    "stream": (bool,),
    "stream_options": (dict,),
    "seed": (int,),
    "user": (str,),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "logit_bias": (dict,),
}
OPENAI_COMPLETION = {
    "prompt": (str, list),
    "echo": (bool,),
    "best_of": (int,),
    "suffix": (str,),
    "logprobs": (int,),  # how many likeliest tokens beside each chosen one
}
OPENAI_CHAT = {
    "messages": (list,),
    "max_completion_tokens": (int,),
    "logprobs": (bool,),
    "top_logprobs": (int,),
}
MAX_CHOICES = 16  # OpenAI's n: choices generated one after another (batch 1), each a request's time
MAX_LOGPROBS = {"logprobs": 5, "top_logprobs": 20}  # OpenAI's bounds: completions, chat
# Fields this server accepts only at the value that asks for nothing it lacks.
OPENAI_NO_OP = {
    "best_of": (1,),
    "suffix": ("",),
}


def parse_openai(body: bytes, path: str, ctx: int, model_name: str, vocab: int = 256) -> dict:
    """A /v1/completions or /v1/chat/completions body -> a checked job spec."""
    data = read_json(body)
    chat = path == "/v1/chat/completions"
    fields = {**OPENAI_FIELDS, **(OPENAI_CHAT if chat else OPENAI_COMPLETION)}
    for name in data:
        if name not in fields:
            raise BadRequest(400, f"Unrecognized request argument supplied: {name}", name)
    get = {}
    for name, types in fields.items():
        value = data.get(name)
        if value is not None and (err := type_error(name, value, types)):
            raise err
        get[name] = value
    if get["model"] is not None and get["model"] != model_name:
        raise BadRequest(
            404,
            f"The model `{get['model']}` does not exist: this server has `{model_name}`",
            "model",
            "model_not_found",
        )
    for name, allowed in OPENAI_NO_OP.items():
        if name in get and get[name] is not None and get[name] not in allowed:
            only = " or ".join(json.dumps(a) for a in allowed)
            raise BadRequest(400, f"{name}: only {only} is supported by this server", name)
    if chat:
        prompt, where = render_chat(get["messages"]), "messages"
    else:
        prompt, where = get["prompt"], "prompt"
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # the API's batch form: one prompt only
        if prompt is None:
            raise BadRequest(400, "prompt is required", "prompt")
    ids = (
        token_prompt(prompt, vocab)
        if isinstance(prompt, list)
        else list(encode_text(prompt, where))
    )
    if not ids:
        raise BadRequest(400, "prompt must not be empty", "prompt")
    stop = get["stop"]
    stop = [stop] if isinstance(stop, str) else stop or []
    if len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest(400, "stop must be a non-empty string or a list of up to 4", "stop")
    stops = [encode_text(s, "stop") for s in stop] + (CHAT_STOPS if chat else [])
    room = ctx - len(ids)
    limit = (
        "max_completion_tokens" if get.get("max_completion_tokens") is not None else "max_tokens"
    )
    max_new = get.get(limit)
    echo = bool(get.get("echo"))
    if max_new is not None and max_new < (0 if echo else 1):  # echo's 0: score the prompt alone
        raise BadRequest(400, f"{limit} must be >= 1 (0 only with echo)", limit)
    if max_new is None:  # OpenAI's defaults: 16 for a completion, the rest of the context for chat
        max_new = max(1, room if chat else min(16, room))
    if len(ids) + max_new > ctx:
        raise BadRequest(
            400,
            f"This model's maximum context length is {ctx} tokens; the request needs "
            f"{len(ids) + max_new} ({len(ids)} in the {where}, {max_new} for the completion): "
            f"shorten it or lower {limit}",
            where,
            "context_length_exceeded",
        )
    temperature = 1.0 if get["temperature"] is None else get["temperature"]
    if not 0 <= temperature <= 2:
        raise BadRequest(400, "temperature must be in [0, 2]", "temperature")
    top_p = 1.0 if get["top_p"] is None else get["top_p"]
    if not 0 <= top_p <= 1:
        raise BadRequest(400, "top_p must be in [0, 1]", "top_p")
    if top_p == 0:  # only the likeliest token is left: greedy
        temperature, top_p = 0.0, 1.0
    n = 1 if get["n"] is None else get["n"]
    if not 1 <= n <= MAX_CHOICES:
        raise BadRequest(400, f"n must be in [1, {MAX_CHOICES}]", "n")
    stream = bool(get["stream"])
    options = get["stream_options"] or {}
    if options and not stream:
        raise BadRequest(400, "stream_options needs stream: true", "stream_options")
    if set(options) - {"include_usage"} or not isinstance(
        options.get("include_usage", False), bool
    ):
        raise BadRequest(400, "stream_options: only include_usage (bool)", "stream_options")
    return {
        "logprobs": parse_logprobs(get, chat, vocab),
        "adjust": parse_adjust(get, vocab),
        "ids": ids,
        "max_new_tokens": max_new,
        "temperature": temperature,
        "top_k": 0,  # not in the API: sampling is temperature and top_p alone
        "top_p": top_p,
        "seed": check_seed(get["seed"]),
        "stream": stream,
        "stop": stops,
        "chat": chat,
        "include_usage": options.get("include_usage", False),
        "n": n,
        "echo": echo,
    }


def token_prompt(prompt: list, vocab: int) -> list[int]:
    """A prompt given as token ids (the API's array of tokens; a byte-level model's are bytes)."""
    if not all(type(t) is int and 0 <= t < vocab for t in prompt):
        raise BadRequest(
            400,
            f"prompt must be a string, or token ids (0 to {vocab - 1}), or a list of one of them",
            "prompt",
        )
    return prompt


MAX_BIASED = 1024  # logit_bias entries: a bound on what a request makes the server build


def parse_adjust(get: dict, vocab: int) -> dict | None:
    """logit_bias ({"token id": -100..100}) and presence/frequency penalties (-2..2), as
    Engine.generate's adjust; None when they ask for nothing."""
    penalties = {}
    for name in ("presence_penalty", "frequency_penalty"):
        value = get[name] or 0
        if not -2 <= value <= 2:
            raise BadRequest(400, f"{name} must be in [-2, 2]", name)
        penalties[name] = float(value)
    bias = {}
    for key, value in (get["logit_bias"] or {}).items():
        if len(bias) == MAX_BIASED:
            raise BadRequest(400, f"logit_bias: at most {MAX_BIASED} tokens", "logit_bias")
        token = int(key) if key.isascii() and key.isdigit() and len(key) < 10 else -1
        if not 0 <= token < vocab:
            raise BadRequest(
                400, f"logit_bias: {key[:20]!r} is not a token id (0 to {vocab - 1})", "logit_bias"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > 100:
            raise BadRequest(
                400, f"logit_bias[{key}] must be a number in [-100, 100]", "logit_bias"
            )
        bias[token] = float(value)
    if not bias and not any(penalties.values()):
        return None
    freq, presence = penalties["frequency_penalty"], penalties["presence_penalty"]
    return {"bias": bias, "presence": presence, "freq": freq}


def parse_logprobs(get: dict, chat: bool, vocab: int = 256) -> int | None:
    """How many likeliest tokens to report beside each chosen token's log-probability; None:
    no logprobs. Completions ask with logprobs: k; chat with logprobs: true, top_logprobs: k.
    At most OpenAI's bound, and the vocabulary (a model of fewer words has no more)."""
    name = "top_logprobs" if chat else "logprobs"
    k = get[name]
    most = min(MAX_LOGPROBS[name], vocab)
    if k is not None and not 0 <= k <= most:
        raise BadRequest(400, f"{name} must be in [0, {most}]", name)
    if not chat:
        return k
    if k is not None and not get["logprobs"]:  # as OpenAI answers it
        raise BadRequest(400, "top_logprobs needs logprobs: true", "top_logprobs")
    return (k or 0) if get["logprobs"] else None


def kmp_failure(s: bytes) -> list[int]:
    """For each i, the length of the longest proper prefix of s[: i + 1] that is also its
    suffix (Knuth-Morris-Pratt's table: where a partial match of s falls back to)."""
    fail, k = [0] * len(s), 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = fail[k - 1]
        if s[i] == s[k]:
            k += 1
        fail[i] = k
    return fail


class StreamText:
    """A completion's text: token bytes decoded as UTF-8 as they come, holding back the bytes
    that may yet begin a stop sequence (a stop sequence is never sent). Streamed, the pieces go
    out as they come; whole, they are joined: the same text either way."""

    def __init__(self, stops: list[bytes]):
        self.stops, self.buf, self.sent, self.end = stops, bytearray(), 0, None
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.ends: list[int] = []  # per token fed: the text's bytes up to its end
        # per stop, how many of its first bytes the text ends with (Knuth-Morris-Pratt: a
        # byte costs O(1) amortized; a stop is up to a request body long, so held() may not
        # look back over its prefixes after every byte, nor keep them all)
        self.fails = [kmp_failure(s) for s in stops]
        self.matched = [0] * len(stops)

    def kept(self) -> int:
        """How many of the tokens fed are in the text sent so far: a stop's never are."""
        return bisect.bisect_right(self.ends, self.sent)

    def held(self) -> int:
        """How many bytes at the end may yet begin a stop sequence (only those wait)."""
        return max(self.matched, default=0)

    def feed(self, token: int) -> str:
        piece = ""
        if self.end is None and token < 256:  # not after a stop, and a byte
            self.buf.append(token)
            ends = []  # where the text ends if stops completed here: the first one ends it
            for i, (stop, fail) in enumerate(zip(self.stops, self.fails, strict=True)):
                q = self.matched[i]
                while q and stop[q] != token:
                    q = fail[q - 1]
                self.matched[i] = q = q + 1 if stop[q] == token else 0
                if q == len(stop):
                    ends.append(len(self.buf) - q)
            self.end = min(ends) if ends else None
            piece = self.take(self.end if self.end is not None else len(self.buf) - self.held())
        self.ends.append(len(self.buf))
        return piece

    def finish(self) -> str:
        return self.take(self.end if self.end is not None else len(self.buf), final=True)

    def take(self, limit: int, final: bool = False) -> str:
        piece = bytes(self.buf[self.sent : limit]) if limit > self.sent else b""
        self.sent = max(self.sent, limit)
        return self.decoder.decode(piece, final)


def logprob_token(t: int) -> tuple[str, list[int] | None]:
    """A token as OpenAI's logprobs name it, and its bytes: a byte that is a character alone is
    that character, another byte "bytes:\\xNN" (as OpenAI writes a part of a character); past
    the bytes (a model of another vocabulary) "token_id:N", as vLLM writes it, with no bytes."""
    if 0 <= t < 256:
        return BYTE_NAMES[t], [t]
    return f"token_id:{t}", None


# The 256 bytes' names, once: a 300-token reply with logprobs 5 names 2,100 tokens.
BYTE_NAMES = tuple(chr(t) if t < 128 else f"bytes:\\x{t:02x}" for t in range(256))


class LogprobsOut:
    """A choice's logprobs in OpenAI's shape, whole or chunk after chunk: chat's content list,
    or a completion's tokens, token_logprobs, top_logprobs (the k likeliest and the chosen) and
    text_offset (characters into the completion, running on across chunks)."""

    FLOOR = -9999.0  # a probability that underflowed: OpenAI's and vLLM's stand-in for -inf

    def __init__(self, chat: bool):
        self.chat, self.chars = chat, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def render(self, pairs: list[tuple[int, tuple | None]]) -> dict:
        """pairs: (token, its Logprobs row), in order; an echoed prompt's first token has no
        row (None: null, as in OpenAI's replies)."""
        floor = self.FLOOR  # comparisons, not max(): this loop runs k + 1 times a token

        def entry(t: int, lp: float) -> dict:
            name, raw = logprob_token(t)
            return {"token": name, "logprob": lp if lp > floor else floor, "bytes": raw}

        if self.chat:
            content = [
                {**entry(t, lp), "top_logprobs": [entry(i, v) for i, v in top]}
                for t, (lp, top) in pairs
            ]
            return {"content": content, "refusal": None}
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t, row in pairs:
            name = logprob_token(t)[0]
            out["tokens"].append(name)
            out["text_offset"].append(self.chars)
            if row is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
            else:
                lp, top = row
                lp = lp if lp > floor else floor
                likeliest = {logprob_token(i)[0]: v if v > floor else floor for i, v in top}
                likeliest[name] = lp  # the chosen, where it is among them or after them
                out["token_logprobs"].append(lp)
                out["top_logprobs"].append(likeliest)
            if t < 256:
                self.chars += len(self.decoder.decode(bytes([t])))
        return out


class Job:
    def __init__(self, spec: dict, endpoint: str = "/generate"):
        self.spec, self.endpoint = spec, endpoint
        # ("token", (id, its logprobs row or None)) ... then ("done"|"error", x)
        self.events: queue.Queue = queue.Queue()
        self.cancelled = False  # the client went away: stop generating
        self.received = time.perf_counter()  # time to first token counts the wait in the queue
        self.scored = None  # echo with logprobs: the prompt's own (Engine.score), by run_job


class Metrics:
    """What GET /metrics reports, in Prometheus' text exposition format (version 0.0.4)."""

    TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.prompt_tokens = self.generated = self.ttft_count = 0
        self.ttft_sum = 0.0
        self.ttft_buckets = [0] * len(self.TTFT_BUCKETS)

    def count_request(self, endpoint: str, status: int) -> None:
        with self.lock:
            self.requests[endpoint, status] = self.requests.get((endpoint, status), 0) + 1

    def observe(self, prompt_tokens: int, generated: int, ttft_s: float) -> None:
        with self.lock:
            self.prompt_tokens += prompt_tokens
            self.generated += generated
            self.ttft_count += 1
            self.ttft_sum += ttft_s
            for i, bound in enumerate(self.TTFT_BUCKETS):
                self.ttft_buckets[i] += ttft_s <= bound

    def render(self, queued: int, in_flight: int) -> str:
        with self.lock:
            out = [
                "# HELP generate_requests_total HTTP requests answered, by endpoint and status.",
                "# TYPE generate_requests_total counter",
            ]
            for (endpoint, status), n in sorted(self.requests.items()):
                out.append(
                    f'generate_requests_total{{endpoint="{endpoint}",status="{status}"}} {n}'
                )
            out += [
                "# HELP generate_prompt_tokens_total Prompt tokens of the requests run.",
                "# TYPE generate_prompt_tokens_total counter",
                f"generate_prompt_tokens_total {self.prompt_tokens}",
                "# HELP generate_tokens_generated_total Tokens generated.",
                "# TYPE generate_tokens_generated_total counter",
                f"generate_tokens_generated_total {self.generated}",
                "# HELP generate_time_to_first_token_seconds From a request's arrival to its "
                "first token: the wait in the queue and the prefill.",
                "# TYPE generate_time_to_first_token_seconds histogram",
            ]
            name = "generate_time_to_first_token_seconds"
            for bound, n in zip(self.TTFT_BUCKETS, self.ttft_buckets, strict=True):
                out.append(f'{name}_bucket{{le="{bound}"}} {n}')
            out += [
                f'{name}_bucket{{le="+Inf"}} {self.ttft_count}',
                f"{name}_sum {self.ttft_sum:.6f}",
                f"{name}_count {self.ttft_count}",
            ]
        out += [
            "# HELP generate_queue_depth Requests admitted and waiting for the worker.",
            "# TYPE generate_queue_depth gauge",
            f"generate_queue_depth {queued}",
            "# HELP generate_requests_in_flight Requests admitted and not answered yet.",
            "# TYPE generate_requests_in_flight gauge",
            f"generate_requests_in_flight {in_flight}",
        ]
        return "\n".join(out) + "\n"


class ServerState:
    """What the handler threads and the worker share: the bounded job queue, admission and the
    drain, the counts the drain waits on, the metrics, and what the endpoints report."""

    def __init__(
        self,
        cfg: Config,
        ctx: int,
        model_name: str,
        byte_level: bool | None,
        api_key: str | None = None,
        vocab: int = 256,
    ):
        self.jobs: queue.Queue = queue.Queue(maxsize=cfg.max_queue)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.draining = False
        self.admitted = 0  # requests in the queue, generating, or writing their answer
        self.connections = 0  # handler threads alive
        self.cap = connection_cap(cfg.max_queue)
        self.request_s = cfg.request_timeout
        # connections whose request has not fully arrived: socket -> [deadline, handler]
        self.reading: dict = {}
        self.metrics = Metrics()
        self.ctx, self.max_body, self.model_name = ctx, cfg.max_body, model_name
        self.byte_level = byte_level
        self.api_key = api_key
        self.vocab = vocab  # token ids logit_bias may name
        self.created = int(time.time())

    def expire_reading(self, now: float, cut_to: float | None = None) -> None:
        """Stop reading requests past their deadline (a slow or idle client holds no thread
        past --request-timeout, however it trickles): the read returns at once, as at end of input.
        cut_to: the drain's nearer deadline for every connection still sending."""
        with self.lock:
            for sock, entry in list(self.reading.items()):
                if cut_to is not None:
                    entry[0] = min(entry[0], cut_to)
                if entry[0] <= now:
                    entry[1].expired = True
                    del self.reading[sock]
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RD)  # its answer (408) can still be written

    def admit(self, job: Job) -> None:
        """Queue the job, or refuse at once: no wait on the worker, so a 503 is immediate."""
        with self.lock:
            if self.draining or STOP["signal"]:
                raise BadRequest(503, "server shutting down", code="shutting_down")
            try:
                self.jobs.put_nowait(job)
            except queue.Full:
                raise BadRequest(
                    503, f"busy: {self.jobs.maxsize} requests waiting already", code="busy"
                ) from None
            self.admitted += 1

    def release(self) -> None:
        with self.lock:
            self.admitted -= 1
            self.changed.notify_all()


def route(path: str) -> str:
    return path.split("?", 1)[0]


def endpoint_label(path: str) -> str:
    """A metrics label: the known endpoints, everything else "other" (bounded label values)."""
    path = route(path)
    return path if path in POST_PATHS + GET_PATHS else "other"


def generate_reply(done: dict) -> dict:
    keys = ("text", "tokens", "prompt_tokens", "ttft_ms", "decode_tokens_per_s", "seed")
    return {k: done[k] for k in keys}


def usage(dones: list[dict]) -> dict:
    """OpenAI's usage: the prompt once, the completion tokens of every choice."""
    p, n = dones[0]["prompt_tokens"], sum(len(d["tokens"]) for d in dones)
    return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}


class Handler(http.server.BaseHTTPRequestHandler):
    """One connection, one request (HTTP/1.0: the server closes after each answer)."""

    server_version = "generate/2"
    default_request_version = "HTTP/1.0"  # a malformed request line still gets a status line
    timeout = 60.0  # one read or write (setup); the whole request: expire_reading
    replied = False  # a status line went out: an error after it cannot change the status
    openai = False  # errors in OpenAI's shape (/v1/...) or this template's ({"error": "..."})
    expired = False  # the request did not arrive within --request-timeout
    head_only = False  # HEAD: the status and headers of GET, no body

    def setup(self) -> None:
        state = self.server.state
        # past the request's deadline: the watchdog's cut comes first, and a 408 goes out
        self.timeout = max(60.0, state.request_s + 5)
        super().setup()
        with state.lock:  # draining: the kernel's backlog, answered 503 once its request is in
            wait = LINGER_S if state.draining else state.request_s
            state.reading[self.connection] = [time.monotonic() + wait, self]

    def request_read(self) -> None:
        """The whole request is in: no deadline from here (answers take as long as they take)."""
        with self.server.state.lock:
            self.server.state.reading.pop(self.connection, None)
        if self.expired:
            raise BadRequest(408, f"request not received within {self.server.state.request_s:g} s")

    def finish(self) -> None:
        with self.server.state.lock:
            self.server.state.reading.pop(self.connection, None)
        super().finish()

    def log_request(self, code="-", size="-") -> None:  # every status line passes here
        self.replied = True
        status = int(code) if isinstance(code, int) else 0
        self.server.state.metrics.count_request(endpoint_label(getattr(self, "path", "")), status)

    def log_message(self, format, *args) -> None:  # no access log on stderr: /metrics counts
        pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        """The base class's own refusals (a bad request line, headers too long, a method with
        no do_ handler) in this server's JSON shape."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.send_failure(BadRequest(code, message or http.HTTPStatus(code).phrase))

    def send_body(self, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not self.head_only:  # HEAD: what GET would send, without the body (RFC 9110 9.3.2)
            self.wfile.write(body)

    def send_json(self, status: int, obj: dict, headers: dict | None = None) -> None:
        self.send_body(status, (json.dumps(obj) + "\n").encode(), "application/json", headers)

    def send_failure(self, exc: BadRequest) -> None:
        if self.openai:
            kind = "server_error" if exc.status >= 500 else "invalid_request_error"
            error = {"message": str(exc), "type": kind, "param": exc.param, "code": exc.code}
            obj = {"error": error}
        else:
            obj = {"error": str(exc)}
        headers = dict(exc.headers or {})
        if exc.status == 503:
            headers["Retry-After"] = "1"
        self.send_json(exc.status, obj, headers)

    def answer(self, method) -> None:
        """Every request gets a status, whatever happens; a client gone is not an error."""
        self.openai = route(self.path).startswith("/v1/")
        try:
            if self.expired:  # cut mid-headers: what arrived is no request to act on
                raise BadRequest(
                    408, f"request not received within {self.server.state.request_s:g} s"
                )
            method()
        except BadRequest as exc:
            if not self.replied:
                self.send_failure(exc)
        except (ConnectionError, TimeoutError):  # the client left (or stalled): nobody to tell
            self.close_connection = True
        except Exception as exc:  # a bug: still an answer, and one line on stderr
            print(
                f"{self.command} {route(self.path)[:80]}: {type(exc).__name__}: {exc}",
                file=sys.stderr,
                flush=True,
            )
            self.close_connection = True
            if not self.replied:
                with contextlib.suppress(OSError):
                    self.send_failure(BadRequest(500, f"internal error ({type(exc).__name__})"))

    def do_GET(self) -> None:
        self.answer(self.get)

    def do_HEAD(self) -> None:
        self.head_only = True
        self.answer(self.get)

    def do_POST(self) -> None:
        self.answer(self.post)

    def check_key(self) -> None:
        """With an API key: /generate and /v1/ need `Authorization: Bearer KEY` (vLLM's
        --api-key); /health and /metrics stay open, for probes and scrapers."""
        key = self.server.state.api_key
        if key is None:
            return
        given = self.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), key.encode()
        ):
            raise BadRequest(
                401,
                "Incorrect API key provided: send `Authorization: Bearer KEY` (the server's key)",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def get(self) -> None:
        state, path = self.server.state, route(self.path)
        self.request_read()
        if path.startswith("/v1/"):
            self.check_key()
        if path == "/health":
            ok = not (state.draining or STOP["signal"])
            self.send_json(200 if ok else 503, {"ok": ok, "queued": state.jobs.qsize()})
        elif path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [self.model_object()]})
        elif path.startswith("/v1/models/"):
            name = urllib.parse.unquote(path.removeprefix("/v1/models/"))
            if name != state.model_name:
                raise BadRequest(
                    404,
                    f"The model `{name[:80]}` does not exist: this server has `{state.model_name}`",
                    "model",
                    "model_not_found",
                )
            self.send_json(200, self.model_object())
        elif path == "/metrics":
            text = state.metrics.render(state.jobs.qsize(), state.admitted)
            self.send_body(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path in POST_PATHS:
            raise BadRequest(405, f"{path} takes POST", headers={"Allow": "POST"})
        else:
            raise BadRequest(
                404,
                f"no such path {path[:80]}: POST {', '.join(POST_PATHS)}; GET "
                f"{', '.join(GET_PATHS)}, /v1/models/ID",
            )

    def model_object(self) -> dict:
        state = self.server.state
        model = {"id": state.model_name, "object": "model", "created": state.created}
        return {**model, "owned_by": "envtool"}

    def post(self) -> None:
        state, path = self.server.state, route(self.path)
        if path not in POST_PATHS:
            self.request_read()
            if path in GET_PATHS or path.startswith("/v1/models/"):
                raise BadRequest(405, f"{path[:80]} takes GET", headers={"Allow": "GET, HEAD"})
            raise BadRequest(404, f"no such POST path {path[:80]}: {', '.join(POST_PATHS)}")
        self.check_key()
        body = self.read_body()
        self.request_read()
        if path == "/generate":
            spec = parse_request(body, state.ctx)
        else:
            spec = parse_openai(body, path, state.ctx, state.model_name, state.vocab)
        job = Job(spec, path)
        state.admit(job)
        try:
            if path == "/generate":
                self.reply_generate(job)
            else:
                self.reply_openai(job)
        except (ConnectionError, TimeoutError):
            job.cancelled = True  # the worker stops at its next token
            raise
        finally:
            state.release()

    def read_body(self) -> bytes:
        sizes = self.headers.get_all("Content-Length") or []
        if not sizes:
            raise BadRequest(411, "Content-Length required")
        size = sizes[0].strip()
        if len(set(sizes)) > 1 or not (size.isascii() and size.isdigit()):  # "²" isdigit()
            raise BadRequest(400, f"bad Content-Length: {size[:20]!r}")
        if len(size) > 12 or int(size) > self.server.state.max_body:
            raise BadRequest(413, f"body over {self.server.state.max_body} bytes")
        try:
            body = self.rfile.read(int(size))
        except TimeoutError:
            raise BadRequest(408, f"body not received within {self.timeout} s") from None
        if len(body) < int(size):
            if self.expired:
                raise BadRequest(
                    408, f"request not received within {self.server.state.request_s:g} s"
                )
            raise BadRequest(400, "body shorter than its Content-Length")
        return body

    def client_gone(self) -> bool:
        """The peer closed its end (a readable socket with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            return True

    def next_event(self, job: Job) -> tuple:
        while True:
            try:
                return job.events.get(timeout=0.5)
            except queue.Empty:
                if not job.cancelled and self.client_gone():
                    job.cancelled = True  # waiting in the queue: the worker skips it

    def gone(self) -> None:
        """The client left and generation stopped early: no answer (nginx's 499). Above all
        not a 200 whose text was cut short as if it had ended."""
        self.close_connection = True
        if not self.replied:  # a stream's 200 went out (and was counted) already
            self.server.state.metrics.count_request(endpoint_label(self.path), 499)

    def reply_generate(self, job: Job) -> None:
        kind, value = self.next_event(job)  # the first event decides the status
        if kind == "error":
            raise BadRequest(*value)
        if not job.spec["stream"]:
            if value["cancelled"]:
                return self.gone()
            self.send_json(200, generate_reply(value))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            if kind == "token":
                t = value[0]
                piece = decoder.decode(bytes([t])) if t < 256 else ""
                line = {"token": t, "text": piece}
            elif kind == "done":
                if value["cancelled"]:
                    return self.gone()
                # a character the last token left unfinished: its U+FFFD, so the pieces add
                # up to the text (a line of no token)
                if tail := decoder.decode(b"", final=True):
                    self.wfile.write((json.dumps({"token": None, "text": tail}) + "\n").encode())
                line = {"done": True, **generate_reply(value)}
            else:
                line = {"error": value[1], "status": value[0]}
            self.wfile.write((json.dumps(line) + "\n").encode())
            self.wfile.flush()
            if kind != "token":
                return
            kind, value = self.next_event(job)

    def reply_openai(self, job: Job) -> None:
        spec, state = job.spec, self.server.state
        chat = spec["chat"]
        kind, value = self.next_event(job)
        if kind == "error":
            raise BadRequest(*value)
        head = {
            "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": state.model_name,
        }
        # echo: a completion's text begins with its prompt (chat has no echo)
        echoed = to_text(spec["ids"], True) if spec["echo"] else ""
        if not spec["stream"]:  # a "done" a choice, in order
            dones = [value]
            while not value["last"]:  # run_job: a cancelled choice is the last
                kind, value = self.next_event(job)
                if kind == "error":
                    raise BadRequest(*value)
                dones.append(value)
            if value["cancelled"]:
                return self.gone()
            choices = []
            for i, done in enumerate(dones):
                reason, rows = done["finish_reason"], done.get("logprobs")
                lp = None
                if rows is not None:  # the completion's tokens: the first len(rows)
                    pairs = list(zip(done["tokens"][: len(rows)], rows, strict=True))
                    if spec["echo"]:
                        pairs[:0] = zip(spec["ids"], job.scored, strict=True)
                    lp = LogprobsOut(chat).render(pairs)
                if chat:
                    message = {"role": "assistant", "content": done["completion"]}
                    choice = {"index": i, "message": message, "logprobs": lp}
                else:
                    choice = {"index": i, "text": echoed + done["completion"], "logprobs": lp}
                choices.append({**choice, "finish_reason": reason})
            self.send_json(200, {**head, "choices": choices, "usage": usage(dones)})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if chat:
            head["object"] = "chat.completion.chunk"
        if spec["include_usage"]:  # OpenAI: every chunk has the field, null until the last
            head["usage"] = None

        def chunk(i: int, piece: str | None, reason: str | None = None, role: bool = False) -> None:
            lp = None
            if rows and (kept := text.kept()) > sent["tokens"]:  # tokens now in the text
                lp = sent["out"].render(rows[sent["tokens"] : kept])
                sent["tokens"] = kept
            if chat:  # OpenAI's first chunk of a choice names the role
                delta = {"role": "assistant", "content": ""} if role else {}
                if piece is not None:
                    delta["content"] = piece
                choice = {"index": i, "delta": delta, "logprobs": lp, "finish_reason": reason}
            else:
                choice = {"index": i, "text": piece or "", "logprobs": lp}
                choice["finish_reason"] = reason
            self.send_event({**head, "choices": [choice]})

        def begin(i: int) -> None:
            """A choice's first chunk: chat's names the role; echo's is the prompt."""
            if chat:
                chunk(i, None, role=True)
            elif spec["echo"]:
                lp = None
                if spec["logprobs"] is not None:
                    lp = sent["out"].render(list(zip(spec["ids"], job.scored, strict=True)))
                choice = {"index": i, "text": echoed, "logprobs": lp, "finish_reason": None}
                self.send_event({**head, "choices": [choice]})

        dones: list[dict] = []  # the choices come one after another: their chunks in turn
        text = StreamText(spec["stop"])
        rows: list[tuple] = []  # this choice's tokens with their logprobs rows, as they came
        sent = {"tokens": 0, "out": LogprobsOut(chat)}  # how many rows went out so far
        begin(0)
        while True:
            if kind == "token":
                if value[1] is not None:
                    rows.append(value)
                if piece := text.feed(value[0]):
                    chunk(len(dones), piece)
            elif kind == "done":
                if value["cancelled"]:
                    return self.gone()
                if piece := text.finish():
                    chunk(len(dones), piece)
                chunk(len(dones), None, value["finish_reason"])
                dones.append(value)
                if not value["last"]:
                    text, rows = StreamText(spec["stop"]), []
                    sent = {"tokens": 0, "out": LogprobsOut(chat)}
                    begin(len(dones))
                    kind, value = self.next_event(job)
                    continue
                if spec["include_usage"]:
                    self.send_event({**head, "choices": [], "usage": usage(dones)})
                self.wfile.write(b"data: [DONE]\n\n")
                return
            else:  # failed mid-stream: the status went out already; say it in the stream
                status, message = value
                error = {"message": message, "type": "server_error", "param": None, "code": status}
                self.send_event({"error": error})
                return
            kind, value = self.next_event(job)

    def send_event(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a client that never reads cannot hold the process past the grace
    # The listen backlog: with the default 5, a burst's SYNs beyond it were dropped and the
    # clients' TCP retried a second later (a 503 that took 1 s).
    request_queue_size = 1024

    def __init__(self, address: tuple, state: ServerState):
        self.state = state
        # an IPv6 address (`--host ::1`, `::`) binds IPv6; a name (localhost) stays IPv4 as
        # before: where /etc/hosts lists ::1 first, the first answer would drop 127.0.0.1
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Handler)

    def get_request(self):
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # out of files: the listening socket
                time.sleep(0.05)  # stays readable, and serve_forever would spin on it
            raise

    def process_request(self, request, client_address) -> None:
        with self.state.lock:
            full = self.state.connections >= self.state.cap
            if not full:
                self.state.connections += 1
        if full:  # answered here, in the accept loop: a short write, then closed
            body = b'{"error": "busy: too many connections"}\n'
            with contextlib.suppress(OSError):
                request.settimeout(0.5)
                request.sendall(
                    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                request.shutdown(socket.SHUT_WR)
                # what the client sent already is read (not waited for): closing with unread
                # bytes sends a reset, which can destroy the 503
                for _ in range(16):
                    if not request.recv(65536, socket.MSG_DONTWAIT):
                        break
            self.close_request(request)
            self.state.metrics.count_request("other", 503)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.state.lock:
                self.state.connections -= 1
                self.state.changed.notify_all()

    def shutdown_request(self, request) -> None:
        """Half-close, then read what the client still sends (bounded) before closing: a close
        with unread bytes in the socket sends a TCP reset, which can destroy the answer."""
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
            request.settimeout(LINGER_S)
            end, total = time.monotonic() + LINGER_S, 0
            while total < LINGER_BYTES and time.monotonic() < end:
                data = request.recv(65536)
                if not data:
                    break
                total += len(data)
        self.close_request(request)

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):  # a client gone: not news
            return
        print(
            f"connection from {client_address[0]}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )


STOP = {"signal": None}


def on_stop_signal(signum, frame):
    STOP["signal"] = STOP["signal"] or signal.Signals(signum).name  # the worker loop polls it


def run_job(engine: Engine, job: Job, master: bool, state: ServerState | None = None) -> None:
    """Generate for one request: its n choices (OpenAI's n; 1 elsewhere) one after another, the
    i-th with seed + i, each ending in a "done" event. Every rank runs them (tensor parallel:
    the same choices, the same seeds); rank 0 also reports."""
    spec, dones, n = job.spec, [], job.spec.get("n", 1)
    byte_level = state.byte_level if state else None
    if spec.get("echo") and spec.get("logprobs") is not None:  # before any event goes out
        job.scored = engine.score(spec["ids"], spec["logprobs"])
    for i in range(n):
        done = run_choice(engine, job, master, (spec["seed"] + i) % 2**63, byte_level)
        if not master:
            continue
        dones.append(done)
        # the client left: no more choices (only with one rank: run_choice)
        done["last"] = i == n - 1 or done["cancelled"]
        if done["last"] and state is not None:  # counted before the answer can go out
            ttft_s = dones[0]["first_token_at"] - job.received  # the first choice's
            state.metrics.observe(len(spec["ids"]), sum(len(d["tokens"]) for d in dones), ttft_s)
        job.events.put(("done", done))
        if done["last"]:
            break


def run_choice(
    engine: Engine, job: Job, master: bool, seed: int, byte_level: bool | None
) -> dict | None:
    """One completion of the request's prompt; on rank 0 its "done" event's fields. A stop
    sequence ends generation on every rank alike: they all see the same tokens."""
    spec = job.spec
    stops, stream = spec.get("stop") or [], spec["stream"]
    watched = stream or stops  # each token to the host as it comes: only then
    completion, pieces = StreamText(stops), []  # the text a stream of these tokens sends

    def on_token(t: int, row) -> bool:
        if master and stream:
            job.events.put(("token", (t, row)))
        pieces.append(completion.feed(t))
        return completion.end is not None or cancelled()

    def cancelled() -> bool:
        # A client gone stops generation early, but only with one rank: the others would run
        # on alone and wait forever in the next step's all-reduce.
        return job.cancelled and engine.world == 1

    started = time.perf_counter()
    if spec["max_new_tokens"] == 0:  # echo's scoring alone: nothing to generate
        r = {"tokens": [], "ttft_s": 0.0, "decode_s": 0.0, "logprobs": []}
    else:
        r = engine.generate(
            spec["ids"],
            spec["max_new_tokens"],
            spec["temperature"],
            spec["top_k"],
            spec["top_p"],
            seed,
            on_token=on_token if watched else None,
            cancelled=cancelled,  # no sync: a plain request stops too when its client leaves
            logprobs=spec.get("logprobs"),
            adjust=spec.get("adjust"),
        )
    if not master:
        return None
    tokens = r["tokens"]
    if not watched:  # on_token fed every token it returned, and no other
        pieces = [completion.feed(t) for t in tokens]
    whole = "".join(pieces) + completion.finish()
    stopped = completion.end is not None
    steps = len(tokens) - 1
    return {
        "text": to_text(tokens, byte_level),
        "completion": whole,
        # "stop": a stop sequence ended it (a byte model has no end-of-text token);
        # cut short by a client that left: no answer at all (Handler.gone)
        "finish_reason": "stop" if stopped else "length",
        "cancelled": not stopped and len(tokens) < spec["max_new_tokens"],
        # the logprobs of the completion's tokens (a stop sequence's are not)
        "logprobs": r["logprobs"][: completion.kept()]
        if spec.get("logprobs") is not None
        else None,
        "tokens": tokens,
        "prompt_tokens": len(spec["ids"]),
        "ttft_ms": r["ttft_s"] * 1e3,
        "first_token_at": started + r["ttft_s"],  # perf_counter's clock, as Job.received
        "decode_tokens_per_s": steps / r["decode_s"] if steps > 0 else None,
        "seed": seed,
    }


def model_name_of(cfg: Config) -> str:
    """The name /v1/models lists and requests must use: --model-name, else the checkpoint's
    directory name, else the random preset."""
    if cfg.model_name:
        return cfg.model_name
    if cfg.ckpt:
        path = Path(cfg.ckpt).resolve()
        return (path.parent if path.is_file() else path).name or "generate"
    return f"random-{cfg.size}"


def is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def drain(server: Server, thread: threading.Thread, state: ServerState, grace: float) -> None:
    """Stop serving (SIGTERM/SIGINT; the request that was generating has finished): the queued
    requests get 503, new ones too, admitted ones finish writing their answers; then the
    connections the kernel accepted already get their 503, and the socket closes. grace bounds
    the wait for slow clients; a client still reading after it is cut off."""
    deadline = time.monotonic() + grace
    with state.lock:
        state.draining = True
        while True:
            try:
                state.jobs.get_nowait().events.put(("error", (503, "server shutting down")))
            except queue.Empty:
                break
        while state.admitted and (left := deadline - time.monotonic()) > 0:
            state.changed.wait(left)
    server.shutdown()  # no more accept()s by serve_forever
    thread.join()
    # connections still sending a request (an idle keep-alive of a load balancer): LINGER_S to
    # finish it and get their 503, then cut, not waited on for the whole grace
    state.expire_reading(time.monotonic(), cut_to=time.monotonic() + LINGER_S)
    server.socket.setblocking(False)
    while True:  # connections already in the listen backlog: answered (503), not reset
        try:
            conn, address = server.socket.accept()
        except OSError:
            break
        conn.setblocking(True)
        server.process_request(conn, address)
    end = max(deadline, time.monotonic() + LINGER_S + 1)
    with state.lock:
        while state.connections and (left := end - time.monotonic()) > 0:
            state.changed.wait(left)
    server.server_close()


def serve(engine: Engine, cfg: Config, master: bool, ctrl) -> dict:
    """Rank 0 serves HTTP and hands each request to every rank (tensor parallel: all ranks run
    every step); the others follow. The model is only ever touched by this (main) thread."""
    n = max(1, min(8, engine.ctx // 2))
    engine.generate([10] * n, n, 0.0)  # compile + capture the smallest buckets before serving
    if engine.fast:  # and the step that draws a sampled token (OpenAI's default request),
        engine.generate([10] * n, n, 1.0)
        # and Picker's kernels (top-p's draw, logprobs, penalties), compiled here once and
        # not in a first request's time
        engine.generate([10] * n, n, 1.0, top_p=0.9, logprobs=1)
        pen = {"bias": {}, "presence": 0.0, "freq": 1.0}
        engine.generate([10] * n, n, 0.0, logprobs=0, adjust=pen)
    if not master:  # follower: run what rank 0 broadcasts until it says stop (None)
        served = 0
        while True:
            box = [None]
            dist.broadcast_object_list(box, src=0, group=ctrl)
            if box[0] is None:
                return {"served": served}
            run_job(engine, Job(box[0]), master=False)
            served += 1
    byte_level = {"bytes": True, "ids": False}.get(cfg.vocab)
    api_key = cfg.api_key or os.environ.get("GENERATE_API_KEY") or None
    vocab = engine.model.shape.vocab_size
    state = ServerState(cfg, engine.ctx, model_name_of(cfg), byte_level, api_key, vocab)
    try:
        server = Server((cfg.host, cfg.serve), state)
    except OSError as exc:
        if ctrl is not None:
            dist.broadcast_object_list([None], src=0, group=ctrl)
        fail(f"--serve {cfg.serve} on {cfg.host}: {exc.strerror or exc}")
    host, port = server.server_address[:2]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    watch_stop = threading.Event()

    def watch_reading() -> None:  # until the socket closes: the drain's connections too
        while not watch_stop.wait(0.2):
            state.expire_reading(time.monotonic())

    threading.Thread(target=watch_reading, daemon=True).start()
    after = time.time() - STARTED
    if api_key is None and not is_loopback(host):
        print(
            f"warning: serving on {host} without an API key: anyone who reaches port {port} "
            "can use it (set GENERATE_API_KEY, or --host 127.0.0.1)",
            file=sys.stderr,
            flush=True,
        )
    shown = f"[{host}]" if ":" in host else host
    print(
        f"serving http://{shown}:{port}/generate (also POST /v1/completions, "
        f"/v1/chat/completions as model {state.model_name!r}; GET /v1/models, /metrics, /health)"
        f"; ready {after:.1f} s after the imports{since_start(after)}",
        flush=True,
    )
    served = failed = 0
    try:
        while not STOP["signal"]:
            try:
                job = state.jobs.get(timeout=0.1)
            except queue.Empty:
                continue
            if job.cancelled:  # its client left while it waited: nobody to generate for
                job.events.put(("error", (499, "client closed the connection")))
                continue
            try:
                if ctrl is not None:
                    dist.broadcast_object_list([job.spec], src=0, group=ctrl)
                run_job(engine, job, master=True, state=state)
                served += 1
            except Exception as exc:  # a failed request must not take the server down
                failed += 1
                job.events.put(("error", (500, f"{type(exc).__name__}: {exc}")))
                print(f"request failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        drain(server, thread, state, cfg.grace)
        watch_stop.set()
        if ctrl is not None:
            dist.broadcast_object_list([None], src=0, group=ctrl)
    print(f"stopped by {STOP['signal']}: served {served} request(s)", flush=True)
    return {"served": served, "failed": failed, "stopped": STOP["signal"], "port": port}


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(argv)
    if cfg.serve is not None:  # a benchmark keeps Python's defaults: Ctrl-C stops it at once
        # SIGTERM: envtool launch / torchrun / Slurm stopping us; SIGINT: Ctrl-C (torchrun passes
        # it on to every rank). The worker loop finishes the request in progress, then stops.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_stop_signal)

    # --- DISTRIBUTED SETUP ---
    # torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; without them this is one process, world size 1.
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and not cfg.cpu
    # Compile where it pays: on a GPU. On a CPU a compile costs more than a sample (94 s for a
    # 3M-parameter model on a laptop) and eager decode is as fast at these sizes.
    cfg.eager = cfg.eager or not (use_cuda if cfg.compile is None else cfg.compile)
    if cfg.cudagraphs and not use_cuda:
        fail("--cudagraphs needs a CUDA GPU (none visible, or --cpu): drop --cudagraphs")
    if cfg.cudagraphs and cfg.eager:
        fail("--cudagraphs captures the compiled steps: drop --eager or --cudagraphs")
    if use_cuda:
        torch.cuda.set_device(local_rank)  # before init_process_group: NCCL binds to this GPU
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = "nccl" if use_cuda else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend, device_id=device if use_cuda else None)
    else:  # a private in-memory store: no port, no env vars needed
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    master = rank == 0
    if use_cuda:
        torch.zeros(1, device=device)  # the CUDA context now, so its start is timed apart
    MARKS["cuda"] = time.time()

    try:
        # Control messages (serving: each request) over a CPU group that may idle for hours.
        ctrl = None
        if world_size > 1:
            ctrl = dist.new_group(backend="gloo", timeout=datetime.timedelta(days=365))
        torch.manual_seed(cfg.seed)
        torch.set_float32_matmul_precision("high")
        if cfg.compile_cache:  # Inductor's and Triton's on-disk caches: a restart reuses them
            where = Path(cfg.compile_cache).resolve()
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(where / "inductor")
            os.environ["TRITON_CACHE_DIR"] = str(where / "triton")
        if cfg.dtype == "auto":
            dtype = torch.bfloat16 if use_cuda else torch.float32
        else:
            dtype = getattr(torch, cfg.dtype)

        # --- LOAD ---
        if cfg.ckpt:
            sd = load_state_dict(Path(cfg.ckpt))
            s = shape_of(sd, cfg.n_head, cfg.ckpt)
            if cfg.vocab == "auto":
                cfg.vocab = read_vocab(Path(cfg.ckpt), s.vocab_size)
        else:
            n_layer, n_head, d_model = SIZES[cfg.size]
            s = ModelShape(n_layer, cfg.n_head or n_head, d_model, cfg.vocab_size, cfg.seq_len)
            sd = None
        if s.n_head % world_size or (4 * s.d_model) % world_size:
            fail(f"tensor parallel: {s.n_head} heads do not split over {world_size} processes")
        with torch.device("meta"):  # no memory until the weights arrive
            model = GPT(s, world_size, cfg.decode_attn).to(dtype)
        materialize(model, device)
        model.head.weight = model.tok_emb.weight  # materialize unties: tie again
        if sd is None:  # every rank draws the same full weights and keeps its shard
            sd = random_state_dict(s, cfg.seed, device, dtype)
        try:
            model.load_state_dict(shard(sd, s, rank, world_size))  # copy_ casts to dtype
        except RuntimeError as exc:
            first = " ".join(str(exc).strip().splitlines()[:2])
            fail(f"{cfg.ckpt}: could not be loaded into this model: {first}")
        del sd
        model.eval().requires_grad_(False)
        if cfg.quant == "int8":
            quantize_int8(model)
        model.setup_cache(device, dtype)
        MARKS["weights"] = time.time()
        try:
            engine = Engine(model, device, cfg, rank, world_size)
        except ValueError as exc:
            fail(str(exc))
        evaluated = eval_loss(model, cfg, device) if cfg.eval_data else None

        if cfg.serve is not None:
            # "auto" is an older checkpoint that records nothing: bytes only at 256 words (the
            # others would sample ids that are no text: empty answers)
            if (
                s.vocab_size < 256
                or cfg.vocab == "ids"
                or (cfg.vocab == "auto" and s.vocab_size != 256)
            ):
                fail(
                    f"--serve needs a byte-level model (prompts are UTF-8 bytes); this one has "
                    f"{s.vocab_size} token ids (train it with lm's --data and --vocab-size 256; "
                    "--vocab bytes serves one trained on bytes that does not record it)"
                )
            result = serve(engine, cfg, master, ctrl)
        else:
            if cfg.prompt is not None:
                prompt = list(cfg.prompt.encode("utf-8"))
                if not prompt:
                    fail("--prompt must not be empty")
                if max(prompt) >= s.vocab_size:
                    fail(f"--prompt has bytes >= the vocabulary size {s.vocab_size}")
            else:  # a benchmark prompt: random tokens, the same on every rank
                g = torch.Generator().manual_seed(cfg.seed)
                prompt = torch.randint(min(s.vocab_size, 256), (cfg.prompt_len,), generator=g)
                prompt = prompt.tolist()
            if len(prompt) + cfg.max_new_tokens > s.seq_len:
                fail(
                    f"prompt ({len(prompt)} tokens) + --max-new-tokens ({cfg.max_new_tokens}) "
                    f"exceeds the context ({s.seq_len})"
                )
            result = run_benchmark(engine, cfg, prompt, master)
        if evaluated:
            result.update(eval_loss=evaluated[0], eval_tokens=evaluated[1], quant=cfg.quant)
            if master:
                print(f"eval {evaluated[1]} tokens: loss {evaluated[0]:.4f}", flush=True)
        if master:
            print("RESULT " + json.dumps(result), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
