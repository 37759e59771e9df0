"""`doctor --replay` of a folder of raw captures, as README promises (issue 12 item 6): what
nvidia-smi printed under the record's file names plus collect_env.txt, no env.json or host/ —
the real 2×H200 capture in fixtures/h200-x2-host replays as it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, run_envtool

from envtool.core.collect_env import parse_collect_env


def doctor(*args: str):
    return run_envtool("doctor", *args, cwd=REPO)


@pytest.mark.integration
def test_the_h200_capture_folder_replays_as_it_is(fixtures: Path) -> None:
    capture = fixtures / "h200-x2-host"
    assert not (capture / "env.json").exists() and not (capture / "host").exists()
    proc = doctor("--replay", str(capture))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "envtool doctor: OK — no problems found: torch 2.11.0+cu130 on 2× NVIDIA H200 "
        "(driver 580.159.04)"
    )
    doc = json.loads(doctor("--replay", str(capture), "--json").stdout)
    assert doc["facts"]["env"]["torch"]["version"] == "2.11.0+cu130"
    assert [g["capability"] for g in doc["facts"]["host"]["gpus"]] == ["9.0", "9.0"]


@pytest.mark.integration
def test_the_capture_with_an_old_driver_is_told_to_upgrade_for_the_gpu(fixtures: Path) -> None:
    proc = doctor("--replay", str(fixtures / "h200-x2-host"), "--driver", "470.57.02")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        "upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (NVIDIA H200, sm_90)" in proc.stdout
    )
    assert "--cuda" not in proc.stdout


@pytest.mark.integration
def test_nvidia_smi_alone_replays_the_host(fixtures: Path, tmp_path: Path) -> None:
    shutil.copy(fixtures / "h200-x2-host" / "nvidia-smi.txt", tmp_path / "nvidia-smi.txt")
    proc = doctor("--replay", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads(proc.stdout)["facts"]
    assert facts["host"]["driver_version"] == "580.159.04"
    assert facts["env"]["status"] == "not-probed"


@pytest.mark.integration
def test_a_folder_without_captures_is_still_not_a_recording(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    proc = doctor("--replay", str(tmp_path))
    assert proc.returncode == 2 and "not a doctor recording" in proc.stderr


@pytest.mark.parametrize(
    ("name", "version", "cuda", "available"),
    [
        ("01_driver-too-old__torch-2.1.0+cu121", "2.1.0+cu121", "12.1", None),
        ("03_cpu-only-torch-on-gpu__torch-2.2.2", "2.2.2", None, False),
    ],
)
def test_parse_collect_env(fixtures: Path, name, version, cuda, available) -> None:
    path = next((fixtures / "collect_env").glob(f"{name}*"))
    env = parse_collect_env(path.read_text(errors="replace"))
    assert env.torch is not None
    assert (env.torch.version, env.torch.cuda, env.torch.is_available) == (version, cuda, available)
