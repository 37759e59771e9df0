"""parse_yaml reads the common case from libyaml's event stream (safe_load._read_events) and
hands everything else to the strict loader. Held here to that loader: for every real YAML file in
the fixtures and tests, and for hostile and unusual text, parse_yaml gives the same value (same
types) or the same one-line refusal with the event reader on as with it off; and the reader
really decides the ordinary files (a lock, an environment.yml) itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from envtool.core import safe_load
from envtool.core.safe_load import _OFF_PATH, _read_events, parse_yaml
from envtool.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def _nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "1" + "]" * depth + "\n"
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + f"{'  ' * depth}v\n"


TEXTS = {
    "alias": "a: &x [1, 2]\nb: *x\n",
    "anchor-only": "a: &x [1, 2]\nb: 3\n",
    "anchor-on-scalar": "a: &x 1\n",
    "billion-laughs": "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n",
    "duplicate-key": "a: 1\na: 2\n",
    "duplicate-quoted-key": "a: 1\n'a': 2\n",
    "nested-duplicate": "top:\n  x: 1\n  y: 2\n  x: 3\n",
    "same-key-two-maps": "p: {x: 1}\nq: {x: 2}\n",
    "merge-key": "base: {a: 1}\nm:\n  <<: {a: 2}\n  b: 3\n",
    "int-key": "1: one\n2: two\n",
    "null-key": "null: x\n~: y\n",
    "bool-key": "true: y\n",
    "list-key": "? [a, b]\n: 1\n",
    "map-key": "? {a: 1}\n: 1\n",
    "complex-scalar-key": "? long key\n: 1\n",
    "custom-tag": "a: !foo bar\n",
    "python-tag": "a: !!python/object/apply:os.system ['true']\n",
    "python-name": "a: !!python/name:os.system\n",
    "binary": "a: !!binary aGVsbG8=\n",
    "set": "a: !!set {x, y}\n",
    "omap": "a: !!omap [x: 1, y: 2]\n",
    "tagged-str": "a: !!str 12\nb: !!int '12'\nc: ! 12\n",
    "tagged-map": "a: !!map {x: 1}\nb: !!seq [1]\n",
    "types": "i: 12\nf: 1.5e3\ninf: .inf\nnan_: -.inf\nb: yes\nn: ~\no: 0o17\nx: 0x1F\nu: 1_000\n"
    "s: 1:20\nd: 2024-01-31\nt: 2024-01-31 10:00:00\nq: '12'\nqq: \"true\"\n",
    "big-int": "x: " + "7" * 5000 + "\n",
    "long-int": "x: 12345678901234567890\n",
    "two-documents": "a: 1\n---\nb: 2\n",
    "explicit-document": "---\na: 1\n...\n",
    "empty": "",
    "comment-only": "# nothing\n",
    "dashes-only": "---\n",
    "scalar-root": "just text\n",
    "list-root": "- a\n- b: 1\n  c: [1, {d: e}]\n",
    "flow": "{a: 1, b: [1, 2, {c: d}], e: {}}\n",
    "empty-values": "a:\nb: []\nc: {}\nd: ''\n",
    "unicode": '名前: ✓\nemoji: "\\U0001F600"\n',
    "bom": "\ufeffa: 1\n",
    "tab-indent": "a:\n\tb: 1\n",
    "unclosed": "a: [1, 2\n",
    "bad-indent": "a:\n  b: 1\n c: 2\n",
    "block-scalars": "a: |\n  line 1\n  line 2\nb: >-\n  folded\n  text\n",
    "deep-list-64": _nested(63, "list"),
    "deep-list-65": _nested(64, "list"),
    "deep-list-66": _nested(65, "list"),
    "deep-map-64": _nested(64, "map"),
    "deep-map-65": _nested(65, "map"),
    "deep-map-66": _nested(66, "map"),
}


def _strict_only(data: str | bytes, monkeypatch: pytest.MonkeyPatch) -> object:
    """What parse_yaml answers with the event reader off: the value, or the refusal's text."""
    with monkeypatch.context() as m:
        m.setattr(safe_load, "_read_events", lambda _data: _OFF_PATH)
        return _answer(data)


def _answer(data: str | bytes) -> object:
    try:
        return ("value", repr(parse_yaml(data, "f.yml")))
    except UsageError as exc:
        return ("refused", exc.message, exc.hint)


@pytest.mark.parametrize("case", sorted(TEXTS))
def test_hostile_and_unusual_text_gets_the_strict_loaders_answer(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = TEXTS[case]
    assert _answer(text) == _strict_only(text, monkeypatch)
    assert _answer(text.encode()) == _strict_only(text.encode(), monkeypatch)


def test_every_refusal_in_the_corpus_still_refuses() -> None:
    """The reader never decides what the strict loader refuses: each of these is refused."""
    for case in ("alias", "billion-laughs", "duplicate-key", "duplicate-quoted-key",
                 "nested-duplicate", "list-key", "map-key", "custom-tag", "python-tag",
                 "python-name", "big-int", "two-documents", "deep-list-66", "deep-map-65",
                 "unclosed", "bad-indent", "tab-indent"):  # fmt: skip
        assert _read_events(TEXTS[case]) is _OFF_PATH, case
        with pytest.raises(UsageError):
            parse_yaml(TEXTS[case], "f.yml")


def _real_files(fixtures: Path) -> list[Path]:
    found = [*fixtures.rglob("*.yml"), *fixtures.rglob("*.yaml"), *REPO.glob("tests/**/*.yml")]
    return sorted(p for p in found if p.is_file())


def test_every_real_yaml_file_reads_the_same(
    fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _real_files(fixtures)
    assert len(files) > 20
    decided = 0
    for path in files:
        data = path.read_bytes()
        assert _answer(data) == _strict_only(data, monkeypatch), path
        decided += _read_events(data) is not _OFF_PATH
    assert decided == len(files)  # none of them needs the slow path


def test_a_real_lock_is_read_by_the_event_reader_with_the_same_types(
    fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = next(p for p in _real_files(fixtures) if p.name.endswith("conda-lock.yml"))
    fast = _read_events(path.read_bytes())
    assert fast is not _OFF_PATH
    monkeypatch.setattr(safe_load, "_read_events", lambda _data: _OFF_PATH)
    slow = parse_yaml(path.read_bytes(), str(path))
    assert fast == slow and repr(fast) == repr(slow)
    assert isinstance(fast["version"], int) and isinstance(fast["package"], list)
