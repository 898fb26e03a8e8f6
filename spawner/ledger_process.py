"""The hub's ledger writes run in a helper process, not in threads of the hub.

Why: a reservation is a few milliseconds of SQLAlchemy work per start, and the hub's event loop
is one thread. In a worker thread of the hub that work shares the interpreter lock with the
loop: each time the loop releases the lock for its own database call (JupyterHub's sqlite, on
every request), the worker takes it and the loop waits for it back. The class-start benchmark
(README, "Development", ``bench/storm.py``) measured the hub's own queries at several times
their stock cost while reservations ran in threads. A process has its own interpreter lock.

One process: the ledger serializes the writes of a course anyway (its transaction holds the
course's lock), and a hub that starts hundreds of servers a minute needs a few milliseconds for
each. The process is started on the first reservation,
with the ``spawn`` method (a fresh interpreter, nothing inherited from the hub's threads), and
exits with the hub, also when the hub is killed: it watches its parent and leaves when the
parent is gone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import multiprocessing.connection
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_pool: concurrent.futures.ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _leave_with_parent() -> None:
    """Run in each helper at its start: exit as soon as the hub process is gone.

    A pool's workers otherwise wait for work forever when the hub dies without shutting them
    down (SIGKILL, an OOM kill), holding the ledger's database open."""
    parent = multiprocessing.parent_process()
    if parent is None:  # pragma: no cover - always set for spawned children
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="classhub-ledger-parent-watch", daemon=True).start()


def _executor() -> concurrent.futures.ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_leave_with_parent,
            )
        return _pool


async def run(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in the helper process (a module-level function, picklable args).

    When the helper has died (killed, out of memory), the call runs once more in a fresh one:
    the ledger's calls may run twice (a reservation replaces the stale one of its own key, a
    release of a released key does nothing), and a student's start should not fail for it."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_executor(), function, *args)
    except concurrent.futures.process.BrokenProcessPool:
        _discard()
        return await loop.run_in_executor(_executor(), function, *args)


def submit(function: Callable[..., Any], *args: Any) -> None:
    """Run ``function(*args)`` in the helper without waiting (``clear_state`` is synchronous)."""
    try:
        _executor().submit(function, *args)
    except concurrent.futures.process.BrokenProcessPool:
        _discard()
        _executor().submit(function, *args)


def _discard() -> None:
    global _pool
    with _pool_lock:
        broken, _pool = _pool, None
    if broken is not None:
        broken.shutdown(wait=False, cancel_futures=True)


def shutdown() -> None:
    """Stop the helper after its queued work (tests; the hub's exit does it by itself)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True)
