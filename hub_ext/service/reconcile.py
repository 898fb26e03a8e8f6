"""Keep the quota ledger in line with what the hub says runs.

The spawner reserves before it starts a server and releases when the hub clears the server's
state. A hub killed between the two (SIGKILL, OOM, node loss) can leave a reservation for a server
that never came up; after a restart the hub no longer knows that spawn. This loop releases such
reservations: every ``interval`` seconds, and once when the service starts, it asks the hub which
servers exist (running or starting) and releases server reservations that match none of them and
are older than ``grace`` (a fresh reservation's server may not be registered yet).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

from hub_ext import store
from hub_ext.hubapi import HubAPI

log = logging.getLogger(__name__)


async def running_server_keys(hub: HubAPI) -> set[str]:
    """Ledger keys (`store.Ledger.server_key`) of every server the hub runs or is starting."""
    return {store.Ledger.server_key(user["name"], name) for user in await hub.users(state="active")
            for name in (user.get("servers") or {})}


async def reconcile_once(hub: HubAPI, ledger: store.Ledger, grace: timedelta) -> store.ReconcileReport:
    running = await running_server_keys(hub)
    report = await asyncio.get_running_loop().run_in_executor(
        None, lambda: ledger.reconcile(running, datetime.now(timezone.utc), grace=grace)
    )
    for key in report.released:
        log.warning("classhub: released %s: its server is not running", key)
    for key in report.unreserved:
        log.warning("classhub: %s runs without a quota reservation", key)
    return report


async def reconcile_forever(hub: HubAPI, ledger: store.Ledger, interval: float, grace: float) -> None:
    """Run :func:`reconcile_once` now and then every ``interval`` seconds; never raises."""
    while True:
        try:
            await reconcile_once(hub, ledger, timedelta(seconds=grace))
        except Exception:  # the hub may be restarting; try again next time
            log.exception("classhub: ledger reconcile failed")
        await asyncio.sleep(interval)
