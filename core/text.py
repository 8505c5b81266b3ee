"""Text that cannot be stored: a NUL character (PostgreSQL refuses it in text and in jsonb)
and a lone surrogate (no UTF-8 encoding exists for it). The edge refuses both with a 400
before anything reaches a query or a row; this module only finds them."""

from __future__ import annotations

import re
from typing import Any

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """What is wrong with ``text`` ("a NUL character", "a lone surrogate"), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return "a NUL character" if found.group() == "\x00" else "a lone surrogate"


def first_unstorable(value: Any) -> tuple[str, str] | None:
    """The first string (key or value) in a parsed JSON document that cannot be stored, as
    ``(where, what)``; ``where`` is a dotted path ("env.NAME", "command.1")."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            what = unstorable(item)
            if what:
                return where or "body", what
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{where}.{key}" if where else str(key)
                what = unstorable(key) if isinstance(key, str) else None
                if what:
                    return name, what
                stack.append((name, child))
        elif isinstance(item, list):
            stack.extend((f"{where}.{i}" if where else str(i), c) for i, c in enumerate(item))
    return None


_DIGITS = re.compile(r"\d+")


def natural_sort_key(text: str, width: int = 20) -> str:
    """``text`` lower-cased with each run of digits padded to ``width``, so that plain string
    order is natural order: student2 < student10 < student11. (Runs longer than ``width``
    keep their length and still sort after shorter ones.)"""
    return _DIGITS.sub(lambda m: m.group().rjust(width, "0"), text.lower())[:255]
