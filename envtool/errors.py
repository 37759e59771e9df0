"""Typed errors. Only the CLI turns them into exit codes; everything else raises."""

from __future__ import annotations


class EnvtoolError(Exception):
    """A failure the user can act on: one-line message plus the fix."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail  # lines printed, indented, under the one-line error (a solver's tree)

    def one_line(self) -> str:
        return f"{self.message} — {self.hint}" if self.hint else self.message


class UsageError(EnvtoolError):
    """Bad input: a file, a value or a flag. Exit 2."""


def first_line(exc: BaseException) -> str:
    """An exception's first line (its type's name when it has no text): one-line errors quote it."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def fit_words(text: str, width: int) -> str:
    """`text` in `width` columns, cut at a space (never mid-word) and marked with …."""
    if len(text) <= width:
        return text
    cut = text[: max(width - 1, 1)]
    head = cut.rsplit(" ", 1)[0] if " " in cut.strip() else cut
    return head.rstrip(" ,;:") + "…"


def cannot_write(path: object, exc: OSError) -> UsageError:
    """A file envtool cannot write where the user asked: a file in the way, no permission, a full
    disk."""
    import errno
    from pathlib import Path

    if exc.errno in (errno.EEXIST, errno.ENOTDIR):  # mkdir/open met a file where a folder goes
        blocker = next((p for p in Path(str(path)).parents if p.is_file()), None)
        if blocker is not None:
            return UsageError(
                f"cannot write {path}: {blocker} is a file, not a directory",
                "pick a path under a directory",
            )
    return UsageError(f"cannot write {path} ({exc.strerror or exc})", "pick a writable path")


def not_utf8(path: object, exc: UnicodeDecodeError, hint: str = "save it as UTF-8") -> UsageError:
    """A text file envtool must read that is not UTF-8: where the first bad byte is."""
    return UsageError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})", hint)


class Interrupted(EnvtoolError):
    """Ctrl-C (or SIGINT) where envtool can say what it left behind. Exit 130, as a shell does."""

    exit_code = 130


class DiagnosedFailure(EnvtoolError):
    """envtool worked and found a problem (doctor fail, stale lock, drift, failed job). Exit 1."""

    exit_code = 1
