"""rattler's networking for every download envtool makes: one client per command.

The client is the one every rattler tool uses (pixi, rattler-build): retries with back-off on
5xx, connection resets and time-outs (`RetryMiddleware`), the shared credential store
(`AuthenticationMiddleware`: RATTLER_AUTH_FILE, the keyring, ~/.rattler/credentials.json), and
s3://, gcs://, oci:// channels. When the user has a rattler config.toml (/etc/rattler,
~/.config/rattler — the shared files pixi and rattler-build read — or ~/.config/envtool) the
client is built from it: mirrors, proxies, TLS, the authentication override file, S3 options.
Repodata goes through the same client (`gateway`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtool.errors import UsageError, first_line

if TYPE_CHECKING:
    from rattler import Config, Gateway
    from rattler.networking import Client

RETRIES = 3  # rattler's own default: 503, resets and time-outs before the body are retried
TOOL = "envtool"  # reads the shared rattler config files, then envtool's own

_state: dict[str, Any] = {}


def rattler_config() -> Config | None:
    """The user's rattler configuration, or None when no config file exists (the default client
    then). A file rattler cannot read is a usage error naming it."""
    if "config" not in _state:
        from rattler import Config

        try:
            config = Config.load_from_default_locations(TOOL)
        except Exception as exc:  # rattler raises its own error types for a bad file
            paths = ", ".join(str(p) for p, _ in Config.config_search_paths(TOOL))
            raise UsageError(
                f"cannot read the rattler configuration: {first_line(exc)}",
                f"fix the config.toml it names (envtool reads {paths})",
            ) from None
        _state["config"] = config if config.loaded_from else None
    return _state["config"]


def client(resume_at: int = 0) -> Client:
    """The command's one rattler client (built once, reused by every download); with
    `resume_at`, the same client stack sending `Range: bytes=N-` (rattler's download calls take
    no per-request headers, only a client's default ones) to resume a body cut short."""
    if resume_at:
        return _build({"Range": f"bytes={resume_at}-"})
    if "client" not in _state:
        _state["client"] = _build(None)
    return _state["client"]


def _build(headers: dict[str, str] | None) -> Client:
    from rattler.networking import Client

    config = rattler_config()
    if config is not None:
        return Client.from_config(config, max_retries=RETRIES, headers=headers)
    return Client.default_client(max_retries=RETRIES, headers=headers)


def gateway(cache_dir: Path | None = None) -> Gateway:
    """A repodata gateway over the command's client (so a 503 on repodata is retried, and
    credentials and mirrors apply to channels as to packages); sharded repodata (CEP-16) is used
    where a channel publishes it."""
    import rattler

    config = rattler_config()
    if config is not None:
        return rattler.Gateway.from_config(config, cache_dir=cache_dir, client=client())
    return rattler.Gateway(cache_dir=cache_dir, client=client())


def download_concurrency() -> int:
    """Archives fetched at once: rattler's `concurrency.downloads` (default 50), capped at 8 —
    a few large CUDA archives saturate a link; more only adds seeks and memory."""
    config = rattler_config()
    wanted = config.concurrency_downloads if config is not None else 8
    return max(1, min(int(wanted or 8), 8))


def reset() -> None:
    """Forget the client and config (tests that change RATTLER_AUTH_FILE in one process)."""
    _state.clear()
