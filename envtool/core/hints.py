"""The command that finishes an unfinished install: one answer for info, list and doctor.

Pure. The recorded lock path (install's marker, or the finished install's record) is what the
command installs from, so it works from any folder; `envtool install NAME` alone needs
./environments/NAME/conda-lock.yml, which is only there in the project that created NAME.
"""

from __future__ import annotations

from pathlib import Path

from envtool.core.shell_quote import join_posix, quote_posix


def finish_install_command(
    name: str | None, prefix: str | None, lock_path: str | None, force: bool = False
) -> str:
    """`envtool install demo --lock /p/environments/demo/conda-lock.yml` for an env known by its
    NAME (installed at the envs dir's NAME), `envtool install --lock FILE --prefix P` for one
    given by its prefix. Without a recorded lock, the same with a LOCK_FILE placeholder.
    `force`: the host check refuses that lock here (core.host_check), so the command says
    --force (without it, the command given would only be refused)."""
    lock = quote_posix(lock_path) if lock_path else "LOCK_FILE"
    tail = " --force" if force else ""
    if name:
        return f"envtool install {quote_posix(name)} --lock {lock}{tail}"
    return f"envtool install --lock {lock} --prefix {quote_posix(prefix or 'PREFIX')}{tail}"


def remove_command(target: Path, envs_dir: Path) -> str:
    """The `envtool remove …` that names this env (by NAME when it lives in `envs_dir`, else by
    its prefix), quoted for a POSIX shell: what finishes an interrupted removal (remove, list)."""
    if target.parent == envs_dir:
        return join_posix(["envtool", "remove", target.name])
    return join_posix(["envtool", "remove", "--prefix", str(target)])
