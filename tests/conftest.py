"""Shared test helpers. Fixtures come from ../shared/fixtures (override: ENVTOOL_FIXTURES)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def fixtures_dir() -> Path:
    return Path(os.environ.get("ENVTOOL_FIXTURES", REPO.parent / "shared" / "fixtures"))


@pytest.fixture(scope="session")
def fixtures() -> Path:
    path = fixtures_dir()
    if not path.is_dir():
        pytest.skip(f"real-world fixtures not found at {path} (set ENVTOOL_FIXTURES)")
    return path
