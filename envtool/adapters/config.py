"""The settings files on disk: the user's `$XDG_CONFIG_HOME/envtool/config.toml` (else
`~/.config/envtool/config.toml`) and the project's `envtool.toml` (the current folder), read
bounded and parsed strictly (core/config), applied as environment variables once per command
(cli.py's group callback), below any variable already set and any flag.
"""

from __future__ import annotations

import os
from pathlib import Path

from envtool.core.config import BY_KEY, SETTINGS, parse_channels, parse_offline
from envtool.core.shell_quote import printable
from envtool.errors import UsageError

CONFIG_LIMIT = 256 * 1024  # a settings file is a few lines
PROJECT_FILE = "envtool.toml"


def user_config_path(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "envtool" / "config.toml"


def project_config_path(directory: str | None = None) -> Path:
    return Path(directory or ".").absolute() / PROJECT_FILE


def read_config_file(path: Path, shared_with_rattler: bool = False) -> dict[str, str] | None:
    """A settings file's variables (None: no file there), paths resolved against its folder.
    `shared_with_rattler` (the user's file, which rattler's Config reads too): a key rattler
    knows (mirrors, proxy-config, tls-no-verify, …) is rattler's, not an unknown key."""
    from envtool.adapters.files import read_text
    from envtool.core.config import split_config, unknown_key

    if not path.exists() and not path.is_symlink():
        return None
    text = read_text(path, CONFIG_LIMIT, what="settings file")
    values, unknown = split_config(text, str(path))
    if unknown and shared_with_rattler:  # rattler is imported only for a file that needs it
        from rattler import Config

        try:
            rattler_unused = set(Config.from_toml_with_unused_keys(text)[1])
        except Exception:  # a rattler key with a bad value: network.py names it when it reads
            rattler_unused = set()
        unknown = [k for k in unknown if k in rattler_unused]
    if unknown:
        raise unknown_key(str(path), unknown[0])
    for s in SETTINGS:
        if s.kind == "path" and s.env in values:
            p = Path(values[s.env]).expanduser()
            values[s.env] = str(p if p.is_absolute() else (path.parent / p).absolute())
            # A project's file comes with the repository. Where envtool installs and caches is
            # the user's to choose: outside, a repo would send envtool's writes anywhere; inside,
            # it could ship a "cache" of extracted packages (or a ready prefix) that installs
            # link as verified.
            if not shared_with_rattler:
                raise UsageError(
                    f"{path}: {s.key}: a project's envtool.toml does not choose where envtool "
                    "installs or caches (a cloned repository could plant packages there)",
                    f"set it in {user_config_path()} or {s.env} instead",
                )
        if s.kind == "channels" and s.env in values:  # a local folder too, from the file's folder
            from envtool.adapters.locate import local_channel

            located = [
                str(local_channel(c, path.parent) or c) for c in parse_channels(values[s.env])
            ]
            comma = next((c for c in located if "," in c), None)
            if comma is not None:  # the variable is a comma-separated list
                raise UsageError(
                    f"{path}: {s.key}: a channel folder's path has a comma ({printable(comma)})",
                    "move the channel to a folder whose path has no comma",
                )
            values[s.env] = ",".join(located)
    return values


def apply_config(
    offline_flag: bool = False, directory: str | None = None, applied: dict[str, str] | None = None
) -> dict[str, str]:
    """Read both files and set the variables they hold that are not set yet (flag > variable >
    project > user); `--offline` sets ENVTOOL_OFFLINE first. Returns where each setting came
    from (`envtool config` prints it). `directory`: the project (`--dir`), whose envtool.toml
    takes the place of the current folder's, as pixi's --manifest-path does; `applied`: what
    an earlier call set (its return), taken back first."""
    from envtool.core.config import plan_environ

    for env, source in (applied or {}).items():
        if not source.startswith(("flag ", "environment variable ")):
            os.environ.pop(env, None)  # a file's value: the files are applied again below
    offline_flag = offline_flag or (applied or {}).get("ENVTOOL_OFFLINE") == "flag --offline"
    if offline_flag:
        os.environ["ENVTOOL_OFFLINE"] = "1"
    layers = []
    for path, shared in ((user_config_path(), True), (project_config_path(directory), False)):
        values = read_config_file(path, shared)
        if values is not None:
            layers.append((str(path), values))
    to_set, origin = plan_environ(layers, dict(os.environ))
    os.environ.update(to_set)
    if offline_flag:
        apply_offline_flag(origin)
    return origin


def apply_offline_flag(origin: dict[str, str]) -> None:
    """`--offline` (before or after the command name): ENVTOOL_OFFLINE=1 over any file's value,
    and `envtool config` says the flag set it."""
    os.environ["ENVTOOL_OFFLINE"] = "1"
    origin["ENVTOOL_OFFLINE"] = "flag --offline"


def offline_mode() -> bool:
    """--offline, ENVTOOL_OFFLINE or `offline = true`: no network (installs from the package
    cache, solves from cached repodata)."""
    return parse_offline(os.environ.get("ENVTOOL_OFFLINE"))


def configured_channels() -> tuple[str, ...]:
    """The `default-channels` setting (or ENVTOOL_CHANNELS): () when none is set."""
    return parse_channels(os.environ.get(BY_KEY["default-channels"].env))
