"""envtool's settings files (`envtool.toml` in the project, `config.toml` in the user's config
folder): parsed strictly, merged by precedence, turned into the environment variables every
other part of envtool already reads. Pure: text in, values out.

The user's file is also rattler's (adapters/solve/network reads mirrors, proxies, TLS from
`~/.config/envtool/config.toml` through rattler's Config, as pixi shares its file with rattler):
there a key rattler knows is not an unknown key (the adapter asks rattler).

Precedence, highest first: a command-line flag > an environment variable > the project's
envtool.toml > the user's config.toml. The files are applied by setting the environment
variable of each setting that is not already set (`plan_environ`), so everything downstream —
the envs and cache folders (adapters/locate), the network idle timeout (adapters/solve/network),
offline installs, a subprocess envtool starts — reads one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from envtool.core.shell_quote import printable
from envtool.errors import UsageError


@dataclass(frozen=True)
class Setting:
    key: str  # in the TOML file
    env: str  # the environment variable it sets
    kind: str  # channels | path | bool | seconds
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "default-channels",
        "ENVTOOL_CHANNELS",
        "channels",
        "channels a request with none of its own is solved against (names or URLs)",
    ),
    Setting("envs-dir", "ENVTOOL_ENVS_DIR", "path", "where NAME is installed (<dir>/NAME)"),
    Setting("cache-dir", "ENVTOOL_CACHE_DIR", "path", "the package and repodata cache"),
    Setting(
        "offline", "ENVTOOL_OFFLINE", "bool", "no network: packages and repodata from the cache"
    ),
    Setting(
        "network-idle-timeout",
        "ENVTOOL_NETWORK_IDLE_TIMEOUT",
        "seconds",
        "seconds a download may receive nothing before it fails",
    ),
)
BY_KEY = {s.key: s for s in SETTINGS}
MAX_CHANNELS = 64


def _bad(source: str, key: str, problem: str, fix: str) -> UsageError:
    return UsageError(f"{source}: {printable(key)}: {problem}", fix)


def parse_config(text: str, source: str) -> dict[str, str]:
    """A settings file → {environment variable: value as the variable would hold it}; a key
    envtool does not know is a one-line UsageError (exit 2) naming the file and the key."""
    values, unknown = split_config(text, source)
    if unknown:
        raise unknown_key(source, unknown[0])
    return values


def unknown_key(source: str, key: str) -> UsageError:
    return _bad(source, key, "unknown key", f"the keys are: {', '.join(BY_KEY)}")


def split_config(text: str, source: str) -> tuple[dict[str, str], list[str]]:
    """(envtool's settings as variables, the keys that are not envtool's). Relative paths stay
    relative here (the adapter resolves them against the file's folder). A known key with a bad
    value, or text that is not TOML: one-line UsageError naming the file and the key."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or int() of more than 4300 digits
        raise UsageError(
            f"{source}: not valid TOML ({printable(str(exc))[:200]})", "fix the file"
        ) from None
    out: dict[str, str] = {}
    unknown: list[str] = []
    for key, value in data.items():
        setting = BY_KEY.get(key)
        if setting is None:
            unknown.append(key)
            continue
        out[setting.env] = _check(setting, value, source)
    return out, unknown


def _check(setting: Setting, value: Any, source: str) -> str:
    key = setting.key
    if setting.kind == "channels":
        if (
            not isinstance(value, list)
            or not value
            or len(value) > MAX_CHANNELS
            or not all(isinstance(c, str) and c.strip() and "," not in c for c in value)
        ):
            raise _bad(
                source, key, "expected a list of channel names or URLs", f'{key} = ["conda-forge"]'
            )
        if any(printable(c) != c for c in value):
            raise _bad(source, key, "a channel holds a control character", "write the name plainly")
        return ",".join(c.strip() for c in value)
    if setting.kind == "path":
        if not isinstance(value, str) or not value.strip() or printable(value) != value:
            raise _bad(source, key, "expected a folder path", f'{key} = "~/envtool/{key}"')
        return value
    if setting.kind == "bool":
        if not isinstance(value, bool):
            raise _bad(source, key, "expected true or false", f"{key} = true")
        return "1" if value else "0"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and 0 < value <= 86400)
    ):
        raise _bad(source, key, "expected seconds, more than 0 and at most 86400", f"{key} = 30")
    return str(value)


def plan_environ(
    layers: list[tuple[str, dict[str, str]]], environ: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(the variables to set, where each setting comes from) for settings files listed lowest
    precedence first ([(user file, values), (project file, values)]): a variable already in
    `environ` wins over every file; a later file over an earlier one."""
    to_set: dict[str, str] = {}
    origin: dict[str, str] = {}
    for source, values in layers:
        for env, value in values.items():
            if env in environ:
                continue
            to_set[env] = value
            origin[env] = source
    for s in SETTINGS:
        if s.env in environ:
            origin[s.env] = f"environment variable {s.env}"
    return to_set, origin


def parse_offline(value: str | None) -> bool:
    """ENVTOOL_OFFLINE as set by --offline, the settings files or by hand: 1/true/yes/on."""
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def parse_channels(value: str | None) -> tuple[str, ...]:
    """ENVTOOL_CHANNELS ("conda-forge,https://…") → the channels; () when unset or empty."""
    return tuple(c.strip() for c in (value or "").split(",") if c.strip())


def offline_refusal(plan: Any) -> UsageError | None:
    """Offline: the refusal of a plan that needs the network (None: the caches hold it all)."""
    from envtool.core.lockfile import some_names

    missing = network_packages(plan)
    if not missing:
        return None
    return UsageError(
        f"offline: {len(missing)} package(s) are not in the package cache "
        f"({some_names(missing, 5)})",
        "install once online (or from `envtool bundle`'s --from DIR), or drop --offline",
    )


def network_packages(plan: Any) -> list[str]:
    """The conda packages of an install plan (core/install_plan.InstallPlan) that only the
    network can bring: not in envtool's archive cache, not extracted in rattler's package
    cache, and not a local file (a file:// channel, a bundle). Offline, these are refused."""
    from envtool.core.install_plan import FETCH

    return [
        pp.package.name
        for pp in plan.packages
        if pp.source == FETCH and not pp.url.startswith("file://")
    ]
