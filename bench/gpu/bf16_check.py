"""GPU check of lm's bf16 cast-once path (BF16Matmul, GPT.cache_weights) against autocast:
loss and gradients, eager and compiled, for each way of computing the weight gradient, and
whether the cached copies stay equal to the weights (a corrupted or stale copy shows here).

Usage (repo root, a CUDA machine): python bench/gpu/bf16_check.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "templates"))
import lm  # noqa: E402


def wgrad_fp32(g2, x2, dtype):
    return torch.mm(g2.t(), x2, out_dtype=dtype)


def wgrad_rounded(g2, x2, dtype):
    return torch.mm(g2.t(), x2).to(dtype)


def wgrad_upcast(g2, x2, dtype):
    return torch.mm(g2.t().to(dtype), x2.to(dtype))


WGRADS = {"fp32-out": wgrad_fp32, "bf16-rounded": wgrad_rounded, "fp32-inputs": wgrad_upcast}


def main() -> None:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randn(4096, 512, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 768, device=dev, dtype=torch.bfloat16)
    exact = a.double().t() @ b.double()
    for name, fn in WGRADS.items():
        for mode, f in (("eager", fn), ("compiled", torch.compile(fn))):
            got = f(a, b, torch.float32)
            err = ((got.double() - exact).norm() / exact.norm()).item()
            print(
                f"mm {name:12s} {mode:8s} dtype {got.dtype} shape {tuple(got.shape)} rel {err:.2e}"
            )

    cfg = lm.parse_config(["--size", "tiny", "--vocab-size", "50304", "--seq-len", "256"])
    cfg.n_layer, cfg.n_head, cfg.d_model = 4, 8, 512
    torch.manual_seed(0)
    model = lm.GPT(cfg).to(dev)
    idx = torch.randint(
        0, 50304, (4, 256), device=dev, generator=torch.Generator(dev).manual_seed(1)
    )

    def run(m, micro=2):
        model.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(micro):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(idx.roll(k, 0), idx.roll(k, 0).roll(-1, 1)) / micro
            loss.backward()
            total += loss.item()
        return total, [p.grad.clone() for p in model.parameters()]

    def copies_ok():
        return all(
            torch.equal(m.bf16_w, m.weight.bfloat16())
            for m in model.modules()
            if isinstance(m, lm.Linear) and hasattr(m, "bf16_w")
        )

    ref_loss, ref = run(model)
    print(f"reference (eager autocast, no copies): loss {ref_loss:.6f}")
    compiled = torch.compile(model)
    c_loss, c_grads = run(compiled)
    print(f"compiled autocast, no copies: loss {c_loss:.6f} " + rels(c_grads, ref))
    backward = lm.BF16Matmul.backward
    for name, fn in WGRADS.items():

        def patched(ctx, grad_out, fn=fn):
            x2, wb = ctx.saved_tensors
            g2 = grad_out.reshape(-1, grad_out.shape[-1]).to(wb.dtype)
            grad_x = (g2 @ wb).view(*grad_out.shape[:-1], wb.shape[1])
            return grad_x, fn(g2, x2, ctx.w_dtype), None

        lm.BF16Matmul.backward = staticmethod(patched)
        for mode in ("eager", "compiled"):
            torch._dynamo.reset()
            model.cache_weights(bf16=True)
            m = model if mode == "eager" else torch.compile(model)
            loss, grads = run(m)
            print(
                f"copies, wgrad {name:12s} {mode:8s}: loss {loss:.6f} copies intact {copies_ok()} "
                + rels(grads, ref)
            )
    lm.BF16Matmul.backward = backward
    for p in model.parameters():
        p.data.add_(torch.randn_like(p) * 0.01)
    torch._dynamo.reset()
    cast = torch.compile(model.cache_weights)
    cast(bf16=True)
    print(f"compiled cache_weights after a weight change: copies equal {copies_ok()}")
    for n, m in model.named_modules():
        if isinstance(m, lm.Linear) and not torch.equal(m.bf16_w, m.weight.bfloat16()):
            d = (m.bf16_w.float() - m.weight.bfloat16().float()).abs().max().item()
            print(f"  stale or wrong: {n} max diff {d:.3e}")


def rels(grads, ref) -> str:
    worst = max(
        ((g - r).norm() / r.norm()).item() for g, r in zip(grads, ref, strict=True) if r.norm() > 0
    )
    head = ((grads[0] - ref[0]).norm() / ref[0].norm()).item()
    return f"grads worst rel {worst:.2e} (tok_emb/head {head:.2e})"


if __name__ == "__main__":
    main()
