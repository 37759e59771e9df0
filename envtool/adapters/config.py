"""The settings files on disk: the user's `$XDG_CONFIG_HOME/envtool/config.toml` (else
`~/.config/envtool/config.toml`) and the project's `envtool.toml` (the current folder), read
bounded and parsed strictly (core/config), applied as environment variables once per command
(cli.py's group callback), below any variable already set and any flag.
"""

from __future__ import annotations

import os
from pathlib import Path

from envtool.core.config import BY_KEY, SETTINGS, parse_channels, parse_config, parse_offline

CONFIG_LIMIT = 256 * 1024  # a settings file is a few lines
PROJECT_FILE = "envtool.toml"


def user_config_path(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "envtool" / "config.toml"


def project_config_path(directory: str | None = None) -> Path:
    return Path(directory or ".").absolute() / PROJECT_FILE


def read_config_file(path: Path) -> dict[str, str] | None:
    """A settings file's variables (None: no file there), paths resolved against its folder."""
    from envtool.adapters.files import read_text

    if not path.exists() and not path.is_symlink():
        return None
    values = parse_config(read_text(path, CONFIG_LIMIT, what="settings file"), str(path))
    for s in SETTINGS:
        if s.kind == "path" and s.env in values:
            p = Path(values[s.env]).expanduser()
            values[s.env] = str(p if p.is_absolute() else (path.parent / p).absolute())
    return values


def apply_config(offline_flag: bool = False) -> dict[str, str]:
    """Read both files and set the variables they hold that are not set yet (flag > variable >
    project > user); `--offline` sets ENVTOOL_OFFLINE first. Returns where each setting came
    from (`envtool config` prints it)."""
    from envtool.core.config import plan_environ

    if offline_flag:
        os.environ["ENVTOOL_OFFLINE"] = "1"
    layers = []
    for path in (user_config_path(), project_config_path()):
        values = read_config_file(path)
        if values is not None:
            layers.append((str(path), values))
    to_set, origin = plan_environ(layers, dict(os.environ))
    os.environ.update(to_set)
    if offline_flag:
        origin["ENVTOOL_OFFLINE"] = "flag --offline"
    return origin


def offline_mode() -> bool:
    """--offline, ENVTOOL_OFFLINE or `offline = true`: installs use the package cache only."""
    return parse_offline(os.environ.get("ENVTOOL_OFFLINE"))


def configured_channels() -> tuple[str, ...]:
    """The `default-channels` setting (or ENVTOOL_CHANNELS): () when none is set."""
    return parse_channels(os.environ.get(BY_KEY["default-channels"].env))
