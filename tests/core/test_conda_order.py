"""Package versions from a channel are ordered as conda orders them (rattler's Version): a
release candidate sorts before its release, 2.10 after 2.9; the hand tuple read them as equal."""

from __future__ import annotations

from envtool.core.plan import parse_cuda_builds
from envtool.core.versions import conda_order, parse_version


def test_conda_order_against_the_tuple_reading() -> None:
    assert parse_version("2.8.0rc1") == parse_version("2.8.0")  # why the tuple is not enough
    versions = ["2.10.0", "2.8.0", "2.8.0rc1", "2.1.0.dev20230310", "2.9.1", "2.8.0.post1"]
    assert sorted(versions, key=conda_order) == [
        "2.1.0.dev20230310",
        "2.8.0rc1",
        "2.8.0",
        "2.8.0.post1",
        "2.9.1",
        "2.10.0",
    ]
    assert conda_order("not a version!") < conda_order("0.1")


def test_the_channel_listing_sorts_release_candidates_first() -> None:
    builds = parse_cuda_builds(
        [
            ("2.8.0", "cuda129_mkl_py312_h1_300", []),
            ("2.8.0rc1", "cuda129_mkl_py312_h2_0", []),
            ("2.10.0", "cuda129_mkl_py312_h3_300", []),
        ],
        "linux-64",
    )
    assert [b.torch for b in builds] == ["2.8.0rc1", "2.8.0", "2.10.0"]
