"""runs/<id>/all.log (every rank's lines, `[node N rank R]`), `envtool logs` and `envtool runs`
over real torchrun runs: a failed rank, a finished run, a followed run, broken manifests."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO, run_envtool, start_envtool

pytestmark = pytest.mark.integration

RANK_FILE = str(REPO / "tests" / "scripts" / "rank_file.py")


def env() -> dict[str, str]:
    e = {**os.environ, "OMP_NUM_THREADS": "1", "ENVTOOL_TEST_MARKER": uuid.uuid4().hex}
    e.pop("CUDA_VISIBLE_DEVICES", None)
    return e


def launch(cwd: Path, *args: str):
    return run_envtool(
        "launch", RANK_FILE, "--cpu", "--nproc", "2", *args, cwd=cwd, env=env(), timeout=120
    )


def run_dirs(cwd: Path) -> list[Path]:
    return sorted((cwd / "runs").iterdir())


def test_merged_log_holds_every_rank_prefixed_and_logs_filters_a_rank(tmp_path: Path) -> None:
    proc = launch(tmp_path, "--", "out", "--steps", "3", "--fail-rank", "1", "--at-step", "2")
    assert proc.returncode == 1, proc.stderr
    (run_dir,) = run_dirs(tmp_path)
    merged = (run_dir / "all.log").read_text().splitlines()
    assert "[node 0 rank 0] rank 0 step 3" in merged  # rank 0 ran on
    assert "[node 0 rank 1] rank 1 step 2" in merged  # rank 1 reached the console in no way
    assert "[node 0 rank 1] ValueError: planted failure on rank 1 at step 2" in merged
    assert all(line.startswith(("[node 0 rank 0] ", "[node 0 rank 1] ")) for line in merged)
    # arrival order within a rank is kept
    steps = [line for line in merged if line.startswith("[node 0 rank 0] rank 0 step")]
    assert steps == [f"[node 0 rank 0] rank 0 step {i}" for i in (1, 2, 3)]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["merged_log"].endswith("all.log")

    shown = run_envtool("logs", "--rank", "1", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "[node 0 rank 1] ValueError: planted failure on rank 1 at step 2" in lines
    assert lines and all(line.startswith("[node 0 rank 1] ") for line in lines)
    everything = run_envtool("logs", run_dir.name, cwd=tmp_path)
    assert everything.stdout.splitlines() == merged
    beyond = run_envtool("logs", "--rank", "2", cwd=tmp_path)  # a typo, not silence
    assert beyond.returncode == 2 and "has ranks 0-1" in beyond.stderr, beyond.stderr


@pytest.mark.slow
def test_runs_lists_failed_and_finished_runs_from_their_manifests(tmp_path: Path) -> None:
    assert launch(tmp_path, "--", "out", "--steps", "2", "--fail-rank", "1").returncode == 1
    assert launch(tmp_path, "--", "out2", "--steps", "2").returncode == 0
    proc = run_envtool("runs", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["runs"]
    assert [r["status"] for r in rows] == ["failed", "finished"]
    assert [r["exit_code"] for r in rows] == [1, 0]
    assert [r["id"] for r in rows] == [p.name for p in run_dirs(tmp_path)]
    for r in rows:
        assert r["script"] == RANK_FILE and (r["nnodes"], r["nproc_per_node"]) == (1, 2)
        assert r["duration_s"] is not None and r["duration_s"] >= 0
    table = run_envtool("runs", cwd=tmp_path).stdout.splitlines()
    assert table[0].split()[:3] == ["RUN", "SCRIPT", "NODES"]
    assert " failed " in table[1] and " finished " in table[2]
    # the latest run is the default of `envtool logs`
    latest = run_envtool("logs", cwd=tmp_path).stdout
    assert "[node 0 rank 1] rank 1 done" in latest and "ValueError" not in latest


@pytest.mark.slow
def test_logs_follow_prints_a_running_run_until_it_ends(tmp_path: Path) -> None:
    running = start_envtool(
        "launch",
        RANK_FILE,
        "--cpu",
        "--nproc",
        "2",
        "--",
        "out",
        "--steps",
        "6",
        "--sleep",
        "0.5",
        cwd=tmp_path,
        env=env(),
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "runs").glob("*/manifest.json")):
            assert running.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        followed = run_envtool("logs", "--follow", cwd=tmp_path, timeout=120)
    finally:
        running.communicate(timeout=120)
    assert running.returncode == 0
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert "[node 0 rank 0] rank 0 done" in lines and "[node 0 rank 1] rank 1 done" in lines
    assert lines == (run_dirs(tmp_path)[0] / "all.log").read_text().splitlines()


@pytest.mark.slow
def test_control_characters_from_a_rank_are_escaped(tmp_path: Path) -> None:
    script = tmp_path / "loud.py"
    script.write_text("print('\\x1b]0;owned\\x07 title', flush=True)\n")
    proc = run_envtool(
        "launch", str(script), "--cpu", "--nproc", "2", cwd=tmp_path, env=env(), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    shown = run_envtool("logs", cwd=tmp_path)
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "[node 0 rank 1] \\x1b]0;owned\\x07 title" in shown.stdout


def test_a_broken_manifest_is_listed_and_bad_names_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "runs" / "20260101-000000-aaaaaa"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text('{"exit_code": 0, "exit_code": 1}')
    odd = tmp_path / "runs" / "20260101-000001-bbbbbb"
    odd.mkdir()
    (odd / "manifest.json").write_text('{"exit_code": "zero", "nnodes": [1], "script": 5}')
    proc = run_envtool("runs", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["runs"]
    assert rows[0]["status"] == "unreadable manifest"
    assert rows[1]["nnodes"] is None and rows[1]["script"] is None and rows[1]["exit_code"] is None
    for args in (
        ["logs", "nosuch"],
        ["logs", bad.name],
        ["logs", "--run-dir", str(tmp_path / "x")],
    ):
        res = run_envtool(*args, cwd=tmp_path)
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    fifo = odd / "all.log"
    os.mkfifo(fifo)
    res = run_envtool("logs", odd.name, cwd=tmp_path, timeout=30)
    assert res.returncode == 2 and "not a regular file" in res.stderr


def test_manifests_that_once_crashed_runs_are_rows_and_a_newline_forges_no_row(
    tmp_path: Path,
) -> None:
    """Times with and without a zone (a TypeError), a pid past a C int (os.kill's
    OverflowError), a 5000-digit restart count in requeues.log (int()'s digit limit): each was
    a traceback. A newline in a field printed a row of its own."""
    import socket

    manifests = {
        "20260101-000000-aaaaaa": {
            "start_time": "2026-01-01T00:00:00+00:00",
            "end_time": "2026-01-01T00:01:00",
            "exit_code": 0,
            "script": "a\nforged  1 x 1  finished",
        },
        "20260101-000001-bbbbbb": {"pid": 10**23, "host": socket.gethostname()},
        "20260101-000002-cccccc": {"slurm": {"job_id": "1"}},
    }
    for name, data in manifests.items():
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "manifest.json").write_text(json.dumps(data))
    (tmp_path / "runs" / "20260101-000002-cccccc" / "requeues.log").write_text(
        f"x restart {'9' * 5000}: running\n"
    )
    proc = run_envtool("runs", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4 and not any(line.startswith("forged") for line in lines), lines
    assert "a\\x0aforged" in proc.stdout or "a\\nforged" in proc.stdout, proc.stdout
    rows = json.loads(run_envtool("runs", "--json", cwd=tmp_path).stdout)["runs"]
    assert [r["duration_s"] for r in rows][0] is None and rows[2]["status"] == "submitted"


H = "2026-12-01T15:31:57Z job 7 restart"


@pytest.mark.parametrize(
    ("lines", "status"),
    [
        ([f"{H} 0: start on n1"], "running"),
        (
            [f"{H} 0: start on n1", f"{H} 0: got SIGUSR1: …", f"{H} 0: srun ended (exit 1)"],
            "failed",
        ),
        ([f"{H} 0: srun ended (exit 1)", f"{H} 0: requeued (1 of 3)"], "requeued (1x)"),
        ([f"{H} 1: start on n1", f"{H} 1: srun ended (exit 0)"], "finished, requeued 1x"),
        ([f"{H} 3: not requeued: --max-requeues 3 reached"], "stopped (--max-requeues reached)"),
    ],
)
def test_a_requeue_jobs_status_comes_from_its_history(lines: list[str], status: str) -> None:
    from envtool.core.runs import summarize_manifest

    manifest = {"slurm": {"job_id": "7"}, "nnodes": 2, "nproc_per_node": 8}
    row = summarize_manifest("r", manifest, None, "\n".join(lines) + "\n")
    assert row.status == status and row.job_id == "7"
    assert summarize_manifest("r", manifest).status == "submitted"


def test_logs_of_a_slurm_run_points_at_its_output(tmp_path: Path) -> None:
    written = run_envtool(
        "launch", RANK_FILE, "--slurm", "--cpu", "--nodes", "1", cwd=tmp_path, env=env()
    )
    assert written.returncode == 0, written.stderr
    listed = json.loads(run_envtool("runs", "--json", cwd=tmp_path).stdout)["runs"]
    assert [r["status"] for r in listed] == ["written"]
    shown = run_envtool("logs", cwd=tmp_path)
    assert shown.returncode == 2 and "is a Slurm job" in shown.stderr and "slurm-" in shown.stderr


def test_a_burst_of_output_at_the_end_is_all_in_the_merged_log(tmp_path: Path) -> None:
    """all.log reads rank files in 1 MiB bites; what a rank wrote just before the run ended
    (here 24 MiB from rank 1, off the console) is still drained to the last line."""
    script = tmp_path / "burst.py"
    script.write_text(
        "import os, sys\n"
        "if os.environ['RANK'] == '1':\n"
        "    line = 'x' * 95\n"
        "    sys.stdout.write(''.join(f'{i:08d} {line}\\n' for i in range(240_000)))\n"
        "    sys.stdout.flush()\n"
    )
    proc = run_envtool(
        "launch", str(script), "--cpu", "--nproc", "2", cwd=tmp_path, env=env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = run_dirs(tmp_path)
    with open(run_dir / "all.log", "rb") as f:
        lines = [line for line in f if line.startswith(b"[node 0 rank 1] ")]
    assert len(lines) == 240_000
    assert lines[-1] == b"[node 0 rank 1] 00239999 " + b"x" * 95 + b"\n"


def test_following_a_run_with_a_log_and_no_manifest_ends(tmp_path: Path) -> None:
    """A folder with all.log and no manifest (an envtool killed before writing it, or an older
    one): `logs --follow` printed the log and then waited forever for an end nobody writes."""
    run = tmp_path / "runs" / "20260101-000000-aaaaaa"
    run.mkdir(parents=True)
    (run / "all.log").write_text("[node 0 rank 0] hello\n")
    proc = run_envtool("logs", "--follow", run.name, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[node 0 rank 0] hello"]


def test_a_run_torchrun_restarted_says_so_in_its_status() -> None:
    """The table says "finished, restarted 2x"; --json keeps status "finished" (what scripts
    compare) and gives the count as `restarts`."""
    from envtool.core.runs import render_rows, summarize_manifest

    base = {"exit_code": 0, "start_time": "2026-12-01T00:00:00+00:00"}
    row = summarize_manifest("r", {**base, "restarts": [{}, {}]})
    assert (row.status, row.to_dict()["restarts"]) == ("finished", 2)
    assert "finished, restarted 2x" in render_rows([row])[1]
    failed = summarize_manifest("r", {**base, "exit_code": 1, "restarts": [{}]})
    assert "failed, restarted 1x" in render_rows([failed])[1]
    for odd in ([], "3", 3, {"a": 1}):  # none, or not a list (an edited manifest): no claim
        row = summarize_manifest("r", {**base, "restarts": odd})
        assert row.restarts == 0 and "restarted" not in render_rows([row])[1]


def test_an_attempts_lines_all_come_before_the_next_attempts_mark(tmp_path: Path) -> None:
    """all.log reads 1 MiB a file a look: a failed attempt's unread tail (and its last line
    without a newline) went in after the `[envtool] attempt 1` line, as the new attempt's."""
    from envtool.adapters.launch.launcher import MergedLog
    from envtool.core.launch_plan import LaunchRequest, plan_launch

    plan = plan_launch(
        LaunchRequest(
            script="t.py", python="py", run_id="r", runs_root=str(tmp_path), cpu=True,
            nproc=2, free_port=1,
        )
    )  # fmt: skip
    attempts = Path(plan.log_dir) / "r_x"
    old = attempts / "attempt_0" / "1"
    old.mkdir(parents=True)
    (old / "stdout.log").write_text("".join(f"{i:07d} {'y' * 92}\n" for i in range(30_000)))
    with open(old / "stderr.log", "w") as f:
        f.write("last words, no newline")
    merged = MergedLog(plan)
    merged.out = open(tmp_path / "all.log", "ab")  # noqa: SIM115
    merged.poll()  # the first MiB of attempt 0
    new = attempts / "attempt_1" / "1"
    new.mkdir(parents=True)
    (new / "stdout.log").write_text("again\n")
    (new / "stderr.log").write_text("")
    merged.poll()
    merged.poll(final=True)
    merged.out.close()
    lines = (tmp_path / "all.log").read_text().splitlines()
    mark = lines.index("[envtool] attempt 1: torchrun started every rank again (--max-restarts)")
    assert mark == 30_001 and lines[mark + 1 :] == ["[node 0 rank 1] again"], lines[mark - 2 :]
    assert "[node 0 rank 1] last words, no newline" in lines[:mark]
    assert not merged.offsets.keys() & {old / "stdout.log", old / "stderr.log"}  # let go
