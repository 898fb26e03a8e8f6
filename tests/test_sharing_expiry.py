"""Shares end on time on every server, whatever the hub answers for one of them.

A share's record ends before its hub share is revoked (`Shares.expire_due`), so it is never due
again: when the hub could not sync one server (restarting, or an owner deleted from the hub), the
servers after it in the same round kept their ended shares working, and that server's share was
never revoked until the service restarted. Here the store is real (sqlite, the service's own
records) and the hub's side of each server's sync (`Shares.reconcile`, which asks the hub and is
tested on a real hub in tests/test_sharing_hub.py) answers as the hub would: an error for one
server, then success once the hub is back.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hub_ext.hubapi import HubAPIError
from hub_ext.service.sharing import Shares
from hub_ext.store import connect
from hub_ext.store.share_models import Share

pytestmark = pytest.mark.unit


async def test_a_server_the_hub_could_not_sync_neither_blocks_the_others_nor_is_forgotten(tmp_path):
    sessions = connect(f"sqlite:///{tmp_path / 'classhub.sqlite'}")
    past = datetime.now(timezone.utc) - timedelta(seconds=5)
    with sessions.begin() as session:
        for owner in ("alice", "bob", "gone"):  # three broadcasts due in the same round
            session.add(Share(owner=owner, kind="read-only", target_kind="group", target="cs101",
                              created_at=past - timedelta(hours=1), created_by=owner, expires_at=past))
    shares = Shares(sessions, hub=None)  # type: ignore[arg-type] - only reconcile asks the hub
    synced: list[str] = []
    hub_down = {"alice"}

    async def reconcile(owner: str, server: str) -> None:
        if owner in hub_down:
            raise HubAPIError(503, f"shares/{owner}/{server}")
        if owner == "gone":
            raise HubAPIError(404, f"shares/{owner}/{server}")  # deleted from the hub
        synced.append(owner)

    shares.reconcile = reconcile  # type: ignore[method-assign]
    assert await shares.expire_due() == 3
    assert synced == ["bob"]  # alice's failure did not leave bob's ended broadcast working
    hub_down.clear()  # the hub is back: the next round syncs alice, whose record is no longer due
    assert await shares.expire_due() == 0
    assert synced == ["bob", "alice"]
    assert await shares.expire_due() == 0 and synced == ["bob", "alice"]  # nothing left to retry
    sessions.kw["bind"].dispose()
