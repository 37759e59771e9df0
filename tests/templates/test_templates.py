"""The training-script templates run for real: torchrun with 2 CPU processes (gloo), resume,
SIGTERM (Slurm preemption) / SIGINT (Ctrl-C) and single-process runs. Tiny models,
OMP_NUM_THREADS=1."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO

TEMPLATES = ("ddp", "lm", "fsdp")
# Small enough for 2 CPU cores; the same seed/schedule in every run so runs are comparable.
TINY = {
    "ddp": ["--hidden", "64", "--depth", "2", "--batch-size", "32"],
    "lm": ["--size", "tiny", "--vocab-size", "256", "--seq-len", "64", "--batch-size", "4"],
    "fsdp": ["--size", "tiny", "--vocab-size", "256", "--seq-len", "64", "--batch-size", "4"],
}
COMMON = ["--cpu", "--seed", "7", "--log-every", "1", "--warmup-steps", "2", "--decay-steps", "6"]
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)", re.MULTILINE)


def template(name: str) -> Path:
    return REPO / "templates" / f"{name}.py"


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)  # a single-process run must not think it is under torchrun
    return env


def torchrun(name: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    argv += [str(template(name)), *TINY[name], *COMMON, *args]
    return subprocess.run(
        argv, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=120
    )


def single_process(name: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The template as a plain script: no torchrun, world size 1."""
    argv = [sys.executable, str(template(name)), *TINY[name], *COMMON, *args]
    return subprocess.run(
        argv, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=60
    )


def result_of(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, stdout  # rank 0 only, exactly once
    return json.loads(lines[0].removeprefix("RESULT "))


def step_losses(stdout: str) -> dict[int, str]:
    return {int(step): loss for step, loss in STEP_LINE.findall(stdout)}


# --- static: what the user receives is a torch + stdlib file ---


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_imports_only_torch_and_stdlib(name: str) -> None:
    tree = ast.parse(template(name).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in a standalone script"
            imported.add(node.module.split(".")[0])
    foreign = imported - set(sys.stdlib_module_names) - {"torch"}
    assert not foreign, f"{name}.py imports {sorted(foreign)}"
    assert "torch" in imported


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_sets_device_before_process_group_and_cleans_up(name: str) -> None:
    text = template(name).read_text()
    tree = ast.parse(text)
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert {"main", "Config"} <= names
    assert text.index("torch.cuda.set_device(local_rank)") < text.index("init_process_group(")
    assert "finally:\n        dist.destroy_process_group()" in text
    assert "while True" not in text and "exec(" not in text
    for command in ("torchrun --standalone --nproc-per-node 4 train.py", "envtool launch"):
        assert command in ast.get_docstring(tree)


# --- torchrun, 2 processes, gloo ---


class FullRuns:
    """One uninterrupted 6-step run per template (grad accumulation 2), made on first use and
    shared by the tests that need it (each torchrun run costs seconds on 2 cores)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory, self.runs = factory, {}

    def __getitem__(self, name: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        if name not in self.runs:
            cwd = self.factory.mktemp(f"full-{name}")
            args = ["--max-steps", "6", "--grad-accum", "2", "--rank-file-dir", "ranks"]
            self.runs[name] = (torchrun(name, args, cwd), cwd)
        return self.runs[name]


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory: pytest.TempPathFactory) -> FullRuns:
    return FullRuns(tmp_path_factory)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("name", TEMPLATES)
def test_two_process_torchrun_run_completes(name: str, full_runs: FullRuns) -> None:
    proc, cwd = full_runs[name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = result_of(proc.stdout)
    assert result["step"] == 6 and result["world_size"] == 2
    assert result["stopped"] == "max_steps"
    assert sorted(step_losses(proc.stdout)) == [1, 2, 3, 4, 5, 6]  # rank 0 logs, once per step
    # torchrun's own test pattern: every rank leaves a file named after its RANK
    assert sorted(p.name for p in (cwd / "ranks").iterdir()) == ["rank-0", "rank-1"]
    losses = {float((cwd / "ranks" / f"rank-{r}").read_text()) for r in (0, 1)}
    assert losses == {result["loss"]}  # the logged loss is averaged over ranks: all agree


# ddp.py shares lm.py's loop, sampler and checkpoint code line for line; lm covers that path
# (ckpt.pt), fsdp the sharded one (DCP) — keeps this file's runtime modest on 2 cores.
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("name", ["lm", "fsdp"])
def test_resume_continues_at_the_checkpointed_step_with_identical_losses(
    name: str, full_runs: FullRuns, tmp_path: Path
) -> None:
    args = ["--grad-accum", "2", "--ckpt-every", "2"]
    first = torchrun(name, [*args, "--max-steps", "4"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    second = torchrun(name, [*args, "--max-steps", "6"], tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]

    assert "at step 4" in second.stdout  # "resumed from ... at step 4"
    assert result_of(second.stdout)["start_step"] == 4
    assert sorted(step_losses(second.stdout)) == [5, 6]
    # Same seed, deterministic CPU kernels, restored optimizer + sampler position + RNG:
    # the interrupted run reproduces the uninterrupted one exactly (6 printed decimals).
    uninterrupted = step_losses(full_runs[name][0].stdout)
    resumed = {**step_losses(first.stdout), **step_losses(second.stdout)}
    assert resumed == uninterrupted


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
    first = torchrun(name, ["--max-steps", "2"], tmp_path)
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


# --- --fp8 (lm, fsdp): what a CPU can check; the speed and loss curves are GPU evidence
# (docs/benchmarks-gpu.md, "FP8 and nanoGPT") ---


def load_template(name: str):
    """The template as a module (its main() does not run): to call its pieces directly."""
    module_name = f"template_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, template(name))
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # torch.compile and pickling look modules up by name
        spec.loader.exec_module(module)
    return sys.modules[module_name]


@pytest.mark.integration
@pytest.mark.parametrize("name", ["lm", "fsdp"])
def test_fp8_without_fp8_tensor_cores_is_refused_in_one_line_with_exit_2(
    name: str, tmp_path: Path
) -> None:
    proc = single_process(name, ["--fp8", "--max-steps", "2"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "--fp8: needs an NVIDIA GPU with FP8 tensor cores (sm_89+: L4, L40S, H100, H200, B200)"
    ]
    assert "RESULT " not in proc.stdout and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["lm", "fsdp"])
@pytest.mark.parametrize("magnitude", [1e-4, 1.0, 1e3])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fp8_matmul_tracks_the_exact_product_and_its_gradients_at_any_magnitude(
    name: str, magnitude: float, dtype: str
) -> None:
    """Per-tensor scaling makes FP8 work for activations and gradients of any size (unscaled,
    1e-4 would underflow e4m3, 1e3 overflow e5m2's useful precision); the gradients come back in
    the parameters' own dtype (fp32 master weights under DDP, bf16 under FSDP's policy)."""
    import torch

    mod = load_template(name)
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(int(magnitude * 1e4) + len(dtype))
    x = (torch.randn(4, 32, 128, generator=gen) * magnitude).to(dt).requires_grad_()
    w = (torch.randn(96, 128, generator=gen) * 0.02).to(dt).requires_grad_()
    grad = torch.randn(4, 32, 96, generator=gen) * magnitude
    y = mod.FP8Matmul.apply(x, w)
    y.backward(grad.to(y.dtype))

    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    y64 = x64 @ w64.t()
    y64.backward(grad.double())

    def rel(a, b) -> float:
        return ((a.double() - b).norm() / b.norm()).item()

    assert y.dtype == torch.bfloat16 and x.grad.dtype == dt and w.grad.dtype == dt
    # e4m3 (3 mantissa bits) forward, e5m2 (2 bits) gradients: a few percent, never more
    assert 1e-3 < rel(y, y64) < 0.06
    assert 1e-3 < rel(x.grad, x64.grad) < 0.09
    assert 1e-3 < rel(w.grad, w64.grad) < 0.09


@pytest.mark.parametrize("name", ["lm", "fsdp"])
def test_fp8_model_has_the_bf16_models_parameters_so_checkpoints_move_between_them(
    name: str,
) -> None:
    import torch

    mod = load_template(name)
    models = []
    for fp8 in (False, True):
        cfg = mod.parse_config(["--size", "tiny", "--vocab-size", "256", "--seq-len", "64"])
        cfg.fp8 = fp8
        torch.manual_seed(0)
        models.append(mod.GPT(cfg))
    plain, fp8 = (m.state_dict() for m in models)
    assert list(plain) == list(fp8)
    assert all(torch.equal(plain[k], fp8[k]) for k in plain)
    assert sum(isinstance(m, mod.Linear) and m.fp8 for m in models[1].modules()) == 4 * 2
    assert models[1].head.__class__ is not mod.Linear  # the tied head stays a bf16 matmul


@pytest.mark.parametrize("name", ["lm", "fsdp"])
def test_fp8_weights_cast_once_per_step_give_the_same_loss_and_gradients_as_casting_per_call(
    name: str,
) -> None:
    """lm casts each weight once per optimizer step and every micro-step reuses it: the loss and
    the gradients must be those of casting afresh on each call, the checkpoint must not carry
    the casts, and a refresh after the weights change must be seen (in-place buffers)."""
    import torch

    mod = load_template(name)
    cfg = mod.parse_config(["--size", "tiny", "--vocab-size", "256", "--seq-len", "64"])
    cfg.fp8 = True
    torch.manual_seed(0)
    model = mod.GPT(cfg)
    keys = list(model.state_dict())
    idx = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(1))

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        loss = model(idx, idx.roll(-1, 1))
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    for _ in range(2):  # before and after the weights change
        fresh = [m for m in model.modules() if isinstance(m, mod.Linear) and m.fp8]
        for m in fresh:  # drop any cast: the per-call path
            for b in ("fp8_w", "fp8_scale", "fp8_wt"):
                m._buffers.pop(b, None)
        want_loss, want_grads = loss_and_grads()
        model.cache_fp8_weights()
        model.cache_fp8_weights()  # the in-place refresh path too
        got_loss, got_grads = loss_and_grads()
        assert torch.equal(got_loss, want_loss)
        assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads, strict=True))
        assert list(model.state_dict()) == keys  # the casts are not checkpointed
        with torch.no_grad():
            for p in model.parameters():  # not a pure rescale: per-tensor scaling hides one
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(2)) * 0.02)
    stale = model.blocks[0].fc.fp8_w.float()
    model.cache_fp8_weights()
    assert not torch.equal(model.blocks[0].fc.fp8_w.float(), stale)  # the refresh reaches them
