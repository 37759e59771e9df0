"""core/target.py: which environment a command acts on when none is named, and the line that
says so (the rule docs/active-environment.md gives users)."""

from __future__ import annotations

import pytest

from envtool.core.target import (
    ACTIVE_CONDA,
    ACTIVE_VENV,
    NAMED,
    OWN,
    PREFIX,
    ActiveEnvs,
    TargetChoice,
    choose_target,
    render_target_line,
)

OWN_PY = "/opt/pipx/venvs/envtool-cuda/bin/python"


def active(conda: str | None = None, venv: str | None = None, path: str = "") -> ActiveEnvs:
    return ActiveEnvs(conda_prefix=conda, virtual_env=venv, path=path, own_python=OWN_PY)


def test_nothing_active_is_envtools_own_python() -> None:
    assert choose_target(None, None, None, active()) == TargetChoice(OWN, OWN_PY)


def test_the_active_conda_env_then_the_active_venv() -> None:
    assert choose_target(None, None, None, active(conda="/c")) == TargetChoice(
        ACTIVE_CONDA, "/c", "CONDA_PREFIX"
    )
    assert choose_target(None, None, None, active(venv="/v")) == TargetChoice(
        ACTIVE_VENV, "/v", "VIRTUAL_ENV"
    )
    # an empty variable (a shell that exported CONDA_PREFIX=) is unset, not "the current dir"
    assert choose_target(None, None, None, active(conda="", venv="/v")).source == ACTIVE_VENV


def test_a_venv_activated_inside_a_conda_env_wins_when_it_is_first_on_path() -> None:
    """conda's auto-activated base, then `source .venv/bin/activate`: `python` is the venv's."""
    path = "/work/.venv/bin:/home/u/miniforge3/bin:/home/u/miniforge3/condabin:/usr/bin"
    chosen = choose_target(None, None, None, active("/home/u/miniforge3", "/work/.venv", path))
    assert (chosen.source, chosen.value) == (ACTIVE_VENV, "/work/.venv")
    assert "first on PATH" in chosen.note
    # the other way round (conda activate after the venv): the conda env
    path = "/home/u/miniforge3/envs/t/bin:/work/.venv/bin:/usr/bin"
    chosen = choose_target(
        None, None, None, active("/home/u/miniforge3/envs/t", "/work/.venv", path)
    )
    assert chosen.source == ACTIVE_CONDA
    # neither on PATH: $CONDA_PREFIX first, as documented
    assert choose_target(None, None, None, active("/c", "/v", "/usr/bin")).source == ACTIVE_CONDA


def test_what_the_user_named_wins_over_any_active_env() -> None:
    assert choose_target("t", None, None, active("/c", "/v")) == TargetChoice(NAMED, "t")
    assert choose_target(None, "/p", None, active("/c")).source == PREFIX


@pytest.mark.parametrize(
    "args, message",
    [
        (("a", "/p", None), "give one of NAME, --prefix, --python"),
        (("", None, None), "NAME '': empty"),
        ((None, " ", None), "--prefix '': empty"),
    ],
)
def test_contradicting_or_empty_flags_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(ValueError) as info:
        choose_target(*args, active("/c"))
    assert info.value.args[0] == message


def test_the_line_says_which_env_and_why() -> None:
    conda = TargetChoice(ACTIVE_CONDA, "/x", "CONDA_PREFIX")
    assert render_target_line("checking", conda, "/x", "conda env") == (
        "checking the active conda env /x ($CONDA_PREFIX)"
    )
    venv = TargetChoice(ACTIVE_VENV, "/v", "VIRTUAL_ENV")
    assert render_target_line("launching in", venv, "/v", "venv") == (
        "launching in the active venv /v ($VIRTUAL_ENV)"
    )
    own = render_target_line("checking", TargetChoice(OWN, OWN_PY), OWN_PY, "venv")
    assert own.startswith(f"checking envtool's own python {OWN_PY} (no conda env or venv is active")
    named = render_target_line("checking", TargetChoice(NAMED, "t"), "/e/t", "conda env", "t")
    assert named == "checking the conda env 't' at /e/t (NAME)"
