"""environment.yml model: conda spec strings, file parsing, errors with file:line, rendering."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envtool.core.spec import (
    CondaSpec,
    EnvSpec,
    parse_conda_spec,
    parse_environment_yml,
    parse_pip_line,
    render_environment_yml,
)
from envtool.errors import UsageError


@pytest.mark.parametrize(
    ("text", "channel", "name", "version", "build"),
    [
        ("pytorch::pytorch=1.12.*", "pytorch", "pytorch", "1.12.*", None),
        ("nvidia::cuda-toolkit", "nvidia", "cuda-toolkit", None, None),
        ("pytorch==2.3.1", None, "pytorch", "==2.3.1", None),
        ("pytorch=2.3.1=py3.11_cuda12.1*", None, "pytorch", "2.3.1", "py3.11_cuda12.1*"),
        ("pytorch 2.3.1 cuda*", None, "pytorch", "2.3.1", "cuda*"),
        ("pytorch>=2.0,<2.4", None, "pytorch", ">=2.0,<2.4", None),
        ("python=3.10", None, "python", "3.10", None),
        ("cudatoolkit=11.3.1", None, "cudatoolkit", "11.3.1", None),
        ("pytorch-cuda=12.1", None, "pytorch-cuda", "12.1", None),
        ("pytorch=1.12  # pinned for the paper", None, "pytorch", "1.12", None),
        ("  python >= 3.8 ", None, "python", ">=3.8", None),
        ("python>=3.8, < 3.10", None, "python", ">=3.8,<3.10", None),
        ("pytorch=*=*cuda*", None, "pytorch", "*", "*cuda*"),
        ("cudatoolkit >=11,<12", None, "cudatoolkit", ">=11,<12", None),
        ("dask-cuda==25.6.*,>=0.0.0a0", None, "dask-cuda", "==25.6.*,>=0.0.0a0", None),
        ("pytorch[version='>=2', build='cuda*']", None, "pytorch", ">=2", "cuda*"),
        ("conda-forge/linux-64::numpy 1.2 py_0", "conda-forge/linux-64", "numpy", "1.2", "py_0"),
        ("ruamel.yaml", None, "ruamel.yaml", None, None),
    ],
)
def test_parse_conda_spec(text, channel, name, version, build) -> None:
    spec = parse_conda_spec(text)
    assert (spec.channel, spec.name, spec.version, spec.build) == (channel, name, version, build)
    # render() gives a string that parses back to the same constraint
    again = parse_conda_spec(spec.render())
    assert (again.channel, again.name, again.version, again.build) == (
        channel,
        name,
        version,
        build,
    )


@pytest.mark.parametrize(
    "text", ["", "   ", ">=1.0", "pytorch 1.0 build extra", "# only a comment"]
)
def test_parse_conda_spec_rejects_non_specs(text) -> None:
    with pytest.raises(ValueError):
        parse_conda_spec(text)


def test_render_spec_forms() -> None:
    assert CondaSpec("pytorch", "2.7.1", "cuda*").render() == "pytorch=2.7.1=cuda*"
    assert CondaSpec("pytorch", None, "cuda*").render() == "pytorch=*=cuda*"
    assert CondaSpec("pytorch", ">=2.0,<2.4", "cuda*").render() == "pytorch >=2.0,<2.4 cuda*"
    assert CondaSpec("pytorch", "2.5", None, "pytorch").render() == "pytorch::pytorch=2.5"


@pytest.mark.parametrize(
    ("text", "kind", "name", "pinned", "option", "value"),
    [
        ("torch==2.1.0+cu121", "requirement", "torch", "2.1.0+cu121", None, None),
        ("torch >= 1.8, <2", "requirement", "torch", None, None, None),
        ("print-on-steroids[exceptions]", "requirement", "print-on-steroids", None, None, None),
        ("wavio >=0.0.5", "requirement", "wavio", None, None, None),
        (
            "--extra-index-url https://download.pytorch.org/whl/cu118",
            "option",
            None,
            None,
            "--extra-index-url",
            "https://download.pytorch.org/whl/cu118",
        ),
        (
            "-f https://download.pytorch.org/whl/torch_stable.html",
            "option",
            None,
            None,
            "--find-links",
            "https://download.pytorch.org/whl/torch_stable.html",
        ),
        ("-e .", "other", None, None, None, None),
        ("git+https://github.com/NVIDIA/dllogger.git", "other", None, None, None, None),
        ("submodules/simple-knn", "other", None, None, None, None),
    ],
)
def test_parse_pip_line(text, kind, name, pinned, option, value) -> None:
    line = parse_pip_line(text)
    assert (line.kind, line.name, line.pinned_version, line.option, line.value) == (
        kind,
        name,
        pinned,
        option,
        value,
    )


def test_parse_environment_yml_full() -> None:
    text = (
        "name: demo\n"
        "channels:\n  - pytorch\n  - nvidia  # GPU\n"
        "dependencies:\n"
        "  - python >= 3.8\n"
        "  - pytorch::pytorch=2.3.1\n"
        "  - pytorch-cuda=12.1  # [linux]\n"
        "  - pip\n"
        "  - pip:\n      - --extra-index-url https://pypi.nvidia.com\n      - einops==0.6\n"
        "variables:\n  CUDA_MODULE_LOADING: LAZY\n"
        "platforms:\n  - linux-64\n"
        "prefix: /opt/envs/demo\n"
    )
    env = parse_environment_yml(text, "environment.yml")
    assert env.name == "demo"
    assert env.channels == ["pytorch", "nvidia"]
    assert [d.name for d in env.dependencies] == ["python", "pytorch", "pytorch-cuda", "pip"]
    assert env.find("pytorch")[0].channel == "pytorch"
    assert env.pip == ["--extra-index-url https://pypi.nvidia.com", "einops==0.6"]
    assert env.variables == {"CUDA_MODULE_LOADING": "LAZY"}
    assert env.platforms == ["linux-64"]
    assert env.prefix == "/opt/envs/demo"


def test_render_is_conda_layout_and_round_trips() -> None:
    env = EnvSpec(
        name="demo",
        channels=["conda-forge"],
        dependencies=[parse_conda_spec("python=3.11"), parse_conda_spec("pytorch=2.7.1=cuda*")],
        pip=["einops==0.8.1", "git+https://example.org/x.git#egg=x"],
        has_pip_section=True,
    )
    text = render_environment_yml(env)
    assert text == (
        "name: demo\n"
        "channels:\n  - conda-forge\n"
        "dependencies:\n  - python=3.11\n  - pytorch=2.7.1=cuda*\n"
        "  - pip:\n      - einops==0.8.1\n      - git+https://example.org/x.git#egg=x\n"
    )
    again = parse_environment_yml(text, "x.yml")
    assert [d.render() for d in again.dependencies] == ["python=3.11", "pytorch=2.7.1=cuda*"]
    assert again.pip == env.pip


def test_render_quotes_what_yaml_would_misread() -> None:
    env = EnvSpec(name="x", dependencies=[parse_conda_spec("pytorch=2.1")], pip=["foo #bar", "*x"])
    again = parse_environment_yml(render_environment_yml(env), "x.yml")
    assert again.pip == ["foo #bar", "*x"]


def test_every_real_env_file_parses_and_round_trips(fixtures) -> None:
    files = sorted((fixtures / "envs").glob("*.y*ml")) + sorted(
        (fixtures / "locks").glob("*environment*.yml")
    )
    assert len(files) >= 38
    for path in files:
        env = parse_environment_yml(path.read_text(), path.name)
        assert env.dependencies, path.name
        again = parse_environment_yml(render_environment_yml(env), path.name)
        assert [d.render() for d in again.dependencies] == [d.render() for d in env.dependencies]
        assert again.pip == env.pip
        assert again.channels == env.channels


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("name: x\ndependencies:\n  - a\n\t- b\n", 4, "malformed YAML"),
        ("name: x\ndependencies:\n  - [a\n", 4, "malformed YAML"),
        ("name: x\ndependencies: numpy\n", 2, "`dependencies` must be a list"),
        ("name: x\ndependencies:\n  - numpy\n  - 3.10\n", 4, "not a spec string"),
        ("name: x\ndependencies:\n  - numpy\n  - foo: [1]\n", 4, "only a nested `- pip:`"),
        ("name: x\nchannels: conda-forge\n", 2, "`channels` must be a list"),
        ("name: x\ndependencies:\n  - numpy\n  - pip:\n      bad: 1\n", 4, "`pip:` must be a list"),
        ("- numpy\n", 1, "expected a mapping"),
        ("name: x\ndependencies:\n  - '>=1.0'\n", 3, "not a conda spec"),
    ],
)
def test_bad_files_raise_usage_error_with_file_and_line(text, line, words) -> None:
    with pytest.raises(UsageError) as info:
        parse_environment_yml(text, "envs/bad.yml")
    err = info.value
    assert err.message.startswith(f"envs/bad.yml:{line}:"), err.message
    assert words in err.one_line()
    assert err.hint  # every error carries the fix
    assert err.exit_code == 2


def test_empty_file_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="empty"):
        parse_environment_yml("# nothing\n", "environment.yml")


@pytest.mark.integration
def test_spec_module_does_not_import_yaml_at_import_time() -> None:
    code = "import sys, envtool.core.spec; print('yaml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_pip_direct_reference_counts_as_its_package_for_the_drop_check() -> None:
    """create's "would drop" check compared pip requirements by name; `name @ URL` has no
    specifier name, so a request losing it (or keeping it) went unnoticed."""
    from envtool.core.request import dropped_packages
    from envtool.core.spec import parse_environment_yml, parse_pip_line, pip_line_name

    wheel = "https://files.example.org/mylib-1.0-py3-none-any.whl"
    assert pip_line_name(parse_pip_line(f"My_Lib[cli] @ {wheel}  # ours")) == "My_Lib"
    assert pip_line_name(parse_pip_line("torch>=2.8")) == "torch"
    for other in ("-e .", wheel, "./local/dir", "--extra-index-url https://x/simple"):
        assert pip_line_name(parse_pip_line(other)) is None
    old = parse_environment_yml(
        f"dependencies:\n  - python\n  - pip:\n    - my-lib @ {wheel}\n    - tqdm\n", "old.yml"
    )
    new = parse_environment_yml("dependencies:\n  - python\n  - pip:\n    - tqdm\n", "new.yml")
    assert dropped_packages(old, new) == ["my-lib (pip)"]
    kept = parse_environment_yml(
        "dependencies:\n  - python\n  - pip:\n    - My_Lib==1.0\n    - tqdm\n", "kept.yml"
    )
    assert dropped_packages(old, kept) == []  # the same project by its normalized name
