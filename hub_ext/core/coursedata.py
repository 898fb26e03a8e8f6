"""Course data: the rules of a course's shared data folder and of the storage view.

Why a pure module: "a student cannot write the course's data" and "an upload never lands outside
the course's folder" are promises to teachers and admins that both run modes keep the same way.
The file system work (hub_ext/backends/coursedata.py) only carries out what these functions
decide: which relative path an upload names, which byte range a chunk covers, whether the
course's folder may grow by that much, and what a home's size means next to its limit.

Vocabulary:
- The *data folder* of a course holds files and folders only, written by the classhub service
  for the course's teachers and TAs; members read it at ``~/data/<course folder>`` in their
  server (a link in local mode, a read-only mount on Kubernetes).
- A *data path* is a relative POSIX path inside that folder. Refused: empty, absolute, ``.``,
  ``..`` or empty components, NUL or backslash, a component starting with ``.classhub``
  (classhub's own bookkeeping), longer than 255 bytes per component or 64 components deep.
- An upload is sent whole, or in chunks with ``Content-Range: bytes <first>-<last>/<total>``
  (each chunk starts where the kept part ends; ``bytes */<total>`` asks where that is).

Pure: standard library only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DataExists",
    "DataFull",
    "DataPathError",
    "Range",
    "check_data_path",
    "check_limit",
    "effective_limit",
    "home_level",
    "human_bytes",
    "over_limit",
    "parse_content_range",
]

#: Most components in a data path, and bytes in one component (the usual NAME_MAX).
MAX_DEPTH = 64
MAX_NAME_BYTES = 255
#: Names classhub keeps for itself inside the data root (partial uploads and the like).
RESERVED_PREFIX = ".classhub"

_RANGE = re.compile(r"^bytes (?:(\d+)-(\d+)|\*)/(\d+)$")


class DataPathError(ValueError):
    """A data path, a range or a size the caller must change; the message says how."""


class DataFull(DataPathError):
    """What an upload would add passes the course's data folder limit."""


class DataExists(DataPathError):
    """A copy would land on a name the course's data folder already holds."""


def check_data_path(path: str) -> tuple[str, ...]:
    """The components of ``path`` if it is a clean relative path, else DataPathError."""
    if not isinstance(path, str) or not path.strip("/"):
        raise DataPathError("Name a file or folder inside the course's data folder, e.g. images/cat.png")
    if path.startswith("/"):
        raise DataPathError(f"{path!r} is an absolute path; give a path relative to the course's "
                            "data folder, e.g. images/cat.png")
    if "\x00" in path or "\\" in path:
        raise DataPathError(f"{path!r} holds a NUL or a backslash; use '/' between folder names")
    parts = tuple(path.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise DataPathError(f"{path!r} holds '..', '.' or an empty folder name; name a path "
                                "inside the course's data folder")
        if part.startswith(RESERVED_PREFIX):
            raise DataPathError(f"{path!r}: names starting with {RESERVED_PREFIX!r} are classhub's own; "
                                "choose another name")
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise DataPathError(f"{part[:40]!r}...: a name is at most {MAX_NAME_BYTES} bytes; shorten it")
    if len(parts) > MAX_DEPTH:
        raise DataPathError(f"{path[:60]!r}...: at most {MAX_DEPTH} nested folders")
    return parts


@dataclass(frozen=True)
class Range:
    """What one request of an upload carries: bytes ``first``..``last`` (inclusive) of a file of
    ``total`` bytes; ``first`` None: the request only asks how much is kept (``bytes */total``)."""

    first: int | None
    last: int | None
    total: int

    @property
    def length(self) -> int:
        return 0 if self.first is None or self.last is None else self.last - self.first + 1

    @property
    def completes(self) -> bool:
        """Whether this chunk is the file's end."""
        return self.last is not None and self.last + 1 == self.total


def parse_content_range(header: str | None, body_length: int | None) -> Range | None:
    """The upload's ``Content-Range`` (None: the body is the whole file), checked against the
    declared body length when there is one."""
    if header is None or not header.strip():
        return None
    match = _RANGE.match(header.strip())
    if match is None:
        raise DataPathError(f"Content-Range {header!r}: send 'bytes <first>-<last>/<total>' (or "
                            "'bytes */<total>' to ask how much of the file is kept)")
    first, last, total = (int(g) if g is not None else None for g in match.groups())
    assert total is not None
    if first is None:
        return Range(None, None, total)
    assert last is not None
    if last < first or last >= total:
        raise DataPathError(f"Content-Range {header!r}: <first> <= <last> < <total> must hold")
    if body_length is not None and body_length != last - first + 1:
        raise DataPathError(f"Content-Range {header!r} names {last - first + 1} bytes but the body "
                            f"has {body_length}; send exactly the range's bytes")
    return Range(first, last, total)


def over_limit(used: int, adding: int, limit: int | None, course: str) -> str | None:
    """The sentence refusing ``adding`` bytes to a data folder holding ``used`` (None: fits)."""
    if limit is None or used + adding <= limit:
        return None
    return (f"The upload is larger than the room left in the data folder of {course}: it would hold "
            f"{human_bytes(used + adding)}, over its limit of {human_bytes(limit)} ({human_bytes(used)} "
            "used); delete files first, or ask a hub admin to raise the course's limit (its Data "
            "section, or PUT /api/courses/<course>/data/limit)")


def check_limit(value: object) -> int | None:
    """A course's own data folder limit as a hub admin sends it: bytes (0: no limit) or None
    (back to the configured default); else DataPathError saying what to send."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DataPathError("max_bytes must be a whole number of bytes (0: no limit), or null for "
                            "the hub's default, e.g. 107374182400 for 100 GiB")
    return value


def effective_limit(own: int | None, default: int | None) -> int | None:
    """The limit that applies: the course's own (0: none) when a hub admin set one, else the
    configured ``default`` (None: no limit)."""
    if own is None:
        return default
    return own if own > 0 else None


#: A home's size next to its limit: fine, near (at least `NEAR` of it) or over.
FINE, NEAR, OVER = "fine", "near", "over"
NEAR_FRACTION = 0.9


def home_level(size: int, limit: int | None) -> str:
    """How a home of ``size`` bytes stands against ``limit`` (None: no limit, always fine)."""
    if limit is None or limit <= 0:
        return FINE
    if size > limit:
        return OVER
    return NEAR if size >= NEAR_FRACTION * limit else FINE


def human_bytes(n: int) -> str:
    """Bytes in words, binary units: 27 B, 3.0 MiB, 50.0 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
