"""Run history: a run's manifest (runs/<id>/manifest.json) → one summary row. Pure.

A manifest is a file on disk anyone can edit: every field is checked for its type here and a
wrong one reads as unknown, never as a crash."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from envtool.core.shell_quote import printable


@dataclass
class RunRow:
    id: str
    script: str | None
    nnodes: int | None
    nproc_per_node: int | None
    status: str  # running | finished | failed | stopped | submitted | unknown
    exit_code: int | None
    duration_s: float | None
    lock_hash: str | None
    job_id: str | None = None
    restarts: int = 0  # torchrun restarted the workers N times (the table: ", restarted Nx")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def summarize_manifest(
    run_id: str, data: Any, alive: bool | None = None, history: str | None = None
) -> RunRow:
    """The row `envtool runs` shows. `alive`: whether the envtool that wrote a manifest with no
    end yet is still running (None: not known here, e.g. another host). `history`: a --requeue
    job's requeues.log, which the batch script keeps."""
    m = data if isinstance(data, dict) else {}
    code = _int(m.get("exit_code"))
    start, end = _time(m.get("start_time")), _time(m.get("end_time"))
    try:
        duration = (end - start).total_seconds() if start and end else None
    except TypeError:  # one time with a zone, one without: not comparable, so unknown
        duration = None
    script = _str(m.get("script"))
    if script is None and isinstance(m.get("command"), list) and m["command"]:
        script = _str(m["command"][-1])
    if m.get("slurm") and isinstance(m.get("slurm"), dict):
        status = "submitted" if m["slurm"].get("job_id") else "written"
        if history:
            status = slurm_status(history) or status
    elif code is None:
        status = "unknown" if alive is False else "running"
    elif m.get("interrupted_by"):
        status = "stopped"
    else:
        status = "finished" if code == 0 else "failed"
    restarts = m.get("restarts")  # torchrun restarted the workers (--max-restarts)
    count = len(restarts) if isinstance(restarts, list) and not m.get("slurm") else 0
    slurm = m.get("slurm") if isinstance(m.get("slurm"), dict) else {}
    return RunRow(
        id=run_id,
        script=script,
        nnodes=_int(m.get("nnodes")),
        nproc_per_node=_int(m.get("nproc_per_node")),
        status=status,
        exit_code=code,
        duration_s=duration,
        lock_hash=_str(m.get("lock_hash")),
        job_id=_str(slurm.get("job_id")),
        restarts=count,
    )


_HISTORY = re.compile(r"restart (\d{1,9}): (.*)$")  # bounded: int() of 5000 digits raises


def slurm_status(history: str) -> str | None:
    """A --requeue job's state from its requeues.log's last line: running, requeued N times,
    finished or failed (the exit of its last srun)."""
    lines = [m for m in map(_HISTORY.search, history.strip().splitlines()) if m]
    if not lines:
        return None
    restarts, what = int(lines[-1].group(1)), lines[-1].group(2)
    again = f", requeued {restarts}x" if restarts else ""
    ended = re.match(r"srun ended \(exit (\d+)\)", what)
    if what.startswith("requeued"):
        return f"requeued ({restarts + 1}x)"
    if ended:
        return ("finished" if ended.group(1) == "0" else "failed") + again
    if what.startswith("not requeued"):
        return "stopped (--max-requeues reached)"
    return "running" + again


def render_rows(rows: list[RunRow]) -> list[str]:
    """A table: id, script, nodes x procs, status, exit, duration, lock hash (12 chars)."""
    if not rows:
        return ["no runs"]
    table = [("RUN", "SCRIPT", "NODES x PROCS", "STATUS", "EXIT", "DURATION", "LOCK")]
    for r in rows:
        shape = f"{_or(r.nnodes)} x {_or(r.nproc_per_node)}"
        status = r.status + (f", restarted {r.restarts}x" if r.restarts else "")
        status += f" (job {r.job_id})" if r.job_id else ""
        duration = f"{r.duration_s:.0f}s" if r.duration_s is not None else "-"
        lock = (r.lock_hash or "-")[:12]
        row = (r.id, r.script or "-", shape, status, _or(r.exit_code, "-"), duration, lock)
        table.append(tuple(printable(c) for c in row))  # a newline in a field is no new row
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]


def _or(value: int | None, unknown: str = "?") -> str:
    return unknown if value is None else str(value)


def filter_rank(lines: list[str], rank: int) -> list[str]:
    """all.log lines of one global rank (`[node N rank R] …`), and envtool's own (`[envtool]
    attempt N: …`, where a restart begins)."""
    mark = f" rank {rank}] "
    return [
        line
        for line in lines
        if line.startswith("[envtool] ")
        or (line.startswith("[node ") and mark in line.split("] ", 1)[0] + "] ")
    ]


MAX_LINE_BYTES = 64 * 1024  # a log line kept whole; a longer one is cut (a progress bar's \r
# redraws with no newline, a dumped tensor): memory stays bounded, time linear


def render_cut_mark(limit: int) -> bytes:
    """What ends a cut line: ` … [line cut at 64 KiB]`."""
    size = f"{limit // 1024} KiB" if limit % 1024 == 0 else f"{limit} bytes"
    return f" … [line cut at {size}]".encode()


class LineSplitter:
    """Bytes in, whole lines out (without their newline). A line longer than `limit` comes out
    once, its first `limit` bytes and the cut mark, as soon as it passes the limit; the rest of it,
    up to the next newline, is dropped. At most `limit` bytes are held; each byte is looked at
    once (joining the unfinished line to every new chunk was quadratic: 10 s for a 64 MB line)."""

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self.mark = render_cut_mark(limit)
        self.held = bytearray()
        self.cutting = False  # inside a line already cut: drop until its newline

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while start <= len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            if not self.cutting:
                room = self.limit - len(self.held)
                if end - start > room:
                    self.held += data[start : start + room]
                    out.append(bytes(self.held) + self.mark)
                    self.held.clear()
                    self.cutting = True
                else:
                    self.held += data[start:end]
            if newline < 0:
                break
            if not self.cutting:
                out.append(bytes(self.held))
            self.held.clear()
            self.cutting = False
            start = newline + 1
        return out

    def flush(self) -> list[bytes]:
        """The last line when the stream ended without a newline (nothing if it was cut)."""
        rest = [] if self.cutting or not self.held else [bytes(self.held)]
        self.held.clear()
        self.cutting = False
        return rest


# --- a hung run: which rank(s) stopped -------------------------------------------------------

TIE_SECONDS = 0.1  # logs that stopped growing this close together: one instant, no order


def find_stalled_ranks(
    last_writes: dict[int, float], stopped: list[int], all_ranks: list[int]
) -> tuple[list[int], str]:
    """The local ranks a hung run names, and why: those whose process is stopped (SIGSTOP, a
    debugger: the others then wait on them in a collective) when there are any; else those
    whose log stopped growing first (within TIE_SECONDS of the earliest: a rank that printed
    its last line a moment after the stuck one is waiting, not stuck); else (nothing printed
    yet) every rank. `last_writes`: mtimes of the ranks that printed something."""
    if stopped:
        return sorted(stopped), "its process is stopped (SIGSTOP or a debugger)"
    if last_writes:
        first = min(last_writes.values())
        named = sorted(r for r, t in last_writes.items() if t - first <= TIE_SECONDS)
        return named, "its log stopped growing first"
    return sorted(all_ranks), "no rank printed anything yet"


def render_ranks(ranks: list[int], offset: int = 0, known: bool = True) -> str:
    """`rank 1`, `ranks 1 and 3`, `ranks 0, 1 and 2` (global: local + offset when the node's
    rank is known), or `local rank 1 on this node` (c10d without --node-rank)."""
    numbers = [str(r + offset) if known else str(r) for r in ranks]
    word = "rank" if known else "local rank"
    if not numbers:
        return "no rank"
    if len(numbers) == 1:
        text = f"{word} {numbers[0]}"
    else:
        text = f"{word}s {', '.join(numbers[:-1])} and {numbers[-1]}"
    return text if known else text + " on this node"
