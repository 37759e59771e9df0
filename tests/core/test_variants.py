"""Variant locks, the pure part (core/variants.py): names, the index, `auto`, and the install
choice on recorded hosts (the H200 host captured for this project, the Tesla T4 and RTX 4080
nvidia-smi captures, a GPU-less host) and what-ifs."""

from __future__ import annotations

from pathlib import Path

import pytest
from smi_captures import strip_command_line

from envtool.core import cuda as cu
from envtool.core import nvidia_smi
from envtool.core.variants import (
    ChannelBuild,
    HostGpu,
    PlatformBuild,
    Variant,
    VariantIndex,
    auto_variants,
    check_chosen,
    choose_variant,
    common_torch,
    lock_file_name,
    parse_index,
    parse_variant,
    parse_variant_list,
    render_index,
)
from envtool.errors import UsageError

SHA = "ab" * 32


def variant(name: str, torch: str = "2.7.1", build: str = "", platforms=("linux-64",)) -> Variant:
    cuda = None if name == "cpu" else name.removeprefix("cuda")
    return Variant(
        name,
        lock_file_name(name),
        SHA,
        cu.min_driver(cuda) if cuda else None,
        tuple(cu.build_archs("pytorch", cuda) or ()) if cuda else (),
        tuple(PlatformBuild(p, torch, build or f"{name}_build") for p in platforms),
    )


def index(*names: str) -> VariantIndex:
    return VariantIndex("demo", names, "2.7.1", tuple(variant(n) for n in names))


FULL = index("cpu", "cuda11.8", "cuda12.6", "cuda12.9")


# ---------------------------------------------------------------- recorded hosts


def host_from_xml(path: Path) -> tuple[str | None, list[HostGpu]]:
    report = nvidia_smi.parse_smi_xml(path.read_text())
    return report.driver_version, [HostGpu(g.capability, g.name) for g in report.gpus]


@pytest.fixture(scope="module")
def h200(fixtures: Path) -> tuple[str | None, list[HostGpu]]:
    return host_from_xml(fixtures / "h200-x2-host" / "nvidia-smi-q.xml")


@pytest.fixture(scope="module")
def t4(fixtures: Path) -> tuple[str | None, list[HostGpu]]:
    return host_from_xml(fixtures / "nvidia-smi" / "xml" / "tesla-t4.xml")


@pytest.fixture(scope="module")
def rtx4080(fixtures: Path) -> tuple[str | None, list[HostGpu]]:
    d = (
        fixtures
        / "nvidia-smi"
        / "extracted"
        / "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05"
    )
    report = nvidia_smi.parse_query_csv(strip_command_line((d / "idle__query-gpu.csv").read_text()))
    return report.driver_version, [HostGpu(g.capability, g.name) for g in report.gpus]


def test_h200_host_gets_the_newest_cuda_variant(h200) -> None:
    driver, gpus = h200
    assert driver == "580.159.04" and [g.capability for g in gpus] == ["9.0", "9.0"]
    choice = choose_variant(driver, gpus, FULL)
    assert (choice.variant.name, choice.mode) == ("cuda12.9", "native")
    assert choice.reason == "driver 580.159.04, 2× NVIDIA H200 (sm_90) → cuda12.9 variant"
    # CUDA 13.0 needs 580.65.06: this driver (580.159) runs it
    assert choose_variant(driver, gpus, index("cpu", "cuda12.6", "cuda13.0")).variant.name == (
        "cuda13.0"
    )


def test_t4_on_its_recorded_driver_and_on_470_gets_cuda_11_8_through_compatibility(t4) -> None:
    driver, gpus = t4
    assert (driver, gpus[0].capability) == ("515.105.01", "7.5")
    for d in (driver, "470.82.01"):
        choice = choose_variant(d, gpus, FULL)
        assert (choice.variant.name, choice.mode) == ("cuda11.8", "compat")
        assert f"driver {d}, Tesla T4 (sm_75) → cuda11.8 variant through CUDA minor-version" in (
            choice.reason
        )
        assert "native needs ≥ 520.61.05" in choice.reason


def test_rtx_4080_runs_sm_86_machine_code_of_the_newest_variant(rtx4080) -> None:
    driver, gpus = rtx4080
    assert (driver, gpus[0].capability) == ("595.71.05", "8.9")
    choice = choose_variant(driver, gpus, FULL)
    assert choice.variant.name == "cuda12.9"  # sm_86 code runs on 8.9 (same major)


def test_gpu_less_host_gets_cpu_and_a_lock_without_cpu_refuses_with_the_fix() -> None:
    choice = choose_variant(
        None, [], FULL, no_driver_reason="no NVIDIA driver (nvidia-smi missing)"
    )
    assert (choice.variant.name, choice.reason) == (
        "cpu",
        "no NVIDIA driver (nvidia-smi missing) → cpu variant",
    )
    with pytest.raises(UsageError) as exc:
        choose_variant(None, [], index("cuda12.6"))
    assert "no NVIDIA driver here and demo's lock has no cpu variant" in exc.value.message
    assert "envtool lock demo --variants cpu,cuda12.6" in exc.value.hint


def test_what_if_driver_535_names_the_newer_variants_it_cannot_run() -> None:
    choice = choose_variant("535.104.05", [HostGpu("8.0")], FULL)
    assert choice.reason == (
        "driver 535.104.05, sm_80 → cuda11.8 variant; cuda12.9 needs ≥ 575.51.03; "
        "cuda12.6 needs ≥ 560.28.03"
    )
    # the example: a cuda12.2 variant is native on 535.104
    two = index("cpu", "cuda12.2", "cuda12.6")
    assert choose_variant("535.104.05", [], two).reason == (
        "driver 535.104.05 → cuda12.2 variant; cuda12.6 needs ≥ 560.28.03"
    )


def test_volta_skips_a_variant_whose_builds_dropped_sm_70() -> None:
    # on R580, Volta's last branch (a V100 on R595 is a host that cannot exist: see below)
    two = index("cpu", "cuda12.6", "cuda13.0")
    choice = choose_variant("580.95.05", [HostGpu("7.0", "Tesla V100")], two)
    assert choice.variant.name == "cuda12.6"
    assert (
        "cuda13.0 builds carry sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120, not "
        "Tesla V100 (sm_70)" in choice.reason
    )
    with pytest.raises(UsageError) as exc:
        choose_variant("595.71.05", [HostGpu("7.0", "Tesla V100")], two)
    assert "R580 is the last driver branch for Volta" in exc.value.message
    assert "install an R580 driver" in (exc.value.hint or "")


def test_ptx_jit_covers_a_newer_gpu_and_arch_specific_code_does_not() -> None:
    ptx = Variant("cuda12.6", lock_file_name("cuda12.6"), SHA, "560.28.03", ("sm_80", "compute_80"),
                  (PlatformBuild("linux-64", "2.7.1", "x"),))  # fmt: skip
    sm90a = Variant("cuda12.9", lock_file_name("cuda12.9"), SHA, "575.51.03", ("sm_90a",),
                    (PlatformBuild("linux-64", "2.7.1", "y"),))  # fmt: skip
    idx = VariantIndex("demo", ("cuda12.6", "cuda12.9"), None, (ptx, sm90a))
    assert choose_variant("580.65.06", [HostGpu("9.0")], idx).variant.name == "cuda12.9"
    # sm_90a runs on 9.0 only; a 10.0 or 12.0 GPU JIT-compiles the other variant's compute_80
    assert choose_variant("580.65.06", [HostGpu("10.0")], idx).variant.name == "cuda12.6"
    assert choose_variant("580.65.06", [HostGpu("12.0")], idx).variant.name == "cuda12.6"


def test_kepler_nothing_fits_names_the_variant_to_add() -> None:
    k80 = [HostGpu("3.7", "Tesla K80")]
    # PyTorch's official cu118 builds carry sm_37 (build_cuda.sh: 11.8 adds 3.7): driver 470
    # runs the cuda11.8 variant through minor-version compatibility
    assert choose_variant("470.82.01", k80, FULL).variant.name == "cuda11.8"
    cuda12 = index("cpu", "cuda12.6", "cuda12.9")
    with pytest.raises(UsageError) as exc:
        choose_variant("470.82.01", k80, cuda12)
    assert "none of demo's variants runs here" in exc.value.message
    assert "not Tesla K80 (sm_37)" in exc.value.message
    # the newest CUDA line conda-forge (lock's default channel) built whose arch list carries
    # sm_3x and that driver 470 runs: 11.8 (compat); never cuda11.3, which it never built
    assert "envtool lock demo --variants cpu,cuda11.8,cuda12.6,cuda12.9" in exc.value.hint
    assert "cuda11.3" not in exc.value.hint
    assert "envtool install demo --variant cpu" in exc.value.hint


def test_driver_too_old_for_every_variant_names_the_upgrade() -> None:
    with pytest.raises(UsageError) as exc:
        choose_variant("418.43", [HostGpu("7.5", "Tesla T4")], FULL)
    assert exc.value.hint.startswith(
        "upgrade the NVIDIA driver to ≥ 520.61.05 (cuda11.8; ≥ 575.51.03 runs cuda12.9)"
    )


def test_a_variant_without_the_platform_is_not_chosen() -> None:
    with pytest.raises(UsageError) as exc:
        choose_variant("580.65.06", [HostGpu("9.0")], FULL, platform="linux-aarch64")
    assert "cuda12.9 has no linux-aarch64 solution" in exc.value.message


def test_override_checks_the_host_and_says_what_it_would_pick() -> None:
    assert check_chosen("cuda12.6", "580.65.06", [HostGpu("9.0")], FULL).variant.name == "cuda12.6"
    assert check_chosen("cpu", "580.65.06", [HostGpu("9.0")], FULL).mode == "cpu"
    with pytest.raises(UsageError) as exc:
        check_chosen("cuda12.9", "515.105.01", [HostGpu("7.5")], FULL)
    assert exc.value.one_line() == (
        "--variant cuda12.9: cuda12.9 needs ≥ 575.51.03 (driver 515.105.01, sm_75) — this host "
        "would install cuda11.8; pass --force to install it anyway"
    )
    # 535 runs 12.9 only through minor-version compatibility: allowed, and said
    assert "compatibility" in check_chosen("cuda12.9", "535.104.05", [], FULL).reason
    with pytest.raises(UsageError, match="no such variant"):
        check_chosen("cuda13.0", None, [], FULL)
    assert check_chosen("cuda12.6", "530.30.02", [], FULL).mode == "compat"


# ---------------------------------------------------------------- names and the index


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu", "cpu"),
        ("CUDA12.6", "cuda12.6"),
        (" cuda11.8 ", "cuda11.8"),
        ("cuda13.0", "cuda13.0"),
    ],
)
def test_variant_names(text: str, expected: str) -> None:
    assert parse_variant(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cuda12", "--variant cuda12: not a variant name"),
        ("cu126", "--variant cu126: not a variant name"),
        ("cuda12.7", "--variant cuda12.7: CUDA 12.7 is not a known CUDA version"),
        ("../x", "--variant ../x: not a variant name"),
        ("cuda1" + "2" * 80 + ".6", "not a variant name"),
    ],
)
def test_bad_variant_names_name_the_value(text: str, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_variant(text)
    assert message in exc.value.message


def test_variant_lists() -> None:
    assert parse_variant_list("cuda12.6,cpu, cuda11.8") == ("cpu", "cuda11.8", "cuda12.6")
    assert parse_variant_list("auto") == ("auto",)
    for bad in ("", "auto,cpu", "cpu,gpu"):
        with pytest.raises(UsageError):
            parse_variant_list(bad)


def test_index_round_trips_deterministically() -> None:
    text = render_index(FULL)
    assert render_index(parse_index(text, "variants.yml")) == text
    again = parse_index(text, "variants.yml")
    assert again.get("cuda12.6").archs == FULL.get("cuda12.6").archs
    assert "lock: conda-lock.cuda12.6.yml" in text and "min_driver: 560.28.03" in text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("lock: conda-lock.cuda12.6.yml", "lock: ../../etc/passwd"), "is not conda-lock.cuda12.6"),
        (("name: cuda12.6", "name: cuda12.7"), "CUDA 12.7 is not a known CUDA version"),
        (("version: 1", "version: 9"), "not an envtool variant index"),
        (("min_driver: 560.28.03", "min_driver: null"), "a CUDA variant without min_driver"),
        (("sm_86,", "sm_xx,"), "not a GPU architecture"),
        (("name: demo", "name: demo\nname: other"), "duplicate key"),
        (("sha256: " + SHA, "sha256: xyz"), "not a sha256"),
    ],
)
def test_a_bad_index_is_one_line_naming_the_file(edit: tuple[str, str], message: str) -> None:
    text = render_index(FULL).replace(*edit, 1)
    with pytest.raises(UsageError) as exc:
        parse_index(text, "environments/demo/variants.yml")
    assert exc.value.message.startswith("environments/demo/variants.yml: ")
    assert message in exc.value.message
    assert "\n" not in exc.value.one_line()


def test_index_refuses_aliases() -> None:
    text = render_index(FULL).replace("requested: ", "requested: &a ", 1) + "x: *a\n"
    with pytest.raises(UsageError, match="aliases"):
        parse_index(text, "variants.yml")


# ---------------------------------------------------------------- auto and the common torch


BUILDS = [  # the harvested conda-forge channel's linux-64 pytorch builds (fixture repodata)
    ChannelBuild("2.0.0", "11.2", "3.9", "linux-64"),
    ChannelBuild("2.0.0", "11.8", "3.9", "linux-64"),
    ChannelBuild("2.3.1", None, "3.12", "linux-64"),
    ChannelBuild("2.3.1", "12.0", "3.12", "linux-64"),
    ChannelBuild("2.7.1", None, "3.12", "linux-64"),
    ChannelBuild("2.7.1", "12.6", "3.12", "linux-64"),
    ChannelBuild("2.7.1", "12.9", "3.12", "linux-64"),
    ChannelBuild("2.8.0", "12.9", "3.13", "linux-64"),
    ChannelBuild("2.10.0", None, "3.14", "linux-64"),
]


def test_auto_takes_the_newest_release_with_cpu_and_cuda_builds() -> None:
    assert auto_variants(BUILDS, ["linux-64"]) == ("2.7.1", ("cpu", "cuda12.6", "cuda12.9"))
    assert auto_variants(BUILDS, ["linux-64"], series="2.3") == ("2.3.1", ("cpu", "cuda12.0"))
    with pytest.raises(UsageError) as exc:
        auto_variants(BUILDS, ["linux-64"], series="2.0")
    assert "2.0.0: cuda11.2, cuda11.8" in exc.value.hint


def test_common_torch_for_a_listed_set() -> None:
    assert common_torch(BUILDS, ["cpu", "cuda12.6"], ["linux-64"]) == "2.7.1"
    assert common_torch(BUILDS, ["cpu", "cuda11.8", "cuda12.6"], ["linux-64"]) is None
    assert common_torch(BUILDS, ["cpu", "cuda12.6"], ["linux-64"], python="3.13") is None


def test_a_driver_older_than_the_gpu_itself_names_that_floor(h200) -> None:
    _, gpus = h200
    with pytest.raises(UsageError) as exc:
        choose_variant("470.82.01", gpus, FULL)
    floor = cu.gpu_min_driver("9.0", "NVIDIA H200")
    assert (
        exc.value.message == f"driver 470.82.01 cannot drive NVIDIA H200, sm_90 (needs ≥ {floor})"
    )
    assert exc.value.hint.startswith(f"upgrade the NVIDIA driver to ≥ {floor} for this GPU")


def test_the_variant_of_a_lock_file_and_doctors_check() -> None:
    from envtool.core.variants import check_installed_variant, variant_of_lock_file

    assert variant_of_lock_file("/p/environments/demo/conda-lock.cuda12.6.yml") == "cuda12.6"
    assert variant_of_lock_file("/p/environments/demo/conda-lock.yml") is None
    assert variant_of_lock_file(None) is None
    pick = choose_variant("580.65.06", [HostGpu("9.0")], FULL)
    ok = check_installed_variant("cuda12.9", "demo", pick, None)
    assert (ok.id, ok.status) == ("variant-choice", "ok")
    old = check_installed_variant("cuda11.8", "demo", pick, None)
    assert (old.status, old.summary) == (
        "warn",
        "cuda12.9 now runs here; installed variant is cuda11.8",
    )
    assert old.fix == "reinstall to get it: `envtool install demo`"
    newer = check_installed_variant("cuda12.9", "demo", choose_variant(None, [], FULL), None)
    assert newer.summary == "installed variant cuda12.9 is not this host's pick (cpu)"
    gone = check_installed_variant("cuda12.9", "demo", None, "driver 418.43: none — upgrade")
    assert (gone.status, gone.fix) == ("warn", "upgrade")


@pytest.mark.integration
def test_variant_hints_quote_the_env_name_for_the_shell() -> None:
    """Every command a variant refusal prints names the env as one shell word: bash reads back
    the exact words (a `$`, a quote or a `;` in a valid conda name does nothing)."""
    import re
    import subprocess

    name = "it's$x;id"
    cuda_only = VariantIndex(name, ("cuda12.6",), "2.7.1", (variant("cuda12.6"),))
    with_cpu = VariantIndex(
        name, ("cpu", "cuda12.6"), "2.7.1", (variant("cpu"), variant("cuda12.6"))
    )
    hints = []
    for call in (
        lambda: choose_variant(None, [], cuda_only),  # no driver, no cpu variant: add one
        lambda: choose_variant("450.80.02", [], with_cpu),  # too old: upgrade or cpu
        lambda: check_chosen("cuda12.9", "570.86.10", [], with_cpu),  # no such variant
    ):
        with pytest.raises(UsageError) as err:
            call()
        hints.append(err.value.hint or "")
    commands = [c for hint in hints for c in re.findall(r"`(envtool [^`]*)`", hint)]
    assert len(commands) >= 3, hints
    for command in commands:
        words = subprocess.run(
            ["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, check=True
        ).stdout.split(b"\0")[:-1]
        assert words[:3] in (
            [b"envtool", b"lock", name.encode()],
            [b"envtool", b"install", name.encode()],
        ), command
