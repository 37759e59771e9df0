"""Activation: the script `conda activate` would run, and the environ it yields.

Activating a prefix sets PATH (its bin/ first), CONDA_PREFIX, CONDA_SHLVL and CONDA_DEFAULT_ENV,
exports the `env_vars` of `conda-meta/state` (`conda env config vars set`), then sources the
prefix's `etc/conda/activate.d` scripts for the shell (CUDA packages set variables there).

The text is built here, not by rattler's activator: rattler puts the prefix and the state's
values inside double quotes, so an env name holding `$(…)` or a backtick ran a command when the
hook was eval'd. Every value goes through `shell_quote.quote(shell, …)`; only the caller's own
`$PATH` is left to expand, as a separate unquoted reference. The text holds no terminal control
character (quote_printable writes them as the shell's escapes), so printing it is safe too. `activated_environ` (used by `run`
and `launch`) evaluates the same bash text, so both paths share one renderer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from envtool.adapters.proc import run_capture
from envtool.core.shell_quote import quote_printable as quote
from envtool.errors import DiagnosedFailure, UsageError

SHELLS = ("bash", "zsh", "sh", "fish", "powershell")
# activate.d scripts conda sources for each shell
_SCRIPT_SUFFIX = {"bash": ".sh", "zsh": ".sh", "sh": ".sh", "fish": ".fish", "powershell": ".ps1"}
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
STATE_LIMIT = 1024 * 1024  # conda-meta/state holds a few variables


def state_env_vars(prefix: Path) -> dict[str, str]:
    """`env_vars` of `conda-meta/state`, checked: names are shell identifiers, values strings
    without NUL (an environ cannot hold one). Anything else is refused with one line."""
    from envtool.adapters.files import read_bytes
    from envtool.core.safe_load import parse_json

    path = Path(prefix) / "conda-meta" / "state"
    if not path.exists() and not path.is_symlink():
        return {}
    hint = f"fix or delete {path} (`conda env config vars` writes it)"
    data = parse_json(read_bytes(path, STATE_LIMIT, what="conda-meta/state file"), str(path), hint)
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object", hint)
    env_vars = data.get("env_vars") or {}
    if not isinstance(env_vars, dict):
        raise UsageError(f"{path}: env_vars is not an object", hint)
    out: dict[str, str] = {}
    for name, value in env_vars.items():
        if not _VAR_NAME.fullmatch(name):
            raise UsageError(f"{path}: env_vars name {name!r} is not a variable name", hint)
        if not isinstance(value, str) or "\0" in value:
            raise UsageError(f"{path}: env_vars {name} is not a string without NUL", hint)
        out[name] = value
    return out


def _activate_scripts(prefix: Path, shell: str) -> list[Path]:
    folder = prefix / "etc" / "conda" / "activate.d"
    if not folder.is_dir():
        return []
    suffix = _SCRIPT_SUFFIX[shell]
    return sorted(p for p in folder.iterdir() if p.name.endswith(suffix) and p.is_file())


def _set(shell: str, name: str, value: str) -> str:
    """One variable assignment; `name` is an identifier (checked by the caller), `value` quoted."""
    if shell == "fish":
        return f"set -gx {name} {quote(shell, value)}"
    if shell == "powershell":
        return f"$env:{name} = {quote(shell, value)}"
    return f"export {name}={quote(shell, value)}"


def _prepend_path(shell: str, directory: str) -> str:
    """PATH with `directory` first; the caller's $PATH expands, outside the quoted word."""
    if shell == "fish":  # fish's PATH is a list
        return f"set -gx PATH {quote(shell, directory)} $PATH"
    if shell == "powershell":
        return f"$env:PATH = {quote(shell, directory)} + [IO.Path]::PathSeparator + $env:PATH"
    # ${PATH:+:$PATH}: an empty PATH must not become a trailing ':' (the current directory)
    return f'export PATH={quote(shell, directory)}"${{PATH:+:$PATH}}"'


def _source(shell: str, script: Path) -> str:
    if shell == "fish":
        return f"source {quote(shell, str(script))}"
    return f". {quote(shell, str(script))}"


def render_activation_script(prefix: Path, shell: str = "bash") -> str:
    """The script for `eval "$(envtool shell-hook NAME)"`; PATH keeps the caller's entries."""
    if shell not in SHELLS:
        raise UsageError(f"--shell {shell}: not supported", f"use one of {', '.join(SHELLS)}")
    prefix = Path(prefix)
    variables = {
        "CONDA_PREFIX": str(prefix),
        "CONDA_SHLVL": "1",
        "CONDA_DEFAULT_ENV": prefix.name,
        **state_env_vars(prefix),
    }
    lines = [_prepend_path(shell, str(prefix / "bin"))]
    lines += [_set(shell, k, v) for k, v in variables.items()]
    lines += [_source(shell, s) for s in _activate_scripts(prefix, shell)]
    return "\n".join(lines) + "\n"


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
    # The script is an argument, evaluated by bash: no temp file, and no value in it is code.
    proc = run_capture(
        [
            "bash",
            "--noprofile",
            "--norc",
            "-c",
            'eval "$1" >&2 && env -0',
            "envtool-activate",
            script,
        ],
        env=env,
        timeout=60,
    )
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
