"""Quota enforcement for classhub spawners: reserve before anything is created, release after.

A server's request (its profile's guarantees and GPUs) is reserved in the classhub ledger,
atomically against the user's and the course's limits, from JupyterHub's ``apply_user_options``
hook, i.e. before the spawner creates a process or a pod. The reservation is released when the
hub clears the server's state: after a stop, after a failed spawn, and when a server is found
dead after a restart. The service reconciles the ledger with what runs, for the cases the hub
cannot see (a hub killed in the middle of a spawn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, timezone

from tornado import web

from hub_ext import store
from hub_ext.core.profiles import Selection
from hub_ext.core.quota import course_to_charge


def server_key(username: str, server_name: str) -> str:
    """The ledger key of a user's server (built by the ledger, its one owner)."""
    return store.Ledger.server_key(username, server_name)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _reserve_sync(url: str, username: str, key: str, selection: Selection,
                  courses: Mapping[str, str] | None) -> str | None:
    sessions = store.shared(url)
    if courses is None:
        with store.readers(sessions)() as session:
            courses = store.courses_of(session, username)
    course = course_to_charge(selection.profile.groups, courses)
    ledger = store.Ledger(sessions)
    # This server is not running (the hub does not start a running server), so a reservation
    # still held under its key is stale (e.g. the hub died before it could release it): the
    # ledger releases it in the reservation's own transaction.
    try:
        ledger.reserve(username, course, key, selection.request, _now(),
                       profile=selection.profile.slug, replace_stale=True)
    except store.QuotaDenied as e:
        with sessions.begin() as session:
            store.record(session, username, "spawn_denied", _now(), reason=e.decision.reason_code,
                         course=course, key=key, message=e.decision.message)
        raise web.HTTPError(403, e.decision.message) from None
    return course


def _release_sync(url: str, key: str, decided: datetime | None = None) -> None:
    store.Ledger(store.shared(url)).release(key, decided or _now(), started_before=decided)


async def reserve(url: str, username: str, server_name: str, selection: Selection,
                  courses: Mapping[str, str] | None = None) -> str | None:
    """Reserve ``selection`` for the server; HTTP 403 with the quota sentence when refused.

    ``courses``: the user's courses and roles as the caller just read them (`course_roles`, for
    the profile check), so the start reads them once; None reads them here. Returns the course
    charged (None when the user is in no course). Runs on the store's threads: the transaction may
    wait for another spawn's lock and must not block the hub.
    """
    key = server_key(username, server_name)
    return await store.in_thread(_reserve_sync, url, username, key, selection, courses)


async def release_now(url: str, username: str, server_name: str) -> None:
    """Give back the server's reservation and wait until it is given back (on the store's threads)."""
    await store.in_thread(_release_sync, url, server_key(username, server_name), _now())


def release(url: str, username: str, server_name: str) -> None:
    """Give back the server's reservation (idempotent).

    JupyterHub calls ``clear_state`` (and so this) synchronously on its event loop; the release
    is a write that may wait for another spawn's transaction, so on a running loop it goes to the
    store's threads. It releases only a reservation made before this call, so a start of the same
    server that reserves before the thread runs keeps its new reservation."""
    key = server_key(username, server_name)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        _release_sync(url, key)
        return
    store.in_thread(_release_sync, url, key, _now())
