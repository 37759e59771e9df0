"""Runs a launch plan: torchrun in its own session, signals forwarded, nothing left behind.

torchrun starts every worker in a session of its own, so a process-group kill cannot reach
them; every process of a run instead carries ENVTOOL_RUN_ID=<run-id> in its environment and
cleanup finds them by that marker in /proc. Also reads what a run leaves behind (rank logs,
error files) and the facts the manifest records (torch version, lock hash, git commit).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from envtool.adapters.proc import Runner, run_capture
from envtool.core.launch_plan import (
    RUN_MARKER_VAR,
    LaunchPlan,
    RankFailure,
    parse_attempt_failures,
    parse_error_file,
    parse_last_exception,
    parse_last_lines,
    parse_last_traceback,
    parse_root_cause,
    render_attempt_mark,
    render_restart,
)
from envtool.core.runs import MAX_LINE_BYTES, LineSplitter
from envtool.core.shell_quote import printable
from envtool.errors import DiagnosedFailure, UsageError

GRACE_SECONDS = 20.0  # after a forwarded Ctrl-C/SIGTERM: time for ranks to checkpoint and exit


@dataclass
class LaunchOutcome:
    exit_code: int
    started: str
    ended: str
    interrupted_by: str | None = None  # "SIGINT" / "SIGTERM" when the user stopped the run
    failure: RankFailure | None = None
    rank_logs: dict[str, str] = field(default_factory=dict)
    killed_leftovers: int = 0
    log_error: RunDirError | None = None  # the run folder stopped taking writes (full disk)
    hang: Hang | None = None  # stopped by --hang-timeout
    restarts: list[RankFailure] = field(default_factory=list)  # --max-restarts used


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- the environment the ranks run in --------------------------------------------------------


def read_activated_environ(prefix: Path | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment as `envtool run` would set it: conda activation, or a venv's bin on PATH."""
    env = dict(environ)
    if prefix is None:
        return env
    if (prefix / "conda-meta").is_dir():
        from envtool.adapters.launch.activation import activated_environ

        return activated_environ(prefix, environ)
    env["VIRTUAL_ENV"] = str(prefix)
    env.pop("PYTHONHOME", None)
    env["PATH"] = os.pathsep.join([str(prefix / "bin"), env.get("PATH", "")]).rstrip(os.pathsep)
    return env


def read_torch_version(prefix: Path | None) -> str | None:
    """torch's version from its site-packages, without importing torch (pre-flight stays fast)."""
    from envtool.adapters.host.env_probe import read_torch_static

    facts = read_torch_static(prefix) if prefix is not None else None
    return facts.version if facts is not None else None


def read_lock_hash(prefix: Path | None) -> str | None:
    """The sha256 of the lock an installed env came from (the installer's state record), if any."""
    from envtool.adapters.install.install_state import read_state_record

    record = read_state_record(prefix) if prefix is not None else None
    value = record.get("lock_sha256") if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def probe_git_commit(script: Path, run: Runner = run_capture) -> str | None:
    """HEAD of the repository holding the training script; None when it is not in one."""
    res = run(["git", "-C", str(script.resolve().parent), "rev-parse", "HEAD"], timeout=5.0)
    return res.stdout.strip() if res.ok and res.stdout.strip() else None


def check_runs_root(root: Path) -> None:
    """The root of run folders (`runs/`, --run-dir), before anything is made in it: the folder
    it is (a link followed: `runs -> /scratch/$USER/runs` is the user's own), or the nearest
    one that exists, must not let another user swap a run's folder and its job.sbatch after
    envtool wrote them and before the user submits it: not owned by another user (a cloned
    repo's `runs` link to its author's folder), not writable by every user unless sticky."""
    import os
    import stat

    from envtool.core.shell_quote import printable

    probe = root.resolve()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        st = probe.stat()
    except OSError:
        return  # make_run_dir says what is wrong with the path
    where = printable(str(root)) + (f" ({printable(str(probe))})" if probe != root else "")
    if st.st_uid not in (os.geteuid(), 0):
        raise UsageError(
            f"the run folder root {where} belongs to another user (uid {st.st_uid}): they could "
            "replace a run's job.sbatch before you submit it",
            "pass --run-dir a folder of your own (an absolute path)",
        )
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise UsageError(
            f"the run folder root {where} is writable by every user",
            "pass --run-dir a folder only you can write to (or chmod o-w it)",
        )


def make_run_dir(path: Path) -> None:
    """The run's folder, parents included; one that cannot be made is the user's to fix."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create the run folder {path} ({exc.strerror})",
            "pass a writable folder with --run-dir",
        ) from None


def write_manifest(path: Path, data: dict[str, Any]) -> None:
    """Whole file or nothing: write beside, then rename. A run folder that cannot take it (a
    full disk, a quota) is a RunDirError naming the file and the disk."""
    from envtool.adapters.files import write_atomic

    try:
        write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")
    except UsageError as exc:  # files.write_atomic's one line; the OSError is its context
        cause = exc.__context__
        if isinstance(cause, OSError):
            raise RunDirError(path, cause) from None
        raise


class RunDirError(DiagnosedFailure):
    """The run folder stopped taking writes (full disk, quota, gone): the run cannot be
    recorded. Exit 1 — envtool worked, the run's place did not."""

    def __init__(self, path: Path, exc: OSError) -> None:
        import errno

        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        where = f" (the disk holding {path.parent} is full)" if full else ""
        super().__init__(
            f"cannot write {path}: {exc.strerror or exc}{where}",
            "free space there or pass --run-dir on another disk",
        )
        self.path = path
        self.errno = exc.errno


# --- running ---------------------------------------------------------------------------------


def apply_launch(
    plan: LaunchPlan,
    environ: Mapping[str, str],
    console: IO[bytes] | None = None,
    grace: float = GRACE_SECONDS,
    stdout_to_stderr: bool = False,
    on_started: Callable[[], None] | None = None,
    hang_timeout: float | None = None,
    startup_grace: float | None = None,
) -> LaunchOutcome:
    """Run the plan's torchrun, forward SIGINT/SIGTERM, clean up, report the first failure.

    `on_started` runs once torchrun is on its way (manifest facts are gathered there, off the
    path to the ranks' first step); signals are already being forwarded by then. No rank log
    growing for a while is warned about; for `hang_timeout` seconds, the run is stopped (before
    any rank printed anything: for `startup_grace` seconds, default STARTUP_GRACE_SECONDS)."""
    run_dir = Path(plan.run_dir)
    make_run_dir(run_dir)
    console = console if console is not None else sys.stderr.buffer
    env = {**environ, **plan.env_add}
    received: list[int] = []
    pid: list[int] = []
    log_errors: list[RunDirError] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if pid:
            _signal_group(pid[0], signum)  # torchrun passes it on to every worker

    watches: list[ProgressWatch] = []  # the one below, once made

    def stopped_by() -> str | None:  # envtool stopped the run: the signal it forwarded, or
        if received:  # its own SIGTERM for --hang-timeout (set before torchrun is signalled)
            return signal.Signals(received[0]).name
        return "--hang-timeout" if watches and watches[0].hang is not None else None

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    merged: MergedLog | None = None
    try:
        started = _now()
        proc = subprocess.Popen(
            with_parent_death_signal(plan.argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno() if stdout_to_stderr else None,  # --json: clean stdout
            stderr=subprocess.PIPE,
            start_new_session=True,  # the terminal's Ctrl-C reaches envtool only; we forward it
        )
        pid.append(proc.pid)
        try:
            if received:  # a signal that came while torchrun was being started
                _signal_group(proc.pid, received[0])
            launcher_log = run_dir / "launcher.log"
            crash = CrashConsole(plan)
            copier = threading.Thread(
                target=_copy_stream,
                args=(proc.stderr, console, launcher_log, log_errors, stopped_by, crash),
                daemon=True,
            )
            copier.start()
            if on_started is not None:  # the manifest first: all.log never exists without one
                on_started()
            merged = MergedLog(plan)
            merged.start()
            watch = ProgressWatch(plan, hang_timeout, startup_grace=startup_grace)
            watches.append(watch)
            code = _wait(proc, received, grace, watch)
        except BaseException:  # e.g. on_started failed: never leave the run going unwatched
            kill_run(proc.pid, plan.run_id)
            proc.wait()
            if merged is not None:
                merged.stop()
            raise
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    copier.join(timeout=5.0)
    merged.stop()  # the last lines the ranks wrote, then all.log is whole
    leftovers = kill_marked(plan.run_id)  # workers live in their own sessions: find by marker
    outcome = LaunchOutcome(
        exit_code=code,
        started=started,
        ended=_now(),
        interrupted_by=signal.Signals(received[0]).name if received else None,
        rank_logs=find_rank_logs(Path(plan.log_dir)),
        killed_leftovers=leftovers,
        log_error=log_errors[0] if log_errors else None,
        hang=watch.hang,
    )
    outcome.restarts = restarts_made(plan, crash.restarts)
    if code != 0:
        outcome.failure = read_failure(plan, _read_text(launcher_log))
    _to_console(console, crash.finish(outcome.failure if not received and not watch.hang else None))
    return outcome


# The supervisor between envtool and torchrun (Linux): it arms PR_SET_PDEATHSIG=SIGTERM
# (linux/prctl.h: 1) on itself, forks torchrun and waits for it. When envtool is gone (even by
# SIGKILL: the shim is reparented) it sends torchrun SIGTERM once; if torchrun has not ended
# within the grace (its own 30 s for deaf workers, and more), it and every process carrying the
# run's marker are SIGKILLed. torchrun alone did not always do it: under load it was seen
# stopping on SIGTERM without killing workers that ignore SIGTERM, then waiting at exit on
# its log-tail threads for ever. Signals envtool sends the process group (Ctrl-C forwarded,
# --hang-timeout) reach torchrun directly; the shim ignores them and only passes on the end.
_SUPERVISOR_SHIM = r"""
import ctypes, os, select, signal, sys, time
parent, grace, argv = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
needle = ("MARKER=" + os.environ.get("MARKER", "")).encode()
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: None)
ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)
child = os.fork()
if child == 0:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    os.execvp(argv[0], argv)
try:  # readable when torchrun ends: the shim exits then, not at its next 0.2 s look
    ended = os.pidfd_open(child)
except (AttributeError, OSError):  # Linux < 5.3
    ended = None
deadline = None
while True:
    pid, status = os.waitpid(child, os.WNOHANG)
    if pid:
        break
    if deadline is None and os.getppid() != parent:
        os.kill(child, signal.SIGTERM)
        deadline = time.monotonic() + grace
    elif deadline is not None and time.monotonic() > deadline:
        os.kill(child, signal.SIGKILL)
    if ended is None:
        time.sleep(0.2)
    else:
        select.select([ended], [], [], 0.2)
if os.getppid() != parent and needle.split(b"=")[1]:
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open("/proc/" + entry + "/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    if sig != signal.SIGKILL:
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
sys.exit(os.waitstatus_to_exitcode(status))
""".replace("MARKER", RUN_MARKER_VAR)
SUPERVISOR_GRACE_S = 45.0  # torchrun's 30 s for workers deaf to SIGTERM, and its own shutdown


def with_parent_death_signal(argv: list[str]) -> list[str]:
    """`argv` (torchrun) run under a tiny supervisor that stops it, and its workers, when
    envtool dies, even by SIGKILL (no handler of ours runs then): SIGTERM first, as torchrun
    expects, then SIGKILL for what is left after SUPERVISOR_GRACE_S (_SUPERVISOR_SHIM says why).
    An interpreter with -I -S (no site, ~20 ms) rather than a preexec_fn, which can deadlock the
    child when envtool has threads (a probe that timed out). Linux only; elsewhere argv
    unchanged."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    shim = [sys.executable, "-I", "-S", "-c", _SUPERVISOR_SHIM]
    return [*shim, str(os.getpid()), str(SUPERVISOR_GRACE_S), *argv]


def _wait(
    proc: subprocess.Popen[bytes],
    received: list[int],
    grace: float,
    watch: ProgressWatch | None = None,
) -> int:
    deadline: float | None = None
    while True:
        try:
            rc = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if watch is not None and not received and watch.hang is None and watch.check():
            _signal_group(proc.pid, signal.SIGTERM)  # as a Ctrl-C would: torchrun stops ranks
        if (received or (watch and watch.hang)) and deadline is None:
            deadline = time.monotonic() + grace
        # a second Ctrl-C means "now": do not wait out the grace period
        if deadline is not None and (time.monotonic() > deadline or len(received) > 1):
            _signal_group(proc.pid, signal.SIGKILL)  # ranks ignored the signal: stop them hard
            rc = proc.wait()
            break
    if received:
        return 128 + received[0]  # the shell convention for "stopped by signal N"
    if watch is not None and watch.hang is not None:
        return 1
    return 128 - rc if rc < 0 else rc


MERGED_LOG = "all.log"
MERGE_POLL_SECONDS = 0.2


class MergedLog:
    """runs/<id>/all.log: every rank's stdout and stderr lines, each prefixed `[node N rank R]`,
    in the order they are seen. torchrun writes each rank's output to its own files
    (torchrun/<id>/attempt_N/<local rank>/{stdout,stderr}.log); a thread reads what they grew
    by, as torchrun's own tee does, so the console filter (`--local-ranks-filter`) loses
    nothing here. A rank's global number is node_rank*nproc + local rank when the node's rank
    is known (one node, static rendezvous); with c10d it is read from the worker's own
    environment (RANK, GROUP_RANK), found by the run marker."""

    def __init__(self, plan: LaunchPlan, path: Path | None = None) -> None:
        self.plan = plan
        self.path = path or Path(plan.run_dir) / MERGED_LOG
        self.offsets: dict[Path, int] = {}
        self.splitters: dict[Path, LineSplitter] = {}  # per rank file: its unfinished line
        self.labels: dict[tuple[str, int], bytes] = {}  # (attempt dir, local rank) -> prefix
        self.out: IO[bytes] | None = None
        self._workers: dict[int, tuple[int, int]] | None = None
        self.attempt = -1  # the latest torchrun attempt (attempt_N) written here
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self.out = open(self.path, "ab")  # noqa: SIM115  (closed in stop)
        except OSError:
            return  # the run folder's disk: launcher.log reports it
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.thread is None:
            return
        self.done.set()
        self.thread.join(timeout=10.0)
        self.thread = None

    def _loop(self) -> None:
        while not self.done.wait(MERGE_POLL_SECONDS):
            self.poll()
        while self.poll():  # a look reads at most 1 MiB a file: drain what is left
            pass
        self.poll(final=True)
        self.out = _close_quietly(self.out)

    def poll(self, final: bool = False) -> bool:
        """Append what every rank file grew by since the last look (whole lines; at the end,
        a last line without a newline too). True when anything was read."""
        files = self._files()
        grew = False
        self._workers = None  # one /proc scan per look, only while a rank is unnamed
        for path, number in files:
            if number < self.attempt:
                continue  # an attempt torchrun replaced: read to its end already
            # name a rank as soon as its files exist: its worker is alive then (a rank that
            # prints only as it exits would be gone by the time its line is read)
            self._label(path.parent)
            if number > self.attempt:
                self._next_attempt(number, files)
            grew = self._read(path) or grew
        if final:
            for path, splitter in sorted(self.splitters.items()):
                rest = splitter.flush()
                if rest:
                    self._write(path, rest)
        return grew

    def _files(self) -> list[tuple[Path, int]]:
        """The rank files torchrun has made, earliest write first, with their attempt's
        number."""
        try:
            found = Path(self.plan.log_dir).glob("*/attempt_*/*/std*.log")
            files = sorted(found, key=lambda p: (_mtime(p), str(p)))
        except OSError:
            return []
        out = []
        for path in files:
            number = _attempt_number(path.parent.parent.name)
            if number is not None and path.parent.name.isdigit():
                out.append((path, number))
        return out

    def _read(self, path: Path) -> bool:
        """What `path` grew by since the last read (at most 1 MiB), its whole lines written."""
        try:
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read(1 << 20)
        except OSError:
            return False  # an attempt folder torchrun is replacing right now
        if not data:
            return False
        self.offsets[path] = self.offsets.get(path, 0) + len(data)
        # a line past 64 KiB (a progress bar's \r redraws) is cut: bounded, linear
        lines = self.splitters.setdefault(path, LineSplitter()).feed(data)
        if lines:
            self._write(path, lines)
        return True

    def _next_attempt(self, number: int, files: list[tuple[Path, int]]) -> None:
        """torchrun started attempt N (--max-restarts): the attempts before it are read to
        their end (their ranks have exited; a last line without a newline too) and let go,
        then a line in all.log marks where the new one begins."""
        for path, older in files:
            if older < number:
                self._label(path.parent)
                while self._read(path):
                    pass
                rest = self.splitters.pop(path, LineSplitter()).flush()
                if rest:
                    self._write(path, rest)
                self.offsets.pop(path, None)
        first, self.attempt = self.attempt < 0, number
        if not first and self.out is not None:
            try:
                self.out.write(render_attempt_mark(number).encode() + b"\n")
            except OSError:
                self.out = _close_quietly(self.out)

    def _write(self, path: Path, lines: list[bytes]) -> None:
        if self.out is None:
            return
        prefix = self._label(path.parent)
        try:
            self.out.write(b"".join(prefix + _strip_tee(line) + b"\n" for line in lines))
            self.out.flush()
        except OSError:
            self.out = _close_quietly(self.out)  # a full disk: launcher.log says so

    def _label(self, rank_dir: Path) -> bytes:
        local = int(rank_dir.name)
        key = (str(rank_dir.parent), local)
        label = self.labels.get(key)
        if label is None:
            plan = self.plan
            node = (
                plan.node_rank if plan.node_rank is not None else (0 if plan.nnodes == 1 else None)
            )
            rank = None if node is None else node * plan.nproc_per_node + local
            if node is None:
                if self._workers is None:
                    self._workers = read_worker_ranks(plan.run_id)
                node, rank = self._workers.get(local, (None, None))
            label = f"[node {_or_q(node)} rank {_or_q(rank, f'?{local}')}] ".encode()
            if node is not None:  # an unknown one is looked up again on the next lines
                self.labels[key] = label
        return label


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _or_q(value: int | None, unknown: str = "?") -> str:
    return unknown if value is None else str(value)


def _strip_tee(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


def read_worker_ranks(run_id: str, proc_root: Path = Path("/proc")) -> dict[int, tuple[int, int]]:
    """local rank -> (node rank, global rank) of the workers of this run alive now, from their
    environment (torchrun sets LOCAL_RANK, GROUP_RANK, RANK)."""
    out: dict[int, tuple[int, int]] = {}
    needle = f"{RUN_MARKER_VAR}={run_id}".encode()
    for pid in pids_with_environ(needle, proc_root):
        environ = _read_environ(proc_root / str(pid)) or b""
        env = dict(e.split(b"=", 1) for e in environ.split(b"\0") if b"=" in e)
        try:
            local, node, rank = (int(env[k]) for k in (b"LOCAL_RANK", b"GROUP_RANK", b"RANK"))
        except (KeyError, ValueError):
            continue
        out[local] = (node, rank)
    return out


HANG_WARN_SECONDS = 300.0  # no rank log grew this long: say so (without --hang-timeout too)
# before any rank printed anything (imports, data loading, compiling, the rendezvous) silence is
# start-up, not a hang: judged against this (--startup-grace) instead of --hang-timeout
STARTUP_GRACE_SECONDS = 600.0


@dataclass
class Hang:
    rank: int  # the first rank named (the manifest's failed_rank)
    label: str  # "rank 1", "ranks 1 and 3", or "local rank 1 on this node" (node rank unknown)
    rank_silent: float  # seconds since its log last grew
    all_silent: float  # seconds since any rank's log grew (or since the start, in start-up)
    log: str | None
    ranks: list[int] = field(default_factory=list)  # every rank named
    why: str = ""  # "its process is stopped (…)", "its log stopped growing first", …
    startup: bool = False  # no rank had printed anything: --startup-grace ran out
    attempt: int = 0  # torchrun's attempt (> 0: after that many --max-restarts restarts)


class ProgressWatch:
    """Progress = a rank's log files (stdout.log/stderr.log of the latest attempt) grew, read
    from their mtimes and sizes. A hung collective silences every rank, so the run counts as
    stuck when no rank's log grew; then the rank(s) named are those whose process is stopped,
    else those whose log stopped growing first (core/runs.find_stalled_ranks). A script that
    prints on rank 0 only is fine: rank 0's log growing is progress for the run. Until some
    rank has printed anything the run is starting up, with its own, longer bound."""

    def __init__(
        self,
        plan: LaunchPlan,
        hang_timeout: float | None,
        warn_after: float = HANG_WARN_SECONDS,
        say: Callable[[str], None] | None = None,
        startup_grace: float | None = None,
        read_states: Callable[[str], dict[int, str]] | None = None,
    ) -> None:
        from envtool.output import note

        self.plan = plan
        self.read_states = read_states or read_worker_states  # local rank -> process state
        self.timeout = hang_timeout
        self.warn_after = min(warn_after, hang_timeout / 2) if hang_timeout else warn_after
        self.startup_grace = (
            startup_grace
            if startup_grace is not None
            else max(STARTUP_GRACE_SECONDS, hang_timeout or 0.0)
        )
        self.say = say or note
        self.warned = False
        self.next_scan = 0.0
        self.started = time.time()  # of the latest attempt: a restart starts up anew
        self.attempt: str | None = None  # torchrun's latest attempt folder seen
        self.hang: Hang | None = None

    def check(self) -> bool:
        """Look (at most once a second); True once the run is stuck past the time-out (or,
        before any rank printed, past the start-up grace)."""
        if time.monotonic() < self.next_scan:
            return False
        self.next_scan = time.monotonic() + 1.0
        sizes, attempt = self._last_writes()
        now = time.time()
        if attempt != self.attempt:  # torchrun restarted the workers (--max-restarts)
            if self.attempt is not None:
                self.started, self.warned = now, False
            self.attempt = attempt
        wrote = {r: t for r, (t, size) in sizes.items() if size > 0}
        startup = not wrote
        silent = now - (max(wrote.values()) if wrote else self.started)
        warn_after = self.startup_grace / 2 if startup else self.warn_after
        limit = self.startup_grace if startup else self.timeout
        if silent < warn_after:
            self.warned = False
            return False
        if not self.warned:
            self.warned = True
            ranks, _ = self._stalled(wrote, list(sizes))
            if startup:
                what = f"no rank has printed anything for {silent:.0f} s (starting up"
                stop = f"--startup-grace stops it at {self.startup_grace:g} s"
            else:
                what = f"no rank's log has grown for {silent:.0f} s ({self._label(ranks)}"
                what += " silent longest" if len(ranks) == 1 else " silent longest together"
                stop = f"--hang-timeout stops it at {self.timeout:g} s"
            if not self.timeout:
                stop = "Ctrl-C stops it; --hang-timeout SECONDS stops such a run by itself"
            self.say(f"envtool: warning: {what}); still waiting — {stop}")
        if self.timeout and limit and silent >= limit:
            states = self.read_states(self.plan.run_id)
            if not startup and not states:
                return False  # every rank has ended: torchrun is wrapping up, nothing hangs
            ranks, why = self._stalled(wrote, list(sizes), states)
            first = ranks[0] if ranks else 0
            log = find_rank_logs(Path(self.plan.log_dir)).get(str(first))
            self.hang = Hang(
                rank=first + (self.plan.node_rank or 0) * self.plan.nproc_per_node,
                label=self._label(ranks),
                rank_silent=now - wrote.get(first, self.started),
                all_silent=silent,
                log=log,
                ranks=[r + (self.plan.node_rank or 0) * self.plan.nproc_per_node for r in ranks],
                why=why,
                startup=startup,
                attempt=_attempt_number(Path(self.attempt or "").name) or 0,
            )
            return True
        return False

    def _stalled(
        self, wrote: dict[int, float], every: list[int], states: dict[int, str] | None = None
    ) -> tuple[list[int], str]:
        from envtool.core.runs import find_stalled_ranks

        states = self.read_states(self.plan.run_id) if states is None else states
        stopped = [local for local, state in states.items() if state in ("T", "t")]
        return find_stalled_ranks(wrote, stopped, every or sorted(states))

    def _label(self, ranks: list[int]) -> str:
        from envtool.core.runs import render_ranks

        # c10d numbers nodes as they join: without --node-rank only the local rank is known
        known = self.plan.nnodes == 1 or self.plan.node_rank is not None
        offset = (self.plan.node_rank or 0) * self.plan.nproc_per_node
        return render_ranks(ranks, offset, known) if ranks else "no rank had started"

    def _last_writes(self) -> tuple[dict[int, tuple[float, int]], str | None]:
        """local rank -> (its logs' latest mtime, their total size), in the latest attempt;
        and that attempt's folder (the last look's when none is readable now)."""
        out: dict[int, tuple[float, int]] = {}
        try:
            logs = find_rank_logs(Path(self.plan.log_dir))
        except OSError:  # an attempt folder torchrun is replacing right now
            return out, self.attempt
        folders = {str(Path(log).parent.parent) for log in logs.values()}
        attempt = max(folders, key=lambda f: _attempt_number(Path(f).name) or 0, default=None)
        for local, stderr_log in logs.items():
            times, size = [], 0
            for name in ("stdout.log", "stderr.log"):
                try:
                    st = Path(stderr_log).with_name(name).stat()
                except OSError:
                    continue
                times.append(st.st_mtime)
                size += st.st_size
            if times:
                out[int(local)] = (max(times), size)
        return out, attempt or self.attempt


def read_worker_states(run_id: str, proc_root: Path = Path("/proc")) -> dict[int, str]:
    """local rank -> the state letter of its worker process (/proc/PID/stat: R, S, D, T
    stopped, t traced, Z), of this run's workers alive now; a rank with a stopped process
    (its dataloader workers share its LOCAL_RANK) reads as stopped."""
    out: dict[int, str] = {}
    needle = f"{RUN_MARKER_VAR}={run_id}".encode()
    for pid in pids_with_environ(needle, proc_root):
        environ = _read_environ(proc_root / str(pid)) or b""
        env = dict(e.split(b"=", 1) for e in environ.split(b"\0") if b"=" in e)
        try:
            local = int(env[b"LOCAL_RANK"])
            stat = (proc_root / str(pid) / "stat").read_text()
        except (KeyError, ValueError, OSError):
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields and out.get(local) not in ("T", "t"):
            out[local] = fields[0]
    return out


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def _copy_stream(
    src: IO[bytes] | None,
    console: IO[bytes],
    log_path: Path,
    errors: list[RunDirError],
    stopped_by: Callable[[], str | None] | None = None,
    crash: CrashConsole | None = None,
) -> None:
    """torchrun's stderr to the console and launcher.log. A log that stops taking writes (a
    full disk) is noted in `errors` and dropped; the console copy goes on, so torchrun never
    blocks on a pipe nobody reads (and no thread dies with a traceback). Once envtool stopped
    the run (`stopped_by` names the signal), the console gets what StopConsole lets through;
    launcher.log still gets every line."""
    if src is None:
        return
    after_stop = StopConsole(log_path)
    log: IO[bytes] | None = None
    try:
        log = open(log_path, "ab")  # noqa: SIM115  (closed below, whatever happens)
    except OSError as exc:
        errors.append(RunDirError(log_path, exc))
    # read in pieces of at most one line's cap: a rank's \r progress with no newline (tee'd
    # by torchrun) is never held whole; the console gets every piece, launcher.log whole lines
    # (a longer one cut, marked)
    lines = LineSplitter()
    for piece in iter(lambda: src.readline(MAX_LINE_BYTES), b""):
        log = _append_lines(log, log_path, lines.feed(piece), errors)
        signame = stopped_by() if stopped_by is not None else None
        if signame is not None:
            shown = after_stop.feed(piece, signame)
        else:
            shown = crash.feed(piece) if crash is not None else [piece]
        _to_console(console, shown)
    _to_console(console, after_stop.flush())
    _close_quietly(_append_lines(log, log_path, lines.flush(), errors))


def _append_lines(
    log: IO[bytes] | None, log_path: Path, lines: list[bytes], errors: list[RunDirError]
) -> IO[bytes] | None:
    """Write whole lines to launcher.log; the log, or None once it stopped taking writes."""
    if log is None or not lines:
        return log
    try:
        log.write(b"".join(line + b"\n" for line in lines))
        log.flush()
    except OSError as exc:
        errors.append(RunDirError(log_path, exc))
        return _close_quietly(log)
    return log


def _to_console(console: IO[bytes], lines: list[bytes]) -> None:
    for line in lines:
        try:
            console.write(line)
            console.flush()
        except (OSError, ValueError):
            pass  # console closed: keep logging


# torchrun's tee prefix ([default0]:) and init_process_group's excepthook prefix ([rank1]: )
_RANK_PREFIX = re.compile(rb"^(?:\[[A-Za-z_]*\d+\]:)?(?:\[rank\d+\]: ?)?")


class StopConsole:
    """The console after envtool stopped a run (Ctrl-C, SIGTERM): torchrun answers the signal
    with a traceback of its own (SignalException) and each rank with a KeyboardInterrupt
    traceback, which came before envtool's summary and looked like a crash. Those go to
    launcher.log only; envtool says once, first, what it is doing. Other rank lines (and a rank
    traceback ending in a real error) still reach the console."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.announced = False
        self.blocks: dict[bytes, list[bytes]] = {}  # a rank's traceback, until its last line

    def feed(self, line: bytes, signame: str) -> list[bytes]:
        out: list[bytes] = []
        if not self.announced:
            self.announced = True
            out.append(
                f"envtool: {signame}: stopping every rank (a second Ctrl-C stops them at once); "
                f"torchrun's shutdown messages go to {self.log_path}\n".encode()
            )
        m = _RANK_PREFIX.match(line)
        prefix, body = (m.group(0), line[m.end() :]) if m else (b"", line)
        if not prefix:
            return out  # torchrun's own: its warnings and its traceback for the signal
        text = body.strip()
        block = self.blocks.get(prefix)
        if block is None:
            if text.startswith(b"Traceback (most recent call last)"):
                self.blocks[prefix] = [line]
                return out
            return [*out, line]
        block.append(line)
        if body[:1] in (b" ", b"\t") or not text or text.startswith((b"Traceback", b"During")):
            return out  # a frame of the traceback
        del self.blocks[prefix]  # its exception line: the block is whole
        if text.startswith(b"KeyboardInterrupt") or b"SignalException" in text:
            return out  # the rank stopped by our signal: nothing to show
        return out + block

    def flush(self) -> list[bytes]:
        """Tracebacks cut short when torchrun's stream ended: shown, not lost."""
        lines = [line for block in self.blocks.values() for line in block]
        self.blocks.clear()
        return lines


# torchrun's own lines once a worker failed: its agent stopping the others, the failure it
# logs, and the ChildFailedError traceback with its "Root Cause" box
_TORCHRUN_FAILING = (
    b"closing signal",
    b"failed (exitcode",
    b"Traceback (most recent call last)",
    b"ChildFailedError",
    b"Worker group FAILED",
)


CRASH_HOLD_LINES = 2000  # what CrashConsole holds at most (memory stays bounded)
MAX_ATTEMPTS_KEPT = 10_000  # torchrun's failure lines CrashConsole keeps (--max-restarts' count)


class CrashConsole:
    """The console while a run goes on (envtool has not stopped it): when a rank fails, torchrun
    prints its ChildFailedError traceback and summary box, and the other ranks their secondary
    errors (a peer closed the connection) — the first crash drowned in the noise. Those are held
    back (launcher.log and all.log have every line); at the end, `finish` shows the failed
    rank's own traceback instead, or, when no rank is to blame, what was held. A run that goes
    on after a failure (torchrun restarted the workers, --max-restarts) shows what was held at
    once, with a line naming the restart and the rank that caused it (with `plan`: its logs are
    read). The stream's order pairs them: torchrun logs one failure line as each attempt ends,
    so the k-th ended attempt k."""

    def __init__(self, plan: LaunchPlan | None = None) -> None:
        self.plan = plan
        self.held: list[bytes] = []
        self.blocks: dict[bytes, list[bytes]] = {}  # a rank's traceback, until its last line
        self.failing = False  # torchrun has started reporting a failure
        # each failure torchrun logged, (local rank, exit code), in order: the k-th ended
        # attempt k (bounded: past MAX_ATTEMPTS_KEPT, no more restarts are named)
        self.attempt_failures: list[tuple[int, int]] = []
        self.restarts: list[RankFailure] = []  # the failures torchrun said it restarts after

    def _restart(self, line: bytes) -> list[bytes] | None:
        """torchrun's failure line: with restarts left it starts every rank again — what was
        held, its line, then envtool's naming the rank and why (its log is whole: the rank
        has exited). None when it ends the run."""
        named = parse_attempt_failures(line.decode("utf-8", "replace"))
        if not named or len(self.attempt_failures) >= MAX_ATTEMPTS_KEPT:
            return None
        self.attempt_failures.append(named[0])
        if self.plan is None or len(self.attempt_failures) > self.plan.max_restarts:
            return None
        number = len(self.attempt_failures)
        failure = read_attempt_failure(self.plan, number - 1, *self.attempt_failures[-1])
        self.restarts.append(failure)
        self.failing = False
        text = render_restart(failure, number, self.plan.max_restarts)
        # escaped as note() escapes: a rank's error text moves no cursor
        return [*self._take(), line, f"envtool: {printable(text)}\n".encode()]

    def feed(self, line: bytes) -> list[bytes]:
        m = _RANK_PREFIX.match(line)
        prefix, body = (m.group(0), line[m.end() :]) if m else (b"", line)
        text = body.strip()
        if not any(c.isalpha() for c in prefix.decode("latin-1")):  # torchrun's own; its
            # summary box's "[0]:" is no rank's tee prefix ("[default0]:", "[rank0]:")
            restart = self._restart(line) if b"failed (exitcode" in line else None
            if restart is not None:
                return restart
            if self.failing or any(mark in line for mark in _TORCHRUN_FAILING):
                self.failing = True
                self.held.append(line)
                return self._take() if len(self.held) > CRASH_HOLD_LINES else []
            return [line]
        block = self.blocks.get(prefix)
        if block is None:
            if text.startswith(b"Traceback (most recent call last)"):
                self.blocks[prefix] = [line]
                return []
            if self.failing:  # the ranks run again (a restart): what happened is shown now
                self.failing = False
                return [*self._take(), line]
            return [line]
        block.append(line)
        if len(block) > CRASH_HOLD_LINES:  # no traceback is this long: a rank's own output
            return self.blocks.pop(prefix)
        if body[:1] in (b" ", b"\t") or not text or text.startswith((b"Traceback", b"During")):
            return []  # a frame of the traceback
        self.held += self.blocks.pop(prefix)  # its exception line: the block is whole
        if len(self.held) > CRASH_HOLD_LINES:  # bounded: past this, shown as it comes
            return self._take()
        return []

    def _take(self) -> list[bytes]:
        lines = self.held + [x for block in self.blocks.values() for x in block]
        self.held, self.blocks = [], {}
        return lines

    def finish(self, failure: RankFailure | None) -> list[bytes]:
        """After torchrun ended: the failed rank's traceback (the last lines of its own log)
        when one rank is to blame — or, where it exited with a code and no traceback, its last
        lines (none when it was killed: envtool's cause line says so) — else everything held
        (nothing is lost)."""
        held = self._take()
        if failure is None:
            return held
        text = _read_text(Path(failure.log)) if failure.log else ""
        tail = parse_last_traceback(text)
        if not tail and (failure.exitcode or 0) > 0:  # no traceback: its last lines say why
            tail = parse_last_lines(text)
        label = f"[rank{failure.rank}]: ".encode()
        return [label + line.encode(errors="replace") + b"\n" for line in tail]


def _close_quietly(log: IO[bytes] | None) -> None:
    if log is not None:
        try:
            log.close()
        except OSError:
            pass  # the buffered tail could not be written either: already reported


def kill_run(pid: int, run_id: str) -> int:
    """SIGKILL a run started with start_new_session: its process group (torchrun), then the
    workers in sessions of their own, found by their ENVTOOL_RUN_ID marker; returns how many
    of those were found."""
    _signal_group(pid, signal.SIGKILL)
    return kill_marked(run_id)


def kill_marked(run_id: str, proc_root: Path = Path("/proc")) -> int:
    """SIGKILL every process still carrying ENVTOOL_RUN_ID=<run_id>; returns how many."""
    needle = f"{RUN_MARKER_VAR}={run_id}".encode()
    killed = 0
    for pid in pids_with_environ(needle, proc_root):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def pids_with_environ(needle: bytes, proc_root: Path = Path("/proc")) -> list[int]:
    """Processes whose environment holds exactly `needle` (a VAR=value entry).

    A process caught inside execve() shows an empty environ: the kernel releases the parent
    (Popen returns) before it has written the new environment's bounds. Such processes are
    re-read for a short while, so one started just now is not missed."""
    me = os.getpid()
    entries = [
        e
        for e in (proc_root.iterdir() if proc_root.is_dir() else [])
        if e.name.isdigit() and int(e.name) != me
    ]
    found: list[int] = []
    deadline = time.monotonic() + EXEC_SETTLE_SECONDS
    while entries:
        unsettled = []
        for entry in entries:
            environ = _read_environ(entry)
            if environ is None:
                continue
            if needle in environ.split(b"\0"):
                found.append(int(entry.name))
            elif not environ and _may_be_in_exec(entry):
                unsettled.append(entry)
        if time.monotonic() > deadline:
            break
        entries = unsettled
        if entries:
            time.sleep(0.01)
    return sorted(found)


EXEC_SETTLE_SECONDS = 0.5  # an execve() finishes in microseconds; this bounds a stuck one
_PF_KTHREAD = 0x00200000  # include/linux/sched.h: kernel threads never have an environ


def _read_environ(entry: Path) -> bytes | None:
    try:
        return (entry / "environ").read_bytes()
    except OSError:
        return None  # gone, or not ours to read


def _may_be_in_exec(entry: Path) -> bool:
    """An empty environ that may still fill in: the argv is empty too (both are set at the
    end of execve; `env -i prog` has an argv), and it is not a kernel thread or a zombie."""
    try:
        if (entry / "cmdline").read_bytes():
            return False
        stat = (entry / "stat").read_text()
    except OSError:
        return False
    # pid (comm) state ppid pgrp session tty tpgid flags ...; comm may hold spaces and ")"
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 7 or fields[0] in ("Z", "X", "x"):
        return False
    try:
        return not int(fields[6]) & _PF_KTHREAD
    except ValueError:
        return False


# --- after the run -----------------------------------------------------------------------------


def _attempt_number(name: str) -> int | None:
    """attempt_N → N (None for any other name in torchrun's log folder)."""
    number = name.removeprefix("attempt_")
    ok = number != name and number.isascii() and number.isdigit() and len(number) < 10
    return int(number) if ok else None


def list_attempts(log_dir: Path) -> list[tuple[int, Path]]:
    """torchrun's attempt folders (<id>/attempt_N), by N."""
    found = [(_attempt_number(p.name), p) for p in log_dir.glob("*/attempt_*")]
    return sorted((n, p) for n, p in found if n is not None)


def find_rank_logs(log_dir: Path) -> dict[str, str]:
    """local rank → its stderr log in the latest attempt (torchrun: <id>/attempt_N/<rank>/)."""
    logs: dict[str, str] = {}
    for _, attempt in list_attempts(log_dir):  # later attempts overwrite earlier ones
        for rank_dir in attempt.iterdir():
            if rank_dir.is_dir() and rank_dir.name.isdigit():
                logs[rank_dir.name] = str(rank_dir / "stderr.log")
    return logs


def read_attempt_failure(
    plan: LaunchPlan, attempt: int, local: int, exitcode: int | None
) -> RankFailure:
    """How attempt N (torchrun/<id>/attempt_N) ended when torchrun restarted the workers: the
    local rank its agent named, its error and its log (none when the folder is gone)."""
    failure = RankFailure(
        rank=local + (plan.node_rank or 0) * plan.nproc_per_node,
        local_rank=local,
        exitcode=exitcode,
        time=None,
    )
    dirs = [p for n, p in list_attempts(Path(plan.log_dir)) if n == attempt]
    if dirs:
        failure.log = str(dirs[-1] / str(local) / "stderr.log")
        failure.error = _rank_error(Path(failure.log), exitcode)
    return failure


def restarts_made(plan: LaunchPlan, named: list[RankFailure]) -> list[RankFailure]:
    """The restarts the console named that happened: the k-th, when attempt k+1 began (a run
    stopped between a failure and its restart made none)."""
    return named[: max((n for n, _ in list_attempts(Path(plan.log_dir))), default=0)]


def read_failure(plan: LaunchPlan, launcher_text: str) -> RankFailure | None:
    """Which rank failed first and with what exception: torchrun's summary, the rank's error
    file (`@record`), else the last traceback in its log; if torchrun itself died, the first
    rank log holding a traceback."""
    logs = find_rank_logs(Path(plan.log_dir))
    failure = parse_root_cause(launcher_text)
    if failure is not None:
        local = failure.local_rank if failure.local_rank is not None else failure.rank
        log = logs.get(str(local))
        if log:
            failure.log = log
            failure.error = _rank_error(Path(log), failure.exitcode)
        return failure
    candidates = []
    for local, log in logs.items():
        error = _error_from_rank_dir(Path(log).parent)
        if error:
            candidates.append((Path(log).stat().st_mtime, int(local), error, log))
    if not candidates:
        return None
    _, local, error, log = min(candidates)
    return RankFailure(
        rank=local + (plan.node_rank or 0) * plan.nproc_per_node,
        local_rank=local,
        exitcode=None,
        time=None,
        error=error,
        log=log,
    )


def _rank_error(log: Path, exitcode: int | None) -> str | None:
    """What a failed rank died of: its exception (error file, else its log's traceback); one
    that exited with a code and no traceback, its last line (a signal's death has none of its
    own, so a last line there would be a guess)."""
    error = _error_from_rank_dir(log.parent)
    if error is None and (exitcode or 0) > 0:
        last = parse_last_lines(_read_text(log), 1)
        error = last[0].strip() if last else None
    return error


def _error_from_rank_dir(rank_dir: Path) -> str | None:
    error_file = rank_dir / "error.json"
    if error_file.is_file():
        try:
            data = json.loads(_read_text(error_file, whole=True) or "null")
        except ValueError:
            data = None
        message, _ = parse_error_file(data) if isinstance(data, dict) else (None, None)
        if message:
            return message
    return parse_last_exception(_read_text(rank_dir / "stderr.log"))


LOG_TAIL_BYTES = 1 << 20  # what is read of a log: its end holds the traceback and the summary


def _read_text(path: Path, whole: bool = False) -> str:
    """A log's last LOG_TAIL_BYTES (a rank may have printed gigabytes); `whole`: the file, or
    "" when it is longer than that (a file only ever small, like error.json)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > LOG_TAIL_BYTES:
                if whole:
                    return ""
                f.seek(size - LOG_TAIL_BYTES)
            return f.read(LOG_TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
