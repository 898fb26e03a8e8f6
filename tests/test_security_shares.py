"""Attacks on notebook sharing, as the person a server was shared with (docs/admins/security.md,
rule 6; docs/teachers/sharing.md).

Every request goes through the hub's proxy to the owner's real single-user server with the
viewer's own hub token, as a script or JupyterLab would. A one-path share (a single notebook)
must give access to that notebook only: nothing the owner keeps in their home about their other
files (JupyterLab's saved workspaces) and nothing the server announces about them (its event
stream, which names every file the owner opens, saves, renames or deletes) may reach the viewer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from tests.hubproc import HubSession, LocalHub, hub_with_config
from tests.test_sharing_hub import revoke, server, share, student1  # noqa: F401

pytestmark = pytest.mark.hub

WORKSPACE = {"data": {"notebook:private/exam-answers.ipynb": {
    "data": {"path": "private/exam-answers.ipynb", "factory": "Notebook"}}},
    "metadata": {"id": "default"}}


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = hub_with_config(hub_root, "shares-attacks", "c.ClasshubService.share_interval = 0.5\n")
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    return {name: HubSession(hub, name).new_token() for name in ("student1", "student2", "ta1")}


@pytest.mark.usefixtures("student1")
def test_one_path_viewer_does_not_read_the_owners_workspaces(hub, tokens) -> None:
    """JupyterLab's workspaces (kept in the owner's home) name the owner's other files."""
    owner, viewer = tokens["student1"], tokens["student2"]
    saved = server(hub, "student1", "PUT", "lab/api/workspaces/default", owner, json=WORKSPACE)
    assert saved.status_code == 204, saved.text
    made = share(hub, owner, kind="read-only", user="student2", path="week1.ipynb")
    try:
        assert server(hub, "student1", "GET", "api/contents/week1.ipynb", viewer).status_code == 200
        for url in ("lab/api/workspaces", "lab/api/workspaces/default", "lab/api/workspaces/default/",
                    "lab/api/workspaces/lab"):
            r = server(hub, "student1", "GET", url, viewer)
            assert "exam-answers" not in r.text, (url, r.status_code, r.text[:300])
            # JupyterLab still starts: an empty layout, not an error
            assert r.status_code == 200, (url, r.status_code, r.text[:300])
        assert server(hub, "student1", "GET", "lab/api/workspaces/default", viewer).json()["data"] == {}
        # the owner's workspace is untouched and still theirs
        mine = server(hub, "student1", "GET", "lab/api/workspaces/default", owner)
        assert "exam-answers" in mine.text
    finally:
        revoke(hub, owner, made["id"])


@pytest.mark.usefixtures("student1")
def test_one_path_viewer_cannot_watch_the_owners_file_activity(hub, tokens) -> None:
    """The server's event stream names every file the owner opens, saves, renames or deletes."""
    owner, viewer = tokens["student1"], tokens["student2"]
    made = share(hub, owner, kind="read-only", user="student2", path="week1.ipynb")
    try:
        # JupyterLab opens the stream on its own: it opens, and carries nothing
        got = asyncio.run(_events_of(hub, viewer, owner))
        assert got == [], got
        # nor emit events into the owner's stream
        assert server(hub, "student1", "POST", "api/events", viewer, json={
            "schema_id": "https://events.jupyter.org/jupyter_server/contents_service/v1",
            "version": "1", "data": {"action": "get", "path": "x"}}).status_code == 403
    finally:
        revoke(hub, owner, made["id"])
    # a whole-server read-only viewer may read every file anyway: the stream stays theirs
    made = share(hub, owner, kind="read-only", user="student2")
    try:
        got = asyncio.run(_first_event(hub, viewer, owner))
        assert got["path"] == "secret.txt", got
    finally:
        revoke(hub, owner, made["id"])


async def _first_event(hub: LocalHub, viewer: str, owner: str) -> dict:
    url = f"ws://127.0.0.1:{hub.port}/user/student1/api/events/subscribe"
    ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {viewer}"},
                                             connect_timeout=20))
    try:
        # the listener is added once the socket is open; ask until the owner's read shows up
        for _ in range(50):
            await asyncio.to_thread(server, hub, "student1", "GET", "api/contents/secret.txt", owner)
            try:
                raw = await asyncio.wait_for(ws.read_message(), 0.5)
            except asyncio.TimeoutError:
                continue
            assert raw is not None, "the websocket closed"
            return json.loads(raw)
        raise AssertionError("no event reached a whole-server viewer")
    finally:
        ws.close()


async def _events_of(hub: LocalHub, viewer: str, owner: str) -> list[dict]:
    """What a viewer's event stream carries while the owner reads secret.txt (a whole-server
    stream, the admin's, opened alongside, says when the event was sent)."""
    url = f"ws://127.0.0.1:{hub.port}/user/student1/api/events/subscribe"
    ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {viewer}"},
                                             connect_timeout=20))
    try:
        await _first_event(hub, owner, owner)  # the owner's own stream saw it: it was sent
        try:
            raw = await asyncio.wait_for(ws.read_message(), 2)
        except asyncio.TimeoutError:
            return []
        return [json.loads(raw)] if raw is not None else []
    finally:
        ws.close()
