"""The JupyterLab panel's server side (hub_ext.singleuser.panel, hub_ext.service.panel) through a
real hub, beside the share enforcement tests: the panel acts as the person looking.

A read-only viewer's requests through the panel's endpoints of the owner's server show nothing
of the owner's account and do nothing as the owner; the viewer's one action, "copy to my
server", reads with the viewer's own rights and writes only into the viewer's server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests

from hub_ext.service.panel import copy_name
from hub_ext.singleuser.panel import relayable
from tests.hubproc import HubSession, LocalHub, api, hub_with_config, start_server

pytestmark = pytest.mark.hub

NOTEBOOK = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "markdown", "id": "m1", "metadata": {}, "source": "# week 1"}]}
RELAY = "api/classhub/panel/service"


def test_the_owner_relay_passes_only_the_panel_s_calls() -> None:
    assert relayable("GET", "usage/me") and relayable("POST", "shares") and relayable("DELETE", "shares/7")
    assert relayable("POST", "courses/demo101/templates/lab1/start") and relayable("POST", "jobs/j1/cancel")
    assert relayable("POST", "jobs") and relayable("GET", "jobs/j1/logs")  # "Submit as job…", "Logs"
    assert relayable("GET", "courses/demo101/assignments")  # the Assignments section and its Submit
    assert relayable("POST", "courses/demo101/assignments/lab1/submissions")
    assert relayable("GET", "courses/demo101/competitions")  # the Competitions section
    for method, path in (("GET", "usage"), ("DELETE", "shares"), ("PUT", "courses/demo101/quota"),
                         ("POST", "courses/demo101/members"), ("GET", "shares/../usage"),
                         ("DELETE", "shares/7/x"), ("PATCH", "shares/7"),
                         ("GET", "courses/../templates"), ("DELETE", "jobs/j1"),
                         ("GET", "jobs/../logs"), ("POST", "courses/demo101/assignments"),
                         ("PUT", "courses/demo101/assignments/lab1"),
                         ("GET", "courses/demo101/assignments/lab1/download"),
                         ("POST", "courses/demo101/competitions"),
                         ("PUT", "courses/demo101/competitions/digits/labels")):
        assert not relayable(method, path), (method, path)


def test_a_copy_never_replaces_a_file() -> None:
    assert copy_name("week1.ipynb", "student1", set()) == "week1-from-student1.ipynb"
    taken = {"week1-from-student1.ipynb", "week1-from-student1-2.ipynb"}
    assert copy_name("labs/week1.ipynb", "student1", taken) == "week1-from-student1-3.ipynb"
    assert copy_name("notes", "s", set()) == "notes-from-s"


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = hub_with_config(hub_root, "lab-server", "c.ClasshubService.share_interval = 0.5\n")
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    tokens = {name: HubSession(hub, name).new_token() for name in ("student1", "student2", "ta1", "teacher1")}
    r = api(hub, "PUT", "courses/demo101/sharing", tokens["teacher1"], json={"ta_server_access": False})
    assert r.status_code == 200, r.text
    start_server(hub, "student1", tokens["student1"])
    r = server(hub, "student1", "PUT", "api/contents/week1.ipynb", tokens["student1"],
               json={"type": "notebook", "content": NOTEBOOK})
    assert r.status_code in (200, 201), r.text
    r = api(hub, "POST", "shares", tokens["student1"], json={"kind": "read-only", "user": "ta1"})
    assert r.status_code == 201, r.text
    return tokens


def server(hub: LocalHub, owner: str, method: str, path: str, token: str, **kwargs) -> requests.Response:
    return requests.request(method, f"{hub.url}/user/{owner}/{path}", timeout=60,
                            headers={"Authorization": f"token {token}"}, **kwargs)


def shares_of(hub: LocalHub, token: str) -> list[dict]:
    return [s for s in api(hub, "GET", "shares", token).json()["shares"] if s["active"]]


def test_read_only_viewer_is_never_the_owner_through_the_panel(hub, tokens) -> None:
    ta, before = tokens["ta1"], shares_of(hub, tokens["student1"])
    state = server(hub, "student1", "GET", "api/classhub/panel/state", ta)
    assert state.status_code == 200, state.text
    body = state.json()
    assert body["viewer"] == {"name": "ta1", "owner": False, "access": "read-only"}
    assert body["owner"] == "student1"
    owners = {"usage", "shares", "shared_with_me", "templates", "culling", "me", "courses", "jobs",
              "assignments", "competitions"}
    assert not owners & set(body)
    refused = {
        "list the owner's shares": server(hub, "student1", "GET", f"{RELAY}/shares", ta),
        "read the owner's quota": server(hub, "student1", "GET", f"{RELAY}/usage/me", ta),
        "share as the owner": server(hub, "student1", "POST", f"{RELAY}/shares", ta,
                                     json={"kind": "edit", "user": "ta1"}),
        "revoke as the owner": server(hub, "student1", "DELETE", f"{RELAY}/shares/{before[0]['id']}", ta),
        "restart the owner's server": server(hub, "student1", "POST",
                                             f"{RELAY}/courses/demo101/templates/lab1/start", ta, json={}),
        "keep the owner's server": server(hub, "student1", "POST", "api/classhub/panel/keep", ta),
        "submit predictions as the owner": server(
            hub, "student1", "POST", "api/classhub/panel/predictions", ta,
            json={"course": "demo101", "competition": "digits", "path": "week1.ipynb"}),
    }
    assert {k: r.status_code for k, r in refused.items()} == {k: 403 for k in refused}
    assert all(r.json().get("message") for r in refused.values())
    assert shares_of(hub, tokens["student1"]) == before  # nothing was shared or revoked

    # someone the server is not shared with gets nothing at all
    assert server(hub, "student1", "GET", "api/classhub/panel/state", tokens["student2"]).status_code == 403

    # the owner's own panel: their account, through the same endpoints
    own = server(hub, "student1", "GET", "api/classhub/panel/state", tokens["student1"]).json()
    assert own["viewer"]["owner"] is True and "demo101" in own["usage"]["courses"]
    assert [s["target"] for s in own["shares"]] == ["ta1"]
    assert own["jobs"] == [] and own["errors"] == []
    assert server(hub, "student1", "GET", f"{RELAY}/usage", tokens["student1"]).status_code == 404


def test_copy_to_my_server_reads_as_the_viewer_and_writes_only_into_theirs(hub, tokens) -> None:
    ta = tokens["ta1"]
    r = server(hub, "student1", "POST", "api/classhub/panel/copy", ta, json={"path": "week1.ipynb"})
    assert r.status_code == 409 and "Your own server is not running" in r.json()["message"], r.text
    start_server(hub, "ta1", ta)
    bad = server(hub, "student1", "POST", "api/classhub/panel/copy", ta, json={"file": "week1.ipynb"})
    assert bad.status_code == 400 and '"path"' in bad.json()["message"]
    missing = server(hub, "student1", "POST", "api/classhub/panel/copy", ta, json={"path": "nope.ipynb"})
    assert missing.status_code == 404, missing.text
    for _ in range(2):
        r = server(hub, "student1", "POST", "api/classhub/panel/copy", ta, json={"path": "week1.ipynb"})
        assert r.status_code == 201, r.text
    assert r.json()["path"] == "week1-from-student1-2.ipynb"  # the first copy was not replaced
    copy = server(hub, "ta1", "GET", "api/contents/week1-from-student1.ipynb", ta).json()
    assert copy["writable"] and copy["content"]["cells"][0]["source"] == "# week 1"
    # the owner asking to copy their own file is told it is theirs already
    own = server(hub, "student1", "POST", "api/classhub/panel/copy", tokens["student1"], json={"path": "x"})
    assert own.status_code == 400
    # the service takes copy requests only from a server, with its own token
    forged = api(hub, "POST", "panel/copy", ta, json={"viewer_token": ta, "path": "week1.ipynb"})
    assert forged.status_code == 403, forged.text
    names = [f["name"] for f in server(hub, "student1", "GET", "api/contents", tokens["student1"]).json()
             ["content"]]
    assert "week1-from-student1.ipynb" not in names  # nothing was written into the owner's server


def test_jupyterlab_pages_ask_for_no_build(hub, tokens) -> None:
    """A student's JupyterLab page carries buildCheck/buildAvailable false: the page never asks the
    server whether to rebuild (which starts Node.js and the package manager at every page load)
    and offers no "Build" dialog (hub_ext.singleuser._no_build_check)."""
    r = server(hub, "student1", "GET", "lab", tokens["student1"])
    assert r.status_code == 200, r.text[:300]
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                      r.text, re.S)
    assert found, r.text[:500]
    config = json.loads(found.group(1))
    assert config["buildCheck"] is False and config["buildAvailable"] is False
