"""core/lock_diff: what a re-lock changed, over real locks (two commits of the same project's
conda-lock.yml) and over the edge cases a re-lock meets."""

from __future__ import annotations

from envtool.adapters.lockfile.lock_io import read_lock
from envtool.core.lock_diff import (
    build_tag,
    diff_locks,
    render_change,
    render_lock_diff,
    solution_as_lock,
)
from envtool.core.lockfile import Lock, LockedPackage, SolvedPackage


def _pkg(name: str, version: str, build: str = "h0_0", platform: str = "linux-64") -> LockedPackage:
    url = f"https://conda.anaconda.org/conda-forge/{platform}/{name}-{version}-{build}.conda"
    return LockedPackage(name, version, "conda", platform, url, build, sha256="0" * 64)


def _lock(*pkgs: LockedPackage) -> Lock:
    return Lock(list(pkgs), sorted({p.platform for p in pkgs}), [])


def test_build_tags_of_real_builds() -> None:
    assert build_tag("cuda126_mkl_py312_h30b5a27_300") == "cuda126"
    assert build_tag("py3.11_cuda12.1_cudnn8.9.2_0") == "cuda12.1"
    assert build_tag("cpu_mkl_py313_h58dab0e_103") == "cpu"
    assert build_tag("py3.10_cpu_0") == "cpu"
    assert build_tag("cuda") == "cuda"  # pytorch-mutex 1.0 cuda
    assert build_tag("h4f385c5_3") is None
    assert build_tag("pyhd8ed1ab_0") is None


def test_the_cuda_build_change_is_called_out() -> None:
    old = _lock(_pkg("pytorch", "2.7.1", "cuda126_mkl_py312_h30b5a27_300"), _pkg("numpy", "2.0.0"))
    new = _lock(_pkg("pytorch", "2.8.0", "cuda129_mkl_py312_h7947483_302"), _pkg("numpy", "2.0.0"))
    diff = diff_locks(old, new)
    assert [(c.name, c.kind, c.cuda_change) for c in diff.changes] == [
        ("pytorch", "upgraded", True)
    ]
    text = render_lock_diff(diff)
    assert text[0] == "lock diff: 1 upgraded"
    assert "  CUDA build changed (linux-64): pytorch 2.7.1 cuda126 → 2.8.0 cuda129" in text
    data = diff.to_dict()
    assert data["counts"]["upgraded"] == 1
    assert data["cuda_changes"][0]["old"] == {
        "version": "2.7.1",
        "build": "cuda126_mkl_py312_h30b5a27_300",
        "tag": "cuda126",
    }


def test_added_removed_downgraded_rebuilt_in_conda_order() -> None:
    old = _lock(_pkg("a", "1.10"), _pkg("b", "2.0"), _pkg("c", "1.0", "h1_0"), _pkg("gone", "1"))
    new = _lock(_pkg("a", "1.9"), _pkg("b", "2.0"), _pkg("c", "1.0", "h1_1"), _pkg("fresh", "3"))
    kinds = {c.name: c.kind for c in diff_locks(old, new).changes}
    # 1.10 > 1.9 as conda orders versions (not as text)
    assert kinds == {"a": "downgraded", "c": "rebuilt", "fresh": "added", "gone": "removed"}
    rebuilt = next(c for c in diff_locks(old, new).changes if c.name == "c")
    assert render_change(rebuilt) == "~ c 1.0 h1_0 → 1.0 h1_1"


def test_a_cpu_tag_that_goes_away_is_not_a_cuda_change() -> None:
    old = _lock(_pkg("pyarrow", "15.0.0", "py311h39c9aba_8_cpu"))
    new = _lock(_pkg("pyarrow", "22.0.0", "py312h1f1ba2b_1"))
    (change,) = diff_locks(old, new).changes
    assert change.kind == "upgraded" and not change.cuda_change


def test_no_change_and_first_lock() -> None:
    lock = _lock(_pkg("pytorch", "2.8.0", "cuda129_x_0"))
    assert render_lock_diff(diff_locks(lock, lock)) == ["lock diff: no package changed"]
    first = diff_locks(None, lock)
    assert first.first_lock and first.count("added") == 1
    assert render_lock_diff(first, "cuda12.9") == [
        "cuda12.9: lock diff: first lock, 1 packages (linux-64)"
    ]


def test_a_solution_diffs_like_the_lock_it_becomes() -> None:
    solved = {
        "linux-64": [
            SolvedPackage("pytorch", "2.8.0", "cuda129_x_0", "linux-64", "https://x/pytorch.conda")
        ]
    }
    old = _lock(_pkg("pytorch", "2.7.1", "cuda126_x_0"))
    (change,) = diff_locks(old, solution_as_lock(solved)).changes
    assert (change.kind, change.old_tag, change.new_tag) == ("upgraded", "cuda126", "cuda129")


def test_two_commits_of_a_real_lock(fixtures) -> None:
    """pangeo's pytorch-notebook lock at 74629d5b and later: pytorch 2.1.2 cuda118 → 2.10.0
    cuda129, libtorch with it; a long diff lists counts per platform, --json every change."""
    locks = fixtures / "locks"
    name = "pangeo-data__pangeo-docker-images__pytorch-notebook__conda-lock"
    diff = diff_locks(read_lock(locks / f"{name}@74629d5b.yml"), read_lock(locks / f"{name}.yml"))
    cuda = {c.name: render_change(c) for c in diff.changes if c.cuda_change}
    assert cuda["pytorch"] == "↑ pytorch 2.1.2 cuda118 → 2.10.0 cuda129"
    assert cuda["libtorch"] == "↑ libtorch 2.1.2 cuda118 → 2.10.0 cuda129"
    assert "pyarrow" not in cuda
    text = render_lock_diff(diff)
    assert "  CUDA build changed (linux-64): pytorch 2.1.2 cuda118 → 2.10.0 cuda129" in text
    assert text[-1].endswith("changes: --json lists every one)")
    assert len(diff.to_dict()["changes"]) == len(diff.changes) > 60
