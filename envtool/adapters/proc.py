"""Subprocess runner: argv lists only, time-outs and missing programs returned as facts, never raised.

Every command runs in a session of its own and a time-out (or Ctrl-C) kills its whole process
group: a hung nvidia-smi or nvcc wrapper that started helpers must not leave them running.
Probes take a `Runner` so tests replace the host with recorded captures.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: did not run to completion (missing program or time-out)
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    missing: bool = False  # the program does not exist

    @property
    def ok(self) -> bool:
        return self.returncode == 0


Runner = Callable[..., ProcResult]


def run_capture(
    argv: list[str],
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: str | None = None,
    cancel: threading.Event | None = None,
    new_session: bool = True,
    kill: Callable[[subprocess.Popen[str]], object] | None = None,
) -> ProcResult:
    """Run argv, capture text output. Never raises for a missing program, a crash or a time-out.

    `cancel` set while it runs stops it like a time-out (doctor: the driver it would block on
    turned out to be hung). A process that does not die when killed (stuck in the kernel, as on
    a wedged GPU driver) is left behind after a short wait rather than waited for forever.
    `new_session` (default): the command gets a session and process group of its own, and the
    default stop SIGKILLs that whole group (the command and every helper it started that did not
    leave the group); `kill` replaces the stop (torchrun's workers leave the group)."""
    stop = kill or (kill_group if new_session else (lambda p: p.kill()))
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            errors="replace",
            start_new_session=new_session,
        )
    except (FileNotFoundError, PermissionError) as exc:
        return ProcResult(tuple(argv), None, "", str(exc), missing=True)
    deadline = time.monotonic() + timeout
    feed = stdin
    while True:
        step = deadline - time.monotonic()
        if cancel is not None:
            step = min(step, 0.1)
        try:
            out, err = proc.communicate(feed, timeout=max(step, 0.0))
            return ProcResult(tuple(argv), proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            feed = None  # communicate() keeps feeding what it started with
        except BaseException:  # e.g. Ctrl-C: as subprocess.run, leave no command running
            stop(proc)
            raise
        if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
            stop(proc)
            try:
                out, err = proc.communicate(timeout=KILL_WAIT_SECONDS)
            except subprocess.TimeoutExpired as exc:
                # unkillable for now, or a grandchild holds the pipes: leave it, keep what it said
                out, err = _decode_partial(exc.stdout), _decode_partial(exc.stderr)
            return ProcResult(tuple(argv), None, out or "", err or "", timed_out=True)


KILL_WAIT_SECONDS = 5.0


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group `proc` leads (started with start_new_session), then `proc`."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except OSError:
        pass


def _decode_partial(data: bytes | str | None) -> str:
    # TimeoutExpired carries the raw bytes read so far, even for a text-mode Popen
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def current_environ() -> dict[str, str]:
    return dict(os.environ)
