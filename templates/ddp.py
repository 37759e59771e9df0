"""Train a model with DistributedDataParallel (DDP): a general template to adapt.

One file, torch + the Python standard library only: it is yours now, edit it freely.
Blocks between `# --- shared: NAME ---` and `# --- end shared ---` are the same code in
envtool's other templates (its tests keep the copies identical); in your copy, edit freely.
Put your model under "# --- MODEL ---" and your dataset under "# --- DATA ---"; the rest
(distributed setup, sampler, mixed precision, accumulation, checkpoint/resume, preemption)
stays as it is. By default it learns a synthetic classification task (random inputs labelled by
a fixed random "teacher" network), so it runs anywhere with no files.

Run it:
    python train.py                                    # one GPU (or CPU), no torchrun needed
    python train.py --cpu --max-steps 20               # quick CPU smoke test
    torchrun --standalone --nproc-per-node 4 train.py  # one node, 4 GPUs
    envtool launch train.py --gpus 4                   # the same, through envtool
    # two nodes (run on each node, R = 0 on the first, 1 on the second):
    torchrun --nnodes 2 --nproc-per-node 8 --node-rank R --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 train.py
    envtool launch train.py --slurm --nodes 2 --gpus-per-node 8 --submit   # Slurm batch job

What it prints (rank 0 only):
    step N loss X lr Y samples/s Z      every --log-every steps
    RESULT {"step": N, "loss": x, "samples_per_s": ...}   last line, JSON

Checkpoints: --out-dir/ckpt.pt, written atomically by rank 0 every --ckpt-every steps, at the
end and on SIGTERM (Slurm preemption) or a first SIGINT (Ctrl-C; a second one aborts at once,
no checkpoint); a new run resumes from it (--resume auto).
"""

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import math
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


# --- CONFIG ---
# Every field is a command-line flag: batch_size -> --batch-size.
@dataclass
class Config:
    in_features: int = field(default=256, metadata={"help": "input size of the synthetic task"})
    num_classes: int = field(default=10, metadata={"help": "classes of the synthetic task"})
    hidden: int = field(default=1024, metadata={"help": "MLP width"})
    depth: int = field(default=4, metadata={"help": "hidden layers"})
    batch_size: int = field(default=256, metadata={"help": "samples per GPU per micro-step"})
    grad_accum: int = field(default=1, metadata={"help": "micro-steps per optimizer step"})
    max_steps: int = field(default=1000, metadata={"help": "optimizer steps to train in total"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate"})
    min_lr: float = field(default=1e-4, metadata={"help": "learning rate at the end of decay"})
    warmup_steps: int = field(default=50, metadata={"help": "linear warm-up steps"})
    decay_steps: int | None = field(
        default=None, metadata={"type": int, "help": "cosine length (default: --max-steps)"}
    )
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW decay on matrices"})
    grad_clip: float = field(default=1.0, metadata={"help": "max grad norm (0: off)"})
    dataset_size: int = field(default=100_000, metadata={"help": "synthetic samples"})
    num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes"})
    seed: int = field(default=1337, metadata={"help": "same seed -> same run"})
    compile: bool = field(default=False, metadata={"help": "torch.compile the model"})
    cpu: bool = field(default=False, metadata={"help": "force CPU + gloo (auto without CUDA)"})
    bucket_cap_mb: int = field(default=25, metadata={"help": "DDP gradient bucket size"})
    grad_compress: str = field(default="none", metadata={"help": "none|bf16 (DDP comm hook)"})
    out_dir: str = field(default="out", metadata={"help": "checkpoint directory"})
    ckpt_every: int = field(
        default=500, metadata={"help": "checkpoint every N steps (0: at the end, -1: never)"}
    )
    resume: str = field(default="auto", metadata={"help": "auto|never|PATH to a ckpt.pt"})
    log_every: int = field(default=10, metadata={"help": "log every N steps"})
    rank_file_dir: str | None = field(
        default=None, metadata={"type": str, "help": "each rank writes DIR/rank-<RANK>"}
    )


def parse_config(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "")
        if "(default" not in helptext:  # a help that says its default itself keeps it
            helptext += f" (default: {f.default})"
        if f.type in (bool, "bool"):
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=f.default, help=helptext
            )
        else:
            kind = f.metadata.get("type", type(f.default))
            parser.add_argument(flag, type=kind, default=f.default, help=helptext)
    cfg = Config(**vars(parser.parse_args(argv)))
    if cfg.grad_compress not in ("none", "bf16"):
        parser.error("--grad-compress must be none or bf16")
    return cfg


# --- DATA ---
class TeacherTask(Dataset):
    """Random inputs labelled by a fixed random network: learnable, deterministic per index,
    no files. Replace with your Dataset; __getitem__ returns (input, target)."""

    def __init__(self, n: int, in_features: int, num_classes: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.teacher = torch.randn(in_features, num_classes, generator=g)
        self.n, self.in_features, self.seed = n, in_features, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        x = torch.randn(self.in_features, generator=g)
        return x, (x @ self.teacher).argmax()


# --- MODEL ---
def build_model(cfg: Config) -> nn.Module:
    """Replace with your model: any nn.Module whose forward(x) returns logits."""
    layers, width = [], cfg.in_features
    for _ in range(cfg.depth):
        layers += [nn.Linear(width, cfg.hidden), nn.GELU()]
        width = cfg.hidden
    layers.append(nn.Linear(width, cfg.num_classes))
    return nn.Sequential(*layers)


# --- shared: lr_schedule ---
def lr_at(step: int, cfg: Config) -> float:
    """Linear warm-up, then cosine decay to min_lr: a function of the step, so resume-safe."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    # Fix --decay-steps when a run may later be extended with a larger --max-steps.
    total = cfg.decay_steps or cfg.max_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


# --- end shared ---


# --- CHECKPOINT ---
# --- shared: rng_state ---
def rng_state(use_cuda: bool) -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if use_cuda:
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict, use_cuda: bool) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if use_cuda and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


def gather_rng_states(use_cuda: bool, group) -> list:
    """Every rank's RNG state, gathered as bytes over the CPU (gloo) group."""
    mine = rng_state(use_cuda)
    if group is None:
        return [mine]
    buf = io.BytesIO()
    torch.save(mine, buf)
    data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    world = dist.get_world_size()
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([data.numel()]), group=group)
    padded = torch.zeros(max(int(n) for n in sizes), dtype=torch.uint8)
    padded[: data.numel()] = data
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    return [
        torch.load(io.BytesIO(bytes(t[: int(n)].tolist())), weights_only=True)
        for t, n in zip(gathered, sizes, strict=True)
    ]


# --- end shared ---


# --- shared: checkpoint_file ---
def save_checkpoint(path: Path, model, optimizer, train_state: dict, use_cuda: bool, group) -> None:
    """Every rank sends its RNG state; rank 0 writes a temp file and renames it over the old
    checkpoint, so a crash mid-write never leaves a truncated ckpt.pt behind."""
    rngs = gather_rng_states(use_cuda, group)
    if dist.get_rank() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rngs}
        torch.save({**state, **train_state}, tmp)
        os.replace(tmp, path)
    dist.barrier()  # nobody exits (or is killed) before the file is in place


def load_checkpoint(path: Path, model, optimizer, use_cuda: bool) -> dict:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as exc:  # another template's or another size's checkpoint in --out-dir
        first = str(exc).strip().splitlines()[0]
        raise SystemExit(
            f"{path} is a checkpoint of a different model ({first}): pass another --out-dir, "
            "or delete it to start from step 0"
        ) from None
    optimizer.load_state_dict(ckpt["optimizer"])
    rngs = ckpt["rng"]
    if len(rngs) == dist.get_world_size():  # same world size: every rank continues its stream
        set_rng_state(rngs[dist.get_rank()], use_cuda)
    return {k: ckpt[k] for k in ("step", "epoch", "batch_in_epoch")}


# --- end shared ---


# --- shared: resume_check ---
def check_resume_agrees(resume_step: int | None, path: Path, world_size: int, group) -> None:
    """Every rank must start from the same step (resume_step; None: no checkpoint). A
    checkpoint only some ranks can see (rank 0 wrote it to a node-local --out-dir), or one at
    another step (a stale one from an older run on a node's own disk), would have them load
    and run different steps, and then wait forever in a collective the others skip. Stop all
    of them with the reason, before any collective load (fsdp's dcp.load)."""
    if world_size == 1:
        return
    # One round: every rank's step (-1: not resuming) gives both the count and the steps.
    mine = torch.tensor([-1 if resume_step is None else resume_step], dtype=torch.long)
    steps = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(steps, mine, group=group)
    found = [int(t) for t in steps if int(t) >= 0]
    if 0 < len(found) < world_size:
        raise SystemExit(
            f"{path} exists for {len(found)} of {world_size} ranks only: put --out-dir "
            "(or --resume) on a filesystem every node shares"
        )
    distinct = sorted(set(found))
    if len(distinct) > 1:
        listed = ", ".join(map(str, distinct[:-1])) + f" and {distinct[-1]}"
        raise SystemExit(
            f"ranks would resume at steps {listed}: {path} differs between nodes (a stale "
            "checkpoint on a node-local disk?): put --out-dir (or --resume) on a filesystem "
            "every node shares, or delete the stale checkpoint"
        )


# --- end shared ---


# --- SIGNALS ---
# --- shared: stop_signal ---
STOP = {"signal": None}


def on_stop_signal(signum, frame):
    # Only set a flag: the loop finishes the step, checkpoints and exits cleanly.
    STOP["signal"] = STOP["signal"] or signal.Signals(signum).name
    if signum == signal.SIGINT:
        # A second Ctrl-C means "now": the default handler raises KeyboardInterrupt.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if os.environ.get("RANK", "0") == "0":  # os.write: print is not reentrant-safe here
            os.write(2, b"SIGINT: stopping after this step (a second SIGINT aborts)\n")


# --- end shared ---


# --- shared: loader_workers ---
def spare_loader_worker(rank_pid: int, _worker_id: int) -> None:
    # torchrun (os.killpg) and Slurm signal every process of the rank, DataLoader workers
    # included: a SIGTERM would kill them mid-step and crash the rank it is meant to stop cleanly.
    # So ignore SIGTERM from anyone but the rank itself: the rank's own SIGTERM (DataLoader's
    # shutdown, Python's exit after a crash or a second Ctrl-C) must still end the worker, or the
    # rank waits for it forever. Only a thread can see the sender (sigwaitinfo); not on macOS.
    # rank_pid, not getppid(): under forkserver (Python 3.14's default) that is the server.
    # SIGINT: the worker inherited the rank's handler at fork; the rank alone reports and stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not hasattr(signal, "sigwaitinfo"):
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # this and later threads

    def exit_on_sigterm_from_rank() -> None:
        while signal.sigwaitinfo({signal.SIGTERM}).si_pid != rank_pid:
            pass
        os._exit(0)  # what torch's own worker handler does for its parent's SIGTERM

    threading.Thread(target=exit_on_sigterm_from_rank, daemon=True).start()


# --- end shared ---


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(argv)
    # SIGTERM: Slurm preemption. SIGINT: Ctrl-C, which torchrun passes on to every rank as
    # SIGINT (torch/distributed/elastic/agent/server/api.py: _shutdown(e.sigval); envtool
    # launch forwards Ctrl-C to torchrun).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_stop_signal)

    # --- DISTRIBUTED SETUP ---
    # torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; without them this is one process, world size 1.
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and not cfg.cpu
    if use_cuda:
        torch.cuda.set_device(local_rank)  # before init_process_group: NCCL binds to this GPU
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = "nccl" if use_cuda else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend, device_id=device if use_cuda else None)
    else:  # a private in-memory store: no port, no env vars needed
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    master = rank == 0

    try:
        # A CPU (gloo) group for small control messages (stop flag, RNG states): no GPU syncs.
        flag_group = dist.new_group(backend="gloo") if world_size > 1 else None
        torch.manual_seed(cfg.seed)  # same seed on every rank: identical initial weights
        random.seed(cfg.seed)
        torch.backends.cuda.matmul.allow_tf32 = True  # any fp32 matmul left uses tensor cores
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if use_cuda else contextlib.nullcontext()
        )

        dataset = TeacherTask(cfg.dataset_size, cfg.in_features, cfg.num_classes, cfg.seed)
        # Each rank sees a disjoint 1/world_size shard; set_epoch reshuffles every epoch.
        sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed, drop_last=True)
        batches_per_epoch = len(sampler) // cfg.batch_size
        if batches_per_epoch == 0:
            raise SystemExit("dataset too small for one batch per rank: lower --batch-size")

        raw_model = build_model(cfg).to(device)

        # Weight decay on matrices only; fused AdamW runs one kernel for all params on CUDA.
        decay = [p for p in raw_model.parameters() if p.dim() >= 2]
        no_decay = [p for p in raw_model.parameters() if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=use_cuda)

        # --- RESUME ---
        ckpt_path = Path(cfg.out_dir) / "ckpt.pt"  # where this run saves
        resume_path = ckpt_path if cfg.resume in ("auto", "never") else Path(cfg.resume)
        if cfg.resume not in ("auto", "never") and not resume_path.is_file():
            raise SystemExit(f"--resume {cfg.resume}: no such checkpoint")
        train_state = {"step": 0, "epoch": 0, "batch_in_epoch": 0}
        resuming = cfg.resume != "never" and resume_path.is_file()
        if resuming:  # local reads only, no collective: every rank knows its step for the check
            train_state = load_checkpoint(resume_path, raw_model, optimizer, use_cuda)
        resume_step = train_state["step"] if resuming else None
        check_resume_agrees(resume_step, resume_path, world_size, flag_group)
        if resuming and master:
            print(f"resumed from {resume_path} at step {resume_step}", flush=True)
        start_step = train_state["step"]

        # --- WRAP FOR DATA PARALLEL ---
        model = raw_model
        if world_size > 1:
            model = DDP(
                raw_model,
                device_ids=[local_rank] if use_cuda else None,
                bucket_cap_mb=cfg.bucket_cap_mb,
                gradient_as_bucket_view=True,  # grads live in the comm buckets: no copy
                # Same graph every step: DDP skips per-step bookkeeping. Not with compile, and not
                # with no_sync (torch 2.13 asserts in the reducer when the first step skips sync).
                static_graph=not cfg.compile and cfg.grad_accum == 1,
            )
            if cfg.grad_compress == "bf16" and use_cuda:  # halves all-reduce bytes (NCCL only)
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                model.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
            elif cfg.grad_compress == "bf16" and master:
                print("--grad-compress bf16 needs NCCL (GPU); ignored on CPU", flush=True)
        ddp_model = model
        if cfg.compile:  # compile after DDP: the graph is split at buckets, comm overlaps
            model = torch.compile(model)

        def micro_batches():
            """(x, y) forever, epoch after epoch, starting where the checkpoint left off."""
            epoch, skip = train_state["epoch"], train_state["batch_in_epoch"]
            while epoch < 1_000_000:  # bounded: the training loop stops long before
                sampler.set_epoch(epoch)
                order = list(sampler)[skip * cfg.batch_size :]  # resume mid-epoch
                loader = DataLoader(
                    dataset,
                    batch_size=cfg.batch_size,
                    sampler=order,
                    drop_last=True,
                    num_workers=cfg.num_workers,
                    worker_init_fn=functools.partial(spare_loader_worker, os.getpid()),
                    pin_memory=use_cuda,
                )
                for i, (x, y) in enumerate(loader, start=skip):
                    train_state["epoch"], train_state["batch_in_epoch"] = epoch, i + 1
                    yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                epoch, skip = epoch + 1, 0

        # --- TRAINING LOOP ---
        batches = micro_batches()
        samples_per_step = cfg.batch_size * cfg.grad_accum * world_size
        loss_sum = torch.zeros((), device=device)
        loss_value, samples_per_s, stopped = None, None, "max_steps"
        t_log, step_log, t_first, step, saved_step = None, start_step, None, start_step, start_step
        model.train()
        for step in range(start_step + 1, cfg.max_steps + 1):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step - 1, cfg)
            for micro in range(cfg.grad_accum):
                x, y = next(batches)
                last = micro == cfg.grad_accum - 1
                # Only the last micro-step all-reduces gradients; the others just accumulate.
                sync = contextlib.nullcontext() if last or world_size == 1 else ddp_model.no_sync()
                with sync:
                    with autocast:
                        loss = F.cross_entropy(model(x).float(), y) / cfg.grad_accum
                    loss.backward()
                loss_sum += loss.detach()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            # All ranks must agree to stop (one got SIGTERM or SIGINT -> all checkpoint and exit).
            # The flag travels on a CPU (gloo) group so this never waits for the GPU.
            stop = torch.tensor([1 if STOP["signal"] else 0])
            if world_size > 1:
                dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=flag_group)
            stopping = bool(stop.item())

            is_log = step % cfg.log_every == 0 or step == cfg.max_steps or stopping
            if is_log:  # the only host<->device syncs: one per log step
                dist.all_reduce(loss_sum)
                loss_value = loss_sum.item() / world_size / (step - step_log)
                loss_sum.zero_()
                if use_cuda:
                    torch.cuda.synchronize()
                now = time.perf_counter()
                if t_log is not None:
                    samples_per_s = samples_per_step * (step - step_log) / (now - t_log)
                if t_first is None:
                    t_first = (now, step)  # first log step ends warm-up (and compile)
                t_log, step_log = now, step
                if master:
                    rate = f"{samples_per_s:.0f}" if samples_per_s else "n/a"
                    print(
                        f"step {step} loss {loss_value:.6f} lr {lr_at(step - 1, cfg):.2e} "
                        f"samples/s {rate}",
                        flush=True,
                    )
            train_state["step"] = step
            saving = stopping or (cfg.ckpt_every > 0 and step % cfg.ckpt_every == 0)
            if saving and cfg.ckpt_every >= 0:  # -1: benchmarks write no checkpoints
                save_checkpoint(ckpt_path, raw_model, optimizer, train_state, use_cuda, flag_group)
                saved_step = step
            if stopping:
                stopped = STOP["signal"] or "signal on another rank"
                break

        if cfg.ckpt_every >= 0 and saved_step != step:  # final state, unless just saved
            save_checkpoint(ckpt_path, raw_model, optimizer, train_state, use_cuda, flag_group)
        if t_first is not None and t_log is not None and step_log > t_first[1]:
            samples_per_s = samples_per_step * (step_log - t_first[1]) / (t_log - t_first[0])

        if cfg.rank_file_dir:  # for tests of the torchrun pattern: one file per RANK
            Path(cfg.rank_file_dir).mkdir(parents=True, exist_ok=True)
            Path(cfg.rank_file_dir, f"rank-{rank}").write_text(f"{loss_value}\n")
        if master:
            result = {
                "step": step,
                # null, not NaN (no JSON): nothing trained (a resume at --max-steps), or diverged
                "loss": loss_value
                if loss_value is not None and math.isfinite(loss_value)
                else None,
                "samples_per_s": samples_per_s,
                "world_size": world_size,
                "params": sum(p.numel() for p in raw_model.parameters()),
                "start_step": start_step,
                "stopped": stopped,
            }
            print("RESULT " + json.dumps(result), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
