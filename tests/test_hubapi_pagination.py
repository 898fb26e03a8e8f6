"""Hub lists read past their first page (issue 13): a hub that pages every 2 items.

The hub caps a list page at ``api_page_max_limit``; a client that does not follow
``_pagination.next`` sees only the first page. Here the cap is 2, with 5 users, 4 of them running
servers, and 5 course groups: the service's ledger reconcile keeps every reservation, the lists
the service and the culler read hold every user and group, and the hub admins past the first page
are known (they are never enrolled by a teacher). The servers are stand-ins (tests/hubproc.py,
``STANDIN_SERVERS``): what is checked is that the hub runs them, not what they serve.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from hub_ext import store
from hub_ext.hubapi import HubAPI
from hub_ext.service.reconcile import reconcile_once, running_server_keys
from tests.hubproc import STANDIN_SERVERS, HubSession, api, hub_with_config, start_servers

pytestmark = pytest.mark.hub

USERS = ["p1", "p2", "p3", "p4", "p5"]
RUNNING = USERS[:4]
COURSES = ["c1", "c2", "c3", "c4", "c5"]
EXTRA_CONFIG = f"""
c.JupyterHub.api_page_max_limit = 2
c.DemoAuthenticator.accounts = ["admin", *{USERS!r}]
c.DemoAuthenticator.admin_users = {{"admin", "p5"}}
"""


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = hub_with_config(hub_root, "paging", EXTRA_CONFIG + STANDIN_SERVERS)
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def admin_token(hub) -> str:
    token = HubSession(hub, "admin").new_token()
    for course in COURSES:
        assert api(hub, "POST", "courses", token, json={"name": course}).status_code == 201
    start_servers(hub, {user: HubSession(hub, user).new_token() for user in RUNNING})
    return token


def test_every_page_is_read(hub, admin_token):
    client = HubAPI(f"{hub.url}/hub/api", admin_token)

    async def read():
        return (await client.groups(), await client.users(), await running_server_keys(client),
                await client.admin_names())

    groups, users, running, admins = asyncio.run(read())
    assert set(COURSES) <= {g["name"] for g in groups}
    assert set(USERS) | {"admin"} <= {u["name"] for u in users}
    assert running == {f"server:{u}/" for u in RUNNING}
    assert admins == {"admin", "p5"}


def test_the_culler_sees_every_user_with_a_server(hub, admin_token):
    from culler.app import ClasshubCuller

    culler = ClasshubCuller(hub_api_url=f"{hub.url}/hub/api", api_token=admin_token, page_size=2)
    culler.api = HubAPI(culler.hub_api_url, culler.api_token)
    users = asyncio.run(culler.users())
    assert {u["name"] for u in users} == set(RUNNING)


def test_reconcile_keeps_every_running_servers_reservation(hub, admin_token):
    ledger = store.Ledger(store.connect(f"sqlite:///{hub.data_dir / 'classhub.sqlite'}"))
    client = HubAPI(f"{hub.url}/hub/api", admin_token)
    report = asyncio.run(reconcile_once(client, ledger, timedelta(0)))
    assert not report.released
    assert not report.unreserved  # every running server holds its reservation


def test_a_teacher_cannot_enrol_an_admin_listed_past_the_first_page(hub, admin_token):
    r = api(hub, "PUT", "courses/c1/members", admin_token, json={"add": [{"username": "p1",
                                                                           "role": "teacher"}]})
    assert r.status_code == 200, r.text
    teacher = HubSession(hub, "p1").new_token()
    r = api(hub, "PUT", "courses/c1/members", teacher, json={"add": ["p5"]})
    assert r.status_code == 403 and "hub admin" in r.json()["message"]
