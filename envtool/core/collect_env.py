"""`python -m torch.utils.collect_env` output -> EnvFacts: what a bug report's capture says of
the torch that ran it. Pure. Used by `doctor --replay` of a folder of raw captures (nvidia-smi
outputs plus collect_env.txt) that has no env.json."""

from __future__ import annotations

import re

from envtool.core.facts import EnvFacts, TorchFacts

_UNKNOWN = ("", "N/A", "None", "Could not collect")


def _field(text: str, label: str) -> str | None:
    m = re.search(rf"^{re.escape(label)}:[ \t]*(.*)$", text, re.MULTILINE)
    if not m or m.group(1).strip() in _UNKNOWN:
        return None
    return m.group(1).strip()


def parse_collect_env(text: str) -> EnvFacts:
    """The torch version, the CUDA it was built for, `Is CUDA available`, the GPU count and the
    python version collect_env printed; facts it could not collect stay None."""
    version = _field(text, "PyTorch version")
    available = _field(text, "Is CUDA available")
    python = _field(text, "Python version")
    gpus = re.findall(r"^GPU \d+: ", text, re.MULTILINE)
    single = _field(text, "GPU models and configuration")
    count = len(gpus) or (1 if single else None)
    torch = (
        TorchFacts(
            version=version,
            cuda=_field(text, "CUDA used to build PyTorch"),
            is_available=None if available is None else available == "True",
            device_count=count if available == "True" else None,
        )
        if version
        else None
    )
    return EnvFacts(
        python_exe=None,
        status="ok" if torch else "not-probed",
        python_version=python.split()[0] if python else None,
        torch=torch,
    )
