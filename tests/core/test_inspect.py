"""`envtool inspect`: the CUDA ask of every real environment file in the fixtures, tricky
hand-written cases (pip wheel indexes, ROCm, cpuonly, ended channel), and the CLI contract."""

from __future__ import annotations

import json

import pytest

from envtool.core.inspect import inspect_env, render_inspect_text
from envtool.core.spec import parse_environment_yml

# file -> flavor, cuda, gpu_required, torch, python, problems (a substring for each problem).
# Written from reading each file (and SOURCES.md), not from envtool's output.
EXPECTED = [
    ("AaltoSciComp__scicomp-docs__triton_examples_pytorch_pytorch-env.yml", "conda-forge", None, True, "pytorch", "python==3.12", []),
    ("CompVis__latent-diffusion__environment.yaml", "cudatoolkit", "11.0", True, "pytorch=1.7.0", "python=3.8.5", []),
    ("CompVis__stable-diffusion__environment.yaml", "cudatoolkit", "11.3", True, "pytorch=1.11.0", "python=3.8.5", []),
    ("CompVis__taming-transformers__environment.yaml", "cudatoolkit", "10.2", True, "pytorch=1.7.0", "python=3.8.5", []),
    ("NVlabs__edm__environment.yml", "unspecified", None, False, "pytorch=1.12.1", "python>=3.8, < 3.10", ["has no CUDA selector"]),
    ("NVlabs__eg3d__eg3d_environment.yml", "cudatoolkit", "11.1", True, "pytorch=1.11.0", "python >= 3.8", []),
    ("NVlabs__stylegan3__environment.yml", "cudatoolkit", "11.1", True, "pytorch=1.9.1", "python >= 3.8", []),
    ("RosettaCommons__RFdiffusion__env_SE3nv.yml", "cudatoolkit", "11.1", True, "pytorch=1.9", "python=3.9", []),
    ("Stability-AI__stablediffusion__environment.yaml", "cudatoolkit", "11.3", True, "pytorch=1.12.1", "python=3.8.5", []),
    # conda has only cudatoolkit; torch==2.0.0 comes from PyPI, whose linux wheel is cu117
    ("Vision-CAIR__MiniGPT-4__environment.yml", "pip-wheel", "11.7", True, "torch==2.0.0", "python=3.9", ["cudatoolkit (conda) does not change the pip torch wheel"]),
    ("XavierXiao__Dreambooth-Stable-Diffusion__environment.yaml", "cudatoolkit", "11.3", True, "pytorch=1.10.2", "python=3.8.10", []),
    ("aqlaboratory__openfold__environment.yml", "pytorch-channel", "12.4", True, "pytorch::pytorch=2.5", "python=3.10", ["cuda is not pinned"]),
    ("aqlaboratory__openfold__environment@9a6deab7.yml", "cudatoolkit", "11.3", True, "pytorch::pytorch=1.12.*", "python=3.9", []),
    ("ashleve__lightning-hydra-template__environment.yaml", "unspecified", None, False, "pytorch=2.*", "python=3.10", ["has no CUDA selector"]),
    ("conda__conda-lock__tests_test-cuda_environment.yaml", "cudatoolkit", None, True, None, None, ["cudatoolkit >=11,<12 does not pin a CUDA version"]),
    ("facebookresearch__DiT__environment.yml", "pytorch-channel", "11.7", True, "pytorch >= 1.13", "python >= 3.8", []),
    ("facebookresearch__dinov2__conda-extras.yaml", "pytorch-channel", "11.7", True, "pytorch::pytorch=2.0.0", "python=3.9", []),
    ("facebookresearch__dinov2__conda.yaml", "pytorch-channel", "11.7", True, "pytorch::pytorch=2.0.0", "python=3.9", []),
    ("facebookresearch__esm__environment.yml", "cudatoolkit", "11.3", True, "pytorch::pytorch=1.12.*", "conda-forge::python=3.7", []),
    ("graphdeco-inria__gaussian-splatting__environment.yml", "cudatoolkit", "11.6", True, "pytorch=1.12.1", "python=3.7.13", []),
    ("hbb1__2d-gaussian-splatting__environment.yml", "unspecified", None, False, "pytorch=2.0.0", "python=3.8.18", ["has no CUDA selector"]),
    # pytorch-channel 1.13 builds depend on pytorch-cuda, so cudatoolkit=11.7 picks nothing
    ("isl-org__MiDaS__environment.yaml", "cudatoolkit", "11.7", True, "pytorch::pytorch=1.13.0", "python=3.10.8", ["selects CUDA with pytorch-cuda, not cudatoolkit"]),
    ("isl-org__ZoeDepth__environment.yml", "pytorch-channel", "11.7", True, "pytorch=1.13.1", "python=3.9.7", []),
    ("konstantinjdobler__nlp-research-template__environment.yml", "pytorch-channel", "11.8", True, "pytorch::pytorch>=2.0", "python=3.10", []),
    ("konstantinjdobler__nlp-research-template__environment@98462a29.yml", "pytorch-channel", "11.8", True, "pytorch-nightly::pytorch>=2.0", "python=3.10", []),
    ("konstantinjdobler__nlp-research-template__ppc64le.environment.yml", "cudatoolkit", "11.8", True, "pytorch=2.0.1", None, []),
    ("lllyasviel__ControlNet__environment.yaml", "cudatoolkit", "11.3", True, "pytorch=1.12.1", "python=3.8.5", []),
    ("princeton-vl__DROID-SLAM__environment.yaml", "cudatoolkit", "11.3", True, "pytorch=1.10", None, []),
    # conda-forge: cuda-version alone does not stop a solver from picking a CPU pytorch
    ("rapidsai__cugraph__conda_environments_all_cuda-118_arch-x86_64@94882aad.yaml", "conda-forge", "11.8", True, "pytorch>=2.3,<2.5a0", None, ["does not force a CUDA build"]),
    ("rapidsai__cugraph__conda_environments_all_cuda-129_arch-x86_64@98f00291.yaml", "conda-forge", "12.9", True, "pytorch>=2.4.1", None, ["does not force a CUDA build"]),
    ("rinongal__textual_inversion__environment.yaml", "cudatoolkit", "11.3", True, "pytorch=1.10.2", "python=3.8.10", []),
    ("sdatkinson__neural-amp-modeler__environments_environment_gpu.yml", "pytorch-channel", "12.1", True, "pytorch::pytorch", "python>=3.9", []),
    ("sxyu__svox2__environment.yml", "cudatoolkit", None, True, "pytorch=1.11.0", "python=3.8.8", ["cudatoolkit does not pin a CUDA version"]),
    ("timothybrooks__instruct-pix2pix__environment.yaml", "cudatoolkit", "11.3", True, "pytorch=1.11.0", "python=3.8.5", []),
]  # fmt: skip

LOCK_ENVS = [
    ("konstantinjdobler__nlp-research-template__environment.yml", "pytorch-channel", "11.8"),
    ("konstantinjdobler__nlp-research-template__environment@98462a29.yml", "pytorch-channel", "11.8"),
    ("pangeo-data__pangeo-docker-images__pytorch-notebook__environment.yml", "conda-forge", None),
    ("pangeo-data__pangeo-docker-images__pytorch-notebook__environment@74629d5b.yml", "conda-forge", "11.8"),
    ("extra/pangeo-data__pangeo-docker-images__pytorch-notebook__environment@69a31d58.yml", "conda-forge", "11.2"),
    ("extra/konstantinjdobler__nlp-research-template__ppc64le.environment.yml", "cudatoolkit", "11.8"),
    ("extra/pangeo-data__pangeo-docker-images__base-notebook__environment.yml", "unspecified", None),
]  # fmt: skip

MIN_DRIVER = {"10.2": "440.33", "11.0": "450.36.06", "11.1": "455.23", "11.2": "460.27.03",
              "11.3": "465.19.01", "11.6": "510.39.01", "11.7": "515.43.04", "11.8": "520.61.05",
              "12.1": "530.30.02", "12.4": "550.54.14", "12.9": "575.51.03"}  # fmt: skip


def test_expected_table_covers_every_fixture_file(fixtures) -> None:
    files = {p.name for p in (fixtures / "envs").iterdir() if p.suffix in (".yml", ".yaml")}
    assert files == {row[0] for row in EXPECTED}
    assert len(files) == 34


@pytest.mark.parametrize(
    ("name", "flavor", "cuda", "gpu", "torch", "python", "problems"),
    EXPECTED,
    ids=[row[0].split("__")[1] + ("@" + row[0].split("@")[1][:8] if "@" in row[0] else "") + ("-" + row[0].split("__")[-1] if "__" in row[0] else "") for row in EXPECTED],
)  # fmt: skip
def test_inspect_real_env_file(fixtures, name, flavor, cuda, gpu, torch, python, problems) -> None:
    path = fixtures / "envs" / name
    ask = inspect_env(parse_environment_yml(path.read_text(), name))
    assert (ask.flavor, ask.cuda, ask.gpu_required) == (flavor, cuda, gpu)
    assert (ask.torch, ask.python) == (torch, python)
    assert ask.min_driver == (MIN_DRIVER[cuda] if cuda else None)
    assert len(ask.problems) == len(problems), ask.problems
    for expected in problems:
        assert any(expected in p for p in ask.problems), (expected, ask.problems)


@pytest.mark.parametrize(("rel", "flavor", "cuda"), LOCK_ENVS)
def test_inspect_env_files_beside_real_locks(fixtures, rel, flavor, cuda) -> None:
    path = fixtures / "locks" / rel
    ask = inspect_env(parse_environment_yml(path.read_text(), path.name))
    assert (ask.flavor, ask.cuda) == (flavor, cuda)


def _ask(text: str):
    return inspect_env(parse_environment_yml(text, "environment.yml"))


def _env(deps: list[str], pip: list[str] | None = None, channels=("conda-forge",)) -> str:
    lines = ["name: t", "channels:"] + [f"  - {c}" for c in channels] + ["dependencies:"]
    lines += [f"  - {json.dumps(d)}" for d in deps]
    if pip is not None:
        lines += ["  - pip:"] + [f"      - {json.dumps(p)}" for p in pip]
    return "\n".join(lines) + "\n"


def test_pip_local_version_tag() -> None:
    ask = _ask(_env(["python=3.11", "pip"], ["torch==2.1.0+cu121", "einops"]))
    assert (ask.flavor, ask.cuda, ask.gpu_required, ask.min_driver) == (
        "pip-wheel",
        "12.1",
        True,
        "530.30.02",
    )
    assert ask.torch == "torch==2.1.0+cu121" and ask.problems == []


def _plain_pip_torch_cli(tmp_path, run_cli, pin: str) -> tuple[str, dict]:
    """`envtool inspect` text and --json for an environment.yml whose pip section pins torch
    with no index and no +cuXYZ (pip then fetches PyPI's default linux-64 wheel)."""
    env = tmp_path / "environment.yml"
    env.write_text(_env(["python=3.12", "pip"], [f"torch=={pin}"]))
    code, text, _ = run_cli(["inspect", str(env)])
    assert code == 0
    code, out, _ = run_cli(["inspect", str(env), "--json"])
    assert code == 0
    data = json.loads(out)
    return text, data


@pytest.mark.parametrize(
    ("pin", "cuda", "driver"),
    [("2.9.1", "12.8", "570.26"), ("2.10.0", "12.8", "570.26"), ("2.11.0", "13.0", "580.65.06")],
)
def test_cli_plain_pypi_torch_after_2_8(tmp_path, run_cli, pin, cuda, driver) -> None:
    text, data = _plain_pip_torch_cli(tmp_path, run_cli, pin)
    assert text.startswith(
        f"environment.yml asks for torch {pin} with CUDA {cuda} via PyPI's default linux-64 "
        f"wheel; needs NVIDIA driver ≥ {driver}."
    )
    asked = (data["flavor"], data["cuda"], data["gpu_required"], data["min_driver"])
    assert asked == ("pip-wheel", cuda, True, driver)
    assert data["problems"] == []


def test_cli_plain_pypi_torch_newer_than_the_table_is_cuda_of_unknown_version(
    tmp_path, run_cli
) -> None:
    text, data = _plain_pip_torch_cli(tmp_path, run_cli, "2.99.0")
    asked = (data["flavor"], data["cuda"], data["gpu_required"], data["min_driver"])
    assert asked == ("pip-wheel", None, True, None)
    [problem] = data["problems"]
    assert problem.startswith(
        "torch==2.99.0: PyPI's default linux-64 wheel of torch 2.99 is a CUDA"
    )
    assert "stops at torch 2.15" in problem
    assert "--index-url https://download.pytorch.org/whl/cuXYZ" in problem
    assert "`+cuXYZ` local version" in problem
    assert text.startswith(
        "environment.yml asks for torch 2.99.0 with CUDA (version unknown to envtool) via "
        "PyPI's default linux-64 wheel.\nProblems:\n  - torch==2.99.0: "
    )
    assert "CPU" not in text and "no CUDA request" not in text


def test_plain_pypi_torch_older_than_the_table_is_cuda_of_unknown_version() -> None:
    ask = _ask(_env(["pip"], ["torch==1.4.0"]))
    assert (ask.flavor, ask.cuda, ask.gpu_required) == ("pip-wheel", None, True)
    assert len(ask.problems) == 1 and "starts at torch 1.5" in ask.problems[0]


def test_pip_extra_index_url_selects_cuda() -> None:
    ask = _ask(
        _env(["pip"], ["--extra-index-url https://download.pytorch.org/whl/cu118", "torch==2.3.1"])
    )
    assert (ask.flavor, ask.cuda) == ("pip-wheel", "11.8")


def test_pip_find_links_torch_stable_with_cu_pin() -> None:
    ask = _ask(
        _env(
            ["pip"], ["-f https://download.pytorch.org/whl/torch_stable.html", "torch==1.8.1+cu111"]
        )
    )
    assert (ask.flavor, ask.cuda, ask.min_driver) == ("pip-wheel", "11.1", "455.23")


def test_pip_wheel_pair_never_built_lists_the_builds() -> None:
    ask = _ask(_env(["pip"], ["torch==2.3.1+cu124"]))
    assert any("never built for CUDA 12.4" in p and "11.8, 12.1" in p for p in ask.problems)


def test_pip_cpu_index_is_cpu() -> None:
    ask = _ask(_env(["pip"], ["--index-url https://download.pytorch.org/whl/cpu", "torch==2.4.0"]))
    assert (ask.flavor, ask.cuda, ask.gpu_required) == ("cpu", None, False)


def test_rocm_index_is_pip_wheel_without_cuda() -> None:
    ask = _ask(
        _env(["pip"], ["--index-url https://download.pytorch.org/whl/rocm5.6", "torch==2.1.0"])
    )
    assert (ask.flavor, ask.cuda, ask.gpu_required, ask.min_driver) == (
        "pip-wheel",
        None,
        True,
        None,
    )
    assert any("ROCm 5.6" in p for p in ask.problems)
    assert render_inspect_text(ask, "environment.yml")[0] == (
        "environment.yml asks for torch 2.1.0 as a ROCm 5.6 wheel (AMD GPUs, not CUDA)."
    )


def test_pip_torch_overrides_conda_torch() -> None:
    ask = _ask(
        _env(
            ["pytorch=2.3.1", "pytorch-cuda=12.1", "pip"],
            ["torch==2.4.0+cu124"],
            ("pytorch", "nvidia"),
        )
    )
    assert (ask.flavor, ask.cuda) == ("pip-wheel", "12.4")
    assert any("is replaced by pip torch==2.4.0+cu124" in p for p in ask.problems)


def test_pytorch_cuda_without_nvidia_channel() -> None:
    ask = _ask(_env(["pytorch=2.3.1", "pytorch-cuda=12.1"], channels=("pytorch",)))
    assert (ask.flavor, ask.cuda) == ("pytorch-channel", "12.1")
    assert any("needs the nvidia channel" in p for p in ask.problems)


def test_pytorch_cuda_with_torch_after_channel_end() -> None:
    ask = _ask(_env(["pytorch=2.6", "pytorch-cuda=12.4"], channels=("pytorch", "nvidia")))
    assert any("stopped at torch 2.5" in p for p in ask.problems)


def test_pytorch_channel_pair_never_built() -> None:
    ask = _ask(_env(["pytorch==2.3.1", "pytorch-cuda=12.4"], channels=("pytorch", "nvidia")))
    assert ask.problems == [
        "torch 2.3 was never built for CUDA 12.4 (pytorch==2.3.1); official builds: CUDA 11.8, 12.1"
    ]


def test_pytorch_channel_given_as_a_url_is_the_pytorch_channel() -> None:
    specs = ["cudatoolkit=11.3", "pytorch=1.13.1"]
    by_name = _ask(_env(specs, channels=("pytorch", "defaults")))
    by_url = _ask(_env(specs, channels=("https://conda.anaconda.org/pytorch/", "defaults")))
    assert by_url.via == by_name.via == "cudatoolkit (pytorch channel)"
    assert by_url.problems == by_name.problems
    assert any("selects CUDA with pytorch-cuda" in p for p in by_url.problems)


def test_cpuonly_with_cuda_ask() -> None:
    ask = _ask(
        _env(["pytorch=2.1", "cpuonly", "pytorch-cuda=11.8"], channels=("pytorch", "nvidia"))
    )
    assert (ask.flavor, ask.gpu_required) == ("cpu", False)
    assert any("CPU build together with pytorch-cuda=11.8" in p for p in ask.problems)


def test_cpuonly_alone_is_cpu_without_problems() -> None:
    ask = _ask(_env(["pytorch=2.1", "cpuonly"], channels=("pytorch",)))
    assert (ask.flavor, ask.cuda, ask.problems) == ("cpu", None, [])


def test_conda_forge_cuda_build_glob_with_cuda_version() -> None:
    ask = _ask(_env(["pytorch=*=*cuda*", "cuda-version=12.9"]))
    assert (ask.flavor, ask.cuda, ask.min_driver, ask.problems) == (
        "conda-forge",
        "12.9",
        "575.51.03",
        [],
    )


def test_conda_forge_build_string_names_cuda() -> None:
    ask = _ask(_env(["pytorch 2.7.1 cuda126*"]))
    assert (ask.flavor, ask.cuda) == ("conda-forge", "12.6")


def test_pytorch_channel_build_string() -> None:
    ask = _ask(_env(["pytorch::pytorch=2.3.1=py3.11_cuda12.1*"], channels=("pytorch", "nvidia")))
    assert (ask.flavor, ask.cuda) == ("pytorch-channel", "12.1")


def test_pytorch_gpu_with_cuda_version() -> None:
    ask = _ask(_env(["pytorch-gpu", "cuda-version=12.6"]))
    assert (ask.flavor, ask.cuda, ask.torch) == ("conda-forge", "12.6", "pytorch-gpu")
    assert ask.problems == []


def test_nvidia_toolkit_only_does_not_select_torch_build() -> None:
    ask = _ask(_env(["pytorch=2.1", "nvidia::cuda-toolkit=12.1"], channels=("pytorch", "nvidia")))
    assert (ask.flavor, ask.cuda, ask.gpu_required) == ("unspecified", "12.1", True)
    assert any("does not select a CUDA build" in p for p in ask.problems)


def test_toolkit_pin_that_disagrees_with_pytorch_cuda() -> None:
    ask = _ask(
        _env(["pytorch=2.1", "pytorch-cuda=12.1", "cuda-nvcc=11.8"], channels=("pytorch", "nvidia"))
    )
    assert any("cuda-nvcc=11.8 disagrees with CUDA 12.1" in p for p in ask.problems)


def test_unknown_cuda_version_is_a_problem() -> None:
    ask = _ask(_env(["pytorch=1.12", "cudatoolkit=11.9"], channels=("pytorch",)))
    assert ask.cuda == "11.9" and ask.min_driver is None
    assert any("not a known CUDA release" in p for p in ask.problems)


def test_cli_human_sentence(fixtures, run_cli) -> None:
    path = fixtures / "envs" / "facebookresearch__esm__environment.yml"
    code, out, _ = run_cli(["inspect", str(path)])
    assert code == 0
    assert out.startswith(
        "facebookresearch__esm__environment.yml asks for pytorch 1.12.* with CUDA 11.3 via "
        "cudatoolkit (pytorch channel); needs NVIDIA driver ≥ 465.19.01."
    )


def test_cli_json_keys(fixtures, run_cli) -> None:
    path = fixtures / "envs" / "aqlaboratory__openfold__environment.yml"
    code, out, _ = run_cli(["inspect", str(path), "--json"])
    data = json.loads(out)
    assert code == 0 and data["command"] == "inspect"
    keys = {"flavor", "cuda", "gpu_required", "min_driver", "torch", "python", "problems"}
    assert keys <= set(data)
    assert (data["flavor"], data["cuda"], data["min_driver"]) == (
        "pytorch-channel",
        "12.4",
        "550.54.14",
    )


def test_cli_malformed_yaml_exits_2_with_file_and_line(tmp_path, run_cli) -> None:
    bad = tmp_path / "environment.yml"
    bad.write_text("name: x\ndependencies:\n  - numpy\n\t- torch\n")
    code, out, err = run_cli(["inspect", str(bad)])
    assert code == 2
    assert f"{bad}:4: malformed YAML" in err
    assert "Traceback" not in err and out == ""


def test_cli_malformed_yaml_json_envelope(tmp_path, run_cli) -> None:
    bad = tmp_path / "environment.yml"
    bad.write_text("name: x\ndependencies: numpy\n")
    code, out, _ = run_cli(["inspect", str(bad), "--json"])
    assert code == 2
    assert json.loads(out)["error"]["message"].startswith(f"{bad}:2:")


def test_cli_missing_file(tmp_path, run_cli) -> None:
    code, _, err = run_cli(["inspect", str(tmp_path / "nope.yml")])
    assert code == 2 and "no such file" in err


@pytest.mark.parametrize("line", ["torch", "torch>=2.0"])
def test_unpinned_pypi_torch_is_a_cuda_build_that_changes_with_the_install_day(line: str) -> None:
    """pip takes the newest release, a CUDA wheel: not "no CUDA request" (a GPU-less reading)."""
    ask = _ask(_env(["pip"], [line]))
    assert (ask.flavor, ask.cuda, ask.gpu_required) == ("pip-wheel", None, True)
    [problem] = ask.problems
    assert problem.startswith(f"{line}: torch is not pinned")
    assert "(torch 2.15: CUDA 13.2, which needs driver ≥ 595.45.04)" in problem
    assert "pin torch==X.Y.Z" in problem


@pytest.mark.parametrize("line", ["torch<2.5", "torch>=2,<2.5", "torch~=2.4.0", "torch<=2.4.1"])
def test_upper_bounded_pypi_torch_is_not_read_as_the_newest_release(line: str) -> None:
    """pip takes the newest release under the bound (2.4, CUDA 12.1 here), so the newest release's
    CUDA (2.11: 13.0, driver ≥ 580) would send the user after the wrong driver."""
    ask = _ask(_env(["pip"], [line]))
    assert (ask.flavor, ask.cuda, ask.gpu_required) == ("pip-wheel", None, True)
    [problem] = ask.problems
    assert problem.startswith(f"{line}: torch is not pinned")
    assert "2.15" not in problem and "13.2" not in problem and "595" not in problem
    assert "newest release the range allows" in problem
    assert "pin torch==X.Y.Z" in problem


@pytest.mark.parametrize(
    ("index", "torch", "warned"),
    [
        ("--extra-index-url https://download.pytorch.org/whl/cu121", "torch", True),
        ("--find-links https://download.pytorch.org/whl/cu121/torch_stable.html", "torch>=2", True),
        ("--extra-index-url https://download.pytorch.org/whl/cu121", "torch==2.5.1", False),
        ("--index-url https://download.pytorch.org/whl/cu121", "torch", False),
    ],
)
def test_an_unpinned_torch_with_an_extra_cuda_index_can_get_pypis_newer_build(
    index: str, torch: str, warned: bool
) -> None:
    """pip takes the highest version from every source: the cu121 index ends at 2.5.1, PyPI goes
    on, so `torch` + --extra-index-url …/cu121 installs PyPI's newest (another CUDA). Pinned, the
    +cu121 local version sorts above PyPI's 2.5.1; --index-url replaces PyPI."""
    ask = _ask(_env(["pip"], [index, torch]))
    assert (ask.flavor, ask.cuda) == ("pip-wheel", "12.1")
    extra = [p for p in ask.problems if "only adds a source" in p]
    assert len(extra) == (1 if warned else 0)
    if warned:
        assert extra[0].startswith(f"{torch}: torch is not pinned")
        assert "pin torch==X.Y.Z+cu121, or use --index-url" in extra[0]


def test_a_pytorch_channel_file_notes_that_the_channel_stopped_at_2_5(fixtures, run_cli) -> None:
    """A legacy pytorch-channel file is frozen at torch 2.5 there; inspect said nothing of it
    unless torch was pinned past the end (issue 12 item 8). Text and --json carry the note; a
    conda-forge file gets none, and a pin past the end is the problem alone, not twice."""
    note = "the pytorch conda channel stopped publishing at torch 2.5"
    for name in (
        "facebookresearch__esm__environment.yml",
        "aqlaboratory__openfold__environment.yml",
    ):
        path = fixtures / "envs" / name
        code, out, _ = run_cli(["inspect", str(path)])
        assert code == 0 and f"Note: {note}: newer torch is on conda-forge" in out
        code, out, _ = run_cli(["inspect", str(path), "--json"])
        assert code == 0 and any(note in n for n in json.loads(out)["notes"])
    forge = _ask(_env(["pytorch=2.7.1=*cuda*", "cuda-version=12.6"]))
    assert forge.flavor == "conda-forge" and forge.notes == []
    past = _ask(_env(["pytorch=2.6", "pytorch-cuda=12.4"], channels=("pytorch", "nvidia")))
    assert any("stopped at torch 2.5" in p for p in past.problems) and past.notes == []
