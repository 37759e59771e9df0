"""envtool.core.suggest.suggest_cuda: the one answer to "which CUDA should this machine ask for"."""

from __future__ import annotations

from envtool.core.suggest import Gpu, official_cuda, suggest_cuda

H200 = Gpu("9.0", "NVIDIA H200")


def test_a_driver_too_old_for_the_gpu_is_an_upgrade_whatever_the_builds() -> None:
    s = suggest_cuda("470.57.02", [H200, H200], ["11.8", "12.6"])
    assert (s.kind, s.driver, s.gpu, s.flag) == ("driver", "520.61.05", "NVIDIA H200, sm_90", None)
    assert (
        s.advice() == "upgrade the NVIDIA driver to ≥ 520.61.05 for this GPU (NVIDIA H200, sm_90)"
    )
    # the same driver on an A100 (sm_80, ≥ 450.36.06) runs CUDA 11.8 through minor-version compat
    s = suggest_cuda("470.57.02", [Gpu("8.0", "NVIDIA A100")], ["11.8", "12.6"])
    assert (s.kind, s.cuda, s.mode) == ("cuda", "11.8", "compat")


def test_only_the_channels_builds_are_suggested() -> None:
    # driver 470 runs CUDA ≤ 11.4 natively; with no 11.x build listed, no CUDA is suggested
    s = suggest_cuda("470.57.02", [], ["12.0", "12.6"])
    assert (s.kind, s.cuda, s.driver) == ("driver", "12.6", "560.28.03")
    assert suggest_cuda("470.57.02", [], []).kind == "cpu"
    assert suggest_cuda("470.57.02", [], ["11.2", "12.6"]).cuda == "11.2"


def test_gpu_architecture_limits() -> None:
    kepler = [Gpu("3.7", "Tesla K80")]
    s = suggest_cuda("470.57.02", kepler, ["12.1", "12.6"])
    assert s.kind == "cpu" and any("CUDA 12 dropped Kepler" in r for r in s.reasons)
    # cu118 still runs a K80 (through minor-version compatibility on R470): PyTorch's builds
    # carry sm_37, conda-forge's sm_35
    for flavor in ("pytorch", "conda-forge"):
        s = suggest_cuda("470.57.02", kepler, ["11.8", "12.1"], flavor=flavor)
        assert (s.cuda, s.mode) == ("11.8", "compat")
    assert suggest_cuda("470.57.02", kepler, None).cuda == "11.8"  # conda-forge's own lines
    v100 = [Gpu("7.0", "Tesla V100")]
    lines = ["12.6", "12.8", "13.0"]
    # PyTorch's newest cu128 wheels (2.11) dropped sm_70 again; conda-forge's 12.8 builds carry
    # it; 13 drops Volta
    assert suggest_cuda("580.65.06", v100, lines, flavor="pytorch").cuda == "12.6"
    assert suggest_cuda("580.65.06", v100, lines, flavor="conda-forge").cuda == "12.8"
    # torch 2.8-2.10 cu128 wheels carry sm_70 (pytorch#157517); 2.7's did not
    for torch, cuda in (("2.8", "12.8"), ("2.10", "12.8"), ("2.7", "12.6")):
        by = {c: torch for c in lines}
        assert suggest_cuda("580.65.06", v100, lines, flavor="pypi", torch=by).cuda == cuda


def test_without_a_driver_version() -> None:
    # a login node planning for a target: the newest build, mode "target"
    s = suggest_cuda(None, [], ["12.6", "12.9"])
    assert (s.cuda, s.mode) == ("12.9", "target")
    # only torch's "found version 11040" message: CUDA ≤ 11.4
    # conda-forge never built 11.3 or 11.4: its newest line ≤ 11.4 is 11.2
    assert suggest_cuda(None, [], None, driver_cuda="11.4").cuda == "11.2"
    assert suggest_cuda(None, [], None, driver_cuda="11.4", flavor="pypi").cuda == "11.3"
    assert suggest_cuda(None, [], ["12.6", "12.9"], major="12").cuda == "12.9"


def test_official_table_per_flavor() -> None:
    # conda-forge's own lines (12.8 only on win-64), the legacy channel up to 2.5, every wheel
    assert official_cuda("conda-forge") == ["11.2", "11.8", "12.0", "12.6", "12.9", "13.0"]
    assert "12.8" in official_cuda("conda-forge", "win-64")
    assert "12.8" not in official_cuda("pytorch") and official_cuda("pytorch")[-1] == "12.4"
    assert official_cuda("pypi")[-2:] == ["13.0", "13.2"]
