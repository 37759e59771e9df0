"""Subprocess runner: argv lists only, time-outs and missing programs returned as facts, never raised.

Probes take a `Runner` so tests replace the host with recorded captures.
"""

from __future__ import annotations

import os
import subprocess
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
) -> ProcResult:
    """Run argv, capture text output. Never raises for a missing program, a crash or a time-out."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            input=stdin,
            errors="replace",
        )
    except FileNotFoundError as exc:
        return ProcResult(tuple(argv), None, "", str(exc), missing=True)
    except PermissionError as exc:
        return ProcResult(tuple(argv), None, "", str(exc), missing=True)
    except subprocess.TimeoutExpired as exc:
        out = (
            exc.stdout.decode(errors="replace")
            if isinstance(exc.stdout, bytes)
            else (exc.stdout or "")
        )
        err = (
            exc.stderr.decode(errors="replace")
            if isinstance(exc.stderr, bytes)
            else (exc.stderr or "")
        )
        return ProcResult(tuple(argv), None, out, err, timed_out=True)
    return ProcResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


def current_environ() -> dict[str, str]:
    return dict(os.environ)
