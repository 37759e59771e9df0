"""`envtool init`: writes a template the user can run, never clobbers a file without --force."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from envtool.adapters.shipped.templates import TEMPLATES, templates_dir
from envtool.commands.init import TEMPLATE_NAMES


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_writes_train_py_with_the_template_text(in_tmp: Path, run_cli) -> None:
    code, out, _ = run_cli(["init", "--template", "lm"])
    assert code == 0
    written = in_tmp / "train.py"
    assert written.read_text() == (REPO / "templates" / "lm.py").read_text()
    assert "wrote train.py" in out and "torchrun" in out
    assert sorted(p.name for p in in_tmp.iterdir()) == ["train.py"]  # no temp file left over
    assert oct(written.stat().st_mode & 0o777) == oct(0o644)


def test_default_template_is_ddp(in_tmp: Path, run_cli) -> None:
    assert run_cli(["init"])[0] == 0
    assert (in_tmp / "train.py").read_text() == (REPO / "templates" / "ddp.py").read_text()


def test_directory_destination_gets_train_py_inside(in_tmp: Path, run_cli) -> None:
    (in_tmp / "exp").mkdir()
    assert run_cli(["init", "exp", "-t", "fsdp"])[0] == 0
    assert (in_tmp / "exp" / "train.py").read_text().startswith('"""Train a GPT-style')
    # a path ending in / that does not exist yet is a directory too
    assert run_cli(["init", "new/run1/", "-t", "ddp"])[0] == 0
    assert (in_tmp / "new" / "run1" / "train.py").is_file()


def test_the_generate_template_is_written_as_sample_py(in_tmp: Path, run_cli) -> None:
    """It samples a trained model: `init -t generate` wrote it as train.py, beside (or over
    the name of) the training script README's walkthrough writes first."""
    assert run_cli(["init", "-t", "lm"])[0] == 0
    assert run_cli(["init", "-t", "generate"])[0] == 0
    assert (in_tmp / "sample.py").read_text() == (REPO / "templates" / "generate.py").read_text()
    assert run_cli(["init", "exp/", "-t", "generate"])[0] == 0
    assert (in_tmp / "exp" / "sample.py").is_file()


def test_a_destination_under_a_file_is_a_usage_error(in_tmp: Path, run_cli) -> None:
    (in_tmp / "a-file").touch()
    code, _, err = run_cli(["init", "a-file/train.py"])
    assert code == 2 and "cannot write a-file/train.py" in err and "Traceback" not in err


def test_refuses_to_overwrite_without_force(in_tmp: Path, run_cli) -> None:
    target = in_tmp / "mine.py"
    target.write_text("# my edits\n")
    code, out, err = run_cli(["init", "mine.py"])
    assert code == 2
    assert target.read_text() == "# my edits\n"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "mine.py" in lines[0] and "--force" in lines[0]
    assert "Traceback" not in err

    code, _, _ = run_cli(["init", "mine.py", "--force", "-t", "lm"])
    assert code == 0
    assert target.read_text() == (REPO / "templates" / "lm.py").read_text()


def test_dry_run_writes_nothing_and_reports_the_plan(in_tmp: Path, run_cli) -> None:
    code, out, _ = run_cli(["init", "x.py", "-t", "lm", "--dry-run", "--json"])
    assert code == 0
    envelope = json.loads(out)
    assert envelope["command"] == "init" and envelope["exit_code"] == 0
    assert envelope["path"] == "x.py" and envelope["template"] == "lm"
    assert envelope["dry_run"] is True and envelope["written"] is False
    assert list(in_tmp.iterdir()) == []


def test_json_error_envelope_when_the_file_exists(in_tmp: Path, run_cli) -> None:
    (in_tmp / "train.py").write_text("x = 1\n")
    code, out, _ = run_cli(["init", "--json"])
    assert code == 2
    assert "--force" in json.loads(out)["error"]["hint"]


def test_list_describes_every_template(run_cli) -> None:
    code, out, _ = run_cli(["init", "--list"])
    assert code == 0
    for name in ("ddp", "lm", "fsdp"):
        assert f"{name}: " in out
    assert "RESULT" in out and "tokens/s" in out

    code, out, _ = run_cli(["init", "--list", "--json"])
    rows = json.loads(out)["templates"]
    assert [r["name"] for r in rows] == list(TEMPLATE_NAMES)  # generate joined in issue 17
    assert all(r["description"] and r["prints"] for r in rows)


def test_cli_choices_catalogue_and_files_agree() -> None:
    assert set(TEMPLATE_NAMES) == set(TEMPLATES)
    for name in TEMPLATES:
        assert (templates_dir() / f"{name}.py").is_file()


def test_the_run_it_lines_say_where_to_run_when_no_env_is_active(
    in_tmp: Path, run_cli, monkeypatch
) -> None:
    """`python train.py` from a shell with nothing active runs a python without torch."""
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    code, out, _ = run_cli(["init", "a.py", "-t", "lm"])
    assert code == 0 and "no environment is active" in out and "envtool run -n NAME" in out
    assert out.strip().splitlines()[-1].lstrip().startswith("envtool launch")  # still last
    monkeypatch.setenv("VIRTUAL_ENV", str(in_tmp))
    code, out, _ = run_cli(["init", "b.py", "-t", "lm"])
    assert code == 0 and "no environment is active" not in out


def test_unknown_template_is_a_usage_error(run_cli) -> None:
    code, _, err = run_cli(["init", "-t", "transformer"])
    assert code == 2 and "transformer" in err


def test_wheel_ships_the_templates_where_the_adapter_looks() -> None:
    """The adapter falls back to envtool/_data/templates; pyproject must put them there."""
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    force = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force["templates"] == "envtool/_data/templates"


@pytest.mark.integration
def test_the_written_script_runs(in_tmp: Path, run_cli) -> None:
    """What `envtool init` writes is a working program (the README's first example)."""
    assert run_cli(["init", "-t", "lm"])[0] == 0
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    argv = [sys.executable, "train.py", "--cpu", "--size", "tiny", "--vocab-size", "256"]
    argv += ["--seq-len", "32", "--batch-size", "2", "--max-steps", "2", "--log-every", "1"]
    proc = subprocess.run(argv, cwd=in_tmp, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT ") and json.loads(last[7:])["step"] == 2


def test_the_suggested_commands_fit_the_gpus_this_host_has() -> None:
    from envtool.commands.init import render_written

    cpu_args = TEMPLATES["lm"].cpu_args
    cpu = render_written("train.py", "lm", 0, cpu_args)
    tail = " --size tiny --seq-len 128 --batch-size 8 --max-steps 200 --data train.py"
    assert cpu[-1] == "  envtool launch train.py --cpu --nproc 2 --" + tail
    assert "  torchrun --standalone --nproc-per-node 2 train.py" + tail in cpu
    assert "  python train.py" + tail in cpu and "--gpus" not in "".join(cpu)
    gpu = render_written("train.py", "lm", 1, cpu_args)  # a GPU: the templates' own sizes
    assert gpu[-1] == "  envtool launch train.py --gpus 1"
    assert "  torchrun --standalone --nproc-per-node 1 train.py" in gpu
    assert "--size" not in "".join(gpu)


@pytest.mark.slow
@pytest.mark.integration
def test_the_cpu_command_init_prints_logs_a_step_before_anything_else(tmp_path: Path) -> None:
    """Issue 21 item 4: on a GPU-less host `init -t lm` suggests a CPU-sized run; that exact
    command (fewer steps) prints a step line first and then its RESULT, and the template's own
    code raises no FutureWarning/DeprecationWarning (errors here, scoped to the script)."""
    import shlex

    from envtool.commands.init import render_written

    (tmp_path / "train.py").write_text((REPO / "templates" / "lm.py").read_text())
    python_line = render_written("train.py", "lm", 0, TEMPLATES["lm"].cpu_args)[2]
    assert python_line.endswith(" --data train.py")  # its own text: a loss that falls
    argv = shlex.split(python_line)[1:] + ["--max-steps", "20", "--out-dir", "out"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    warn = ["-W", "error::FutureWarning:__main__", "-W", "error::DeprecationWarning:__main__"]
    proc = subprocess.run(
        [sys.executable, *warn, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("step 10 loss "), proc.stdout  # nothing before the first step
    assert lines[-1].startswith("RESULT ") and json.loads(lines[-1][7:])["step"] == 20


@pytest.mark.slow
@pytest.mark.integration
def test_the_suggested_launch_runs_on_this_host(in_tmp: Path, run_cli) -> None:
    """init printed `envtool launch train.py --gpus 2` whatever the host: on a GPU-less one that
    command exits 2 (issue 12 item 8). The printed launch line now runs here, with real torchrun."""
    import shlex

    from conftest import run_envtool

    code, out, _ = run_cli(["init", "--json"])
    assert code == 0
    launch = json.loads(out)["launch"]  # the envelope carries the line the text shows last
    code, text, _ = run_cli(["init", "--force"])
    assert code == 0 and text.splitlines()[-1] == f"  {launch}"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    tiny = ["--hidden", "16", "--depth", "1", "--batch-size", "4", "--dataset-size", "64"]
    tiny += ["--max-steps", "2", "--warmup-steps", "1", "--ckpt-every", "-1", "--log-every", "1"]
    sep = [] if " -- " in launch else ["--"]  # later flags win over the printed CPU sizes
    proc = run_envtool(*shlex.split(launch)[1:], *sep, *tiny, cwd=in_tmp, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"step": 2' in proc.stdout
