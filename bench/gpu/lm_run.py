"""Run a template's main with bench-only switches from the environment, so one device call can
try them side by side without editing the template:

- COMPILED_AUTOGRAD=1: every backward runs under compiled autograd (torch.compile traces the
  whole backward, the gradient accumulation into .grad included, and Inductor fuses it);
- PROFILE_ROWS=N: --profile-steps prints N rows of its kernel table instead of 15;
- FP8_RESIDUAL=bf16: --fp8 runs with the bf16 residual stream too (the template keeps fp32
  under --fp8, the way its figures were measured; GPT.fp8 is what decides).

Usage: python bench/gpu/lm_run.py templates/lm.py ARGS...
"""

from __future__ import annotations

import os
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

# the template imported by its name (Dynamo traces a module it can import), patched, then run
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
template = __import__(os.path.splitext(os.path.basename(sys.argv[0]))[0])
if os.environ.get("FP8_RESIDUAL") == "bf16":
    init = template.GPT.__init__

    def bf16_stream_init(self, cfg):
        init(self, cfg)
        self.fp8 = False  # only the residual stream reads it; the linears keep their own flag

    template.GPT.__init__ = bf16_stream_init
template.main()
