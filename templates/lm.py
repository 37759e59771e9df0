"""Train a GPT-style causal language model with DistributedDataParallel (DDP).

One file, torch + the Python standard library only: it is yours now, edit it freely.
Blocks between `# --- shared: NAME ---` and `# --- end shared ---` are the same code in
envtool's other templates (its tests keep the copies identical); in your copy, edit freely.
Reads top to bottom: config -> distributed setup -> data -> model -> optimizer -> resume -> loop.

Run it:
    python train.py                                    # one GPU (or CPU), no torchrun needed
    python train.py --size tiny --seq-len 128 --batch-size 8 --max-steps 200  # a laptop CPU
    torchrun --standalone --nproc-per-node 4 train.py  # one node, 4 GPUs
    envtool launch train.py --gpus 4                   # the same, through envtool
    # two nodes (run on each node, R = 0 on the first, 1 on the second):
    torchrun --nnodes 2 --nproc-per-node 8 --node-rank R --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 train.py
    envtool launch train.py --slurm --nodes 2 --gpus-per-node 8 --submit   # Slurm batch job
    python train.py --size 1.3b --compile --data input.txt   # a real text file, byte-level tokens
    python train.py --size 1.3b --compile --fp8            # FP8 matmuls (H100/H200, L40S, B200)

What it prints (rank 0 only):
    step N loss X lr Y tokens/s Z mfu W      every --log-every steps
    RESULT {"step": N, "loss": x, "tokens_per_s": ..., "mfu": ...}   last line, JSON

Measured with envtool launch on 2x H200 (torch 2.11, --compile, seq 1024; docs/benchmarks-gpu.md):
    --size 1.3b --batch-size 16 --grad-accum 8   56.7% MFU on 1 GPU, 98.4% scaling to 2 GPUs
    --size 124m --batch-size 16 --grad-accum 4   43.6% MFU on 1 GPU, 97.3% scaling to 2 GPUs
Accumulation (no_sync) is what hides the gradient all-reduce; --grad-compress bf16 did not help
on NVLink (measured -4.7%); it may across nodes.
Issues 16 and 25, 1x H200 (torch 2.11), 1.3b 16 x 8 --compile, beside nanoGPT's train.py:
    bf16 68.1k tokens/s (1.06x nanoGPT; 1.02x before the bf16 residual stream), --fp8 84.3k
    tokens/s (1.28x; 72.2% of the bf16 peak); 124m 16 x 4 bf16 1.07x, --fp8 no faster there
    (d 768 GEMMs are too small to gain).
    --fp8 loss on byte-level text: +0.35 to +0.78% vs bf16 after 300 steps; the bf16 stream's
    loss: +0.03% vs the fp32 stream after 300 steps.

Checkpoints: --out-dir/ckpt.pt, written atomically by rank 0 every --ckpt-every steps, at the
end and on SIGTERM (Slurm preemption) or a first SIGINT (Ctrl-C; a second one aborts at once,
no checkpoint); a new run resumes from it (--resume auto).
"""

import argparse
import contextlib
import dataclasses
import functools
import inspect
import io
import json
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# torch 2.13 renamed DDP's broadcast_buffers to forward_sync_buffers (the old name warns);
# older torch knows only the old one.
DDP_SYNC_BUFFERS = (
    "forward_sync_buffers"
    if "forward_sync_buffers" in inspect.signature(DDP).parameters
    else "broadcast_buffers"
)

# --- CONFIG ---
# Every field is a command-line flag: n_layer -> --n-layer. None means "from --size".
SIZES = {  # name: (n_layer, n_head, d_model)
    "tiny": (2, 2, 64),
    "124m": (12, 12, 768),
    "350m": (24, 16, 1024),
    "1.3b": (24, 16, 2048),
}


@dataclass
class Config:
    size: str = field(default="124m", metadata={"help": "model preset: " + "|".join(SIZES)})
    n_layer: int | None = field(default=None, metadata={"type": int, "help": "overrides --size"})
    n_head: int | None = field(default=None, metadata={"type": int, "help": "overrides --size"})
    d_model: int | None = field(default=None, metadata={"type": int, "help": "overrides --size"})
    vocab_size: int = field(
        default=256,
        metadata={"help": "256: bytes (UTF-8 text, what --data reads); 50304: GPT-2-sized ids"},
    )
    seq_len: int = field(default=1024, metadata={"help": "tokens per sample"})
    batch_size: int = field(default=8, metadata={"help": "samples per GPU per micro-step"})
    grad_accum: int = field(default=1, metadata={"help": "micro-steps per optimizer step"})
    max_steps: int = field(default=1000, metadata={"help": "optimizer steps to train in total"})
    lr: float = field(default=6e-4, metadata={"help": "peak learning rate"})
    min_lr: float = field(default=6e-5, metadata={"help": "learning rate at the end of decay"})
    warmup_steps: int = field(default=100, metadata={"help": "linear warm-up steps"})
    decay_steps: int | None = field(
        default=None, metadata={"type": int, "help": "cosine length (default: --max-steps)"}
    )
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW decay on matrices"})
    grad_clip: float = field(default=1.0, metadata={"help": "max grad norm (0: off)"})
    dropout: float = field(default=0.0, metadata={"help": "dropout probability"})
    data: str | None = field(
        default=None,
        metadata={"type": str, "help": "text file, read as bytes (tokens 0..255)"},
    )
    synthetic_samples: int = field(default=1_000_000, metadata={"help": "synthetic dataset size"})
    num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes"})
    seed: int = field(default=1337, metadata={"help": "same seed -> same run"})
    compile: bool = field(default=False, metadata={"help": "torch.compile the model"})
    fp8: bool = field(
        default=False,
        metadata={"help": "FP8 matmuls in the blocks and the head (GPUs sm_89+: H100, L40S..)"},
    )
    cpu: bool = field(default=False, metadata={"help": "force CPU + gloo (auto without CUDA)"})
    bucket_cap_mb: int = field(default=100, metadata={"help": "DDP gradient bucket size"})
    grad_compress: str = field(default="none", metadata={"help": "none|bf16 (DDP comm hook)"})
    peak_tflops: float | None = field(
        default=None, metadata={"type": float, "help": "GPU peak for MFU (default: by name)"}
    )
    out_dir: str = field(default="out", metadata={"help": "checkpoint directory"})
    ckpt_every: int = field(
        default=500, metadata={"help": "checkpoint every N steps (0: at the end, -1: never)"}
    )
    resume: str = field(default="auto", metadata={"help": "auto|never|PATH to a ckpt.pt"})
    log_every: int = field(default=10, metadata={"help": "log every N steps"})
    rank_file_dir: str | None = field(
        default=None, metadata={"type": str, "help": "each rank writes DIR/rank-<RANK>"}
    )
    profile_steps: int = field(
        default=0, metadata={"help": "profile N steps after warm-up; rank 0 prints the top kernels"}
    )


def parse_config(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "")
        if "(default" not in helptext:  # a help that says its default itself keeps it
            helptext += f" (default: {f.default})"
        if f.type in (bool, "bool"):
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=f.default, help=helptext
            )
        else:
            kind = f.metadata.get("type", type(f.default))
            parser.add_argument(flag, type=kind, default=f.default, help=helptext)
    cfg = Config(**vars(parser.parse_args(argv)))
    if cfg.size not in SIZES:
        parser.error(f"--size must be one of {', '.join(SIZES)}")
    n_layer, n_head, d_model = SIZES[cfg.size]
    cfg.n_layer = cfg.n_layer or n_layer
    cfg.n_head = cfg.n_head or n_head
    cfg.d_model = cfg.d_model or d_model
    if cfg.fp8 and (cfg.d_model % 16 or cfg.batch_size * cfg.seq_len % 16):
        parser.error("--fp8 needs --d-model and --batch-size x --seq-len divisible by 16")
    if cfg.data and cfg.vocab_size < 256:
        parser.error(f"--data is read as bytes (0..255): --vocab-size {cfg.vocab_size} is < 256")
    if cfg.data and not Path(cfg.data).is_file():
        parser.error(f"--data {cfg.data}: no such file (a plain text file, read as bytes)")
    if cfg.grad_compress not in ("none", "bf16"):
        parser.error("--grad-compress must be none or bf16")
    return cfg


# --- DATA ---
# --- shared: token_data ---
class SyntheticTokens(Dataset):
    """Random token windows whose second half repeats the first: learnable (loss falls as the
    model learns to copy), deterministic per index, no memory, no files."""

    def __init__(self, n: int, seq_len: int, vocab_size: int, seed: int):
        self.n, self.seq_len, self.vocab_size, self.seed = n, seq_len, vocab_size, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        half = (self.seq_len + 2) // 2
        first = torch.randint(self.vocab_size, (half,), generator=g)
        window = torch.cat([first, first])[: self.seq_len + 1]
        return window[:-1], window[1:]  # inputs, next-token targets


class ByteTokens(Dataset):
    """A plain text file as bytes (vocabulary 0..255), cut into non-overlapping windows."""

    def __init__(self, path: str, seq_len: int):
        raw = Path(path).read_bytes()
        self.tokens = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        self.seq_len = seq_len
        if len(self) == 0:
            raise SystemExit(f"{path}: needs more than {seq_len} bytes (or a smaller --seq-len)")

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, i: int):
        window = self.tokens[i * self.seq_len : (i + 1) * self.seq_len + 1]
        return window[:-1], window[1:]


# --- end shared ---


# --- MODEL ---
# --- shared: gpt_model ---
# FP8 (--fp8): the transformer blocks' four matmuls run on FP8 tensor cores through
# torch._scaled_mm, and so does the tied head (a vocabulary that is a multiple of 16); the
# embedding lookup, LayerNorm, attention and the loss stay bf16/fp32, as do the master
# weights. lm casts each weight once per optimizer step (GPT.cache_fp8_weights: fp8 copy, its
# scale and its transpose, reused by every micro-step);
# fsdp casts the gathered bf16 copy on every call, since caching would undo the sharding.
# Each operand is cast with its own dynamic per-tensor scale (amax of this very tensor -> the
# format's max): no state, no history, nothing in the checkpoint. e4m3 (3 mantissa bits) for
# activations and weights; e5m2 (more range) for the output gradients, as in torchao's float8
# "tensorwise" recipe. Per-tensor, not row-wise: 1.74x bf16 vs 1.56x for the 1.3B layer GEMMs
# on H200, and a transposed operand keeps its one scale (row-wise scales must be recomputed per
# direction).
FP8_FORWARD, FP8_GRAD = torch.float8_e4m3fn, torch.float8_e5m2


AUTOCAST_BY_DEVICE = hasattr(torch, "get_autocast_dtype")  # torch 2.4+


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast computes in on this device type, None when it is off. torch 2.4+
    asks by device type; 2.1-2.3 (still what some CUDA 11.8 clusters run) have a call per
    device, and the 2.4 form raises a TypeError there."""
    if AUTOCAST_BY_DEVICE:
        on = torch.is_autocast_enabled(device_type)
        return torch.get_autocast_dtype(device_type) if on else None
    if device_type == "cuda":
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
    if device_type == "cpu":
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
    return None


def fp8_unsupported(device: torch.device) -> str | None:
    """Why --fp8 cannot run here (None: it can): it needs FP8 tensor cores, sm_89 or newer."""
    if device.type != "cuda":
        return "needs an NVIDIA GPU with FP8 tensor cores (sm_89+: L4, L40S, H100, H200, B200)"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        name = torch.cuda.get_device_name(device)
        return f"{name} is sm_{major}{minor}: FP8 tensor cores need sm_89+ (L4, L40S, H100, B200)"
    if not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no torch._scaled_mm (torch 2.4+)"
    return None


def to_fp8(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """t scaled so that its largest magnitude is the format's largest, cast; returns the fp8
    tensor and the inverse scale that _scaled_mm multiplies back in (fp32 scalar)."""
    fmax = torch.finfo(dtype).max
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = fmax / amax
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype), scale.reciprocal()


class FP8Matmul(torch.autograd.Function):
    """y = x @ w.T with both operands in FP8; backward also in FP8 (two more GEMMs). _scaled_mm
    wants its first operand row-major and its second column-major: hence the transposes."""

    @staticmethod
    def forward(ctx, x, weight, w8=None, sw=None, w8t=None):
        x2 = x.reshape(-1, x.shape[-1])
        x8, sx = to_fp8(x2, FP8_FORWARD)
        if w8 is None:  # no copy cast for this optimizer step: cast now
            w8, sw = to_fp8(weight, FP8_FORWARD)
        out = torch._scaled_mm(
            x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True
        )
        ctx.save_for_backward(x8, sx, w8, sw, w8t)  # fp8: half the activation memory of bf16
        ctx.x_dtype, ctx.w_dtype = x.dtype, weight.dtype
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_out):
        x8, sx, w8, sw, w8t = ctx.saved_tensors
        g8, sg = to_fp8(grad_out.reshape(-1, grad_out.shape[-1]), FP8_GRAD)
        w_col = w8.t().contiguous().t() if w8t is None else w8t.t()  # column-major (N, K)
        grad_x = torch._scaled_mm(  # (M, N) @ (N, K)
            g8, w_col, scale_a=sg, scale_b=sw, out_dtype=ctx.x_dtype
        )
        grad_w = torch._scaled_mm(  # (N, M) @ (M, K), straight in the weight's dtype
            g8.t().contiguous(),
            x8.t().contiguous().t(),
            scale_a=sg,
            scale_b=sx,
            out_dtype=ctx.w_dtype,
        )
        return grad_x.view(*grad_out.shape[:-1], grad_x.shape[-1]), grad_w, None, None, None


class Linear(nn.Linear):
    """Bias-free nn.Linear; fp8=True runs its matmuls through FP8Matmul. Same parameters and
    state dict either way: a checkpoint moves between --fp8 and bf16 runs."""

    def __init__(self, d_in: int, d_out: int, fp8: bool):
        super().__init__(d_in, d_out, bias=False)
        self.fp8 = fp8

    def forward(self, x):
        if not self.fp8:
            return super().forward(x)
        if hasattr(self, "fp8_w"):  # cast once this optimizer step (GPT.cache_fp8_weights)
            return FP8Matmul.apply(x, self.weight, self.fp8_w, self.fp8_scale, self.fp8_wt)
        return FP8Matmul.apply(x, self.weight)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.qkv = Linear(cfg.d_model, 3 * cfg.d_model, cfg.fp8)
        self.proj = Linear(cfg.d_model, cfg.d_model, cfg.fp8)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, bias=False)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, bias=False)
        self.fc = Linear(cfg.d_model, 4 * cfg.d_model, cfg.fp8)
        self.fc_proj = Linear(4 * cfg.d_model, cfg.d_model, cfg.fp8)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.fc_proj(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=False)
        self.fp8 = cfg.fp8
        # --fp8 takes the head too (8 % of a 1.3B model's matmul work at 50k words) where
        # _scaled_mm can: a vocabulary that is a multiple of 16
        self.head = Linear(cfg.d_model, cfg.vocab_size, cfg.fp8 and cfg.vocab_size % 16 == 0)
        self.head.weight = self.tok_emb.weight  # weight tying: one matrix in and out
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @torch.no_grad()
    def cache_fp8_weights(self) -> None:
        """Cast every FP8 linear's weight (and its transpose, which backward needs) once, for all
        micro-steps until the next optimizer step: at accumulation 8 this saves 7 of 8 casts of
        every weight. Non-persistent buffers: not in the checkpoint, updated in place (the
        compiled graphs keep reading the same tensors)."""
        for m in self.modules():
            if isinstance(m, Linear) and m.fp8:
                w8, sw = to_fp8(m.weight, FP8_FORWARD)
                if not hasattr(m, "fp8_w"):
                    m.register_buffer("fp8_w", w8, persistent=False)
                    m.register_buffer("fp8_scale", sw, persistent=False)
                    m.register_buffer("fp8_wt", w8.t().contiguous(), persistent=False)
                else:
                    m.fp8_w.copy_(w8)
                    m.fp8_scale.copy_(sw)
                    m.fp8_wt.copy_(w8.t())

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        # Under autocast the residual stream is cast to bf16 once, here; the fp32 embedding tables
        # would keep it fp32, and every residual add and LayerNorm, forward and backward, would
        # move twice the bytes: +3.3 % at 1.3B on H200, the same loss curve. FSDP's bf16 param
        # policy and Megatron's default train this way too. --fp8 keeps fp32, as it was measured.
        cast = None if self.fp8 else autocast_dtype(x.device.type)
        if cast is not None:
            x = x.to(cast)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def flops_per_token(model: GPT, cfg: Config) -> float:
    """PaLM appendix B: 6N (matmuls, forward + backward) + 12·L·H·Q·T (attention), where N
    excludes position embeddings (a lookup, not a matmul) and the tied head counts once."""
    n = sum(p.numel() for p in model.parameters()) - model.pos_emb.weight.numel()
    head_dim = cfg.d_model // cfg.n_head
    return 6 * n + 12 * cfg.n_layer * cfg.n_head * head_dim * cfg.seq_len


def peak_tflops_for(device: torch.device, override: float | None) -> float | None:
    """Dense bf16 peak per GPU (NVIDIA datasheets); None on CPU (MFU is n/a there)."""
    if override:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device).upper()
    for key, tflops in (
        ("B200", 2250.0),
        ("H100", 989.0),
        ("H200", 989.0),
        ("H800", 989.0),
        ("A100", 312.0),
        ("A800", 312.0),
        ("L40S", 362.0),
        ("4090", 165.0),
    ):
        if key in name:
            return tflops
    return 989.0  # unknown GPU: assume H100-class; pass --peak-tflops for the real number


# --- end shared ---


# --- shared: lr_schedule ---
def lr_at(step: int, cfg: Config) -> float:
    """Linear warm-up, then cosine decay to min_lr: a function of the step, so resume-safe."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    # Fix --decay-steps when a run may later be extended with a larger --max-steps.
    total = cfg.decay_steps or cfg.max_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


# --- end shared ---


# --- CHECKPOINT ---
# --- shared: rng_state ---
def rng_state(use_cuda: bool) -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if use_cuda:
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict, use_cuda: bool) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if use_cuda and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


def gather_rng_states(use_cuda: bool, group) -> list:
    """Every rank's RNG state, gathered as bytes over the CPU (gloo) group."""
    mine = rng_state(use_cuda)
    if group is None:
        return [mine]
    buf = io.BytesIO()
    torch.save(mine, buf)
    data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    world = dist.get_world_size()
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([data.numel()]), group=group)
    padded = torch.zeros(max(int(n) for n in sizes), dtype=torch.uint8)
    padded[: data.numel()] = data
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    return [
        torch.load(io.BytesIO(bytes(t[: int(n)].tolist())), weights_only=True)
        for t, n in zip(gathered, sizes, strict=True)
    ]


# --- end shared ---


# --- shared: checkpoint_file ---
def save_checkpoint(path: Path, model, optimizer, train_state: dict, use_cuda: bool, group) -> None:
    """Every rank sends its RNG state; rank 0 writes a temp file and renames it over the old
    checkpoint, so a crash mid-write never leaves a truncated ckpt.pt behind."""
    rngs = gather_rng_states(use_cuda, group)
    if dist.get_rank() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rngs}
        torch.save({**state, **train_state}, tmp)
        os.replace(tmp, path)
    dist.barrier()  # nobody exits (or is killed) before the file is in place


def load_checkpoint(path: Path, model, optimizer, use_cuda: bool) -> dict:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as exc:  # another template's or another size's checkpoint in --out-dir
        first = str(exc).strip().splitlines()[0]
        raise SystemExit(
            f"{path} is a checkpoint of a different model ({first}): pass another --out-dir, "
            "or delete it to start from step 0"
        ) from None
    optimizer.load_state_dict(ckpt["optimizer"])
    rngs = ckpt["rng"]
    if len(rngs) == dist.get_world_size():  # same world size: every rank continues its stream
        set_rng_state(rngs[dist.get_rank()], use_cuda)
    return {k: ckpt[k] for k in ("step", "epoch", "batch_in_epoch")}


# --- end shared ---


# --- shared: resume_check ---
def check_resume_agrees(resume_step: int | None, path: Path, world_size: int, group) -> None:
    """Every rank must start from the same step (resume_step; None: no checkpoint). A
    checkpoint only some ranks can see (rank 0 wrote it to a node-local --out-dir), or one at
    another step (a stale one from an older run on a node's own disk), would have them load
    and run different steps, and then wait forever in a collective the others skip. Stop all
    of them with the reason, before any collective load (fsdp's dcp.load)."""
    if world_size == 1:
        return
    # One round: every rank's step (-1: not resuming) gives both the count and the steps.
    mine = torch.tensor([-1 if resume_step is None else resume_step], dtype=torch.long)
    steps = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(steps, mine, group=group)
    found = [int(t) for t in steps if int(t) >= 0]
    if 0 < len(found) < world_size:
        raise SystemExit(
            f"{path} exists for {len(found)} of {world_size} ranks only: put --out-dir "
            "(or --resume) on a filesystem every node shares"
        )
    distinct = sorted(set(found))
    if len(distinct) > 1:
        listed = ", ".join(map(str, distinct[:-1])) + f" and {distinct[-1]}"
        raise SystemExit(
            f"ranks would resume at steps {listed}: {path} differs between nodes (a stale "
            "checkpoint on a node-local disk?): put --out-dir (or --resume) on a filesystem "
            "every node shares, or delete the stale checkpoint"
        )


# --- end shared ---


# --- SIGNALS ---
# --- shared: stop_signal ---
STOP = {"signal": None}


def on_stop_signal(signum, frame):
    # Only set a flag: the loop finishes the step, checkpoints and exits cleanly.
    STOP["signal"] = STOP["signal"] or signal.Signals(signum).name
    if signum == signal.SIGINT:
        # A second Ctrl-C means "now": the default handler raises KeyboardInterrupt.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if os.environ.get("RANK", "0") == "0":  # os.write: print is not reentrant-safe here
            os.write(2, b"SIGINT: stopping after this step (a second SIGINT aborts)\n")


# --- end shared ---


# --- shared: loader_workers ---
def spare_loader_worker(rank_pid: int, _worker_id: int) -> None:
    # torchrun (os.killpg) and Slurm signal every process of the rank, DataLoader workers
    # included: a SIGTERM would kill them mid-step and crash the rank it is meant to stop cleanly.
    # So ignore SIGTERM from anyone but the rank itself: the rank's own SIGTERM (DataLoader's
    # shutdown, Python's exit after a crash or a second Ctrl-C) must still end the worker, or the
    # rank waits for it forever. Only a thread can see the sender (sigwaitinfo); not on macOS.
    # rank_pid, not getppid(): under forkserver (Python 3.14's default) that is the server.
    # SIGINT: the worker inherited the rank's handler at fork; the rank alone reports and stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not hasattr(signal, "sigwaitinfo"):
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # this and later threads

    def exit_on_sigterm_from_rank() -> None:
        while signal.sigwaitinfo({signal.SIGTERM}).si_pid != rank_pid:
            pass
        os._exit(0)  # what torch's own worker handler does for its parent's SIGTERM

    threading.Thread(target=exit_on_sigterm_from_rank, daemon=True).start()


# --- end shared ---


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(argv)
    # SIGTERM: Slurm preemption. SIGINT: Ctrl-C, which torchrun passes on to every rank as
    # SIGINT (torch/distributed/elastic/agent/server/api.py: _shutdown(e.sigval); envtool
    # launch forwards Ctrl-C to torchrun).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_stop_signal)

    # --- DISTRIBUTED SETUP ---
    # torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; without them this is one process, world size 1.
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and not cfg.cpu
    if use_cuda:
        torch.cuda.set_device(local_rank)  # before init_process_group: NCCL binds to this GPU
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    why_not_fp8 = fp8_unsupported(device) if cfg.fp8 else None
    if why_not_fp8:  # before any process group: every rank stops, rank 0 says why
        if rank == 0:
            print(f"--fp8: {why_not_fp8}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    if cfg.fp8 and not cfg.compile and rank == 0:  # measured: 0.45x bf16 eager at 124M
        print(
            "--fp8 without --compile: the FP8 casts run unfused and slow; add --compile", flush=True
        )
    backend = "nccl" if use_cuda else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend, device_id=device if use_cuda else None)
    else:  # a private in-memory store: no port, no env vars needed
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    master = rank == 0

    try:
        # A CPU (gloo) group for small control messages (stop flag, RNG states): no GPU syncs.
        flag_group = dist.new_group(backend="gloo") if world_size > 1 else None
        torch.manual_seed(cfg.seed)  # same seed on every rank: identical initial weights
        random.seed(cfg.seed)
        torch.backends.cuda.matmul.allow_tf32 = True  # any fp32 matmul left uses tensor cores
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if use_cuda else contextlib.nullcontext()
        )

        if cfg.data:
            dataset = ByteTokens(cfg.data, cfg.seq_len)
        else:
            dataset = SyntheticTokens(cfg.synthetic_samples, cfg.seq_len, cfg.vocab_size, cfg.seed)
        # Each rank sees a disjoint 1/world_size shard; set_epoch reshuffles every epoch.
        sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed, drop_last=True)
        batches_per_epoch = len(sampler) // cfg.batch_size
        if batches_per_epoch == 0:
            raise SystemExit("dataset too small for one batch per rank: lower --batch-size")

        raw_model = GPT(cfg).to(device)
        fpt = flops_per_token(raw_model, cfg)

        # Weight decay on matrices only; fused AdamW runs one kernel for all params on CUDA.
        decay = [p for p in raw_model.parameters() if p.dim() >= 2]
        no_decay = [p for p in raw_model.parameters() if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=use_cuda)

        # --- RESUME ---
        ckpt_path = Path(cfg.out_dir) / "ckpt.pt"  # where this run saves
        resume_path = ckpt_path if cfg.resume in ("auto", "never") else Path(cfg.resume)
        if cfg.resume not in ("auto", "never") and not resume_path.is_file():
            raise SystemExit(f"--resume {cfg.resume}: no such checkpoint")
        train_state = {"step": 0, "epoch": 0, "batch_in_epoch": 0}
        resuming = cfg.resume != "never" and resume_path.is_file()
        if resuming:  # local reads only, no collective: every rank knows its step for the check
            train_state = load_checkpoint(resume_path, raw_model, optimizer, use_cuda)
        resume_step = train_state["step"] if resuming else None
        check_resume_agrees(resume_step, resume_path, world_size, flag_group)
        if resuming and master:
            print(f"resumed from {resume_path} at step {resume_step}", flush=True)
        start_step = train_state["step"]
        # What the tokens are, for generate: bytes print as text, synthetic ids as numbers.
        train_state["vocab"] = "bytes" if cfg.data or cfg.vocab_size == 256 else "ids"

        # --- WRAP FOR DATA PARALLEL ---
        model = raw_model
        if world_size > 1:
            model = DDP(
                raw_model,
                device_ids=[local_rank] if use_cuda else None,
                bucket_cap_mb=cfg.bucket_cap_mb,
                gradient_as_bucket_view=True,  # grads live in the comm buckets: no copy
                # Same graph every step: DDP skips per-step bookkeeping. Not with compile, and not
                # with no_sync (torch 2.13 asserts in the reducer when the first step skips sync).
                static_graph=not cfg.compile and cfg.grad_accum == 1,
                # The only buffers are --fp8's casts, equal on every rank: no per-step broadcast.
                **{DDP_SYNC_BUFFERS: False},
            )
            if cfg.grad_compress == "bf16" and use_cuda:  # halves all-reduce bytes (NCCL only)
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                model.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
            elif cfg.grad_compress == "bf16" and master:
                print("--grad-compress bf16 needs NCCL (GPU); ignored on CPU", flush=True)
        ddp_model = model
        if cfg.compile:  # compile after DDP: the graph is split at buckets, comm overlaps
            model = torch.compile(model)

        def micro_batches():
            """(x, y) forever, epoch after epoch, starting where the checkpoint left off."""
            epoch, skip = train_state["epoch"], train_state["batch_in_epoch"]
            while epoch < 1_000_000:  # bounded: the training loop stops long before
                sampler.set_epoch(epoch)
                order = list(sampler)[skip * cfg.batch_size :]  # resume mid-epoch
                loader = DataLoader(
                    dataset,
                    batch_size=cfg.batch_size,
                    sampler=order,
                    drop_last=True,
                    num_workers=cfg.num_workers,
                    worker_init_fn=functools.partial(spare_loader_worker, os.getpid()),
                    pin_memory=use_cuda,
                )
                for i, (x, y) in enumerate(loader, start=skip):
                    train_state["epoch"], train_state["batch_in_epoch"] = epoch, i + 1
                    yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                epoch, skip = epoch + 1, 0

        # --- TRAINING LOOP ---
        batches = micro_batches()
        cast_fp8 = None
        if cfg.fp8:  # the first cast registers the buffers; later ones refresh them in place
            raw_model.cache_fp8_weights()
            cast_fp8 = raw_model.cache_fp8_weights
            cast_fp8 = torch.compile(cast_fp8) if cfg.compile else cast_fp8
        tokens_per_step = cfg.batch_size * cfg.seq_len * cfg.grad_accum * world_size
        peak = peak_tflops_for(device, cfg.peak_tflops)
        loss_sum = torch.zeros((), device=device)
        loss_value, tokens_per_s, mfu, stopped = None, None, None, "max_steps"
        t_log, step_log, t_first, step, saved_step = None, start_step, None, start_step, start_step
        model.train()
        # Profile before tuning: N steps after compile/warm-up, rank 0 prints where time goes.
        prof_start = start_step + 2 * cfg.log_every + 1 if cfg.profile_steps else -1
        prof = None
        for step in range(start_step + 1, cfg.max_steps + 1):
            if step == prof_start:
                acts = [torch.profiler.ProfilerActivity.CPU]
                if use_cuda:
                    acts.append(torch.profiler.ProfilerActivity.CUDA)
                prof = torch.profiler.profile(activities=acts)
                prof.start()
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step - 1, cfg)
            if cast_fp8 is not None:  # weights changed at the last optimizer step
                cast_fp8()
            for micro in range(cfg.grad_accum):
                x, y = next(batches)
                last = micro == cfg.grad_accum - 1
                # Only the last micro-step all-reduces gradients; the others just accumulate.
                sync = contextlib.nullcontext() if last or world_size == 1 else ddp_model.no_sync()
                with sync:
                    with autocast:
                        loss = model(x, y) / cfg.grad_accum
                    loss.backward()
                loss_sum += loss.detach()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            # All ranks must agree to stop (one got SIGTERM or SIGINT -> all checkpoint and exit).
            # The flag travels on a CPU (gloo) group so this never waits for the GPU.
            stop = torch.tensor([1 if STOP["signal"] else 0])
            if world_size > 1:
                dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=flag_group)
            stopping = bool(stop.item())

            is_log = step % cfg.log_every == 0 or step == cfg.max_steps or stopping
            if is_log:  # the only host<->device syncs: one per log step
                dist.all_reduce(loss_sum)
                loss_value = loss_sum.item() / world_size / (step - step_log)
                loss_sum.zero_()
                if use_cuda:
                    torch.cuda.synchronize()
                now = time.perf_counter()
                if t_log is not None:
                    tokens_per_s = tokens_per_step * (step - step_log) / (now - t_log)
                    mfu = fpt * tokens_per_s / (world_size * peak * 1e12) if peak else None
                if t_first is None:
                    t_first = (now, step)  # first log step ends warm-up (and compile)
                t_log, step_log = now, step
                if master:
                    rate = f"{tokens_per_s:.0f}" if tokens_per_s else "n/a"
                    mfu_s = f"{mfu:.1%}" if mfu is not None else "n/a"
                    print(
                        f"step {step} loss {loss_value:.6f} lr {lr_at(step - 1, cfg):.2e} "
                        f"tokens/s {rate} mfu {mfu_s}",
                        flush=True,
                    )
            if prof is not None and step == prof_start + cfg.profile_steps - 1:
                if use_cuda:
                    torch.cuda.synchronize()
                prof.stop()
                if master:
                    key = "self_device_time_total" if use_cuda else "self_cpu_time_total"
                    print(f"PROFILE steps {prof_start}..{step}", flush=True)
                    print(prof.key_averages().table(sort_by=key, row_limit=15), flush=True)
                prof = None
            train_state["step"] = step
            saving = stopping or (cfg.ckpt_every > 0 and step % cfg.ckpt_every == 0)
            if saving and cfg.ckpt_every >= 0:  # -1: benchmarks write no checkpoints
                save_checkpoint(ckpt_path, raw_model, optimizer, train_state, use_cuda, flag_group)
                saved_step = step
            if stopping:
                stopped = STOP["signal"] or "signal on another rank"
                break

        if cfg.ckpt_every >= 0 and saved_step != step:  # final state, unless just saved
            save_checkpoint(ckpt_path, raw_model, optimizer, train_state, use_cuda, flag_group)
        if t_first is not None and t_log is not None and step_log > t_first[1]:
            tokens_per_s = tokens_per_step * (step_log - t_first[1]) / (t_log - t_first[0])
            mfu = fpt * tokens_per_s / (world_size * peak * 1e12) if peak else None

        if cfg.rank_file_dir:  # for tests of the torchrun pattern: one file per RANK
            Path(cfg.rank_file_dir).mkdir(parents=True, exist_ok=True)
            Path(cfg.rank_file_dir, f"rank-{rank}").write_text(f"{loss_value}\n")
        if master:
            result = {
                "step": step,
                # null, not NaN (no JSON): nothing trained (a resume at --max-steps), or diverged
                "loss": loss_value
                if loss_value is not None and math.isfinite(loss_value)
                else None,
                "tokens_per_s": tokens_per_s,
                "mfu": mfu,
                "world_size": world_size,
                "params": sum(p.numel() for p in raw_model.parameters()),
                "start_step": start_step,
                "stopped": stopped,
            }
            print("RESULT " + json.dumps(result), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
