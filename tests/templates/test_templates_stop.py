"""Stopping a template: SIGTERM (Slurm preemption) and SIGINT (Ctrl-C) to one process or the
whole group, under torchrun and alone; loader workers spared; a second SIGINT aborts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from template_runs import (
    COMMON,
    TEMPLATES,
    TINY,
    child_env,
    result_of,
    step_losses,
    template,
)

# --- preemption ---


STOP_SIGNALS = [signal.SIGTERM, signal.SIGINT]  # Slurm preemption, Ctrl-C


def run_until_step_then_signal(
    argv: list[str],
    cwd: Path,
    sig: signal.Signals,
    step: int = 2,
    stderr: int = subprocess.DEVNULL,
    group: bool = False,
) -> tuple[int, str]:
    """group: signal the whole process group, as torchrun (os.killpg) and a terminal's Ctrl-C do."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=group,
    )
    guard = threading.Timer(90, proc.kill)  # a hung run fails the test instead of hanging it
    guard.start()
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith(f"step {step} "):
                if group:
                    os.killpg(proc.pid, sig)
                else:
                    proc.send_signal(sig)
                break
        rest, _ = proc.communicate(timeout=60)
        return proc.returncode, "".join(seen) + rest
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("name", ["ddp", "lm", "fsdp"])
@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=lambda s: s.name)
def test_a_stop_signal_to_the_process_group_spares_the_loader_workers(
    name: str, sig: signal.Signals, tmp_path: Path
) -> None:
    """torchrun and a terminal signal the rank's whole process group, DataLoader workers
    included: a worker that dies of it would crash the step the rank is finishing."""
    argv = [sys.executable, str(template(name)), *TINY[name], *COMMON, "--max-steps", "100000"]
    argv += ["--num-workers", "2"]
    code, out = run_until_step_then_signal(
        argv, tmp_path, sig, group=True, stderr=subprocess.STDOUT
    )
    assert code == 0, out[-3000:]
    assert result_of(out)["stopped"] == sig.name
    # The rank says it once; its workers (which inherit its handlers at fork) stay silent.
    assert out.count("SIGINT: stopping after this step") == (sig == signal.SIGINT), out[-3000:]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=lambda s: s.name)
def test_stop_signal_single_process_checkpoints_exits_zero_and_resumes(
    sig: signal.Signals, tmp_path: Path
) -> None:
    """No torchrun (RANK unset): world size 1. SIGTERM or Ctrl-C (SIGINT) -> finish the step,
    save, exit 0."""
    argv = [sys.executable, str(template("lm")), *TINY["lm"], *COMMON, "--max-steps", "100000"]
    code, out = run_until_step_then_signal(argv, tmp_path, sig)
    assert code == 0, out
    result = result_of(out)
    assert result["stopped"] == sig.name and result["world_size"] == 1
    assert (tmp_path / "out" / "ckpt.pt").is_file()
    assert not list((tmp_path / "out").glob("*.tmp"))  # atomic write left no temp file

    stopped_at = result["step"]
    again = subprocess.run(
        [*argv[:-1], str(stopped_at + 1)],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"at step {stopped_at}" in again.stdout
    assert sorted(step_losses(again.stdout)) == [stopped_at + 1]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=lambda s: s.name)
def test_stop_signal_under_torchrun_all_ranks_stop_and_save_a_sharded_checkpoint(
    sig: signal.Signals, tmp_path: Path
) -> None:
    """Slurm preemption (SIGTERM) or Ctrl-C (SIGINT) of an FSDP job: torchrun forwards the
    signal to both ranks, they agree (all-reduced flag), write a DCP checkpoint and exit 0.
    torchrun itself then exits non-zero: it reports that it was signalled (README.md)."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    argv += [str(template("fsdp")), *TINY["fsdp"], *COMMON, "--max-steps", "100000"]
    _code, out = run_until_step_then_signal(argv, tmp_path, sig)
    result = result_of(out)
    assert result["stopped"] == sig.name
    latest = (tmp_path / "out" / "latest").read_text().strip()
    assert latest == f"step-{result['step']:08d}"
    step_dir = tmp_path / "out" / latest
    assert (step_dir / "train_state.pt").is_file() and (step_dir / ".metadata").is_file()
    assert len(list(step_dir.glob("*.distcp"))) == 2  # one shard file per rank


# The second SIGINT is raised from inside the checkpoint write the first one started: no race
# between "the first handler ran" and "the run already finished".
SECOND_SIGINT_WHILE_SAVING = """\
import os, runpy, signal, sys
import torch
script = sys.argv.pop(1)
save = torch.save
def impatient_save(*args, **kwargs):
    os.write(1, b"saving after the first SIGINT\\n")
    signal.raise_signal(signal.SIGINT)  # the user presses Ctrl-C again
    return save(*args, **kwargs)
torch.save = impatient_save
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("name", TEMPLATES)
def test_a_second_sigint_aborts_at_once(name: str, tmp_path: Path) -> None:
    """The first Ctrl-C stops after the step and checkpoints; a second one, while that is
    under way, raises KeyboardInterrupt at once: non-zero exit, no RESULT line."""
    wrapper = tmp_path / "impatient.py"
    wrapper.write_text(SECOND_SIGINT_WHILE_SAVING)
    argv = [sys.executable, str(wrapper), str(template(name)), *TINY[name], *COMMON]
    argv += ["--max-steps", "100000"]
    code, out = run_until_step_then_signal(argv, tmp_path, signal.SIGINT, stderr=subprocess.STDOUT)
    assert "saving after the first SIGINT" in out  # the first one did not abort
    assert code != 0 and "KeyboardInterrupt" in out, out[-3000:]
    assert "RESULT " not in out


@pytest.mark.slow
@pytest.mark.integration
# forkserver: Python 3.14's default on Linux; the workers' parent is then the server, not the rank.
@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
@pytest.mark.parametrize("name", TEMPLATES)
def test_a_rank_that_aborts_with_loader_workers_alive_still_exits(
    name: str, start_method: str, tmp_path: Path
) -> None:
    """A second Ctrl-C (or any crash) ends the rank while its DataLoader workers run: Python's
    exit SIGTERMs them and waits for them. They ignore other senders' SIGTERM, but their own
    rank's must still end them, or the rank never exits (it would hang until the guard)."""
    wrapper = tmp_path / "impatient.py"
    start = "import multiprocessing, sys\nmultiprocessing.set_start_method(sys.argv.pop(1))\n"
    wrapper.write_text(start + SECOND_SIGINT_WHILE_SAVING)
    argv = [sys.executable, str(wrapper), start_method, str(template(name)), *TINY[name], *COMMON]
    argv += ["--max-steps", "100000", "--num-workers", "2"]
    code, out = run_until_step_then_signal(argv, tmp_path, signal.SIGINT, stderr=subprocess.STDOUT)
    assert "KeyboardInterrupt" in out, out[-3000:]
    # It ended by itself, not by the guard: KeyboardInterrupt re-raises SIGINT (fsdp: DCP wraps
    # it in a CheckpointException, exit 1).
    assert code in (1, -signal.SIGINT), out[-3000:]
