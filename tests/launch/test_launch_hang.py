"""--hang-timeout names the rank(s) that stopped making progress, and start-up has its own grace.

Before: the rank named was the one whose log stopped growing first, by mtime, so a rank stopped
while every rank printed each step lost the race to the rank waiting on it in the all-reduce
(rank 0 named, rank 1 stopped); and the files torchrun creates empty at start counted as
silence, so a start-up longer than --hang-timeout (imports, data loading) was stopped as a hang.
Real torchrun runs over gloo (tests/scripts/stall.py) and the pure choice (core/runs)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from conftest import REPO, run_envtool
from test_launch import launch_env, only_run_dir, wait_gone

from envtool.core.runs import find_stalled_ranks, render_ranks

STALL = str(REPO / "tests" / "scripts" / "stall.py")
QUIET_START = """
import os, time
time.sleep(15)  # start-up: loading data, say; nothing printed
for i in range(5):
    print(f"rank {os.environ['RANK']} step {i}", flush=True)
    time.sleep(0.1)
"""


def launch(tmp_path: Path, marker: str, *args: str):  # type: ignore[no-untyped-def]
    return run_envtool("launch", *args, cwd=tmp_path, env=launch_env(marker), timeout=180)


def test_a_stopped_process_is_named_over_the_log_order() -> None:
    # rank 1 printed last by a hair (it raced rank 0), but rank 0's process is the one stopped
    assert find_stalled_ranks({0: 100.0, 1: 100.05}, [0], [0, 1]) == (
        [0],
        "its process is stopped (SIGSTOP or a debugger)",
    )
    # no stopped process: the log that stopped first; logs within TIE_SECONDS stopped together
    assert find_stalled_ranks({0: 100.0, 1: 95.0, 2: 99.0}, [], [0, 1, 2])[0] == [1]
    assert find_stalled_ranks({0: 100.0, 1: 100.05}, [], [0, 1])[0] == [0, 1]
    assert find_stalled_ranks({}, [], [1, 0]) == ([0, 1], "no rank printed anything yet")
    assert render_ranks([1]) == "rank 1" and render_ranks([0, 2, 3], 4) == "ranks 4, 6 and 7"
    assert render_ranks([1, 3], known=False) == "local ranks 1 and 3 on this node"


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("stalled", [1, 0])
def test_the_rank_that_was_stopped_is_named(tmp_path: Path, stalled: int) -> None:
    """Every rank all-reduces and prints each step; rank `stalled` is SIGSTOPped at step 3,
    the other waits for it in the next all-reduce. The stopped one is named, whichever it is."""
    marker = uuid.uuid4().hex
    proc = launch(
        tmp_path, marker, STALL, "--cpu", "--nproc", "2", "--hang-timeout", "4",
        "--", "--steps", "1000", "--stall-rank", str(stalled), "--at-step", "3",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "made no progress" in x)
    assert line.startswith(f"envtool: rank {stalled} made no progress for "), line
    assert "its process is stopped" in line and "--hang-timeout 4" in line
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["failed_rank"] == stalled and manifest["hang"]["ranks"] == [stalled]
    assert wait_gone(marker) == []


@pytest.mark.integration
@pytest.mark.slow
def test_a_silent_start_up_is_not_a_hang(tmp_path: Path) -> None:
    """15 s of silence before any rank prints (3x --hang-timeout), then a short run: start-up
    is judged by --startup-grace (600 s by default), so the run finishes. (Stdlib only: no
    torch teardown after the last line for a loaded machine to stretch past the bound.)"""
    script = tmp_path / "slow_start.py"
    script.write_text(QUIET_START)
    marker = uuid.uuid4().hex
    proc = launch(tmp_path, marker, str(script), "--cpu", "--nproc", "2", "--hang-timeout", "5")
    assert proc.returncode == 0, proc.stderr
    assert "made no progress" not in proc.stderr and "no rank printed" not in proc.stderr
    merged = (only_run_dir(tmp_path) / "all.log").read_text()
    assert "[node 0 rank 1] rank 1 step 4" in merged


@pytest.mark.integration
@pytest.mark.slow
def test_a_start_up_past_its_grace_is_stopped_and_says_so(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    proc = launch(
        tmp_path, marker, STALL, "--cpu", "--nproc", "2", "--hang-timeout", "2",
        "--startup-grace", "15", "--", "--quiet-start", "600",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "no rank printed anything" in x)
    assert "(ranks 0 and 1)" in line and "stopped by --startup-grace" in line, line
    assert "made no progress" not in proc.stderr
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["hang"]["startup"] is True and manifest["hang"]["ranks"] == [0, 1]
    assert wait_gone(marker) == []


def test_startup_grace_with_slurm_is_refused(tmp_path: Path) -> None:
    proc = run_envtool(
        "launch", STALL, "--slurm", "--nodes", "1", "--cpu", "--startup-grace", "60",
        cwd=tmp_path, env=launch_env(uuid.uuid4().hex),
    )  # fmt: skip
    assert proc.returncode == 2 and "--startup-grace watches a local run" in proc.stderr


def test_startup_grace_alone_is_refused_not_ignored(tmp_path: Path) -> None:
    """It was accepted and bounded nothing (a silent start was only warned about)."""
    proc = run_envtool(
        "launch", STALL, "--cpu", "--startup-grace", "4", cwd=tmp_path,
        env=launch_env(uuid.uuid4().hex),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "envtool: error: --startup-grace 4 bounds start-up under --hang-timeout — add "
        "--hang-timeout SECONDS (the bound once ranks print)"
    )
    assert not (tmp_path / "runs").exists()


def _aged_logs(tmp_path: Path, ages: dict[int, float | None]):  # type: ignore[no-untyped-def]
    """A one-node plan and its rank logs as torchrun leaves them; None: created, never written."""
    import os
    import time

    from envtool.core.launch_plan import LaunchRequest, plan_launch

    plan = plan_launch(
        LaunchRequest(
            script="t.py", python="py", run_id="r", runs_root=str(tmp_path), cpu=True,
            nproc=len(ages), free_port=1,
        )
    )  # fmt: skip
    now = time.time()
    for local, age in ages.items():
        rank_dir = Path(plan.log_dir, "r_x", "attempt_0", str(local))
        rank_dir.mkdir(parents=True)
        for name in ("stdout.log", "stderr.log"):
            (rank_dir / name).write_text("" if age is None else "x")
            os.utime(rank_dir / name, (now - (age or 50.0), now - (age or 50.0)))
    return plan


def test_ranks_that_have_ended_are_not_a_hang(tmp_path: Path) -> None:
    """Every worker process is gone (the ranks finished; torchrun is slow to wrap up on a
    loaded machine): silence past the bound stops nothing."""
    from envtool.adapters.launch.launcher import ProgressWatch

    plan = _aged_logs(tmp_path, {0: 40.0, 1: 45.0})
    watch = ProgressWatch(plan, hang_timeout=30.0, say=lambda _: None, read_states=lambda _: {})
    assert watch.check() is False and watch.hang is None


def test_files_torchrun_created_empty_are_start_up_not_silence(tmp_path: Path) -> None:
    """Nothing printed yet, files 50 s old, --hang-timeout 30: start-up (600 s grace), no stop;
    with --startup-grace 40 it is stopped, naming every rank, as start-up."""
    from envtool.adapters.launch.launcher import ProgressWatch

    plan = _aged_logs(tmp_path, {0: None, 1: None})
    alive = lambda _: {0: "S", 1: "S"}  # noqa: E731
    said: list[str] = []
    watch = ProgressWatch(plan, hang_timeout=30.0, say=said.append, read_states=alive)
    watch.started -= 50  # start-up is counted from the launch
    assert watch.check() is False and said == []
    watch = ProgressWatch(plan, 30.0, say=said.append, startup_grace=40.0, read_states=alive)
    watch.started -= 50
    assert watch.check() is True and watch.hang is not None
    assert watch.hang.startup and watch.hang.ranks == [0, 1] and watch.hang.label == "ranks 0 and 1"
    assert "no rank has printed anything for" in said[0]


def test_a_restart_starts_up_again_and_is_not_stopped_as_a_hang(tmp_path: Path) -> None:
    """--max-restarts with --hang-timeout: torchrun's next attempt starts with empty logs.
    Start-up was counted from the launch, so a run older than --startup-grace was stopped as
    "no rank printed anything" a second after any restart. Each attempt starts up anew."""
    import os

    from envtool.adapters.launch.launcher import ProgressWatch

    plan = _aged_logs(tmp_path, {0: 1.0, 1: 1.0})  # attempt 0: printing
    alive = lambda _: {0: "S", 1: "S"}  # noqa: E731
    said: list[str] = []
    watch = ProgressWatch(plan, 30.0, say=said.append, startup_grace=40.0, read_states=alive)
    watch.started -= 3600  # an hour into the run
    assert watch.check() is False
    for local in (0, 1):  # torchrun restarted the workers: attempt 1, nothing printed yet
        rank_dir = Path(plan.log_dir, "r_x", "attempt_1", str(local))
        rank_dir.mkdir(parents=True)
        for name in ("stdout.log", "stderr.log"):
            (rank_dir / name).write_text("")
    watch.next_scan = 0.0
    assert watch.check() is False and watch.hang is None and said == []
    # the new attempt's start-up has its own grace: past it, stopped as start-up
    watch.started -= 50
    watch.next_scan = 0.0
    assert watch.check() is True and watch.hang is not None and watch.hang.startup
    assert watch.hang.attempt == 1  # "no rank printed anything for 50 s after restart 1"
    assert os.path.basename(os.path.dirname(os.path.dirname(watch.hang.log or ""))) == "attempt_1"


RESTARTS_LATE = """
import os, sys, time
rank, attempt = os.environ["RANK"], int(os.environ["TORCHELASTIC_RESTART_COUNT"])
time.sleep(2 if attempt else 0)  # the restart's start-up: silent, within its grace
for i in range(16 if attempt == 0 else 3):  # attempt 0 runs past --startup-grace
    print(f"rank {rank} attempt {attempt} step {i}", flush=True)
    time.sleep(0.4)
if attempt == 0 and rank == "1":
    sys.exit("rank 1: planted failure")
time.sleep(0.2)
"""


@pytest.mark.integration
@pytest.mark.slow
def test_a_restart_of_a_run_older_than_its_startup_grace_goes_on(tmp_path: Path) -> None:
    """The second attempt's empty logs were start-up counted from the launch: a run 6 s old
    with --startup-grace 4 was stopped as "no rank printed anything" at its first restart."""
    script = tmp_path / "late.py"
    script.write_text(RESTARTS_LATE)
    marker = uuid.uuid4().hex
    proc = launch(
        tmp_path, marker, str(script), "--cpu", "--nproc", "2", "--max-restarts", "1",
        "--hang-timeout", "4", "--startup-grace", "4",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "restart 1 of 1: rank 1 failed (exit 1): rank 1: planted failure" in proc.stderr
    merged = (only_run_dir(tmp_path) / "all.log").read_text()
    assert "[node 0 rank 1] rank 1 attempt 1 step 2" in merged
