"""What the template tests share: the tiny shapes, the child environment, and running a
template under torchrun (2 CPU processes, gloo) or as a plain script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

TEMPLATES = ("ddp", "lm", "fsdp")
# Small enough for 2 CPU cores; the same seed/schedule in every run so runs are comparable.
TINY = {
    "ddp": ["--hidden", "64", "--depth", "2", "--batch-size", "32"],
    "lm": ["--size", "tiny", "--vocab-size", "256", "--seq-len", "64", "--batch-size", "4"],
    "fsdp": ["--size", "tiny", "--vocab-size", "256", "--seq-len", "64", "--batch-size", "4"],
}
COMMON = ["--cpu", "--seed", "7", "--log-every", "1", "--warmup-steps", "2", "--decay-steps", "6"]
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)", re.MULTILINE)


def template(name: str) -> Path:
    return REPO / "templates" / f"{name}.py"


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    # A deprecated torch API called from a template's own code (the script runs as __main__,
    # under torchrun too) fails the run: torch's warnings about its own internals do not.
    env["PYTHONWARNINGS"] = "error::FutureWarning:__main__,error::DeprecationWarning:__main__"
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)  # a single-process run must not think it is under torchrun
    return env


def torchrun(name: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    argv += [str(template(name)), *TINY[name], *COMMON, *args]
    return subprocess.run(
        argv, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=120
    )


def single_process(name: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The template as a plain script: no torchrun, world size 1."""
    argv = [sys.executable, str(template(name)), *TINY[name], *COMMON, *args]
    return subprocess.run(
        argv, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=60
    )


def result_of(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, stdout  # rank 0 only, exactly once

    def not_json(constant: str) -> None:  # Python's json reads NaN; jq and JSON do not
        raise AssertionError(f"{constant} in RESULT: {lines[0]}")

    return json.loads(lines[0].removeprefix("RESULT "), parse_constant=not_json)


def step_losses(stdout: str) -> dict[int, str]:
    return {int(step): loss for step, loss in STEP_LINE.findall(stdout)}


def top_level_imports(path: Path) -> set[str]:
    """The packages a template imports (relative imports refused: it is one standalone file)."""
    import ast

    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in a standalone script"
            imported.add(node.module.split(".")[0])
    return imported
