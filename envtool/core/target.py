"""**The** rule for which environment a command acts on (doctor, launch, run, verify, info,
export, shell-hook): what the user named, else the environment they activated, else envtool's
own interpreter, and the one line that says which and why.

Pure: `adapters/locate.read_active_envs` reads the variables, `locate.resolve_target` checks the
choice against the disk. docs/active-environment.md describes the rule for users.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

# How a target was chosen; `source` in --json.
NAMED, PREFIX, PYTHON, ACTIVE_CONDA, ACTIVE_VENV, OWN = (
    "name",
    "prefix",
    "python",
    "active-conda",
    "active-venv",
    "own",
)


@dataclass(frozen=True)
class ActiveEnvs:
    """What the shell says is active, as an adapter read it (empty strings are "unset")."""

    conda_prefix: str | None = None  # $CONDA_PREFIX (conda/mamba/micromamba activate)
    virtual_env: str | None = None  # $VIRTUAL_ENV (venv, virtualenv, uv, poetry activate)
    path: str = ""  # $PATH: which of two active envs was activated last
    own_python: str = ""  # sys.executable: envtool's interpreter (pipx's venv when pipx-installed)


@dataclass(frozen=True)
class TargetChoice:
    """The environment chosen, before the disk is asked: `value` is a NAME, a prefix or a
    python path depending on `source`; `variable` the environment variable it came from."""

    source: str
    value: str
    variable: str | None = None
    note: str = ""  # why, when the rule had a choice to make (two active envs)


def choose_target(
    name: str | None, prefix: str | None, python: str | None, active: ActiveEnvs
) -> TargetChoice:
    """NAME, --prefix or --python when given (at most one); else $CONDA_PREFIX, else
    $VIRTUAL_ENV, else envtool's own python. Both variables set (a venv activated inside a conda
    env, e.g. conda's auto-activated base): the one whose bin/ comes first on PATH was activated
    last and is the one `python` runs, so it wins; neither on PATH: $CONDA_PREFIX. Raises
    ValueError (message, hint) for flags that contradict each other or are empty."""
    for flag, value in (("NAME", name), ("--prefix", prefix), ("--python", python)):
        if value is not None and not value.strip():  # `doctor ""`: not "the default env"
            raise ValueError(f"{flag} '': empty", f"pass a {flag}, or leave it out")
    given = [x for x in (name, prefix, python) if x]
    if len(given) > 1:
        raise ValueError(
            "give one of NAME, --prefix, --python", "pick the one environment to act on"
        )
    if name:
        return TargetChoice(NAMED, name)
    if prefix:
        return TargetChoice(PREFIX, prefix)
    if python:
        return TargetChoice(PYTHON, python)
    conda = active.conda_prefix or None
    venv = active.virtual_env or None
    if conda and venv and _norm(conda) != _norm(venv):
        first = _first_on_path(active.path, {"conda": conda, "venv": venv})
        if first == "venv":
            return TargetChoice(
                ACTIVE_VENV, venv, "VIRTUAL_ENV", "activated after $CONDA_PREFIX: first on PATH"
            )
        return TargetChoice(ACTIVE_CONDA, conda, "CONDA_PREFIX", "$VIRTUAL_ENV is set too")
    if conda:
        return TargetChoice(ACTIVE_CONDA, conda, "CONDA_PREFIX")
    if venv:
        return TargetChoice(ACTIVE_VENV, venv, "VIRTUAL_ENV")
    return TargetChoice(OWN, active.own_python)


def _norm(path: str) -> str:
    return posixpath.normpath(path)


def _first_on_path(path: str, prefixes: dict[str, str]) -> str | None:
    """Which of `prefixes` has its bin (or Scripts) folder earliest on PATH (POSIX paths: the
    platforms envtool runs on)."""
    bins = {_norm(posixpath.join(p, sub)): key for key, p in prefixes.items() for sub in ("bin",)}
    for entry in path.split(":"):
        if entry and _norm(entry) in bins:
            return bins[_norm(entry)]
    return None


def render_target_line(
    verb: str, choice: TargetChoice, where: str, kind: str, label: str | None = None
) -> str:
    """The one line every command prints (stderr) about its target: `verb` ("checking",
    "launching in"), `where` the prefix or python found, `kind` "conda env" / "venv" /
    "environment", `label` the env's NAME when it was named."""
    if choice.source == NAMED:
        return f"{verb} the {kind} {label or choice.value!r} at {where} (NAME)"
    if choice.source == PREFIX:
        return f"{verb} the {kind} at {where} (--prefix)"
    if choice.source == PYTHON:
        return f"{verb} the {kind} of {where} (--python)"
    if choice.source in (ACTIVE_CONDA, ACTIVE_VENV):
        why = f"${choice.variable}" + (f"; {choice.note}" if choice.note else "")
        return f"{verb} the active {kind} {where} ({why})"
    return (
        f"{verb} envtool's own python {where} (no conda env or venv is active: "
        "activate one, or name one: NAME or -n NAME, or --prefix)"
    )
