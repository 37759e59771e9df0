"""`envtool init [DEST] --template ddp|lm|fsdp|generate`: write a script template the user owns."""

from __future__ import annotations

import click

from envtool.commands import renders
from envtool.output import Result

# Kept in step with adapters.shipped.templates.TEMPLATES (tested).
TEMPLATE_NAMES = ("ddp", "lm", "fsdp", "generate")


@click.command("init")
@click.argument("dest", required=False)
@click.option(
    "--template",
    "-t",
    type=click.Choice(TEMPLATE_NAMES),
    default="ddp",
    show_default=True,
    help="Which template to write.",
)
@click.option("--force", is_flag=True, help="Overwrite DEST if it exists.")
@click.option("--list", "list_", is_flag=True, help="Describe the templates; write nothing.")
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope.")
@renders
def cmd(
    dest: str | None, template: str, force: bool, list_: bool, dry_run: bool, as_json: bool
) -> Result:
    """Write a script template to DEST (default train.py, sample.py for generate; a directory
    gets that name inside it).

    Each template is one file that imports only torch and the standard library and runs with
    plain `python`, `torchrun` or `envtool launch`.
    """
    from envtool.adapters.shipped.templates import TEMPLATES, apply_init, plan_init, templates_dir

    if list_:
        return render_list(TEMPLATES, str(templates_dir()))
    plan = plan_init(template, dest, force)
    data = {
        "template": plan.template,
        "path": str(plan.target),
        "source": str(plan.source),
        "overwrite": plan.overwrite,
        "dry_run": dry_run,
        "written": False,
    }
    verb = "overwrite" if plan.overwrite else "write"
    if dry_run:
        return Result("init", data, [f"would {verb} {plan.target} (template {template})"])
    size = apply_init(plan)
    import os

    text = render_written(plan.target, template, visible_gpus(), TEMPLATES[template].cpu_args)
    if not (os.environ.get("CONDA_PREFIX") or os.environ.get("VIRTUAL_ENV")):
        # nothing active: `python` here is likely one without torch
        text.insert(
            1,
            "(no environment is active: run these in yours — activate it, or "
            "`envtool run -n NAME -- python …`, `envtool launch … -n NAME`)",
        )
    data.update(written=True, bytes=size, launch=text[-1].strip())
    return Result("init", data, text)


def visible_gpus() -> int:
    """GPUs ranks would see on this host (after CUDA_VISIBLE_DEVICES), as `launch` counts them."""
    from envtool.adapters.host.host_probe import probe_host, summarize_host

    return int(summarize_host(probe_host())["visible_gpus"])


def render_list(templates: dict, directory: str) -> Result:
    rows = [
        {"name": t.name, "description": t.description, "prints": t.prints}
        for t in templates.values()
    ]
    text = []
    for row in rows:
        text += [f"{row['name']}: {row['description']}", f"    prints: {row['prints']}"]
    return Result("init", {"templates": rows, "directory": directory}, text)


def render_written(
    target: object, template: str, gpus: int, cpu_args: tuple[str, ...] = ()
) -> list[str]:
    """The lines after a write: commands that run on this host — one rank per visible GPU, or
    (no GPU) two CPU ranks, which the templates run with gloo, with cpu_args sizing the run for
    a CPU (the defaults are GPU-sized); the launch line is last."""
    from envtool.core.shell_quote import quote_posix

    path = quote_posix(str(target))  # the lines are pasted into a shell
    if gpus > 0:
        return [
            f"wrote {target} (template {template})",
            "run it:",
            f"  python {path} --help",
            f"  torchrun --standalone --nproc-per-node {gpus} {path}",
            f"  envtool launch {path} --gpus {gpus}",
        ]
    from envtool.adapters.shipped.templates import SCRIPT

    args = "".join(" " + quote_posix(str(target) if a == SCRIPT else a) for a in cpu_args)
    return [
        f"wrote {target} (template {template})",
        "run it (no GPU visible here: CPU processes, a CPU-sized run):",
        f"  python {path}{args}",
        f"  torchrun --standalone --nproc-per-node 2 {path}{args}",
        f"  envtool launch {path} --cpu --nproc 2" + (f" --{args}" if args else ""),
    ]
