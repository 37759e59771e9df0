"""Templates as plain scripts, on a text file, and the checkpoints ranks disagree about (one
line and every rank stops, not a hang or a traceback)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from template_runs import (
    COMMON,
    TEMPLATES,
    TINY,
    child_env,
    result_of,
    single_process,
    template,
)


@pytest.mark.integration
def test_ddp_template_runs_as_a_plain_python_script(tmp_path: Path) -> None:
    proc = single_process("ddp", ["--max-steps", "3"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = result_of(proc.stdout)
    assert result["world_size"] == 1 and result["step"] == 3
    assert result["samples_per_s"] > 0


@pytest.mark.integration
def test_lm_trains_on_a_text_file_as_bytes(tmp_path: Path) -> None:
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 100)
    argv = [sys.executable, str(template("lm")), *TINY["lm"], *COMMON, "--max-steps", "3"]
    argv += ["--data", "corpus.txt", "--resume", "never"]
    proc = subprocess.run(
        argv, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert result_of(proc.stdout)["step"] == 3

    argv[argv.index("corpus.txt")] = "missing.txt"
    proc = subprocess.run(
        argv, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2  # a usage error naming the file, not a traceback
    assert "missing.txt" in proc.stderr and "Traceback" not in proc.stderr


HIDE_FROM_RANK_1 = """\
import os, pathlib, runpy, sys
hide, script = sys.argv.pop(1), sys.argv.pop(1)
if os.environ.get("RANK") == "1":  # a node that cannot see the checkpoint rank 0 wrote
    is_file = pathlib.Path.is_file
    pathlib.Path.is_file = lambda self, *a, **k: self.name != hide and is_file(self, *a, **k)
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
"""


def torchrun_through_wrapper(
    name: str, wrapper: str, wrapper_args: list[str], args: list[str], cwd: Path
) -> tuple[int, str, str]:
    """torchrun, 2 ranks, each running the template through `wrapper` (which plays a node with
    a different view of --out-dir); a hang fails the test and leaves no worker behind."""
    from envtool.adapters.launch.launcher import pids_with_environ

    script = cwd / "wrapper.py"
    script.write_text(wrapper)
    marker = f"ENVTOOL_TEST_MARKER=resume-{os.getpid()}-{name}-{cwd.name}"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    argv += [str(script), *wrapper_args, str(template(name)), *TINY[name], *COMMON, *args]
    env = {**child_env(), marker.split("=")[0]: marker.split("=")[1]}
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the ranks hung: they started from different steps")
    finally:
        for pid in pids_with_environ(marker.encode()):  # workers live in their own sessions
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("name", TEMPLATES)
def test_a_checkpoint_only_some_ranks_see_stops_every_rank_instead_of_hanging(
    name: str, tmp_path: Path
) -> None:
    """rank 0 wrote --out-dir on a node-local disk: on restart only its node finds the
    checkpoint. Ranks resuming at different steps would hang in a collective the others skip;
    all of them must stop with the reason instead."""
    first = single_process(name, ["--max-steps", "2"], tmp_path)  # cheaper than torchrun
    assert first.returncode == 0, first.stderr[-3000:]
    hide = "latest" if name == "fsdp" else "ckpt.pt"
    code, out, err = torchrun_through_wrapper(
        name, HIDE_FROM_RANK_1, [hide], ["--max-steps", "4"], tmp_path
    )
    assert code != 0, out
    assert "of 2 ranks only" in err, err[-3000:]
    assert "RESULT " not in out


STALE_ON_RANK_1 = """\
import os, runpy, sys
stale, script = sys.argv.pop(1), sys.argv.pop(1)
if os.environ.get("RANK") == "1":  # its node-local --out-dir holds an older run's checkpoint
    sys.argv += ["--out-dir", stale]
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("name", TEMPLATES)
def test_checkpoints_at_different_steps_stop_every_rank_instead_of_hanging(
    name: str, tmp_path: Path
) -> None:
    """Every node finds a checkpoint in its node-local --out-dir, but rank 1's is a stale one
    from a shorter run: resuming at steps 4 and 2 they would run different numbers of steps
    and hang. All of them must stop with the steps named instead."""
    for out_dir, steps in (("out", "4"), ("stale", "2")):  # single-process runs: cheaper
        made = single_process(name, ["--max-steps", steps, "--out-dir", out_dir], tmp_path)
        assert made.returncode == 0, made.stderr[-3000:]
    code, out, err = torchrun_through_wrapper(
        name, STALE_ON_RANK_1, ["stale"], ["--max-steps", "6"], tmp_path
    )
    assert code != 0, out
    assert "ranks would resume at steps 2 and 4" in err, err[-3000:]
    assert "RESULT " not in out


@pytest.mark.slow
@pytest.mark.integration
def test_fsdp_latest_naming_a_missing_checkpoint_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    """`latest` left pointing at a step directory someone deleted (or a copy that missed it)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "latest").write_text("step-4\n")
    proc = single_process("fsdp", ["--max-steps", "2"], tmp_path)
    assert proc.returncode != 0
    assert "names " in proc.stderr and "not a complete checkpoint" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    ("first", "then", "said"),
    [
        (("ddp", []), ("lm", []), "is a checkpoint of a different model"),
        (("fsdp", []), ("fsdp", ["--vocab-size", "512"]), "could not be loaded into this model"),
    ],
)
def test_resuming_another_models_checkpoint_is_one_line_not_a_traceback(
    first: tuple[str, list[str]], then: tuple[str, list[str]], said: str, tmp_path: Path
) -> None:
    """Two templates (or two sizes) run in one folder share the default --out-dir."""
    done = single_process(first[0], ["--max-steps", "2", *first[1]], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = single_process(then[0], ["--max-steps", "4", *then[1]], tmp_path)
    assert proc.returncode != 0
    assert said in proc.stderr and "another --out-dir" in proc.stderr
    assert "Traceback" not in proc.stderr
