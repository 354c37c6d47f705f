"""Credentials never leave in a message, a path or a cache file: ``HF_ENDPOINT`` may be
``https://user:pass@host`` (a private mirror), and every URL mlxfit shows is built from it."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# scheme://userinfo@ anywhere in a text: the userinfo goes, whatever it holds.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]*@")


def redact_url(url: str) -> str:
    """``url`` without the user and password of its authority (``***@`` in their place)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc="***@" + host))


def redact_text(text: str) -> str:
    """Every ``scheme://user:pass@`` in ``text`` as ``scheme://***@``."""
    return _USERINFO.sub(r"\1***@", text) if "@" in text else text
