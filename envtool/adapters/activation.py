"""Activation through rattler: the script `conda activate` would run, and the environ it yields.

rattler's activator writes PATH/CONDA_PREFIX and sources the prefix's
`etc/conda/activate.d/*.sh` scripts (CUDA packages set variables there), so the environ is
computed by running that script in bash and reading `env -0` — not by guessing.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from envtool.adapters.proc import run_capture
from envtool.errors import DiagnosedFailure, UsageError

SHELLS = ("bash", "zsh", "fish")


def render_activation_script(prefix: Path, shell: str = "bash") -> str:
    """The script for `eval "$(envtool shell-hook NAME)"`; PATH keeps the caller's entries."""
    if shell not in SHELLS:
        raise UsageError(f"--shell {shell}: not supported", f"use one of {', '.join(SHELLS)}")
    from rattler.shell import ActivationVariables, Shell, activate

    result = activate(Path(prefix), ActivationVariables(None, []), getattr(Shell, shell))
    # rattler 0.28 bakes this process's PATH in front of the shell's own `${PATH}`; drop the
    # baked copy so the script prepends the env's bin/ to whatever PATH it is evaluated under.
    here = os.environ.get("PATH", "")
    script = result.script
    if here:
        script = script.replace(f":{here}:", ":")
    return script


def activated_environ(prefix: Path | str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ (or `base`) as it is after activating prefix, activate.d scripts included."""
    prefix = Path(prefix)
    if not (prefix / "conda-meta").is_dir():
        raise UsageError(
            f"{prefix}: not a conda environment (no conda-meta/)", "pass an installed env"
        )
    env = dict(os.environ if base is None else base)
    # Deactivate whatever conda env the caller had: the child must see only this prefix.
    for var in ("CONDA_PREFIX", "CONDA_SHLVL", "CONDA_DEFAULT_ENV"):
        env.pop(var, None)
    script = render_activation_script(prefix, "bash")
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as fh:
        fh.write(script)
        path = fh.name
    try:
        proc = run_capture(
            [
                "bash",
                "--noprofile",
                "--norc",
                "-c",
                'source "$1" >&2 && env -0',
                "envtool-activate",
                path,
            ],
            env=env,
            timeout=60,
        )
    finally:
        os.unlink(path)
    if not proc.ok:
        raise DiagnosedFailure(
            f"activating {prefix} failed: {(proc.stderr or '').strip()[-300:]}",
            f"check the scripts in {prefix}/etc/conda/activate.d",
        )
    out: dict[str, str] = {}
    for item in proc.stdout.split("\0"):
        if "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
    out.pop("_", None)
    out.pop("SHLVL", None)
    out["CONDA_DEFAULT_ENV"] = prefix.name
    return out
