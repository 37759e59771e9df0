"""How big the archives an install would fetch are (`install --dry-run`): the lock (conda-lock
v1) records no sizes, so a local channel's file is measured and a remote channel's repodata is
asked, through rattler's gateway (adapters/solve/network), within a bounded wait. What cannot be
learnt (offline, a flaky mirror) is left out: the dry run says how many it could not size."""

from __future__ import annotations

import asyncio
import urllib.parse
import urllib.request
from pathlib import Path

from envtool.core.install_plan import FETCH, PIP, InstallPlan

QUERY_TIMEOUT = 15.0


def probe_download_sizes(plan: InstallPlan, timeout: float = QUERY_TIMEOUT) -> dict[str, int]:
    """file name → bytes for the archives and wheels `plan` fetches."""
    sizes: dict[str, int] = {}
    remote: dict[str, set[str]] = {}  # channel URL → names
    for planned in plan.packages:
        if planned.source not in (FETCH, PIP):
            continue
        name = planned.package.file_name
        parsed = urllib.parse.urlparse(planned.url)
        if parsed.scheme in ("file", ""):
            try:
                path = Path(urllib.request.url2pathname(parsed.path))
                sizes[name] = path.stat().st_size
            except OSError:
                pass
        elif parsed.scheme in ("http", "https") and planned.source == FETCH:
            channel = planned.url.rsplit("/", 2)[0]  # …/<channel>/<subdir>/<file>
            remote.setdefault(channel, set()).add(planned.package.name)
    if remote:
        try:
            sizes.update(asyncio.run(_query(remote, plan.platform, timeout)))
        except Exception:  # noqa: BLE001  (a size is a nicety: offline, a dead mirror → unknown)
            pass
    return sizes


async def _query(remote: dict[str, set[str]], platform: str, timeout: float) -> dict[str, int]:
    import rattler

    from envtool.adapters.solve.network import gateway

    found: dict[str, int] = {}
    try:
        gw = gateway()
        for channel, names in remote.items():
            result = await asyncio.wait_for(
                gw.query(
                    [rattler.Channel(channel)], [platform, "noarch"], sorted(names), recursive=False
                ),
                timeout,
            )
            for records in result:
                for r in records:
                    if r.size:
                        found[str(r.url).rsplit("/", 1)[-1]] = int(r.size)
    finally:
        await asyncio.sleep(0.05)  # rattler: let its tasks settle before the loop closes
    return found
