"""One quoting function per shell, and one escaper for text shown on a terminal.

Every generated shell text (activation for bash/zsh/fish/powershell, sbatch scripts, printed
"run it:" hints) quotes each outside value through `quote(shell, value)`; nothing else builds
shell words. Values that reach a terminal (GPU names, lock fields, env names) go through
`printable` so escape codes in data cannot drive the user's terminal.
"""

from __future__ import annotations

import re
import shlex

SHELLS = ("bash", "zsh", "sh", "fish", "powershell")

# PowerShell treats the typographic single quotes as quote characters too
_PWSH_QUOTES = "'\u2018\u2019\u201a\u201b"


def quote_posix(value: str) -> str:
    """A word for sh/bash/zsh: single quotes, nothing inside is expanded."""
    return shlex.quote(value)


def quote_fish(value: str) -> str:
    """A word for fish: inside '…' only \\\\ and \\' are escapes."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_powershell(value: str) -> str:
    """A word for PowerShell: a verbatim '…' string, every quote character doubled."""
    return "'" + "".join(c + c if c in _PWSH_QUOTES else c for c in value) + "'"


def quote(shell: str, value: str) -> str:
    if shell in ("bash", "zsh", "sh"):
        return quote_posix(value)
    if shell == "fish":
        return quote_fish(value)
    if shell == "powershell":
        return quote_powershell(value)
    raise ValueError(f"unknown shell {shell!r}")


# what a terminal acts on, inside a quoted word: C0 controls but tab and newline, DEL, C1
# plus lone surrogates: bytes of a non-UTF-8 path (os.fsdecode's surrogateescape), which a
# strict UTF-8 stdout cannot write and which, written raw, include C1 bytes (0x9b is CSI)
_WORD_CONTROL = re.compile(r"([\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]+)")


def quote_printable(shell: str, value: str) -> str:
    """quote(shell, value) as a text with no terminal control characters in it (a script that
    is printed, not only eval'd: `envtool shell-hook`). Control characters are written as the
    shell's own escape outside the quotes: sh `"$(printf '\\033')"`, fish `\\u001b`,
    PowerShell `[char]0x1b`; the shell still gets the exact value."""
    if not _WORD_CONTROL.search(value):
        return quote(shell, value)
    parts: list[str] = []
    for i, part in enumerate(_WORD_CONTROL.split(value)):
        if not part:
            continue
        if i % 2 == 0:
            parts.append(quote(shell, part))
        elif shell == "fish":  # \xHH is fish's raw byte: a surrogate-escaped path byte exactly
            parts.append("".join(_fish_escape(c) for c in part))
        elif shell == "powershell":
            parts.append(" + ".join(f"[char]0x{ord(c):02x}" for c in part))
        else:  # printf's octal escapes are POSIX; a C1 character is its UTF-8 bytes
            octal = "".join(f"\\{b:03o}" for b in part.encode("utf-8", "surrogateescape"))
            parts.append(f"\"$(printf '{octal}')\"")
    if shell == "powershell":
        return "(" + " + ".join(parts) + ")"
    return "".join(parts)


def _fish_escape(c: str) -> str:
    if "\udc80" <= c <= "\udcff":
        return f"\\x{ord(c) - 0xDC00:02x}"
    return f"\\u{ord(c):04x}"


def join_posix(words: list[str]) -> str:
    """A command line for sh/bash from words (each quoted)."""
    return " ".join(quote_posix(w) for w in words)


# C0 controls (but tab), DEL and the C1 range (U+0080-U+009F: CSI is U+009B)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str, keep_newlines: bool = False) -> str:
    """`text` with control characters shown as \\xNN, so data cannot move the cursor, set the
    title or inject lines; a URL's credentials are masked (core/credentials). `keep_newlines`
    keeps \\n for multi-line blocks."""

    def esc(m: re.Match[str]) -> str:
        c = m.group(0)
        if keep_newlines and c == "\n":
            return c
        if "\udc80" <= c <= "\udcff":  # an undecodable byte of a path: show the byte
            return f"\\x{ord(c) - 0xDC00:02x}"
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    from envtool.core.credentials import redact_credentials

    return _CONTROL.sub(esc, redact_credentials(text))
