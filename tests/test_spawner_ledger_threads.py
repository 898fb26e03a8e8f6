"""Reservations waiting for the database keep to the store's own threads (hub_ext.store.engine).

A reservation waits while another transaction holds its lock (sqlite's one writer here, a
course's row on PostgreSQL). The hub's loop also runs kubernetes_asyncio's per-request work in
its default executor; were the reservations there, a class start's waiting reservations would
hold every one of its threads and each pod and PVC call of the hub would wait behind them.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from hub_ext import store
from hub_ext.core.profiles import Catalog, Viewer
from hub_ext.store import add_member, engine, ensure_course
from spawner import quota
from tests.kubefake.waiting import async_wait_for

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=timezone.utc)
CATALOG = Catalog.from_config([{"slug": "cpu", "kind": "cpu", "groups": ["cs101"]}])
STUDENTS = [f"s{i:02d}" for i in range(12)]  # more than any default executor of 2 cores has threads


async def test_waiting_reservations_leave_the_loops_executor_free(tmp_path):
    url = f"sqlite:///{tmp_path / 'classhub.sqlite'}"
    sessions = store.shared(url)
    with sessions.begin() as session:
        course = ensure_course(session, "cs101", NOW)
        for name in STUDENTS:
            add_member(session, course, name)
    loop = asyncio.get_running_loop()
    with sessions.begin() as holder:  # BEGIN IMMEDIATE: the database's one writer, from here
        holder.add(store.AuditLog(at=NOW, actor="test", action="holding", details={}))
        holder.flush()
        starts = [asyncio.ensure_future(quota.reserve(url, name, "", _selection(name), {"cs101": "student"}))
                  for name in STUDENTS]
        # every store thread holds a reservation waiting for the writer, the rest queue for them
        await async_wait_for(_all_store_threads_waiting, timeout=20, what="the store threads taken")
        assert not any(start.done() for start in starts)  # every reservation waits for the writer
        # ... and work the loop hands to its default executor still runs at once
        assert await asyncio.wait_for(loop.run_in_executor(None, lambda: "ran"), 5) == "ran"
    assert await asyncio.gather(*starts) == ["cs101"] * len(STUDENTS)
    with store.readers(sessions)() as session:
        assert len(store.Ledger(sessions).active(course="cs101")) == len(STUDENTS)


async def _all_store_threads_waiting() -> bool:
    return engine._store_threads._work_queue.qsize() == len(STUDENTS) - engine.STORE_THREADS


def _selection(name: str):
    return CATALOG.select(Viewer(name, frozenset({"cs101"})), {"profile": "cpu"})
