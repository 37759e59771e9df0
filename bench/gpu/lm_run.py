"""Run a template's main with bench-only switches from the environment, so one device call can
try them side by side without editing the template:

- COMPILED_AUTOGRAD=1: every backward runs under compiled autograd (torch.compile traces the
  whole backward, the gradient accumulation into .grad included, and Inductor fuses it);
- PROFILE_ROWS=N: --profile-steps prints N rows of its kernel table instead of 15.

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
runpy.run_path(sys.argv[0], run_name="__main__")
