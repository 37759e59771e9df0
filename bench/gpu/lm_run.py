"""Run a template's main with bench-only switches from the environment, so one device call can
try them side by side without editing the template:

- COMPILED_AUTOGRAD=1: every backward runs under compiled autograd (torch.compile traces the
  whole backward, the gradient accumulation into .grad included, and Inductor fuses it);
- PROFILE_ROWS=N: --profile-steps prints N rows of its kernel table instead of 15;
- WGRAD=rounded|upcast: BF16Matmul's weight gradient as a bf16 GEMM cast up afterwards
  (autocast's numbers) or a GEMM of the operands cast to fp32, instead of mm(out_dtype=fp32);
- RESIDUAL=bf16: the residual stream in bf16 under autocast (the embeddings' sum cast once),
  where autocast keeps it in fp32 (the fp32 embedding tables make it so).

Usage: python bench/gpu/lm_run.py templates/lm.py ARGS...
"""

from __future__ import annotations

import os
import runpy
import sys

import torch

if os.environ.get("COMPILED_AUTOGRAD") == "1":
    from torch._dynamo import compiled_autograd

    backward = torch.Tensor.backward

    def compiled_backward(self, *args, **kwargs):
        with compiled_autograd._enable(torch.compile):
            return backward(self, *args, **kwargs)

    torch.Tensor.backward = compiled_backward

rows = int(os.environ.get("PROFILE_ROWS", "0"))
if rows:
    from torch.autograd import profiler_util

    table = profiler_util.EventList.table

    def long_table(self, *args, **kwargs):
        kwargs["row_limit"] = rows
        return table(self, *args, **kwargs)

    profiler_util.EventList.table = long_table

sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
wgrad, residual = os.environ.get("WGRAD"), os.environ.get("RESIDUAL")
if wgrad or residual:
    import lm  # the template, importable by name so that Dynamo can trace the patches

    def patched_backward(ctx, grad_out):
        x2, wb = ctx.saved_tensors
        g2 = grad_out.reshape(-1, grad_out.shape[-1]).to(wb.dtype)
        grad_x = (g2 @ wb).view(*grad_out.shape[:-1], wb.shape[1])
        if wgrad == "rounded":
            grad_w = torch.mm(g2.t(), x2).to(ctx.w_dtype)
        else:
            grad_w = torch.mm(g2.t().to(ctx.w_dtype), x2.to(ctx.w_dtype))
        return grad_x, grad_w, None

    def bf16_residual_forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        if torch.is_autocast_enabled():
            x = x.to(torch.bfloat16)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return torch.nn.functional.cross_entropy(
            logits.view(-1, logits.size(-1)).float(), targets.view(-1)
        )

    if wgrad:
        lm.BF16Matmul.backward = staticmethod(patched_backward)
    if residual == "bf16":
        lm.GPT.forward = bf16_residual_forward
    sys.argv[0] = lm.__file__
    lm.main()
    sys.exit(0)
runpy.run_path(sys.argv[0], run_name="__main__")
