"""Captured container output, served by the ``pods/log`` subresource (with follow)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from .objects import now_iso


@dataclass
class LogBuffer:
    """Lines written by one container instance; :attr:`closed` once it has terminated."""

    lines: list[tuple[str, str]] = field(default_factory=list)  # (timestamp, line with newline)
    closed: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def write(self, line: str) -> None:
        """Append a line (a newline is added when missing)."""
        if not line.endswith("\n"):
            line += "\n"
        self.lines.append((now_iso(), line))
        self._notify()

    def close(self) -> None:
        """Mark the end of output (ends following readers)."""
        self.closed = True
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, timeout: float | None = None) -> None:
        """Wait until the next write or close."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    def render(self, start: int, timestamps: bool) -> str:
        """Lines from index ``start``, optionally prefixed with RFC 3339 timestamps."""
        return "".join((f"{ts} {line}" if timestamps else line) for ts, line in self.lines[start:])
