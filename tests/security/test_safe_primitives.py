"""The primitives every reader and writer of outside data goes through: bounded reads, strict
YAML/JSON, exclusive atomic writes, one quoting function per shell, the terminal escaper, the pip
requirements writer."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading

import pytest

from envtool.adapters.files import read_bytes, read_text, write_atomic
from envtool.core.safe_load import parse_json, parse_yaml
from envtool.core.shell_quote import printable, quote
from envtool.errors import UsageError

HOSTILE = [
    "plain",
    "$(touch PWNED)",
    "`touch PWNED`",
    'it\'s "quoted"',
    "a;touch PWNED;b",
    "back\\slash\\",
    "new\nline",
    "tab\there",
    "dollar $HOME ${HOME} $((1+1))",
    "glob * ? [a]",
    "unicode é ‘smart’ quotes’",
    "-n",
    "",
    "'",
    "\\'",
    "%s %n {} &|<>!",
]


# --- bounded reads -----------------------------------------------------------------------------


def test_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "env.yml"
    os.mkfifo(fifo)
    result: list[BaseException] = []
    t = threading.Thread(target=lambda: _catch(result, read_text, fifo, 1024), daemon=True)
    t.start()
    t.join(30)  # generous: the point is that it returns at all
    assert not t.is_alive(), "a FIFO blocked the reader"
    assert isinstance(result[0], UsageError) and "not a regular file" in str(result[0])


def _catch(out, fn, *args):
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        out.append(exc)


def test_device_and_directory_and_oversize_are_one_line_errors(tmp_path):
    with pytest.raises(UsageError, match="not a regular file"):
        read_bytes("/dev/zero", 1024)
    with pytest.raises(UsageError, match="a directory"):
        read_bytes(tmp_path, 1024)
    big = tmp_path / "big.yml"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(UsageError, match="too large .*2048 bytes; the limit is 1024"):
        read_bytes(big, 1024)
    assert read_bytes(big, 2048) == b"x" * 2048


def test_symlink_refused_only_when_asked(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    link = tmp_path / "nvml.json"
    link.symlink_to(secret)
    assert read_text(link, 100) == "s3cret"
    with pytest.raises(UsageError, match="symbolic link") as info:
        read_text(link, 100, follow_symlinks=False)
    assert "s3cret" not in str(info.value)


def test_non_utf8_names_the_byte(tmp_path):
    f = tmp_path / "env.yml"
    f.write_bytes(b"name: x\n\xff\n")
    with pytest.raises(UsageError, match=r"not a UTF-8 text file .* at byte 8"):
        read_text(f, 100)


# --- strict YAML / JSON ----------------------------------------------------------------------


def test_billion_laughs_is_refused_before_it_expands():
    lol = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 9):
        lol += f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join(['*' + chr(96 + i)] * 9)}]\n"
    with pytest.raises(UsageError, match="aliases"):
        parse_yaml(lol, "bomb.yml")


def test_duplicate_keys_refused_like_rattler_does():
    with pytest.raises(UsageError, match=r"dup.yml: duplicate key 'sha256' \(line 3\)"):
        parse_yaml("name: x\nsha256: aa\nsha256: bb\n", "dup.yml")
    with pytest.raises(UsageError, match="duplicate key 'a'"):
        parse_json('{"a": 1, "a": 2}', "d.json")


def test_deep_nesting_is_one_line_error():
    with pytest.raises(UsageError, match="deep.yml"):
        parse_yaml("[" * 200_000, "deep.yml")
    with pytest.raises(UsageError, match="deep.json: nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000, "deep.json")
    with pytest.raises(UsageError, match="nested deeper than 64"):
        parse_yaml("[" * 100 + "]" * 100, "d.yml")


def test_plain_documents_still_parse():
    assert parse_yaml("dependencies: [python=3.11, {pip: [torch]}]\n", "e.yml") == {
        "dependencies": ["python=3.11", {"pip": ["torch"]}]
    }
    assert parse_json('{"a": [1, {"b": null}]}', "x.json") == {"a": [1, {"b": None}]}


# --- atomic writes -----------------------------------------------------------------------------


def test_write_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    out = tmp_path / "environment.yml"
    out.symlink_to(victim)
    write_atomic(out, "new")
    assert victim.read_text() == "keep me"
    assert not out.is_symlink() and out.read_text() == "new"


def test_write_never_replaces_a_device_node_or_directory(tmp_path):
    with pytest.raises(UsageError, match="not a regular file"):
        write_atomic("/dev/null", "x")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    (tmp_path / "d").mkdir()
    with pytest.raises(UsageError, match="a directory"):
        write_atomic(tmp_path / "d", "x")


def test_write_leaves_no_temp_behind_and_keeps_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "conda-lock.yml"
    target.write_text("old")

    def full_disk(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(UsageError, match="cannot write .*conda-lock.yml .No space left"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conda-lock.yml"]


def test_write_mode_follows_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "f", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o640


# --- quoting, run by the real shells -----------------------------------------------------------


SHELL_PRINT = {
    "bash": ["bash", "-c"],
    "sh": ["dash", "-c"],
    "zsh": ["zsh", "-c"],
    "fish": ["fish", "-c"],
}


@pytest.mark.integration
@pytest.mark.parametrize("shell", sorted(SHELL_PRINT))
def test_quoted_words_reach_the_program_byte_exact(shell, tmp_path):
    exe = SHELL_PRINT[shell][0]
    if shutil.which(exe) is None:
        pytest.skip(f"{exe} is not installed (.ci/run installs it with apt)")
    values = [v for v in HOSTILE if not (shell == "fish" and v == "")]
    script = "printf '%s\\0' " + " ".join(quote(shell, v) for v in values)
    out = subprocess.run(
        [*SHELL_PRINT[shell], script], cwd=tmp_path, capture_output=True, check=True
    )
    assert out.stdout.split(b"\0")[:-1] == [v.encode() for v in values]
    assert not (tmp_path / "PWNED").exists()


def test_powershell_quoting_doubles_every_quote_character():
    # no pwsh on Debian's archive; the rule is PowerShell's verbatim-string grammar
    assert quote("powershell", "it's ‘x’ $(a)") == "'it''s ‘‘x’’ $(a)'"


def test_printable_escapes_terminal_controls():
    shown = printable("H200\x1b]0;owned\x07\x1b[2J\x9b31m\r\nnext")
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert "\n" not in shown and shown.startswith("H200\\x1b]0;owned\\x07")
    assert printable("a\nb", keep_newlines=True) == "a\nb"
    assert printable("NVIDIA H200 — ok\t") == "NVIDIA H200 — ok\t"


def test_the_requirements_writer_refuses_anything_but_one_line_per_entry() -> None:
    from envtool.core.pip_lock import locked_requirement, requirements_text
    from envtool.errors import UsageError

    ok = locked_requirement("a.b-c_d", "1.0", "file:///w/a.whl", "AB" * 32, "L")
    assert ok == f"a.b-c_d @ file:///w/a.whl --hash=sha256:{'ab' * 32}"
    assert requirements_text([ok, ok], "L") == f"{ok}\n{ok}\n"
    bad = [
        ("a\nb", "1", "file:///a", "ab" * 32),
        ("-e", "1", "file:///a", "ab" * 32),
        ("a_", "1", "file:///a", "ab" * 32),
        ("a", "1 2", "file:///a", "ab" * 32),
        ("a", "1", "file:///a --index-url x", "ab" * 32),
        ("a", "1", "file:///a\r", "ab" * 32),
        ("a", "1", "file:///a", "ab" * 31),
        ("a", "1", "file:///a", None),
    ]
    for name, version, url, sha in bad:
        with pytest.raises(UsageError, match="^L: pip package"):
            locked_requirement(name, version, url, sha, "L")
    for line in ("a\nb", "", "a\x00", "a\x1b[2J"):
        with pytest.raises(UsageError, match="not a single requirement line"):
            requirements_text([line], "L")
