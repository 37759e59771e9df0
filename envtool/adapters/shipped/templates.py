"""Training-script templates: find them (source checkout or installed wheel), read, write.

Templates are plain files in the repository's `templates/`; a wheel carries them as
`envtool/_data/templates` (pyproject force-include). Writing is atomic: a temp file in the
destination directory, then os.replace, so an interrupted `envtool init` leaves no half file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from envtool.errors import UsageError

DEFAULT_FILENAME = "train.py"
SAMPLE_FILENAME = "sample.py"  # the generate template samples, it does not train (README's name)


def default_filename(template: str) -> str:
    """What `envtool init` names the script when DEST is a folder or absent."""
    return SAMPLE_FILENAME if template == "generate" else DEFAULT_FILENAME


@dataclass(frozen=True)
class TemplateInfo:
    name: str
    description: str
    prints: str
    # Flags that size a run for a laptop CPU (init prints them when no GPU is visible): the
    # defaults are GPU-sized, and a 124M model on a CPU logs its first step after minutes.
    # SCRIPT stands for the written script's path: the lm templates train on its own text
    # (on synthetic tokens the loss stays at ln 256 and a sample of it is noise).
    cpu_args: tuple[str, ...] = ()


SCRIPT = "{script}"


# The catalogue `envtool init --list` shows; each name is templates/<name>.py.
TEMPLATES: dict[str, TemplateInfo] = {
    "ddp": TemplateInfo(
        "ddp",
        "General DistributedDataParallel loop: put your model and dataset in the marked "
        "places (default: an MLP on a synthetic classification task).",
        'per step "step N loss X lr Y samples/s Z"; last line RESULT {"step", "loss", '
        '"samples_per_s", ...}',
        cpu_args=tuple("--hidden 256 --batch-size 64 --max-steps 200".split()),
    ),
    "lm": TemplateInfo(
        "lm",
        "GPT-style causal language model with DDP (--size tiny|124m|350m|1.3b; synthetic "
        "tokens, or --data FILE as bytes).",
        'per step "step N loss X lr Y tokens/s Z mfu W"; last line RESULT {"step", "loss", '
        '"tokens_per_s", "mfu", ...}',
        cpu_args=(
            *"--size tiny --seq-len 128 --batch-size 8 --max-steps 200".split(),
            "--data",
            SCRIPT,
        ),
    ),
    "fsdp": TemplateInfo(
        "fsdp",
        "The lm model sharded with FSDP2 (fully_shard, bf16 mixed precision) and "
        "torch.distributed.checkpoint (DCP) checkpoints: for models too big for one GPU.",
        'per step "step N loss X lr Y tokens/s Z mfu W"; last line RESULT {"step", "loss", '
        '"tokens_per_s", "mfu", ...}',
        cpu_args=(
            *"--size tiny --seq-len 128 --batch-size 8 --max-steps 200".split(),
            "--data",
            SCRIPT,
        ),
    ),
    "generate": TemplateInfo(
        "generate",
        "Sample an lm/fsdp checkpoint (or random weights, --size, to benchmark): static KV "
        "cache, bf16, compiled prefill and CUDA-graph decode, temperature/top-k/top-p, "
        "--serve PORT (HTTP: POST /generate and the OpenAI API, /metrics), tensor-parallel "
        "under torchrun.",
        '"prefill N tokens: TTFT X ms", "decode N tokens: X tokens/s, ... = W% of peak"; '
        'last line RESULT {"ttft_ms", "decode_tokens_per_s", "mbu", "tokens", ...}',
        cpu_args=tuple("--size tiny --seq-len 128 --prompt-len 16 --max-new-tokens 32".split()),
    ),
}


@dataclass(frozen=True)
class InitPlan:
    template: str
    source: Path
    target: Path
    overwrite: bool  # the target exists and --force was given


def templates_dir() -> Path:
    """templates/ beside the package (editable install, checkout) or envtool/_data/templates."""
    import envtool

    package = Path(envtool.__file__).resolve().parent
    for candidate in (package / "_data" / "templates", package.parent / "templates"):
        if (candidate / "ddp.py").is_file():
            return candidate
    raise UsageError(
        f"no training-script templates found next to {package}",
        "reinstall envtool (the wheel ships them in envtool/_data/templates)",
    )


def template_path(name: str) -> Path:
    if name not in TEMPLATES:
        raise UsageError(
            f"unknown template {name!r}", f"choose one of: {', '.join(sorted(TEMPLATES))}"
        )
    path = templates_dir() / f"{name}.py"
    if not path.is_file():
        raise UsageError(f"template file {path} is missing", "reinstall envtool")
    return path


def plan_init(name: str, dest: str | os.PathLike[str] | None, force: bool) -> InitPlan:
    """Where `envtool init` would write, refusing to clobber a file without --force."""
    source = template_path(name)
    target = Path(dest) if dest else Path(default_filename(name))
    if target.is_dir() or str(dest or "").endswith(("/", os.sep)):
        target = target / default_filename(name)
    if target.is_dir():
        raise UsageError(f"{target} is a directory", "give a file name for the script")
    exists = target.exists()
    if exists and not force:
        raise UsageError(f"{target} already exists", "pass --force to overwrite it")
    return InitPlan(name, source, target, overwrite=exists)


def apply_init(plan: InitPlan) -> int:
    """Write the template to plan.target atomically; returns the number of bytes written.
    write_atomic refuses a device node or directory at the target (`init /dev/full --force`
    as root replaced the node with a regular file)."""
    from envtool.adapters.files import write_atomic

    data = plan.source.read_bytes()
    write_atomic(plan.target, data, mode=0o644)  # a script the user owns should be readable
    return len(data)
