"""**The** rule for credentials in URLs: never written to a file, never printed.

A channel or mirror URL may carry them (`https://user:password@host/…`, anaconda.org's
`https://conda.anaconda.org/t/TOKEN/channel`). Credentials belong in rattler's auth store
(`pixi auth login HOST`, RATTLER_AUTH_FILE, the keyring), which rattler's client applies per
host. `redact_credentials` takes any text (a URL, an error message, a rendered file):
for files (`strip=True`) the credentials are removed, so the URL still works with the auth
store; for the terminal they are masked (`https://***@host/…`), so the reader sees that the URL
had some. Pure: no I/O.
"""

from __future__ import annotations

import re

# scheme://USERINFO@ — the userinfo runs to the last @ before the path (a password may hold an
# encoded @ only, but a raw one must not leak its tail either)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s?#'\"<>]*)@")
# anaconda.org's token path segment, right after the host: https://HOST/t/TOKEN/…
_TOKEN = re.compile(r"(?P<host>://[^/\s'\"<>]+)/t/(?P<token>[^/\s'\"<>]+)(?=/|$|\s)")

MASK = "***"


def redact_credentials(text: str, strip: bool = False) -> str:
    """`text` with every URL's credentials masked (`***`), or removed with `strip` (files)."""
    if "://" not in text:
        return text
    if strip:
        text = _USERINFO.sub(lambda m: m.group("scheme"), text)
        return _TOKEN.sub(lambda m: m.group("host"), text)
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _TOKEN.sub(lambda m: f"{m.group('host')}/t/{MASK}", text)


def has_credentials(text: str) -> bool:
    """Does `text` hold a URL with credentials (a user:password@ part or an anaconda.org token)?"""
    return redact_credentials(text, strip=True) != text


# an option whose name says it carries a secret: --hf-token, --api-key, --wandb_key, --password
_SECRET_OPTION = re.compile(
    r"^--?(?:[A-Za-z0-9_-]*[-_])?(token|secret|passw(?:or)?d|apikey|key)$", re.IGNORECASE
)


def redact_secret_args(argv: list[str]) -> list[str]:
    """A command line as a record keeps it (a run's manifest.json): the values of options named
    like secrets (`--hf-token X`, `--api-key=X`) masked, URL credentials masked; the rest as is.
    The command that runs is not touched, only what is written down."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        if _SECRET_OPTION.match(name):
            if eq:
                out.append(f"{name}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_credentials(arg))
    return out
