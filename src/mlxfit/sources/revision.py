"""Which ``--revision`` values name a branch, tag or commit: git's own rules for ref names
(``git check-ref-format``), plus a length bound. A value outside them is refused in one line
before any cache or the Hub is asked: ``..`` in a URL path would otherwise be collapsed by the
HTTP client and silently size ``main``."""

from __future__ import annotations

import re

from mlxfit.errors import UsageError

# Longer than any branch, tag or refs/pr/N name: git itself has no limit, the Hub's URLs do.
MAX_REVISION_CHARS = 256

# git check-ref-format: no control character, space, ~ ^ : ? * [ \ or DEL anywhere
_FORBIDDEN = re.compile(r"[\x00-\x20~^:?*\[\\\x7f]")


def check_revision(revision: str | None) -> None:
    """UsageError (param "revision") unless ``revision`` is None or a ref or commit name."""
    if revision is None:
        return
    why = _problem(revision)
    if why:
        shown = repr(revision[:40]) + ("..." if len(revision) > 40 else "")
        raise UsageError(f"revision {shown} is not a branch, tag or commit name: {why}",
                         param="revision")


def _problem(rev: str) -> str | None:
    if not rev:
        return "it is empty"
    if len(rev) > MAX_REVISION_CHARS:
        return f"{len(rev):,} characters, more than {MAX_REVISION_CHARS}"
    if _FORBIDDEN.search(rev) or not rev.isprintable():
        return "it has a space, a control character or one of ~ ^ : ? * [ \\"
    if rev == "@" or "@{" in rev:
        return "git reserves '@' alone and '@{'"
    if ".." in rev:
        return "it has '..'"
    if rev.startswith("/") or rev.endswith(("/", ".")) or "//" in rev:
        return "it starts or ends with '/', ends with '.', or has '//'"
    parts = rev.split("/")
    if any(p.startswith(".") or p.endswith(".lock") for p in parts):
        return "a part of it starts with '.' or ends with '.lock'"
    return None
