"""One reader of "what does this environment file ask for" (core/inspect.read_ask): `envtool
inspect` reports it and `create -f` / `lock` plan it, so the two agree for every real file in the
fixtures, and for the three files on which the old two readers disagreed (issue 13 item 1):
a pip `torch==…+cu118` wheel, `pytorch-cpu`, and a major-only `cuda-version=12`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from solve_scenarios import H200
from test_inspect import EXPECTED, LOCK_ENVS

from envtool.commands.inspect import run_inspect
from envtool.core.plan import plan_environment
from envtool.workflows.lock import request_from_yml

# file -> the request `create -f` plans from it: (--cuda, --flavor). Written from each file:
# an X.Y pin of cudatoolkit / cuda-version / pytorch-cuda / a build string is that CUDA; the
# pytorch-cuda files (and cudaX.Y builds) take the legacy pytorch channel; a pip torch with no
# CUDA named, an unpinned cudatoolkit or a range is auto (the host decides); `*cuda12*` is 12.
REQUEST = {
    "AaltoSciComp__scicomp-docs__triton_examples_pytorch_pytorch-env.yml": ("auto", "conda-forge"),
    "CompVis__latent-diffusion__environment.yaml": ("11.0", "conda-forge"),
    "CompVis__stable-diffusion__environment.yaml": ("11.3", "conda-forge"),
    "CompVis__taming-transformers__environment.yaml": ("10.2", "conda-forge"),
    "NVlabs__edm__environment.yml": ("auto", "conda-forge"),
    "NVlabs__eg3d__eg3d_environment.yml": ("11.1", "conda-forge"),
    "NVlabs__stylegan3__environment.yml": ("11.1", "conda-forge"),
    "RosettaCommons__RFdiffusion__env_SE3nv.yml": ("11.1", "conda-forge"),
    "Stability-AI__stablediffusion__environment.yaml": ("11.3", "conda-forge"),
    "Vision-CAIR__MiniGPT-4__environment.yml": ("auto", "conda-forge"),
    "XavierXiao__Dreambooth-Stable-Diffusion__environment.yaml": ("11.3", "conda-forge"),
    "aqlaboratory__openfold__environment.yml": ("12.4", "pytorch"),
    "aqlaboratory__openfold__environment@9a6deab7.yml": ("11.3", "conda-forge"),
    "ashleve__lightning-hydra-template__environment.yaml": ("auto", "conda-forge"),
    "conda__conda-lock__tests_test-cuda_environment.yaml": ("auto", "conda-forge"),
    "facebookresearch__DiT__environment.yml": ("11.7", "pytorch"),
    "facebookresearch__dinov2__conda-extras.yaml": ("11.7", "pytorch"),
    "facebookresearch__dinov2__conda.yaml": ("11.7", "pytorch"),
    "facebookresearch__esm__environment.yml": ("11.3", "conda-forge"),
    "graphdeco-inria__gaussian-splatting__environment.yml": ("11.6", "conda-forge"),
    "hbb1__2d-gaussian-splatting__environment.yml": ("auto", "conda-forge"),
    "isl-org__MiDaS__environment.yaml": ("11.7", "conda-forge"),
    "isl-org__ZoeDepth__environment.yml": ("11.7", "pytorch"),
    "konstantinjdobler__nlp-research-template__environment.yml": ("11.8", "pytorch"),
    "konstantinjdobler__nlp-research-template__environment@98462a29.yml": ("11.8", "pytorch"),
    "konstantinjdobler__nlp-research-template__ppc64le.environment.yml": ("11.8", "conda-forge"),
    "lllyasviel__ControlNet__environment.yaml": ("11.3", "conda-forge"),
    "princeton-vl__DROID-SLAM__environment.yaml": ("11.3", "conda-forge"),
    "rapidsai__cugraph__conda_environments_all_cuda-118_arch-x86_64@94882aad.yaml": ("11.8", "conda-forge"),
    "rapidsai__cugraph__conda_environments_all_cuda-129_arch-x86_64@98f00291.yaml": ("12.9", "conda-forge"),
    "rinongal__textual_inversion__environment.yaml": ("11.3", "conda-forge"),
    "sdatkinson__neural-amp-modeler__environments_environment_gpu.yml": ("12.1", "pytorch"),
    "sxyu__svox2__environment.yml": ("auto", "conda-forge"),
    "timothybrooks__instruct-pix2pix__environment.yaml": ("11.3", "conda-forge"),
    # beside real locks
    "locks/konstantinjdobler__nlp-research-template__environment.yml": ("11.8", "pytorch"),
    "locks/konstantinjdobler__nlp-research-template__environment@98462a29.yml": ("11.8", "pytorch"),
    "locks/pangeo-data__pangeo-docker-images__pytorch-notebook__environment.yml": ("12", "conda-forge"),
    "locks/pangeo-data__pangeo-docker-images__pytorch-notebook__environment@74629d5b.yml": ("11.8", "conda-forge"),
    "locks/extra/pangeo-data__pangeo-docker-images__pytorch-notebook__environment@69a31d58.yml": ("11.2", "conda-forge"),
    "locks/extra/konstantinjdobler__nlp-research-template__ppc64le.environment.yml": ("11.8", "conda-forge"),
    "locks/extra/pangeo-data__pangeo-docker-images__base-notebook__environment.yml": ("auto", "conda-forge"),
}  # fmt: skip

# a V100 on a current driver runs every CUDA from 10.2 to 12.x: no file's own CUDA is refused
ANY_CUDA_HOST = {"driver": "580.65.06", "gpus": ["7.0"]}


def _path(fixtures: Path, key: str) -> Path:
    return fixtures / key if key.startswith("locks/") else fixtures / "envs" / key


def test_the_table_covers_every_fixture_env_file() -> None:
    files = {row[0] for row in EXPECTED} | {f"locks/{row[0]}" for row in LOCK_ENVS}
    assert set(REQUEST) == files and len(files) == 41


@pytest.mark.parametrize("key", sorted(REQUEST))
def test_inspect_and_create_f_read_the_same_request(fixtures, key) -> None:
    """inspect's report and create -f's planned request agree, and both are the table's."""
    path = _path(fixtures, key)
    text = path.read_text()
    report = run_inspect(path).data  # `envtool inspect FILE --json`'s payload
    request = request_from_yml(text, path.name, {})  # what create -f and lock plan
    cuda, flavor = REQUEST[key]
    assert (report["request"]["cuda"], report["request"]["flavor"]) == (cuda, flavor)
    assert (request.cuda, request.flavor) == (cuda, flavor)
    assert (report["request"]["torch"], report["request"]["python"]) == (
        request.torch,
        request.python,
    )
    # inspect's own sentence says the same CUDA
    if cuda[0].isdigit() and "." in cuda:
        assert report["cuda"] == cuda
    elif cuda.isdigit():
        assert report["cuda"] is None and report["gpu_required"]
    elif cuda == "cpu":
        assert report["flavor"] == "cpu"
    else:  # auto: the file names no one CUDA (PyPI's default wheel is the one inspect names)
        assert report["cuda"] is None or report["flavor"] == "pip-wheel"


@pytest.mark.parametrize(
    "key", sorted(k for k, (cuda, _) in REQUEST.items() if "." in cuda and "ppc64le" not in k)
)
def test_the_plan_without_a_solve_takes_the_cuda_inspect_reports(fixtures, key) -> None:
    path = _path(fixtures, key)
    report = run_inspect(path).data
    plan = plan_environment(request_from_yml(path.read_text(), path.name, ANY_CUDA_HOST), None)
    assert (plan.cuda, plan.cuda_mode) == (report["cuda"], "native")


def _env(deps: list[str], pip: list[str] | None = None) -> str:
    lines = ["name: x", "channels:", "  - conda-forge", "dependencies:"]
    lines += [f"  - {json.dumps(d)}" for d in deps]
    if pip is not None:
        lines += ["  - pip:"] + [f"      - {json.dumps(p)}" for p in pip]
    return "\n".join(lines) + "\n"


def _inspect_and_dry_run(run_cli, tmp_path, text: str, conda_forge: str) -> tuple[dict, dict, str]:
    (tmp_path / "env.yml").write_text(text)
    rc, out, err = run_cli(["inspect", "env.yml", "--json"], tmp_path)
    assert rc == 0, err
    inspected = json.loads(out)
    args = ["create", "x", "--dry-run", "--json", "-f", "env.yml", "--channel", conda_forge]
    rc, out, err = run_cli([*args, *H200], tmp_path)
    assert rc == 0, err
    assert not (tmp_path / "environments").exists()
    return inspected, json.loads(out)["plan"], err


@pytest.mark.integration
def test_a_pip_cu118_wheel_plans_cuda_11_8_from_conda(harvested, run_cli, tmp_path) -> None:
    """Was: inspect "CUDA 11.8 via a +cu118 wheel", create -f `--cuda auto` (then pip's wheel
    refused over the conda build). Now both say 11.8; the plan installs pytorch 2.0.0's CUDA 11.8
    build from conda in place of the pip line, says so, and the pip section is left without it."""
    text = _env(["python=3.9", "pip"], ["torch==2.0.0+cu118"])
    inspected, plan, err = _inspect_and_dry_run(
        run_cli, tmp_path, text, str(harvested / "conda-forge")
    )
    assert (inspected["cuda"], inspected["request"]["cuda"]) == ("11.8", "11.8")
    assert inspected["request"]["pip_replaced"] == ["torch==2.0.0+cu118"]
    assert (plan["cuda"], plan["torch"], plan["pip"]) == ("11.8", "2.0.0", [])
    assert "pytorch 2.0.0.* cuda118*" in plan["platforms"][0]["specs"]
    assert "pip torch==2.0.0+cu118 installed from conda instead" in err
    rc, out, _ = run_cli(["inspect", "env.yml"], tmp_path)
    assert "Plan: `envtool create -f` installs torch from conda for CUDA 11.8" in out


@pytest.mark.integration
def test_pytorch_cpu_plans_the_cpu_build(harvested, run_cli, tmp_path) -> None:
    """Was: inspect "CPU only", create -f inferred nothing (auto: a CUDA build on a GPU host)."""
    text = _env(["python", "pytorch-cpu"])
    inspected, plan, _ = _inspect_and_dry_run(
        run_cli, tmp_path, text, str(harvested / "conda-forge")
    )
    assert (inspected["flavor"], inspected["request"]["cuda"]) == ("cpu", "cpu")
    assert (plan["cuda"], plan["cuda_mode"]) == (None, "cpu")


@pytest.mark.integration
def test_a_major_only_pin_is_the_newest_of_that_major_for_both(
    harvested, run_cli, tmp_path
) -> None:
    """Was: inspect "CUDA (version not pinned)", create -f the newest 12.x. Now inspect says
    12.x, the newest that runs, and the plan on an H200 (driver 580) takes 12.9."""
    text = _env(["python", "pytorch", "cuda-version=12"])
    inspected, plan, _ = _inspect_and_dry_run(
        run_cli, tmp_path, text, str(harvested / "conda-forge")
    )
    assert (inspected["cuda"], inspected["request"]["cuda"]) == (None, "12")
    assert inspected["min_driver"] == "525.60.13"  # CUDA 12.0's: any 12.x build needs it
    assert (plan["cuda"], plan["cuda_mode"]) == ("12.9", "native")
    rc, out, _ = run_cli(["inspect", "env.yml"], tmp_path)
    assert "with CUDA 12.x via cuda-version (conda-forge) (a major only: envtool plans the " in out
    assert "newest 12.x that runs)" in out


def test_the_pip_torch_family_becomes_conda_packages_in_the_request() -> None:
    text = _env(
        ["python=3.11", "pip"],
        [
            "--extra-index-url https://download.pytorch.org/whl/cu121",
            "torch==2.3.1",
            "torchvision==0.18.1",
            "torchaudio>=2.3",
            "einops",
        ],
    )
    request = request_from_yml(text, "env.yml", {})
    assert (request.cuda, request.torch) == ("12.1", "2.3.1")
    assert request.pip_specs == (
        "--extra-index-url https://download.pytorch.org/whl/cu121",
        "einops",
    )
    assert request.conda_specs[-2:] == ("torchvision=0.18.1", "torchaudio>=2.3")


def test_an_explicit_flag_still_wins_over_the_file() -> None:
    text = _env(["python", "pip"], ["torch==2.1.0+cu118"])
    request = request_from_yml(text, "env.yml", {"cuda": "12.1"})
    assert request.cuda == "12.1" and request.pip_specs == ()


def test_a_rocm_wheel_stays_in_pip_and_plans_auto() -> None:
    """No conda equivalent: the pip line stays (the pip step then refuses it over conda torch)."""
    text = _env(["python", "pip"], ["torch==2.1.0+rocm5.6"])
    request = request_from_yml(text, "env.yml", {})
    assert request.cuda == "auto" and request.pip_specs == ("torch==2.1.0+rocm5.6",)


def test_a_pinned_nvidia_toolkit_alone_plans_that_cuda() -> None:
    """Was: inspect "CUDA 11.8 via cuda-nvcc=11.8", create -f auto (two CUDAs in one env)."""
    text = _env(["python", "pytorch", "cuda-nvcc=11.8"])
    report = request_from_yml(text, "env.yml", {})
    assert report.cuda == "11.8"


@pytest.mark.integration
def test_the_written_request_has_the_conda_build_not_the_pip_wheel(
    harvested, run_cli, tmp_path
) -> None:
    """environments/NAME/environment.yml keeps what the plan installs: `conda env create -f` on
    it gets the same build, and `envtool lock` reads it back to the same request."""
    (tmp_path / "env.yml").write_text(
        _env(["python=3.9", "pip"], ["torch==2.0.0+cu118", "--no-index"])
    )
    args = ["create", "x", "--no-install", "-f", "env.yml", "--channel"]
    rc, _, err = run_cli([*args, str(harvested / "conda-forge"), *H200], tmp_path)
    assert rc == 0, err
    written = (tmp_path / "environments" / "x" / "environment.yml").read_text()
    assert "pytorch=2.0.0.*=cuda118*" in written and "cuda-version=11.8.*" in written
    assert "+cu118" not in written and "--no-index" in written
    rc, out, err = run_cli(["lock", "x"], tmp_path)
    assert rc == 0 and "lock is up to date" in out, err
