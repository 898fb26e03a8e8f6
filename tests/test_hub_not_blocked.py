"""A classhub write that holds the database does not stall the hub (issue 13).

On sqlite a write transaction holds the whole database. Something outside the hub holds it here
(as a culler cycle or the service would) while a student loads hub pages and another student
starts a server. The pages come back while the write is still held: their reads (the culler's
warning in the announcement bar, read every 2 s off the loop; the course roles of the spawn
form, on the store's threads) go through readers that never wait on a writer. A spawn's
reservation is a write: it waits in a worker thread, the hub keeps answering (the spawn page
shows the progress), and the server starts once the write ends.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from hub_ext import store
from hub_ext.store.culler_models import CullWarning
from tests.hubproc import HubSession, hub_with_config, wait_for

pytestmark = pytest.mark.hub


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    # The culler runs dry: the warning the test plants is for student1, who runs no server, and a
    # real culler cycle clears such warnings (a cycle landing mid-test removed it in CI).
    hub = hub_with_config(hub_root, "not-blocked", "c.ClasshubCuller.dry_run = True\n")
    yield hub
    hub.stop()


def test_pages_answer_and_a_spawn_waits_its_turn_while_a_write_is_held(hub):
    sessions = store.connect(f"sqlite:///{hub.data_dir / 'classhub.sqlite'}")
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        session.add(CullWarning(username="student1", server_name="", warned_at=now,
                                cull_at=now + timedelta(minutes=10), message="idle"))
    student1, student2 = HubSession(hub, "student1"), HubSession(hub, "student2")
    token2 = student2.new_token()
    started: dict[str, requests.Response] = {}

    def start() -> None:
        started["r"] = requests.post(f"{hub.url}/hub/api/users/student2/server", timeout=120,
                                     headers={"Authorization": f"token {token2}"})

    spawn = threading.Thread(target=start)
    with sessions.begin() as holder:  # BEGIN IMMEDIATE: classhub's database is held from here
        holder.add(store.AuditLog(at=now, actor="test", action="holding", details={}))
        holder.flush()
        spawn.start()
        # the banner's reader (hub_ext.hubside.Announcement) reads every 2 s, the write held
        wait_for(lambda: (home := student1.get("/hub/home")).status_code == 200
                 and "will be stopped in about" in home.text, 30, "the culler's warning on /hub/home")
        # the spawn page (one profile here, so it starts the server and shows its progress)
        pending = student1.get("/hub/spawn")
        assert pending.status_code == 200 and "Your server is starting up" in pending.text
        # the spawn is waiting for the database, and the hub still answers about it
        server = wait_for(lambda: student2.hub_api("GET", "users/student2").json()["servers"].get(""),
                          30, "the hub to list student2's spawn")
        assert server["pending"] == "spawn" and not server["ready"]
    spawn.join(timeout=120)
    assert started["r"].status_code in (201, 202), started["r"].text

    def ready():
        server = student2.hub_api("GET", "users/student2").json()["servers"].get("")
        return server if server and server["ready"] else None

    wait_for(ready, 120, "student2's server after the write ended")
