"""The console while a run goes on (launcher.CrashConsole) and the failed rank's traceback
(core/launch_plan.parse_last_traceback), on lines recorded from real torchrun 2.13 runs; the
real runs are in test_launch.py."""

from __future__ import annotations

from pathlib import Path

from envtool.adapters.launch.launcher import CrashConsole
from envtool.core.launch_plan import RankFailure, parse_last_traceback

TORCHRUN_FAILING = [
    b"W1201 22:20:29.914000 10505 torch/distributed/elastic/multiprocessing/api.py:1028] "
    b"Sending process 10649 closing signal SIGTERM\n",
    b"E1201 22:20:30.016000 10505 torch/distributed/elastic/multiprocessing/api.py:1002] "
    b"failed (exitcode: 1) local_rank: 1 (pid: 10650) of binary: /x/bin/python\n",
    b"Traceback (most recent call last):\n",
    b'  File "/x/torch/distributed/run.py", line 1032, in <module>\n',
    b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
    b"Root Cause (first observed failure):\n",
    b"[0]:\n",  # the summary box's entry: no rank's prefix
    b"  rank      : 1 (local_rank: 1)\n",
]
SECONDARY = [
    b"[default0]:[rank0]: Traceback (most recent call last):\n",
    b'[default0]:[rank0]:   File "/t/ddp_fail.py", line 5, in <module>\n',
    b"[default0]:[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:19340\n",
]


def feed(console: CrashConsole, lines: list[bytes]) -> list[bytes]:
    return [shown for line in lines for shown in console.feed(line)]


def test_rank_lines_pass_and_a_crash_is_held_back() -> None:
    c = CrashConsole()
    assert feed(c, [b"[default0]:step 1\n"]) == [b"[default0]:step 1\n"]
    assert feed(c, SECONDARY + TORCHRUN_FAILING) == []


def test_finish_shows_the_failed_ranks_traceback_only(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    log.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/t/ddp_fail.py", line 5, in <module>\n'
        "[rank1]: ValueError: boom\n"
        "[W1201 rank1 ProcessGroup.cpp] destroyed without destroy_process_group\n"
    )
    c = CrashConsole()
    feed(c, SECONDARY + TORCHRUN_FAILING)
    failure = RankFailure(rank=1, local_rank=1, exitcode=1, time=None, error="x", log=str(log))
    assert c.finish(failure) == [
        b"[rank1]: Traceback (most recent call last):\n",
        b'[rank1]:   File "/t/ddp_fail.py", line 5, in <module>\n',
        b"[rank1]: ValueError: boom\n",
    ]


def test_with_no_rank_to_blame_nothing_held_is_lost() -> None:
    c = CrashConsole()
    feed(c, TORCHRUN_FAILING)
    assert c.finish(None) == TORCHRUN_FAILING


def test_a_restart_shows_what_was_held_before_the_ranks_go_on() -> None:
    """--max-restarts: torchrun restarts the workers; the failure that caused it is shown as
    soon as a rank speaks again, in order."""
    c = CrashConsole()
    feed(c, SECONDARY + TORCHRUN_FAILING[:2])
    assert feed(c, [b"[default0]:step 1\n"]) == [
        *SECONDARY,
        *TORCHRUN_FAILING[:2],
        b"[default0]:step 1\n",
    ]
    assert c.finish(None) == []


def test_a_long_traceback_keeps_its_head_and_its_last_frames() -> None:
    frames = "".join(f'  File "/m.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(30))
    text = f"noise\nTraceback (most recent call last):\n{frames}RecursionError: deep\nafter\n"
    lines = parse_last_traceback(text, max_lines=10)
    assert len(lines) == 10
    assert lines[:2] == ["Traceback (most recent call last):", "  ..."]
    assert lines[-1] == "RecursionError: deep"
    assert parse_last_traceback("rank killed, nothing printed\n") == []


def test_what_is_held_stays_bounded(monkeypatch) -> None:
    """A rank printing a "Traceback" line then endless indented output is not held forever."""
    from envtool.adapters.launch import launcher

    monkeypatch.setattr(launcher, "CRASH_HOLD_LINES", 5)
    c = CrashConsole()
    lines = [b"[default0]:Traceback (most recent call last):\n"]
    lines += [b"[default0]:  more\n"] * 10
    shown = feed(c, lines)
    assert shown == lines and c.finish(None) == []  # released, then shown as it comes
    c = CrashConsole()
    assert (
        feed(c, TORCHRUN_FAILING) == TORCHRUN_FAILING[:6] and c.finish(None) == TORCHRUN_FAILING[6:]
    )
