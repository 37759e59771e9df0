"""Where environments live, and which python a command targets (-n NAME / --prefix / --python)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from envtool.core.shell_quote import printable, quote_posix
from envtool.errors import UsageError


def conda_root(environ: dict[str, str] | None = None) -> Path | None:
    """The conda/mamba installation whose envs/ `conda activate NAME` searches, if one exists."""
    env = os.environ if environ is None else environ
    for var in ("ENVTOOL_CONDA_ROOT", "MAMBA_ROOT_PREFIX", "CONDA_ROOT"):
        if env.get(var):
            return Path(env[var])
    if env.get("CONDA_EXE"):  # <root>/bin/conda or <root>/condabin/conda
        return Path(env["CONDA_EXE"]).resolve().parent.parent
    home = Path(env.get("HOME", str(Path.home())))
    for name in ("miniforge3", "mambaforge", "miniconda3", "anaconda3"):
        if (home / name / "conda-meta").is_dir():
            return home / name
    return None


def envs_dir(environ: dict[str, str] | None = None) -> Path:
    """<conda root>/envs when conda is installed (so `conda activate NAME` works), else a per-user dir."""
    env = os.environ if environ is None else environ
    if env.get("ENVTOOL_ENVS_DIR"):
        return checked_dir(Path(env["ENVTOOL_ENVS_DIR"]), "ENVTOOL_ENVS_DIR")
    root = conda_root(env)
    if root is not None:
        return root / "envs"
    if env.get("XDG_DATA_HOME"):
        return checked_dir(Path(env["XDG_DATA_HOME"]) / "envtool" / "envs", "XDG_DATA_HOME")
    home = Path(env.get("HOME", str(Path.home())))
    return checked_dir(home / ".local" / "share" / "envtool" / "envs", "HOME")


def checked_dir(path: Path, origin: str) -> Path:
    """`path`, a directory envtool keeps things in, unless it or the nearest existing folder
    above it is a file (ENVTOOL_ENVS_DIR/ENVTOOL_CACHE_DIR set to a file): then one line naming
    the variable it came from, not an OSError deep in a command. It need not exist yet."""
    for p in (path, *path.parents):
        try:
            is_dir = p.is_dir()
            exists = is_dir or os.path.lexists(p)
        except OSError:  # ENAMETOOLONG, EACCES on a parent: let the command's own error say it
            return path
        if exists:
            if not is_dir:
                what = "is" if p == path else f"is under {p}, which is"
                raise UsageError(
                    f"{origin}: {path} {what} not a directory",
                    f"point {origin} at a directory (or unset it)"
                    if origin.startswith("ENVTOOL_")
                    else f"move the file {p} away, or set ENVTOOL_ENVS_DIR / ENVTOOL_CACHE_DIR",
                )
            return path
    return path


def python_in(prefix: Path) -> Path:
    for candidate in (prefix / "bin" / "python", prefix / "python.exe", prefix / "bin" / "python3"):
        if candidate.exists():
            return candidate
    return prefix / "bin" / "python"


@dataclass(frozen=True)
class Target:
    """The environment a command acts on."""

    python: Path
    prefix: Path | None
    name: str | None = None

    @property
    def label(self) -> str:
        return self.name or str(self.prefix or self.python)


def resolve_target(
    name: str | None = None, prefix: str | None = None, python: str | None = None
) -> Target:
    """-n NAME, --prefix PATH or --python PATH; none given → the python envtool runs under."""
    for flag, value in (("NAME", name), ("--prefix", prefix), ("--python", python)):
        if value is not None and not value.strip():  # `doctor ""`: not "the default env"
            raise UsageError(f"{flag} '': empty", f"pass a {flag}, or leave it out")
    given = [x for x in (name, prefix, python) if x]
    if len(given) > 1:
        raise UsageError(
            "give one of NAME, --prefix, --python", "pick the one environment to act on"
        )
    if name:
        p = Path(name)
        if os.sep in name and p.is_dir():  # a path given positionally
            return Target(python_in(p), p, None)
        pre = env_prefix(name)  # refuses a NAME that climbs out of the envs dir
        if not pre.is_dir():
            raise UsageError(
                f"no environment named {name!r} under {envs_dir()}",
                f"create it with `envtool create {quote_posix(name)}`, or pass --prefix PATH / --python PATH",
            )
        return Target(python_in(pre), pre, name)
    if prefix:
        pre = Path(prefix).expanduser().resolve()
        if not pre.is_dir():
            raise UsageError(
                f"--prefix {prefix}: no such directory", "pass an existing environment prefix"
            )
        return Target(python_in(pre), pre, None)
    if python:
        exe = Path(python).expanduser()
        if not exe.exists():
            raise UsageError(
                f"--python {python}: no such file", "pass the path of the environment's python"
            )
        return Target(exe, _prefix_of(exe), None)
    exe = Path(sys.executable)
    return Target(exe, Path(sys.prefix), None)


def _prefix_of(exe: Path) -> Path | None:
    parent = exe.parent
    if parent.name in ("bin", "Scripts"):
        return parent.parent
    return parent


# --- install/list/remove helpers (additive) ---------------------------------------------


def env_prefix(name: str | None, prefix: str | None = None) -> Path:
    """Where NAME is (or will be) installed: --prefix wins, else envs_dir()/NAME. Need not exist."""
    if prefix:
        return Path(prefix).expanduser().absolute()
    if not name:
        raise UsageError("no environment given", "pass NAME or --prefix PATH")
    # `..` is the conda root, itself a conda env (`remove ..` deleted it); an absolute path, as
    # before, is taken as given
    if os.path.isabs(name):
        return Path(name)
    check_env_name(name)
    return envs_dir() / name


def check_env_name(name: str) -> str:
    """The one validator for a NAME that becomes a path (envs dir, environments/NAME/): refused
    with one line when it is not a plain folder name conda would accept."""
    if name in (".", "..") or ".." in Path(name).parts or "/" in name:
        raise UsageError(
            f"{printable(name)!r}: not a valid environment name (it leaves {envs_dir()})",
            "pass --prefix PATH",
        )
    if not valid_env_name(name):
        raise UsageError(
            f"{printable(name)!r}: not a valid environment name",
            "a conda env name: at most 255 bytes, no / \\ : # spaces or control characters, "
            "not starting with -",
        )
    return name


def valid_env_name(name: str) -> bool:
    """conda's rule (no /, space, : or #), plus no backslash, no leading '-' (an option), and
    not . or .. (NAME becomes a folder)."""
    return (
        re.fullmatch(r"(?!\.\.?$)[^-/\\\s:#\x00-\x1f\x7f-\x9f][^/\\\s:#\x00-\x1f\x7f-\x9f]*", name)
        is not None
        and len(name.encode("utf-8", "surrogateescape")) <= 255  # NAME_MAX: one path component
    )


def project_env_paths(name: str, directory: str | None = None) -> tuple[Path, Path, Path]:
    """environments/NAME/, its environment.yml and conda-lock.yml in the project at `directory`
    (default: cwd), as `envtool create` writes them. NAME becomes a path, so it is checked."""
    check_env_name(name)
    root = Path(directory or ".")
    env_dir = root / "environments" / name
    # a cloned repository can commit environments/NAME as a link to anywhere: create and lock
    # would write there; links that stay inside the project are fine
    for folder in (root / "environments", env_dir):
        if folder.is_symlink() and not folder.resolve().is_relative_to(root.resolve()):
            raise UsageError(
                f"{folder} is a link to {printable(str(folder.resolve()))}, outside the project",
                "replace the link with a folder (envtool writes and reads the env's files there)",
            )
    return env_dir, env_dir / "environment.yml", env_dir / "conda-lock.yml"


def project_lock_path(name: str) -> Path:
    """The project's lock for NAME, absolute: it is recorded in the install state."""
    return project_env_paths(name)[2].absolute()


def existing_env(name: str | None, prefix: str | None = None) -> Path:
    """The prefix of an environment that must already exist (verify, info, run, shell-hook)."""
    target = env_prefix(name, prefix)
    if not looks_like_env(target):
        raise UsageError(f"no environment at {target}", "see `envtool list`, or pass --prefix PATH")
    return target


def looks_like_env(prefix: Path) -> bool:
    """A conda prefix has conda-meta/ (with `history` or package records): the guard for remove."""
    from envtool.adapters.install.install_state import read_install_state

    meta = Path(prefix) / "conda-meta"
    return meta.is_dir() and (
        (meta / "history").exists()
        or any(meta.glob("*.json"))
        or read_install_state(prefix) == "incomplete"
    )


def list_env_prefixes(environ: dict[str, str] | None = None) -> list[Path]:
    """Every environment under envs_dir(), sorted by name."""
    root = envs_dir(environ)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and looks_like_env(p))


def current_platform() -> str:
    """This machine's conda platform (linux-64, osx-arm64, …), as rattler names it."""
    from rattler.platform import Subdir

    return str(Subdir.current())


def default_cache_dir() -> Path:
    """ENVTOOL_CACHE_DIR, else the user's cache dir: shared by every env, so reinstalls are offline."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return checked_dir(Path(os.environ["ENVTOOL_CACHE_DIR"]), "ENVTOOL_CACHE_DIR")
    if os.environ.get("XDG_CACHE_HOME"):
        return checked_dir(Path(os.environ["XDG_CACHE_HOME"]) / "envtool", "XDG_CACHE_HOME")
    return checked_dir(Path.home() / ".cache" / "envtool", "HOME")
