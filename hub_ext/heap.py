"""Freeze the hub's startup heap once the hub runs, so full garbage collections skip it.

Why: Python's full (generation 2) collection walks every container object the process holds.
A hub holds about 280,000 of them after its imports (JupyterHub, tornado, SQLAlchemy,
kubernetes_asyncio's models, KubeSpawner, classhub), and none of them ever becomes garbage; each
full collection still walks them all, on the hub's event loop, while every request waits. During
a 300-student class start (``bench/storm.py``) a stock hub ran 3-4 full collections of 190-270 ms
each, and the classhub hub, whose imports and state make its heap larger, 4-5 of 170-390 ms: those
pauses were most of the difference between the two hubs' p95 ready times (docs/contributing/benchmarks.md,
"Benchmarks and their history").

``gc.freeze()`` (Python's mechanism for long-lived heaps) moves every object alive at that moment
to a permanent generation that collections skip. It runs once, when the hub's ``start()`` has
returned (all of its imports done, its users and spawners loaded), after one full collection so
that no garbage is frozen. Objects created later (users, spawners, ORM rows of a class start) are collected as
before; an object of the frozen heap that dies later is freed by reference counting as before,
only a reference cycle among frozen objects would stay (a few bytes a hub restart frees).
"""

from __future__ import annotations

import gc
import logging
from typing import Any

log = logging.getLogger(__name__)


def freeze_when_started() -> None:
    """Freeze the heap once the JupyterHub of this process has started; nothing outside a hub.

    Called by ``configure()`` while the hub loads its configuration file (JupyterHub's
    ``initialize``, before its ``start``)."""
    from jupyterhub.app import JupyterHub

    if JupyterHub.initialized():
        freeze_after_start(JupyterHub.instance())
    # else: a test or a tool building a configuration, not a hub: its heap is left alone


def freeze_after_start(app: Any) -> None:
    """Make ``app.start`` (a JupyterHub about to start) freeze the heap when it has returned:
    the hub then runs, its imports done and its users and spawners loaded. Once per app."""
    if getattr(app, "_classhub_freezes_heap", False):
        return
    app._classhub_freezes_heap = True
    start = app.start

    async def start_then_freeze(*args: Any, **kwargs: Any) -> Any:
        result = await start(*args, **kwargs)
        freeze(app.log)
        return result

    app.start = start_then_freeze


def freeze(logger: logging.Logger | logging.LoggerAdapter = log) -> int:
    """Collect once, then freeze every object alive; returns how many are frozen (logged to
    ``logger``: the hub's own log in a hub)."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("classhub: froze the hub's startup heap (%d objects); full garbage collections "
                "skip it", frozen)
    return frozen
