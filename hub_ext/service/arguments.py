"""Whole numbers from a request's query, range-checked in one place.

Why one helper: ``int(self.get_query_argument(...))`` takes ``-1``, ``1_000``, `` 7 ``, digits of
other scripts (``"٣"``) and numbers of any length, and what it returns then reaches a database
(an OverflowError past 64 bits), a file's seek (an OSError) or a loop. Every integer a handler
reads from the query goes through `int_argument`: ASCII digits with an optional leading ``-``,
within ``[minimum, maximum]``, or a 400 whose message names the argument and the range
(``offset must be a whole number from 0 to 4611686018427387904; 'abc' is not.``).

The bounds every handler uses are named here, so the OpenAPI document and the handlers agree.
Flags (``?remove_missing=true``) and folder paths (``?path=week1``) are read here too.

Every refusal of a query argument goes through `refuse`, the one hand-written 400 of the
service besides APIHandler's for bodies: a query argument is no JSON body, so no body model
(hub_ext.service.body_models) reads it.
"""

from __future__ import annotations

import re
from typing import NoReturn

from tornado import web

__all__ = ["MAX_LOG_OFFSET", "MAX_OFFSET", "flag_argument", "folder_argument", "int_argument",
           "refuse", "whole_number"]

#: How a flag may be written in a query, and what each way means.
_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}

#: The largest offset into a list (a page's start): beyond any row count, and far inside the
#: signed 64-bit range databases take for OFFSET (2**63 overflows).
MAX_OFFSET = 2**62
#: The largest byte offset into a log: far beyond any log, and inside what a file's seek takes.
MAX_LOG_OFFSET = 2**62

#: An optional minus and 1 to 20 ASCII digits (``re``'s ``[0-9]`` is ASCII only, unlike ``\d``
#: and ``str.isdigit``); longer is beyond every bound here without converting it.
_WHOLE = re.compile(r"-?[0-9]{1,20}\Z")


def whole_number(text: str | None, minimum: int, maximum: int) -> int | None:
    """``text`` as an int from ``minimum`` to ``maximum``, or None when it is not one."""
    if text is None or not _WHOLE.match(text):
        return None
    number = int(text)
    return number if minimum <= number <= maximum else None


def int_argument(handler: web.RequestHandler, name: str, default: int, *, minimum: int, maximum: int) -> int:
    """The query argument ``name`` as a whole number from ``minimum`` to ``maximum``
    (``default`` when it is absent); HTTP 400 saying the range for anything else, an empty
    value included."""
    raw = handler.get_query_argument(name, None)
    if raw is None:
        return default
    number = whole_number(raw, minimum, maximum)
    if number is None:
        shown = raw if len(raw) <= 24 else raw[:21] + "..."
        refuse(name, f"{name} must be a whole number from {minimum} to {maximum}; {shown!r} is not.")
    return number


def flag_argument(handler: web.RequestHandler, name: str, default: bool = False) -> bool:
    """The query argument ``name`` as a flag: true/false, 1/0 or yes/no (any case)."""
    raw = handler.get_query_argument(name, None)
    if raw is None:
        return default
    if raw.lower() not in _FLAGS:
        refuse(name, f"{name} must be true or false.")
    return _FLAGS[raw.lower()]


def folder_argument(handler: web.RequestHandler, name: str, where: str) -> str:
    """The query argument ``name`` as a folder path inside ``where`` ("" for its root), without
    empty, ``.`` or ``..`` parts."""
    path = handler.get_query_argument(name, "").strip("/")
    if path and any(part in ("", ".", "..") for part in path.split("/")):
        refuse(name, f"{name} must be a folder inside {where}, without '..'.")
    return path


def refuse(name: str, sentence: str) -> NoReturn:
    """Answer 400 with ``sentence`` about the query (or path) argument ``name``.

    Why a hand-written 400: query arguments are not a JSON body, so no body model reads them;
    this is the one place they are refused (``name`` is for the log and the reader)."""
    raise web.HTTPError(400, "%s", sentence)
