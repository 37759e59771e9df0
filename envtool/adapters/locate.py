"""Where environments live, and which environment a command targets (NAME / --prefix / --python /
the active one: core/target decides)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envtool.core.shell_quote import printable, quote_posix
from envtool.core.target import (
    ACTIVE_CONDA,
    ACTIVE_VENV,
    NAMED,
    OWN,
    PREFIX,
    PYTHON,
    ActiveEnvs,
    TargetChoice,
    choose_target,
    render_target_line,
)
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
    """The environment a command acts on, and how it was chosen (core/target.choose_target)."""

    python: Path
    prefix: Path | None
    name: str | None = None
    choice: TargetChoice | None = None

    @property
    def label(self) -> str:
        return self.name or str(self.prefix or self.python)

    @property
    def kind(self) -> str:
        """conda env (conda-meta/), venv (pyvenv.cfg) or environment (anything else)."""
        if self.prefix is not None and (self.prefix / "conda-meta").is_dir():
            return "conda env"
        if self.prefix is not None and is_venv(self.prefix):
            return "venv"
        return "environment"

    @property
    def is_own(self) -> bool:
        """Nothing was named and nothing is active: the fallback is envtool's own python."""
        return self.choice is None or self.choice.source == OWN

    def describe(self, verb: str) -> str:
        """The one line that says which environment a command acts on and why."""
        choice = self.choice or TargetChoice(OWN, str(self.python))
        where = str(self.python if choice.source in (PYTHON, OWN) else self.prefix or self.python)
        return render_target_line(verb, choice, where, self.kind, self.name)

    def to_dict(self) -> dict[str, str | None]:
        choice = self.choice or TargetChoice(OWN, str(self.python))
        return {
            "name": self.name,
            "prefix": str(self.prefix) if self.prefix else None,
            "python": str(self.python),
            "kind": self.kind,
            "source": choice.source,
            "variable": choice.variable,
        }


def read_active_envs(environ: Mapping[str, str] | None = None) -> ActiveEnvs:
    """The shell's activation variables, for core/target.choose_target."""
    env = os.environ if environ is None else environ
    return ActiveEnvs(
        conda_prefix=env.get("CONDA_PREFIX") or None,
        virtual_env=env.get("VIRTUAL_ENV") or None,
        path=env.get("PATH", ""),
        own_python=sys.executable,
    )


def resolve_target(
    name: str | None = None,
    prefix: str | None = None,
    python: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Target:
    """**The** target of doctor, launch, run, verify, info, export and shell-hook: NAME,
    --prefix PATH or --python PATH; none given → the active conda env, else the active venv,
    else the python envtool runs under (core/target.choose_target decides)."""
    try:
        choice = choose_target(name, prefix, python, read_active_envs(environ))
    except ValueError as exc:
        raise UsageError(*exc.args) from None
    if choice.source == NAMED:
        p = Path(choice.value)
        if os.sep in choice.value and p.is_dir():  # a path given positionally
            return Target(python_in(p), p, None, TargetChoice(PREFIX, choice.value))
        pre = env_prefix(choice.value)  # refuses a NAME that climbs out of the envs dir
        if not pre.is_dir():
            raise UsageError(
                f"no environment named {choice.value!r} under {envs_dir()}",
                missing_env_hint(choice.value),
            )
        return Target(python_in(pre), pre, choice.value, choice)
    if choice.source == PREFIX:
        pre = Path(choice.value).expanduser().resolve()
        if not pre.is_dir():
            raise UsageError(
                f"--prefix {choice.value}: no such directory", "pass an existing environment prefix"
            )
        return Target(python_in(pre), pre, None, choice)
    if choice.source == PYTHON:
        exe = Path(choice.value).expanduser()
        if not exe.exists():
            raise UsageError(
                f"--python {choice.value}: no such file",
                "pass the path of the environment's python",
            )
        return Target(exe, _prefix_of(exe), None, choice)
    if choice.source in (ACTIVE_CONDA, ACTIVE_VENV):
        pre = Path(choice.value).expanduser()
        if not pre.is_dir():  # a shell that kept the variable of an env since removed
            raise UsageError(
                f"${choice.variable}={printable(choice.value)}: no such directory "
                "(the active environment is gone)",
                "deactivate it (`conda deactivate` / `deactivate`), or pass NAME / --prefix PATH",
            )
        return Target(python_in(pre), pre, None, choice)
    return Target(Path(sys.executable), Path(sys.prefix), None, choice)


def missing_env_hint(name: str) -> str:
    """What to do about a NAME that is not installed: install it when this project has its
    lock (create would solve it again), else create it."""
    q = quote_posix(name)
    try:
        locked = project_env_paths(name)[2].is_file()
    except UsageError:
        locked = False
    if locked:
        return f"environments/{name}/conda-lock.yml is here: install it with `envtool install {q}`"
    return f"create it with `envtool create {q}` (envtool list shows the installed ones)"


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
            # add/drop/lock/update name a project environment and take no path
            "a NAME is one folder name (no / or ..); for an environment at a path use --prefix "
            "PATH with the commands that take it (create, install, doctor, run, launch, ...)",
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
        refuse_link_out_of(folder, root, "envtool writes and reads the env's files there")
    return env_dir, env_dir / "environment.yml", env_dir / "conda-lock.yml"


def refuse_link_out_of(folder: Path, root: Path, why: str) -> None:
    """A folder envtool writes in under a project (environments/NAME, runs/) may be a link
    that stays inside the project; one a cloned repository commits as a link to anywhere else
    is refused: envtool would write there."""
    if folder.is_symlink() and not folder.resolve().is_relative_to(root.resolve()):
        raise UsageError(
            f"{folder} is a link to {printable(str(folder.resolve()))}, outside the project",
            f"replace the link with a folder ({why})",
        )


def local_channel(channel: str, base: str | Path | None = None) -> Path | None:
    """**The** answer to "which folder is this local channel": None for a URL or a channel name
    (conda-forge, pytorch/label/nightly); else the folder, absolute. A relative one (`./chan`,
    `../x`; a bare name only from a flag, when a folder of that name is there) is read from `base`: the folder of the file
    that names it (an environment file given with -f, a settings file), the project folder for
    environments/NAME/environment.yml (`create` writes it relative to the project, and pixi reads
    a manifest's paths from the manifest's folder), the current folder for a flag (None). The
    text is data: joined as a path, never expanded or run (`~` alone is the home folder)."""
    if "://" in channel:
        return None
    if channel.startswith("~"):
        return Path(channel).expanduser().resolve()
    root = Path(base) if base is not None else Path.cwd()
    path = root / channel  # an absolute `channel` replaces root
    # a bare name is a folder only when typed as a flag (`--channel chan`): in a file it is a
    # channel name, as conda and rattler read it, so a repository's `conda-forge/` folder cannot
    # stand in for conda-forge
    if channel.startswith((".", "/")) or (base is None and path.is_dir()):
        return path.resolve()
    return None


def project_root(env_dir: Path) -> Path:
    """The project folder of environments/NAME (project_env_paths' env_dir), absolute: the base
    the relative channels of its environment.yml are read from (local_channel)."""
    return env_dir.parent.parent.absolute()


def channel_base(env_file: Path) -> Path:
    """The folder the relative channels of an environment file are read from: the project for
    a project's environments/NAME/environment.yml (what `create` writes them relative to), the
    file's own folder for any other (a `-f` file, the one beside an exported lock)."""
    folder = env_file.absolute().parent
    return project_root(folder) if folder.parent.name == "environments" else folder


def written_channel(
    channel: str,
    directory: str | None = None,
    base: str | Path | None = None,
    *,
    as_typed: bool = True,
) -> str:
    """A channel as environments/NAME/environment.yml records it: as the user gave it (a name, a
    URL, an absolute or ~ path), except a relative folder (read from `base`, the folder of the
    file that named it; a flag's from the current folder: local_channel): `./sub/dir` when it is
    inside the project folder (`directory`, else the current one), which is where `lock` reads it
    from (the project can be moved or cloned with it), else its absolute path (a `../x` from
    here means nothing from elsewhere). `as_typed=False`: an absolute path is not the user's
    text (a settings file's folder, made absolute when read) and is recorded the same way."""
    if "://" in channel or (as_typed and channel.startswith(("/", "~"))):
        return channel
    absolute = local_channel(channel, base)
    if absolute is None:
        return channel  # a channel name
    project = Path(directory or ".").resolve()
    if absolute.is_relative_to(project) and absolute != project:
        return "./" + absolute.relative_to(project).as_posix()
    return str(absolute)


def project_lock_path(name: str) -> Path:
    """The project's lock for NAME, absolute: it is recorded in the install state."""
    return project_env_paths(name)[2].absolute()


def existing_env(name: str | None, prefix: str | None = None) -> Path:
    """The prefix of an environment that must already exist (verify, info, run, shell-hook)."""
    target = env_prefix(name, prefix)
    if name and not prefix and not os.path.lexists(target):
        raise UsageError(
            f"no environment named {name!r} under {envs_dir()}", missing_env_hint(name)
        )
    if not looks_like_env(target):
        from envtool.core.shell_quote import quote_posix

        if is_venv(target):  # a venv activates with its own script
            activate = quote_posix(str(target / "bin" / "activate"))
            raise UsageError(
                f"{printable(str(target))} is a venv, not a conda environment",
                f"activate it with `source {activate}` (fish: activate.fish)",
            )
        fix = "see `envtool list`" + ("" if prefix else ", or pass --prefix PATH")
        raise UsageError(f"no environment at {target}", fix)
    return target


def is_venv(prefix: Path) -> bool:
    """A venv (virtualenv, uv, poetry) marks its root with pyvenv.cfg."""
    return (Path(prefix) / "pyvenv.cfg").is_file()


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
    """This machine's conda platform (linux-64, osx-arm64, …): probe_platform's."""
    return probe_platform()[0]


def probe_platform() -> tuple[str, str]:
    """(this machine's conda platform, where it came from): `CONDA_SUBDIR` when set (conda's way
    to ask for another platform: osx-64 on Apple silicon, for Rosetta), else rattler's answer for
    this machine. core/request.choose_platforms checks it is one envtool plans for."""
    subdir = os.environ.get("CONDA_SUBDIR", "").strip()
    if subdir:
        return subdir, "CONDA_SUBDIR"
    from rattler.platform import Subdir

    return str(Subdir.current()), "this host"


def default_cache_dir() -> Path:
    """ENVTOOL_CACHE_DIR, else the user's cache dir: shared by every env, so reinstalls are offline."""
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return checked_dir(Path(os.environ["ENVTOOL_CACHE_DIR"]), "ENVTOOL_CACHE_DIR")
    if os.environ.get("XDG_CACHE_HOME"):
        return checked_dir(Path(os.environ["XDG_CACHE_HOME"]) / "envtool", "XDG_CACHE_HOME")
    return checked_dir(Path.home() / ".cache" / "envtool", "HOME")
