"""The training-script templates run for real: torchrun with 2 CPU processes (gloo), resume, and
what a CPU can check of --fp8. Tiny models, OMP_NUM_THREADS=1 (helpers: template_runs.py)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from template_runs import (
    TEMPLATES,
    result_of,
    single_process,
    step_losses,
    template,
    top_level_imports,
    torchrun,
)

# --- static: what the user receives is a torch + stdlib file ---


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_imports_only_torch_and_stdlib(name: str) -> None:
    imported = top_level_imports(template(name))
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
    # the same command again: nothing left to train, and RESULT is still JSON (it said NaN)
    third = torchrun(name, [*args, "--max-steps", "6"], tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    again = result_of(third.stdout)  # strict JSON
    assert again["loss"] is None and again["step"] == 6


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
    assert sum(isinstance(m, mod.Linear) and m.fp8 for m in models[1].modules()) == 4 * 2 + 1
    assert models[1].head.fp8 and models[1].head.weight is models[1].tok_emb.weight  # tied
    # a vocabulary _scaled_mm cannot take (not a multiple of 16): the head stays bf16
    cfg = mod.parse_config(["--size", "tiny", "--vocab-size", "250", "--seq-len", "64"])
    cfg.fp8 = True
    odd = mod.GPT(cfg)
    assert not odd.head.fp8 and sum(isinstance(m, mod.Linear) and m.fp8 for m in odd.modules()) == 8
    idx = torch.randint(0, 250, (2, 64), generator=torch.Generator().manual_seed(1))
    odd(idx, idx.roll(-1, 1)).backward()  # and it trains


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


@pytest.mark.parametrize("api", ["torch 2.4+", "torch 2.1-2.3"])
@pytest.mark.parametrize("name", ["lm", "fsdp"])
def test_autocast_keeps_the_residual_stream_in_bf16_with_the_loss_of_an_fp32_stream(
    name: str, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under autocast (bf16, as on a GPU) the blocks pass bf16 hidden states along: half the
    bytes for every residual add and LayerNorm. Without autocast (CPU training) and with --fp8
    the stream stays fp32. The loss and the gradients stay those of an fp32 stream within
    bf16's rounding, and the fp32 master weights get fp32 gradients. The same with torch
    2.1-2.3's autocast calls (one per device; the 2.4 form was a TypeError there)."""
    import torch

    if api == "torch 2.1-2.3":  # their signatures, answered by this torch's calls
        enabled, dtype = torch.is_autocast_enabled, torch.get_autocast_dtype

        def is_autocast_enabled(*device_type: str) -> bool:  # torch's own code still asks
            # with a device type (this torch's autocast): only the template gets 2.3's error
            if device_type and sys._getframe(1).f_code.co_filename.endswith(f"{name}.py"):
                raise TypeError("is_autocast_enabled() takes 0 positional arguments")
            return enabled(*device_type) if device_type else enabled("cuda")

        monkeypatch.setattr(torch, "is_autocast_enabled", is_autocast_enabled)
        monkeypatch.setattr(torch, "is_autocast_cpu_enabled", lambda: enabled("cpu"))
        monkeypatch.setattr(torch, "get_autocast_cpu_dtype", lambda: dtype("cpu"))
    mod = load_template(name)
    if api == "torch 2.1-2.3":  # what the template sees at import there
        monkeypatch.setattr(mod, "AUTOCAST_BY_DEVICE", False)
    cfg = mod.parse_config(["--size", "tiny", "--vocab-size", "256", "--seq-len", "64"])
    torch.manual_seed(0)
    model = mod.GPT(cfg)
    idx = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(1))
    seen = []
    model.blocks[1].register_forward_pre_hook(lambda _m, args: seen.append(args[0].dtype))

    def loss_and_grads(autocast: bool):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(idx, idx.roll(-1, 1))
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss_fp32, _ = loss_and_grads(autocast=False)
    loss, grads = loss_and_grads(autocast=True)
    model.fp8 = True  # the switch --fp8 sets: the same autocast run with an fp32 stream
    ref_loss, ref_grads = loss_and_grads(autocast=True)
    assert seen == [torch.float32, torch.bfloat16, torch.float32]
    assert not torch.equal(loss, ref_loss)  # the cast is there ...
    assert abs(loss - ref_loss) / ref_loss < 1e-4  # ... and costs nothing visible
    assert abs(loss - loss_fp32) / loss_fp32 < 1e-3
    for got, want in zip(grads, ref_grads, strict=True):
        assert got.dtype == torch.float32
        assert (got - want).norm() <= 0.03 * want.norm()  # bf16 rounding: 1.4 % here
