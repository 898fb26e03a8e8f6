"""Capacity pressure: a spawn refused for lack of a device asks the culler to reclaim one.

The spawner (in the hub process) calls `reclaim_notice` on the refusal path: it writes a
`Shortfall` row and returns the sentence the refused user reads. The culler checks for open
shortfalls every ``pressure_check_interval`` seconds and then runs a cycle at once, freeing the
longest-idle servers holding that device past their reclaim threshold (hub_ext.core.culling).

The store is the only channel between the hub and the culler service (it survives restarts):
this end of it is the spawner's, and the spawner imports nothing of the culler
(docs/architecture.md, rule 2).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from hub_ext import store
from hub_ext.store import culler_models as cm

#: What the refused user is told to wait: a pressure check (10 s) plus stopping a server.
RETRY_SECONDS = 30


def _record(url: str, resource: str, units: int, username: str) -> None:
    with store.shared(url).begin() as session:
        cm.record_shortfall(session, resource, units, username, datetime.now(timezone.utc))


async def reclaim_notice(db_url: str, username: str, profile: Any) -> str:
    """Record that ``username`` waits for ``profile``'s device; the sentence to add to the 409.

    Empty when there is nothing to reclaim for (no device, no store) or the store fails (the
    refusal itself must still reach the user).
    """
    resource = getattr(profile, "gpu_resource", None)
    if not db_url or not resource:
        return ""
    try:
        await store.in_thread(_record, db_url, resource, int(profile.gpu_count or 1), username)
    except Exception:  # the refusal matters more than the notice
        return ""
    return (
        f" Capacity is being reclaimed from idle servers that hold a {resource}: retry in about "
        f"{RETRY_SECONDS} s."
    )
