"""Long lines: a rank's `\r` progress bar with no newline (tqdm's way) or one huge line in a log
cost time quadratic in the line and memory in proportion to it (launch: 100 MB of progress, 34.6 s
and 346 MB; `envtool logs` of one 64 MB line, 10.4 s and 525 MB). A line is now cut at 64 KiB
and marked, read once: the tests assert the cut and envtool's peak memory (its own ru_maxrss,
against the same command on a small input), not time. And `logs --follow` ends for a manifest
whose writer cannot be watched from here (another host, a pid that is no pid)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import REPO

from envtool.core.runs import MAX_LINE_BYTES, LineSplitter

PROGRESS = str(REPO / "tests" / "scripts" / "progress_bar.py")
CUT = " … [line cut at 64 KiB]"
# envtool's own peak RSS, printed at exit (RUSAGE_SELF: not the ranks, which are its children)
PEAK = (
    "import atexit, resource, sys; atexit.register(lambda: sys.stderr.write("
    "'PEAK_KB %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)); "
    "from envtool.cli import main; sys.argv[0] = 'envtool'; main()"
)
MB = 1024  # ru_maxrss is in KiB on Linux


def envtool_peak(args: list[str], cwd: Path, timeout: float = 300) -> tuple[int, str, str]:
    """(peak RSS in KiB, stdout, stderr without the PEAK line) of `envtool ARGS`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ENVTOOL_TEST_MARKER": uuid.uuid4().hex}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=timeout,
    )
    err = proc.stderr.decode("utf-8", "replace")
    peak = [line for line in err.splitlines() if line.startswith("PEAK_KB ")]
    assert peak, err[-3000:]
    rest = "\n".join(line for line in err.splitlines() if not line.startswith("PEAK_KB "))
    return int(peak[-1].split()[1]), proc.stdout.decode("utf-8", "replace"), rest


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
def test_a_line_past_the_cap_is_cut_once_whatever_the_chunks(chunk: int) -> None:
    data = b"short\n" + b"x" * (3 * MAX_LINE_BYTES) + b"\nafter\n" + b"y" * 10
    splitter = LineSplitter()
    out: list[bytes] = []
    for i in range(0, len(data), chunk):
        out += splitter.feed(data[i : i + chunk])
    out += splitter.flush()
    assert out == [b"short", b"x" * MAX_LINE_BYTES + CUT.encode(), b"after", b"y" * 10]
    assert len(splitter.held) == 0


def test_a_line_of_exactly_the_cap_is_whole() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"z" * MAX_LINE_BYTES + b"\n") == [b"z" * MAX_LINE_BYTES]


def write_run(root: Path, name: str, log: bytes, **manifest: object) -> Path:
    run = root / "runs" / name
    run.mkdir(parents=True)
    data = {"run_id": name, "exit_code": 0, **manifest}
    (run / "manifest.json").write_text(json.dumps(data))
    with open(run / "all.log", "wb") as f:
        f.write(log)
    return run


@pytest.mark.integration
@pytest.mark.slow
def test_logs_of_one_64_mb_line_is_cut_and_stays_small(tmp_path: Path) -> None:
    head = b"[node 0 rank 0] first\n"
    tail = b"\n[node 0 rank 1] last\n"
    line = b"[node 0 rank 0] " + b"\rstep 1234567 [##########]" * (64 * 1024 * 1024 // 26)
    write_run(tmp_path, "20260101-000000-aaaaaa", head + b"[node 0 rank 0] tiny" + tail)
    write_run(tmp_path, "20260101-000001-bbbbbb", head + line + tail)
    small, _, _ = envtool_peak(["logs", "20260101-000000-aaaaaa"], tmp_path)
    big, out, err = envtool_peak(["logs", "20260101-000001-bbbbbb"], tmp_path)
    lines = out.splitlines()
    assert lines[0] == "[node 0 rank 0] first" and lines[-1] == "[node 0 rank 1] last", err
    (cut,) = [x for x in lines if x.endswith(CUT)]
    shown = cut[: -len(CUT)].replace("\\x0d", "\r").encode()  # the terminal sees \r escaped
    assert len(shown) == MAX_LINE_BYTES  # the line's first 64 KiB, its prefix included
    assert len(lines) == 3
    assert big - small < 16 * MB, (small, big)  # was +525 MB


@pytest.mark.integration
@pytest.mark.slow
def test_a_rank_drawing_24_mb_of_progress_without_a_newline(tmp_path: Path) -> None:
    """torchrun tees rank 0's stderr to envtool (launcher.log, the console) and every rank's
    files are merged into all.log: each keeps a cut, marked line; envtool's memory does not
    follow the line's length."""
    args = ["launch", PROGRESS, "--cpu", "--nproc", "2"]
    small, _, small_err = envtool_peak([*args, "--run-dir", "small", "--", "0.01"], tmp_path)
    big, _, err = envtool_peak([*args, "--run-dir", "big", "--", "24"], tmp_path)
    assert "finished" in err and "finished" in small_err, err[-2000:]
    (run,) = (tmp_path / "big").iterdir()
    merged = (run / "all.log").read_bytes().split(b"\n")
    for rank in (0, 1):
        mine = [x for x in merged if x.startswith(f"[node 0 rank {rank}] ".encode())]
        cut = [x for x in mine if x.endswith(CUT.encode())]
        assert len(cut) == 1 and len(cut[0]) < MAX_LINE_BYTES + 100, [len(x) for x in mine]
        assert f"[node 0 rank {rank}] rank {rank} done".encode() in mine
    # torchrun's tee reads rank 0's file as text: each \r redraw reaches envtool as a line
    launcher = (run / "launcher.log").read_bytes().split(b"\n")
    assert max(len(x) for x in launcher) <= MAX_LINE_BYTES + len(CUT.encode())
    assert big - small < 16 * MB, (small, big)


@pytest.mark.integration
@pytest.mark.parametrize(
    "writer",
    [
        {"host": "another-host.example", "pid": 1},  # pid 1 is alive here: not the writer
        {"host": socket.gethostname(), "pid": 1 << 40},  # no pid is this large
        {"host": socket.gethostname(), "pid": -5},
        {"host": socket.gethostname(), "pid": "123"},
    ],
    ids=["another-host", "pid-out-of-range", "negative-pid", "pid-as-text"],
)
def test_logs_follow_ends_for_a_writer_it_cannot_watch(tmp_path: Path, writer: dict) -> None:
    write_run(
        tmp_path, "20260101-000000-cccccc", b"[node 0 rank 0] hello\n", exit_code=None, **writer
    )
    proc = subprocess.run(
        [sys.executable, "-m", "envtool", "logs", "--follow"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,  # before: it followed forever
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[node 0 rank 0] hello\n"
