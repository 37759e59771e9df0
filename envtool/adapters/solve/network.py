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


def client() -> Client:
    """The command's one rattler client for repodata (built once, reused by every query), with
    rattler's retries on 5xx, resets and time-outs, and a whole-request time-out of ten idle
    time-outs (at least 5 min): repodata moves through rattler's gateway, which reports no
    progress, so a server that drips it is bounded by the request, not by an idle watch."""
    if "client" not in _state:
        _state["client"] = _build(None, timeout=int(max(10 * idle_timeout(), 300)))
    return _state["client"]


def download_client(resume_at: int = 0) -> Client:
    """The client for archive downloads: the same stack without rattler's retries — the fetch
    retries each archive itself (install/fetch.py), so every retry is seen, shown and bounded
    (a refused connection ends in seconds, not after rattler's back-off on every try)."""
    if resume_at:  # rattler's download calls take no per-request headers: a client with Range
        return _build({"Range": f"bytes={resume_at}-"}, retries=0)
    if "download" not in _state:
        _state["download"] = _build(None, retries=0)
    return _state["download"]


def _build(
    headers: dict[str, str] | None, retries: int = RETRIES, timeout: int | None = None
) -> Client:
    from rattler.networking import Client

    config = rattler_config()
    if config is not None:
        return Client.from_config(config, max_retries=retries, headers=headers, timeout=timeout)
    return Client.default_client(max_retries=retries, headers=headers, timeout=timeout)


IDLE_TIMEOUT_S = 60.0


def idle_timeout() -> float:
    """Seconds a transfer may go without progress before it is cut and tried again:
    ENVTOOL_NETWORK_IDLE_TIMEOUT, else 60. A value that is not a positive number is a usage
    error naming the variable."""
    import os

    text = os.environ.get("ENVTOOL_NETWORK_IDLE_TIMEOUT", "").strip()
    if not text:
        return IDLE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise UsageError(
            f"ENVTOOL_NETWORK_IDLE_TIMEOUT={text!r}: not a number of seconds",
            "set it to seconds, e.g. ENVTOOL_NETWORK_IDLE_TIMEOUT=60",
        )
    return value


def describe_unreachable(url: str, wait: float = 3.0) -> str | None:
    """What stops a connection to `url`'s host, found after rattler's request failed (its error
    text says only "error sending request"): the DNS lookup, then a TCP connect, each bounded.
    None when a proxy is set (the host is the proxy's business) or the host answers."""
    import os
    import socket
    import urllib.parse
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as Waited

    if any(
        os.environ.get(v)
        for v in (
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        )
    ):
        return None
    parsed = urllib.parse.urlparse(url)
    host = parsed.hostname
    if not host or parsed.scheme not in ("http", "https"):
        return None
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return None
    pool = ThreadPoolExecutor(max_workers=1)  # getaddrinfo has no time-out of its own
    try:
        addrs = pool.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM).result(wait)
    except Waited:
        return f"{host}: the DNS lookup did not answer in {wait:g} s"
    except OSError as exc:
        return f"{host}: DNS lookup failed ({exc.strerror or exc})"
    finally:
        pool.shutdown(wait=False)
    family, kind, proto, _, address = addrs[0]
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(wait)
            sock.connect(address)
    except TimeoutError:
        return f"{host}:{port} did not answer a connection in {wait:g} s"
    except OSError as exc:
        via = f" ({address[0]})" if address[0] != host else ""
        return f"{host}:{port}{via}: {exc.strerror or exc}"
    return None


def gateway(cache_dir: Path | None = None) -> Gateway:
    """A repodata gateway over the command's client (so a 503 on repodata is retried, and
    credentials and mirrors apply to channels as to packages); sharded repodata (CEP-16) is used
    where a channel publishes it. Its cache: repodata_cache_dir. Offline (`--offline`): that
    cache only, stale or not (rattler's force-cache-only); a channel never fetched is refused."""
    import rattler

    from envtool.adapters.config import offline_mode

    cache_dir = repodata_cache_dir(cache_dir)
    config = rattler_config()
    if offline_mode():  # --offline: the cached repodata however old, never a request
        # from_config takes no cache action: the user's [repodata-config] (its defaults, and
        # a channel URL's table over them) by hand, so the offline read looks for the forms
        # the online run cached (sharded or not)
        rc = (config.repodata_config if config is not None else None) or {}
        defaults = {k: v for k, v in rc.items() if not isinstance(v, dict)}
        per_channel = {
            url: _offline_source({**defaults, **v}) for url, v in rc.items() if isinstance(v, dict)
        }
        return rattler.Gateway(
            cache_dir=cache_dir,
            default_config=_offline_source(defaults),
            per_channel_config=per_channel,
            client=client(),
        )
    if config is not None:
        return rattler.Gateway.from_config(config, cache_dir=cache_dir, client=client())
    return rattler.Gateway(cache_dir=cache_dir, client=client())


def _offline_source(rc: dict[str, Any]) -> Any:
    """A [repodata-config] table as rattler's SourceConfig that reads the cache only."""
    import rattler

    return rattler.SourceConfig(
        zstd_enabled=not rc.get("disable-zstd", False),
        bz2_enabled=not rc.get("disable-bzip2", False),
        sharded_enabled=not rc.get("disable-sharded", False),
        cache_action="force-cache-only",
    )


MAX_REPODATA_BYTES = 1 << 30  # conda-forge's largest subdir is ~300 MB of JSON; 1 GiB is none


def max_repodata_bytes() -> int:
    """The most repodata one solve may take in: ENVTOOL_MAX_REPODATA_BYTES, else 1 GiB."""
    import os

    text = os.environ.get("ENVTOOL_MAX_REPODATA_BYTES", "").strip()
    if not text:
        return MAX_REPODATA_BYTES
    if not text.isdigit() or not 0 < int(text) < 1 << 50:
        raise UsageError(
            f"ENVTOOL_MAX_REPODATA_BYTES={text!r}: not a number of bytes",
            f"set it to bytes, e.g. ENVTOOL_MAX_REPODATA_BYTES={MAX_REPODATA_BYTES}",
        )
    return int(text)


def repodata_cache_dir(cache_dir: Path | None = None) -> Path:
    """Where rattler caches repodata: `cache_dir`; with ENVTOOL_CACHE_DIR, CACHE/repodata;
    otherwise rattler's shared one (RATTLER_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache, +
    rattler/cache; then repodata/), as pixi uses it."""
    import os

    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("ENVTOOL_CACHE_DIR"):
        return Path(os.environ["ENVTOOL_CACHE_DIR"]) / "repodata"
    return rattler_cache_root() / "repodata"


def rattler_cache_root() -> Path:
    """rattler's shared cache, as pixi and rattler-build find it: RATTLER_CACHE_DIR, else
    $XDG_CACHE_HOME or ~/.cache, + rattler/cache."""
    import os

    if os.environ.get("RATTLER_CACHE_DIR"):
        return Path(os.environ["RATTLER_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "rattler" / "cache"
    return Path.home() / ".cache" / "rattler" / "cache"


async def bounded_repodata(work: Any, channels: list[str], cache_dir: Path | None = None) -> Any:
    """Run `work` (a coroutine reading repodata through the gateway), cancelled once the
    repodata it takes in passes max_repodata_bytes: rattler streams each body (decompressed)
    into a temp file in its cache — watched as the cache folder's growth — and parses what it
    reads, sharded repodata in memory — watched as this process's resident memory, allowed four
    times the cap. Cancelling drops rattler's transfer and its temp file, so nothing the channel
    sent stays in the cache. An endless stream or a zstd/gzip bomb costs the cap, not the disk."""
    import asyncio

    cap = max_repodata_bytes()
    folder = repodata_cache_dir(cache_dir)
    base_disk, base_rss = _folder_bytes(folder), _resident_bytes()
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.5)  # a walk of the cache twice a second
            if done:
                return task.result()
            disk = _folder_bytes(folder) - base_disk
            memory = _resident_bytes() - base_rss
            if disk > cap or memory > 4 * cap:
                task.cancel()
                await asyncio.wait({task}, timeout=5)
                hosts = ", ".join(sorted({_host(c) for c in channels})) or "the channel"
                raise UsageError(
                    f"{hosts} sent more than {cap >> 20} MB of repodata — more than any real "
                    "channel publishes; the transfer was cut and nothing it sent was kept",
                    "check the channel URL; if the channel is real and this large, raise "
                    "ENVTOOL_MAX_REPODATA_BYTES",
                )
    finally:
        if not task.done():
            task.cancel()


def _host(channel: str) -> str:
    import urllib.parse

    return urllib.parse.urlparse(channel).hostname or channel


def _folder_bytes(folder: Path) -> int:
    """Bytes in the files of `folder` and its subfolders (rattler's temp files are there)."""
    import os

    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass  # a temp file rattler just removed
    return total


def _resident_bytes() -> int:
    """This process's resident memory now (Linux /proc; 0 where it cannot be read)."""
    import os

    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def download_concurrency() -> int:
    """Archives fetched at once: rattler's `concurrency.downloads` (default 50), capped at 8 —
    a few large CUDA archives saturate a link; more only adds seeks and memory."""
    config = rattler_config()
    wanted = config.concurrency_downloads if config is not None else 8
    return max(1, min(int(wanted or 8), 8))


def reset() -> None:
    """Forget the client and config (tests that change RATTLER_AUTH_FILE in one process)."""
    _state.clear()
