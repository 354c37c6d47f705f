"""``calibrate --write`` over a calibration file that already exists: the text is edited in
place for the keys the fit changed, so every other key, table and comment the loader accepted
stays as the user wrote it (re-rendering the parsed document dropped top-level keys, nested
tables and every comment). The edit is checked by parsing it back: it must be the old document
with exactly the new values, or nothing is written (``EditRefused``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import tomllib

_PART = r'(?:[A-Za-z0-9_-]+|"[^"\\\n]*"|\'[^\'\n]*\')'
_KEY = re.compile(rf"^(\s*)({_PART}(?:\s*\.\s*{_PART})*)\s*=\s*(.*)$")
_HEADER = re.compile(rf"^\s*\[\s*({_PART}(?:\s*\.\s*{_PART})*)\s*\]\s*(?:#.*)?$")
_ARRAY_HEADER = re.compile(r"^\s*\[\[")


class EditRefused(ValueError):
    """The file's layout is one the in-place edit does not handle (an inline table, a key
    split over lines, a table defined twice): nothing is written."""


def _split(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip()[1:-1] if p.strip()[:1] in "\"'" else p.strip()
                 for p in re.findall(_PART, dotted))


def _one_line_value(rest: str) -> bool:
    try:
        tomllib.loads(f"x = {rest}")
    except tomllib.TOMLDecodeError:
        return False
    return True


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for p in path[:-1]:
        doc = doc.setdefault(p, {})
        if not isinstance(doc, dict):
            raise EditRefused(f"{'.'.join(path)}: {p} is not a table there")
    doc[path[-1]] = value


def _deep_copy(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in doc.items()}


def edit_toml(text: str, updates: Mapping[tuple[str, ...], Any], fmt: Callable[[Any], str],
              comments: Mapping[tuple[str, ...], str]) -> str:
    """``text`` with each key path of ``updates`` set to its value (written with ``fmt``, a
    comment from ``comments`` beside it; a table's comment above its header): an existing
    ``key = value`` line is rewritten, a key missing from an existing table is added under its
    header, any other key goes into a new table at the end (or, where that would not parse, as
    a dotted key before the first table). EditRefused unless the result parses to the old
    document with exactly those values changed."""
    try:
        return _edit(text, updates, fmt, comments, new_tables=True)
    except EditRefused:
        return _edit(text, updates, fmt, comments, new_tables=False)


def _edit(text: str, updates: Mapping[tuple[str, ...], Any], fmt: Callable[[Any], str],
          comments: Mapping[tuple[str, ...], str], new_tables: bool) -> str:
    lines = text.splitlines()
    table: tuple[str, ...] | None = ()
    where: dict[tuple[str, ...], int] = {}  # full key path -> its line
    headers: dict[tuple[str, ...], int] = {}
    first_header = len(lines)
    for i, line in enumerate(lines):
        if _ARRAY_HEADER.match(line):
            table = None  # inside an array of tables: nothing here is ours to edit
            first_header = min(first_header, i)
            continue
        h = _HEADER.match(line)
        if h:
            table = _split(h.group(1))
            headers.setdefault(table, i)
            first_header = min(first_header, i)
            continue
        m = _KEY.match(line)
        if m and table is not None and _one_line_value(m.group(3)):
            where.setdefault((*table, *_split(m.group(2))), i)
    inserts: dict[int, list[str]] = {}  # new lines to put before line i
    drop: set[int] = set()  # the comment of a previous fit above a table's header
    end: dict[tuple[str, ...], list[str]] = {}  # new tables
    for tbl in {p[:-1] for p in updates}:
        c = comments.get(tbl)
        if c and tbl in headers:
            h = headers[tbl]
            old = lines[max(h - len(c.splitlines()), 0):h]
            # the comment a previous --write put there (same first words) gives way to this one
            if len(old) == len(c.splitlines()) and all(
                    o.startswith(f"# {n.split(' ', 1)[0]} ") for o, n in zip(old, c.splitlines())):
                drop.update(range(h - len(old), h))
            inserts.setdefault(h, []).extend(f"# {x}" for x in c.splitlines())
    for path, value in updates.items():
        c = comments.get(path)
        tail = f"  # {c}" if c else ""
        if path in where:
            i = where[path]
            indent, key = _KEY.match(lines[i]).group(1, 2)
            lines[i] = f"{indent}{key} = {fmt(value)}{tail}"
        elif path[:-1] in headers:
            inserts.setdefault(headers[path[:-1]] + 1, []).append(
                f"{_quote(path[-1])} = {fmt(value)}{tail}")
        elif new_tables:
            end.setdefault(path[:-1], []).append(f"{_quote(path[-1])} = {fmt(value)}{tail}")
        else:
            inserts.setdefault(first_header, []).append(
                f"{'.'.join(_quote(p) for p in path)} = {fmt(value)}{tail}")
    out: list[str] = []
    for i in range(len(lines) + 1):
        out.extend(inserts.get(i, ()))
        if i < len(lines) and i not in drop:
            out.append(lines[i])
    for tbl, body in end.items():
        c = comments.get(tbl)
        out += ["", *(f"# {x}" for x in (c.splitlines() if c else ())),
                f"[{'.'.join(_quote(p) for p in tbl)}]", *body]
    new = "\n".join(out) + "\n"
    try:
        old_doc, new_doc = tomllib.loads(text), tomllib.loads(new)
    except tomllib.TOMLDecodeError as e:
        raise EditRefused(f"editing it in place would not parse ({e})") from None
    want = _deep_copy(old_doc)
    for path, value in updates.items():
        _set(want, path, tomllib.loads(f"x = {fmt(value)}")["x"])
    if new_doc != want:
        raise EditRefused("its layout cannot be edited in place without changing other keys")
    return new


def _quote(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else '"' + key.replace('"', '\\"') + '"'
