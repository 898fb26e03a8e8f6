"""Deadline-based waiting for tests (no fixed sleeps)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> T:
    """Poll ``predicate`` until it returns something truthy; return it or raise AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


async def async_wait_for(
    predicate: Callable[[], Awaitable[T]], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """Async :func:`wait_for` for coroutine predicates."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        await asyncio.sleep(interval)
