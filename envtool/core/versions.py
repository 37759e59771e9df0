"""Version strings as comparable tuples (drivers "535.54.03", CUDA "12.4", torch "2.3.1+cu121")."""

from __future__ import annotations

import re

_NUM = re.compile(r"\d+")
# A version part longer than this is no version (int() refuses > 4300 digits; any real one is
# < 10): refused as "not a version" like any other bad text, so callers' ValueError handling works.
MAX_PART = 64


def parse_version(text: str) -> tuple[int, ...]:
    """'535.54.03' -> (535, 54, 3); '2.3.1+cu121' -> (2, 3, 1); stops at the first non-numeric part."""
    head = re.split(r"[+\-_ a-zA-Z]", text.strip(), maxsplit=1)[0]
    digits = _NUM.findall(head)
    if any(len(p) > MAX_PART for p in digits):
        raise ValueError(f"not a version: {text[:40]!r} (a part longer than {MAX_PART} digits)")
    parts = [int(p) for p in digits]
    if not parts:
        raise ValueError(f"not a version: {text[:40]!r}")
    return tuple(parts)


def conda_order(text: str) -> tuple:
    """A sort key in conda's version order, through rattler's Version (2.8.0rc1 < 2.8.0 <
    2.8.0.post1 < 2.10.0; parse_version reads the first two as equal). For package versions from
    a channel, where rattler is loaded anyway; text rattler cannot read sorts first, as text."""
    from rattler import Version

    try:
        return (1, Version(text))
    except Exception:  # rattler's InvalidVersionError
        return (0, text)


def major_minor(text: str) -> str:
    """'12.4.131' -> '12.4'; '12' -> '12.0'."""
    parts = parse_version(text)
    return f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}"


def cuda_from_int(value: int) -> str:
    """NVML/cudaDriverGetVersion integers: 12040 -> '12.4', 13000 -> '13.0', 9010 -> '9.1'."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def cuda_from_build_tag(tag: str) -> str | None:
    """'cu121' / 'cuda121' / 'cuda12.1' / 'cuda118' -> '12.1' / '11.8'; anything else -> None."""
    m = re.search(r"cu(?:da)?(\d{1,4})\.(\d{1,4})(?!\d)", tag)
    if m:
        return f"{int(m.group(1))}.{int(m.group(2))}"
    # Three digits, or two for the CUDA 8/9 era (cu92); "cuda12*" is a glob naming no single CUDA.
    m = re.search(r"cu(?:da)?(\d{3}|[89]\d)(?!\d)", tag)
    if not m:
        return None
    digits = m.group(1)
    # cu92 -> 9.2, cu102 -> 10.2, cu121 -> 12.1, cu130 -> 13.0
    return f"{int(digits[:-1])}.{int(digits[-1])}"
