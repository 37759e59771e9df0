"""The console while a run goes on (launcher.CrashConsole) and the failed rank's traceback
(core/launch_plan.parse_last_traceback), on lines recorded from real torchrun 2.13 runs; the
real runs are in test_launch.py."""

from __future__ import annotations

from pathlib import Path

from envtool.adapters.launch.launcher import CrashConsole, read_attempt_failure, restarts_made
from envtool.core.launch_plan import (
    LaunchPlan,
    RankFailure,
    parse_attempt_failures,
    parse_last_traceback,
)

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


def _restart_plan(tmp_path: Path, max_restarts: int) -> LaunchPlan:
    """A run folder as torchrun 2.13 leaves it: torchrun/<id>_<rand>/attempt_N/<local>/."""
    return LaunchPlan(
        argv=[],
        env_add={},
        run_id="r",
        run_dir=str(tmp_path),
        log_dir=str(tmp_path / "torchrun"),
        backend="gloo",
        nproc_per_node=2,
        nnodes=1,
        node_rank=None,
        rendezvous={},
        max_restarts=max_restarts,
    )


def _attempt(plan: LaunchPlan, n: int, rank1_log: str = "") -> Path:
    attempt = Path(plan.log_dir) / "r_x1y2" / f"attempt_{n}"
    for local in (0, 1):
        (attempt / str(local)).mkdir(parents=True)
        (attempt / str(local) / "stderr.log").write_text(rank1_log if local == 1 else "")
    return attempt


PLANTED = (
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "/t/train.py", line 9, in <module>\n'
    "[rank1]: ValueError: planted\n"
)


def test_a_restart_is_named_with_the_rank_that_caused_it(tmp_path: Path) -> None:
    """--max-restarts: torchrun's failure line with restarts left shows what was held, the
    line, then one envtool line: which restart, which rank failed and why, and where its log
    is. The k-th failure line ended attempt k, whatever folders exist by the time the line
    is read (a slow console: torchrun may have made the next ones already)."""
    plan = _restart_plan(tmp_path, max_restarts=2)
    first = _attempt(plan, 0, PLANTED)
    second = _attempt(plan, 1, PLANTED.replace("planted", "again"))
    _attempt(plan, 2)  # read late: every attempt's folder is there already
    c = CrashConsole(plan)
    assert feed(c, [b"[default0]:step 1\n", TORCHRUN_FAILING[0]]) == [b"[default0]:step 1\n"]
    shown = feed(c, [TORCHRUN_FAILING[1]])
    assert shown[:2] == TORCHRUN_FAILING[:2] and len(shown) == 3
    assert shown[2].decode() == (
        "envtool: restart 1 of 2: rank 1 failed (exit 1): ValueError: planted — torchrun "
        f"started every rank again; its logs: {first}/1/stderr.log\n"
    )
    assert feed(c, [b"[default0]:step 1\n"]) == [b"[default0]:step 1\n"]
    killed = TORCHRUN_FAILING[1].replace(b"exitcode: 1", b"exitcode: -9")
    (line,) = feed(c, [killed])[1:]
    assert line.decode() == (
        "envtool: restart 2 of 2: rank 1 failed (killed by SIGKILL): ValueError: again — "
        f"torchrun started every rank again; its logs: {second}/1/stderr.log\n"
    )
    # the third failure: no restart left, held for the end (the failed rank's traceback)
    assert feed(c, TORCHRUN_FAILING) == []
    assert [(f.exitcode, f.error) for f in c.restarts] == [
        (1, "ValueError: planted"),
        (-9, "ValueError: again"),
    ]


def test_a_rank_error_is_escaped_and_no_plan_names_no_restart(tmp_path: Path) -> None:
    plan = _restart_plan(tmp_path, max_restarts=1)
    _attempt(plan, 0, "[rank1]: fatal \x1b[2J\x1b]0;owned\x07 done\n")
    (line,) = CrashConsole(plan).feed(TORCHRUN_FAILING[1])[1:]
    assert b"\x1b" not in line and b"\x07" not in line and b"fatal \\x1b[2J" in line, line
    c = CrashConsole()  # no plan (no run folder to read): held as any failure
    assert feed(c, TORCHRUN_FAILING[:2]) == [] and c.finish(None) == TORCHRUN_FAILING[:2]


def test_a_restart_is_recorded_once_its_next_attempt_began(tmp_path: Path) -> None:
    """The manifest's record: each failure the console named as a restart, once torchrun's
    next attempt exists (a run stopped between the failure and the restart made none); an
    exit without a traceback is named by its last line."""
    plan = _restart_plan(tmp_path, max_restarts=3)
    _attempt(plan, 0, PLANTED)
    _attempt(plan, 1, "[rank1]: fatal: no data at /d\n")
    c = CrashConsole(plan)
    text = b"".join(TORCHRUN_FAILING[:2]).decode()
    failures = parse_attempt_failures(text + text.replace("exitcode: 1", "exitcode: 3"))
    assert failures == [(1, 1), (1, 3)]
    feed(c, [TORCHRUN_FAILING[1], TORCHRUN_FAILING[1].replace(b"exitcode: 1", b"exitcode: 3")])
    (first,) = restarts_made(plan, c.restarts)  # attempt 2 never began: one restart
    assert (first.rank, first.exitcode, first.error) == (1, 1, "ValueError: planted")
    assert "/attempt_0/1/" in (first.log or "")
    _attempt(plan, 2)
    first, second = restarts_made(plan, c.restarts)
    assert (second.exitcode, second.error) == (3, "fatal: no data at /d")
    assert "/attempt_1/1/" in (second.log or "")
    assert restarts_made(_restart_plan(tmp_path / "none", 1), c.restarts) == []
    gone = read_attempt_failure(plan, 7, 1, -9)  # its folder is gone: the line's facts only
    assert (gone.rank, gone.exitcode, gone.log, gone.error) == (1, -9, None, None)


def test_logs_are_read_by_their_end_and_an_odd_error_file_is_no_crash(tmp_path: Path) -> None:
    """A rank that printed 64 MB before its traceback: only the log's end is read (memory
    stays far under the log's size). An error.json that is a list, broken or too big falls
    back to the log's traceback."""
    import tracemalloc

    plan = _restart_plan(tmp_path, max_restarts=1)
    attempt = _attempt(plan, 0)
    with open(attempt / "1" / "stderr.log", "w") as f:
        for _ in range(64):
            f.write(("x" * 1023 + "\n") * 1024)
        f.write(PLANTED)
    for odd in ("[1, 2]", "{", '{"message": "' + "m" * (2 << 20) + '"}'):
        (attempt / "1" / "error.json").write_text(odd)
        tracemalloc.start()
        failure = read_attempt_failure(plan, 0, 1, 1)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert failure.error == "ValueError: planted", odd
        assert peak < 8 << 20, peak  # the log is 64 MB


def test_odd_folders_in_torchruns_log_folder_are_no_attempts(tmp_path: Path) -> None:
    from envtool.adapters.launch.launcher import find_rank_logs

    plan = _restart_plan(tmp_path, max_restarts=1)
    _attempt(plan, 0, PLANTED)
    for odd in ("attempt_x", "attempt_²", "attempt_" + "9" * 200, "attempt_"):
        (Path(plan.log_dir) / "r_x1y2" / odd).mkdir()
    assert restarts_made(plan, [read_attempt_failure(plan, 0, 1, 1)]) == []  # one attempt
    assert find_rank_logs(Path(plan.log_dir))["1"].endswith("attempt_0/1/stderr.log")
