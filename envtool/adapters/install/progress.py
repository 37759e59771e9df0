"""Install progress on stderr: a live line on a terminal, one line per phase otherwise, and a
closing summary (`fetched 2.85 GB in 41 s (69 MB/s), linked 90 packages in 6 s`).

Total bytes are not known before the downloads end (a conda-lock v1 entry has no size, and
rattler's streaming download does not expose Content-Length), so the live line shows bytes
done, rate and archives done of total; the ETA is estimated from the archives still to come at
the average size of those done so far, and marked `~`.
Every line goes through output.note's escaping (terminal_text).
"""

from __future__ import annotations

import sys
import threading
import time

from envtool.errors import fit_words
from envtool.output import note, terminal_text


def human_bytes(n: float) -> str:
    unit = "B"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            break
        n /= 1000
    if unit == "B":
        return f"{n:.0f} B"
    return f"{n:.2f} {unit}" if n < 10 else f"{n:.1f} {unit}" if n < 100 else f"{n:.0f} {unit}"


def human_seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


class Progress:
    """Counts bytes and packages; `quiet` prints nothing at all."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.live = not quiet and _isatty()
        self.lock = threading.Lock()
        self.to_fetch = 0
        self.fetched = 0
        self.bytes = 0
        self.fetch_started = 0.0
        self.fetch_seconds = 0.0
        self.link_total = 0
        self.linked = 0
        self.link_started = 0.0
        self.link_seconds = 0.0
        self.last_draw = 0.0
        self.drawn = False
        self.retry = ""  # the latest retry, shown on the live line until an archive completes

    # --------------------------------------------------------------- lines
    def say(self, message: str) -> None:
        """A note that is not progress (a relinked package, a refetched copy)."""
        if self.quiet:
            return
        self._clear()
        note(message)

    def _clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[K")
            self.drawn = False

    def _draw(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not self.live or (not force and now - self.last_draw < 0.1):
            return
        self.last_draw = now
        sys.stderr.write("\r" + fit_words(terminal_text(text), _columns() - 1) + "\x1b[K")
        sys.stderr.flush()
        self.drawn = True

    # --------------------------------------------------------------- fetch
    def start_fetch(self, total: int, cached: int, lock_name: str) -> None:
        self.to_fetch = total - cached
        self.fetch_started = time.monotonic()
        self.say(
            f"fetching {total} packages (hash-checked against {lock_name}): "
            f"{self.to_fetch} to download, {cached} already in the cache"
        )

    def add_bytes(self, n: int) -> None:
        with self.lock:
            self.bytes += n
        self._draw(self._fetch_line())

    def retrying(self, message: str) -> None:
        """A download tried again ("retry 2/4 HOST: 503 …"): on the live line, else a line."""
        with self.lock:
            self.retry = message
        if self.live:
            self._draw(self._fetch_line(), force=True)
        else:
            self.say(f"  {message}")

    def archive_done(self) -> None:
        with self.lock:
            self.fetched += 1
            self.retry = ""
        self._draw(self._fetch_line(), force=self.fetched == self.to_fetch)

    def _fetch_line(self) -> str:
        spent = max(time.monotonic() - self.fetch_started, 1e-6)
        rate = self.bytes / spent
        line = (
            f"  fetched {human_bytes(self.bytes)}, {self.fetched}/{self.to_fetch} archives, "
            f"{human_bytes(rate)}/s"
        )
        left = self.to_fetch - self.fetched
        if self.fetched and left and rate > 0:
            eta = left * (self.bytes / self.fetched) / rate
            line += f", ~{human_seconds(eta)} left"
        if self.retry:
            line += f"; {self.retry}"
        return line

    def end_fetch(self) -> None:
        self.fetch_seconds = time.monotonic() - self.fetch_started
        self._clear()

    # --------------------------------------------------------------- link
    def start_link(self, total: int, prefix: str) -> None:
        self.link_total = total
        self.link_started = time.monotonic()
        self.say(f"linking {total} packages into {prefix}")

    def package_linked(self, name: str) -> None:
        with self.lock:
            self.linked += 1
        self._draw(
            f"  linked {self.linked}/{self.link_total}: {name}",
            force=self.linked == self.link_total,
        )

    def end_link(self) -> None:
        self.link_seconds = time.monotonic() - self.link_started
        self._clear()

    def summary(self) -> str:
        spent = max(self.fetch_seconds, 1e-6)
        fetched = (
            f"fetched {human_bytes(self.bytes)} in {human_seconds(self.fetch_seconds)} "
            f"({human_bytes(self.bytes / spent)}/s)"
            if self.to_fetch
            else "nothing to fetch (all in the cache)"
        )
        return f"{fetched}, linked {self.link_total} packages in {human_seconds(self.link_seconds)}"

    def close(self) -> None:
        self._clear()
        if self.live:
            sys.stderr.flush()


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _columns() -> int:
    import shutil

    return max(shutil.get_terminal_size((100, 20)).columns, 20)
