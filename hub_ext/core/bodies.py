"""Request bodies and path values checked before anything else looks at them.

Why one module: an API answers bad input with a 400 that says what to change, never with a 500.
Python's json module recurses once per nesting level (a 20,000-deep body raises RecursionError),
reads ``10**400`` as an int and ``1e400`` as infinity, and accepts ``NaN``; a database column holds
far less than that. `parse_json` refuses all of these with a `BodyError` whose message names the
field, and `path_id` turns an id from a URL into an int or None ("no such thing": a 404).

Pure: standard library only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = [
    "DB_INT_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_DEPTH",
    "BodyError",
    "field_name",
    "parse_json",
    "path_id",
]

#: The deepest nesting of arrays and objects a body may have.
MAX_DEPTH = 64
#: JSON numbers must fit a signed 64-bit integer (the widest column any database here has).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Ids are SQLAlchemy ``Integer`` primary keys: 32 bits on PostgreSQL.
DB_INT_MAX = 2**31 - 1

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]")
_ID = re.compile(r"[0-9]{1,10}")


class BodyError(ValueError):
    """The body cannot be used; the message is one sentence for the caller."""


class _BigInt(str):
    """An integer literal too long to convert cheaply: always out of range."""


def field_name(path: tuple[str | int, ...]) -> str:
    """``("add", 0, "role")`` -> ``add[0].role``; ``()`` -> ``the body``."""
    if not path:
        return "the body"
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def nesting_depth(text: str) -> int:
    """How deeply arrays and objects nest in ``text`` (strings are not counted)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = deepest = 0
    for c in brackets:
        depth += 1 if c in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _constant(name: str) -> Any:
    raise BodyError(f"{name} is not a JSON number; send a finite number.")


def _int(literal: str) -> int | _BigInt:
    return _BigInt(literal) if len(literal) > 20 else int(literal)


def parse_json(raw: bytes | bytearray | str, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in ``raw`` (UTF-8); `BodyError` for anything an endpoint cannot store.

    Refused: bytes that are not UTF-8, text that is not JSON, nesting deeper than ``max_depth``,
    integers outside the signed 64-bit range, numbers that are not finite (``1e400``, ``NaN``,
    ``Infinity``), and text with NUL characters or unpaired surrogates (``"\\ud800"``), which no
    database column takes.
    """
    if isinstance(raw, bytes | bytearray):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise BodyError(f"The body is not valid UTF-8 (byte {e.start}); send JSON text in "
                            "UTF-8.") from None
    else:
        text = raw
    if nesting_depth(text) > max_depth:
        raise BodyError(f"The body nests arrays and objects more than {max_depth} levels deep.")
    try:
        value = json.loads(text, parse_int=_int, parse_constant=_constant)
    except BodyError:
        raise
    except (ValueError, RecursionError):
        raise BodyError("The body must be JSON (Content-Type: application/json).") from None
    _check(value)
    return value


def _check(root: Any) -> None:
    """Walk the parsed document (iteratively: depth is bounded, but be safe) for bad values."""
    pending: list[tuple[tuple[str | int, ...], Any]] = [((), root)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                _check_text(path, key, is_key=True)
                pending.append(((*path, key), item))
        elif isinstance(value, list):
            pending.extend(((*path, i), item) for i, item in enumerate(value))
        elif isinstance(value, _BigInt) or (
            isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX
        ):
            raise BodyError(f"{field_name(path)}: {str(value)[:24]}{'...' if len(str(value)) > 24 else ''} "
                            f"is out of range; numbers must lie between {INT64_MIN} and {INT64_MAX}.")
        elif isinstance(value, float) and not math.isfinite(value):
            raise BodyError(f"{field_name(path)}: the number is too large (at most about 1.8e308); "
                            "send a finite number.")
        elif isinstance(value, str):
            _check_text(path, value)


def _check_text(path: tuple[str | int, ...], text: str, is_key: bool = False) -> None:
    where = f"{field_name(path)}: the key {text[:40]!r}" if is_key else field_name(path)
    if "\x00" in text:
        raise BodyError(f"{where}: text must not contain NUL characters (\\u0000).")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BodyError(f"{where}: the text has an unpaired surrogate (\\ud800-\\udfff); "
                        "send valid Unicode.") from None


def path_id(text: str, maximum: int = DB_INT_MAX) -> int | None:
    """The id in a URL path segment, or None when it cannot name anything (not digits, 0, or
    beyond what the id column holds): callers answer that with the same 404 as a missing id."""
    if not _ID.fullmatch(text or ""):
        return None
    number = int(text)
    return number if 1 <= number <= maximum else None
