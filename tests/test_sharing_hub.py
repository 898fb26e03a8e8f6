"""Sharing through a real hub and real single-user servers (issue 7, "must show" 1-5).

Everything a viewer does goes to the owner's jupyter-server REST API and kernel websocket through
the hub's proxy, with the viewer's own hub token, as a script or JupyterLab would; the files on
disk are checked afterwards. Shares are made, listed and revoked through the classhub service.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from tests.hubproc import HubSession, LocalHub, api, hub_with_config, start_server, wait_for

pytestmark = pytest.mark.hub

NOTEBOOK = {
    "nbformat": 4, "nbformat_minor": 5, "metadata": {},
    "cells": [{"cell_type": "code", "id": "c1", "execution_count": 1, "metadata": {},
               "source": "print(6 * 7)",
               "outputs": [{"output_type": "stream", "name": "stdout", "text": "42\n"}]}],
}


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = hub_with_config(hub_root, "sharing", "c.ClasshubService.share_interval = 0.5\n")
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    return {name: HubSession(hub, name).new_token() for name in ("admin", "student1", "student2", "ta1",
                                                                 "teacher1")}


@pytest.fixture(scope="module")
def student1(hub: LocalHub, tokens: dict[str, str]) -> Path:
    """student1's running server with a notebook (with outputs) and a second file; their home."""
    start_server(hub, "student1", tokens["student1"])
    for path, body in (("week1.ipynb", {"type": "notebook", "content": NOTEBOOK}),
                       ("secret.txt", {"type": "file", "format": "text", "content": "mine\n"})):
        r = server(hub, "student1", "PUT", f"api/contents/{path}", tokens["student1"], json=body)
        assert r.status_code in (200, 201), r.text
    return hub.data_dir / "homes" / "student1"


def server(hub: LocalHub, owner: str, method: str, path: str, token: str, **kwargs) -> requests.Response:
    """A request to `owner`'s server through the proxy, with `token` (a viewer's or the owner's)."""
    return requests.request(method, f"{hub.url}/user/{owner}/{path}", timeout=30,
                            headers={"Authorization": f"token {token}"}, **kwargs)


def share(hub: LocalHub, token: str, expect: int = 201, **body) -> dict:
    r = api(hub, "POST", "shares", token, json=body)
    assert r.status_code == expect, r.text
    return r.json()


def revoke(hub: LocalHub, token: str, share_id: int) -> dict:
    r = api(hub, "DELETE", f"shares/{share_id}", token)
    assert r.status_code == 200, r.text
    return r.json()


def snapshot(home: Path) -> dict[str, bytes]:
    """The user's files (not the hidden ones that kernels and tools keep to themselves)."""
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(home).parts)}


async def _kernel_ws(hub: LocalHub, owner: str, kernel_id: str, token: str, code: str | None) -> str:
    """Connect to a kernel's channels websocket; run `code` and return its stdout."""
    url = f"ws://127.0.0.1:{hub.port}/user/{owner}/api/kernels/{kernel_id}/channels?session_id={uuid.uuid4()}"
    ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"},
                                             connect_timeout=20))
    try:
        if code is None:
            return ""
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": "", "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False},
        }))
        out = ""
        while True:
            raw = await asyncio.wait_for(ws.read_message(), 30)
            assert raw is not None, "the websocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out += msg["content"]["text"]
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out
    finally:
        ws.close()


async def _open_ws(hub: LocalHub, owner: str, kernel_id: str, token: str):
    url = f"ws://127.0.0.1:{hub.port}/user/{owner}/api/kernels/{kernel_id}/channels?session_id={uuid.uuid4()}"
    return await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"},
                                               connect_timeout=20))


async def _closed_within(ws, seconds: float) -> bool:
    """Whether the server closes `ws` within `seconds` (messages before that are skipped)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        try:
            if await asyncio.wait_for(ws.read_message(), deadline - loop.time()) is None:
                return True
        except asyncio.TimeoutError:
            return False
    return False


def kernel_ws(hub: LocalHub, owner: str, kernel_id: str, token: str, code: str | None = None) -> str:
    return asyncio.run(_kernel_ws(hub, owner, kernel_id, token, code))


def ws_refused(hub: LocalHub, owner: str, path: str, token: str) -> int:
    async def go() -> int:
        url = f"ws://127.0.0.1:{hub.port}/user/{owner}/{path}"
        try:
            ws = await websocket_connect(HTTPRequest(
                url, headers={"Authorization": f"token {token}"}, connect_timeout=20))
        except HTTPClientError as e:
            return e.code
        ws.close()
        return 101
    return asyncio.run(go())


# -- 1. read-only ---------------------------------------------------------------------------------

def test_read_only_viewer_reads_and_cannot_change_or_run(hub, tokens, student1) -> None:
    owner, viewer = tokens["student1"], tokens["student2"]
    kernel = server(hub, "student1", "POST", "api/kernels", owner, json={}).json()["id"]
    term = server(hub, "student1", "POST", "api/terminals", owner)
    assert term.status_code == 200, term.text
    before = snapshot(student1)
    assert "week1.ipynb" in before

    made = share(hub, owner, kind="read-only", user="student2")
    assert made["kind"] == "read-only" and made["active"]

    nb = server(hub, "student1", "GET", "api/contents/week1.ipynb", viewer)
    assert nb.status_code == 200, nb.text
    assert nb.json()["content"]["cells"][0]["outputs"][0]["text"] == "42\n"  # sees outputs
    assert server(hub, "student1", "GET", "files/secret.txt", viewer).text == "mine\n"
    assert server(hub, "student1", "GET", "api/contents", viewer).status_code == 200
    assert server(hub, "student1", "GET", "api/kernels", viewer).json()[0]["id"] == kernel
    assert server(hub, "student1", "GET", "api/sessions", viewer).status_code == 200

    refused = {
        "PUT notebook": server(hub, "student1", "PUT", "api/contents/week1.ipynb", viewer,
                               json={"type": "notebook", "content": {**NOTEBOOK, "cells": []}}),
        "PATCH rename": server(hub, "student1", "PATCH", "api/contents/week1.ipynb", viewer,
                               json={"path": "renamed.ipynb"}),
        "DELETE": server(hub, "student1", "DELETE", "api/contents/secret.txt", viewer),
        "upload": server(hub, "student1", "PUT", "api/contents/upload.bin", viewer,
                         json={"type": "file", "format": "base64", "content": "aGk="}),
        "new file": server(hub, "student1", "POST", "api/contents", viewer, json={"type": "file"}),
        "start kernel": server(hub, "student1", "POST", "api/kernels", viewer, json={}),
        "new session": server(hub, "student1", "POST", "api/sessions", viewer,
                              json={"path": "week1.ipynb", "type": "notebook",
                                    "kernel": {"name": "python3"}}),
        "interrupt": server(hub, "student1", "POST", f"api/kernels/{kernel}/interrupt", viewer),
        "restart": server(hub, "student1", "POST", f"api/kernels/{kernel}/restart", viewer),
        "kill kernel": server(hub, "student1", "DELETE", f"api/kernels/{kernel}", viewer),
        "open terminal": server(hub, "student1", "POST", "api/terminals", viewer),
        "lab settings": server(hub, "student1", "PUT",
                               "lab/api/settings/@jupyterlab/apputils-extension:themes", viewer,
                               json={"raw": "{}"}),
        "shutdown": server(hub, "student1", "POST", "api/shutdown", viewer),
    }
    assert {k: r.status_code for k, r in refused.items()} == {k: 403 for k in refused}
    # what JupyterLab asks every few seconds is answered, not refused (and changes nothing)
    terminals = server(hub, "student1", "GET", "api/terminals", viewer)
    assert (terminals.status_code, terminals.json()) == (200, [])
    layout = server(hub, "student1", "PUT", "lab/api/workspaces/x", viewer,
                    json={"data": {}, "metadata": {"id": "x"}})
    assert layout.status_code == 204
    assert ws_refused(hub, "student1", f"api/kernels/{kernel}/channels", viewer) == 403
    assert ws_refused(hub, "student1", f"terminals/websocket/{term.json()['name']}", viewer) == 403
    assert snapshot(student1) == before  # nothing changed on disk
    wait_for(lambda: ("student2", "share_accessed") in audit(hub), 10, "the viewer's access in the audit log")
    assert server(hub, "student1", "GET", "api/kernels", owner).json()[0]["id"] == kernel
    # the owner still does everything
    assert kernel_ws(hub, "student1", kernel, owner, "print(6 * 7)") == "42\n"
    revoke(hub, owner, made["id"])
    assert server(hub, "student1", "GET", "api/contents/week1.ipynb", viewer).status_code == 403


# -- 2. editable, then revoked ----------------------------------------------------------------------

def test_editable_share_edits_and_runs_until_revoked(hub, tokens, student1) -> None:
    """The helper is student2: the demo TA (ta1) opens every demo student's server through the
    course's TA role already (configure(ta_server_access=True)), so a share would add nothing."""
    owner, ta = tokens["student1"], tokens["student2"]
    made = share(hub, owner, kind="edit", user="student2")
    assert [s["id"] for s in api(hub, "GET", "shares/with-me", ta).json()["shares"]] == [made["id"]]
    assert made["id"] in [s["id"] for s in api(hub, "GET", "shares", owner).json()["shares"]]

    saved = server(hub, "student1", "PUT", "api/contents/from-ta.txt", ta,
                   json={"type": "file", "format": "text", "content": "hint\n"})
    assert saved.status_code == 201, saved.text
    assert (student1 / "from-ta.txt").read_text() == "hint\n"
    session = server(hub, "student1", "POST", "api/sessions", ta,
                     json={"path": "week1.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
    assert session.status_code == 201, session.text
    kernel = session.json()["kernel"]["id"]
    assert kernel_ws(hub, "student1", kernel, ta, "print(6 * 7)") == "42\n"
    # warm every cache the server has for this token, then revoke
    assert server(hub, "student1", "GET", "api/contents/week1.ipynb", ta).status_code == 200


    async def revoke_while_connected() -> dict:
        ws = await _open_ws(hub, "student1", kernel, ta)
        assert not await _closed_within(ws, 3)  # an open connection stays open while shared
        ended = await asyncio.get_running_loop().run_in_executor(None, revoke, hub, owner, made["id"])
        assert await _closed_within(ws, 15), "the open kernel websocket was not closed"
        return ended

    ended = asyncio.run(revoke_while_connected())
    assert not ended["active"] and ended["end_reason"] == "revoked"
    assert server(hub, "student1", "GET", "api/contents/week1.ipynb", ta).status_code == 403
    assert server(hub, "student1", "PUT", "api/contents/from-ta.txt", ta,
                  json={"type": "file", "format": "text", "content": "again\n"}).status_code == 403
    assert ws_refused(hub, "student1", f"api/kernels/{kernel}/channels", ta) == 403
    assert (student1 / "from-ta.txt").read_text() == "hint\n"
    assert api(hub, "GET", "shares/with-me", ta).json()["shares"] == []


def test_browser_sessions_get_the_share_kind_and_lose_it_on_revocation(hub, tokens, student1) -> None:
    """A browser logged in to the server through OAuth (a cookie): JupyterHub's OAuth token holds
    no share scopes, so the server reads the kind from the hub's shares; revocation holds at once."""
    owner = tokens["student1"]
    made = share(hub, owner, kind="edit", user="student2")
    browser = HubSession(hub, "student2")
    lab = browser.get("/user/student1/lab")
    if "/oauth2/authorize" in lab.url:  # the hub asks a non-owner to authorize the server
        fields = re.findall(r'<input type="hidden" name="(_xsrf|scopes)" value="([^"]*)"', lab.text)
        lab = browser.http.post(lab.url, data=[(k, html.unescape(v)) for k, v in fields], timeout=30)
    assert lab.status_code == 200 and lab.url.endswith("/user/student1/lab"), lab.url

    def put(text: str) -> int:
        xsrf = browser.http.cookies.get("_xsrf", path="/user/student1/") or ""
        return browser.http.put(f"{hub.url}/user/student1/api/contents/browser.txt", timeout=30,
                                json={"type": "file", "format": "text", "content": text},
                                headers={"X-XSRFToken": xsrf}).status_code

    assert put("edited in a browser\n") in (200, 201)
    revoke(hub, owner, made["id"])
    assert browser.get("/user/student1/api/contents/week1.ipynb").status_code == 403
    assert put("after revocation\n") == 403
    made = share(hub, owner, kind="read-only", user="student2")
    assert browser.get("/user/student1/api/contents/week1.ipynb").status_code == 200
    assert put("read-only\n") == 403
    revoke(hub, owner, made["id"])
    assert (student1 / "browser.txt").read_text() == "edited in a browser\n"


# -- 4. attempts that must fail --------------------------------------------------------------------

def test_a_student_cannot_share_another_students_server(hub, tokens, student1) -> None:
    r = api(hub, "POST", "shares", tokens["student2"], json={"owner": "student1", "user": "student2",
                                                               "kind": "edit"})
    assert r.status_code == 403 and "student1" in r.json()["message"]
    assert server(hub, "student1", "GET", "api/contents", tokens["student2"]).status_code == 403
    r = api(hub, "POST", "shares", tokens["student1"], json={"user": "nobody-here"})
    assert r.status_code == 400 and "hub refused" in r.json()["message"]
    assert api(hub, "GET", "shares", tokens["student1"]).json()["shares"] == []


@pytest.mark.parametrize("path", ["../student2/x.ipynb", "%2e%2e/x", "a/%2E%2E/%2e%2e/x", "~/x"])
def test_a_path_outside_the_server_is_refused(hub, tokens, path) -> None:
    r = api(hub, "POST", "shares", tokens["student1"], json={"user": "student2", "path": path})
    assert r.status_code == 400 and "path" in r.json()["message"]


def test_one_notebook_share(hub, tokens, student1) -> None:
    owner, ta = tokens["student1"], tokens["student2"]
    outside = student1.parent / "outside.txt"
    outside.write_text("not yours\n")
    link = student1 / "escape.txt"
    if not link.is_symlink():
        link.symlink_to(outside)
    made = share(hub, owner, kind="edit", user="student2", path="week1.ipynb")
    assert server(hub, "student1", "GET", "api/contents/week1.ipynb", ta).status_code == 200
    # save it as JupyterLab does (the file, then a checkpoint)
    assert server(hub, "student1", "PUT", "api/contents/week1.ipynb", ta,
                  json={"type": "notebook", "content": NOTEBOOK}).status_code == 200
    assert server(hub, "student1", "POST", "api/contents/week1.ipynb/checkpoints", ta).status_code == 201
    assert server(hub, "student1", "PATCH", "api/contents/week1.ipynb", ta,
                  json={"path": "moved.ipynb"}).status_code == 403
    for other in ("api/contents/secret.txt", "files/secret.txt", "api/contents/sub",
                  "api/contents/sub%2F..%2Fsecret.txt", "api/contents/.%2Fsecret.txt"):
        assert server(hub, "student1", "GET", other, ta).status_code in (403, 404), other
    # the top folder (what JupyterLab's file browser lists) shows the shared file only
    listing = server(hub, "student1", "GET", "api/contents", ta)
    assert listing.status_code == 200, listing.text
    assert [e["path"] for e in listing.json()["content"]] == ["week1.ipynb"]
    assert server(hub, "student1", "POST", "api/terminals", ta).status_code == 403
    revoke(hub, owner, made["id"])
    # a share of a symlink that leaves the server's root opens nothing
    made = share(hub, owner, kind="read-only", user="student2", path="escape.txt")
    assert server(hub, "student1", "GET", "api/contents/escape.txt", ta).status_code == 403
    assert server(hub, "student1", "GET", "files/escape.txt", ta).status_code == 403
    revoke(hub, owner, made["id"])


def test_link_expires_and_is_revocable(hub, tokens, student1) -> None:
    owner = tokens["student1"]
    made = share(hub, owner, kind="read-only", link=True, expires_in=5)
    code_url = made["open_url"]
    assert "code=" in code_url
    viewer = {"Authorization": f"token {tokens['student2']}"}
    r = requests.get(f"{hub.url}{code_url}", headers=viewer, allow_redirects=False, timeout=30)
    assert r.status_code == 302 and r.headers["Location"] == "/user/student1/"
    assert server(hub, "student1", "GET", "api/contents/week1.ipynb", tokens["student2"]).status_code == 200
    bad = requests.get(f"{hub.url}{made['open_url'].split('?')[0]}?code=wrong", headers=viewer,
                       allow_redirects=False, timeout=30)
    assert bad.status_code == 403
    wait_for(lambda: server(hub, "student1", "GET", "api/contents", tokens["student2"]).status_code == 403,
             20, "the link's access to end when it expires", interval=0.5)
    again = requests.get(f"{hub.url}{code_url}", headers=viewer, allow_redirects=False, timeout=30)
    assert again.status_code == 410
    # revoked before expiry: refused at once
    made = share(hub, owner, kind="read-only", link=True, minutes=60)
    ok = requests.get(f"{hub.url}{made['open_url']}", headers=viewer, allow_redirects=False, timeout=30)
    assert ok.status_code == 302
    revoke(hub, owner, made["id"])
    assert server(hub, "student1", "GET", "api/contents", tokens["student2"]).status_code == 403
    assert requests.get(f"{hub.url}{made['open_url']}", headers=viewer, allow_redirects=False,
                        timeout=30).status_code == 410
    log = audit(hub)
    assert ("student1", "share_revoked") in log and ("classhub", "share_expired") in log


# -- 3. broadcast to 60 ----------------------------------------------------------------------------

def test_broadcast_to_sixty_expires(hub, tokens) -> None:
    admin = {"Authorization": f"token {tokens['admin']}"}
    members = [f"lecture-{i:02d}" for i in range(60)]
    r = requests.post(f"{hub.url}/hub/api/users", headers=admin, json={"usernames": members}, timeout=60)
    assert r.status_code == 201, r.text
    r = requests.post(f"{hub.url}/hub/api/groups/lecture60", headers=admin, timeout=30)
    assert r.status_code == 201, r.text
    r = requests.post(f"{hub.url}/hub/api/groups/lecture60/users", headers=admin,
                      json={"users": [*members, "teacher1"]}, timeout=30)
    assert r.status_code == 200, r.text
    teacher = tokens["teacher1"]
    start_server(hub, "teacher1", teacher)
    assert server(hub, "teacher1", "PUT", "api/contents/lecture.ipynb", teacher,
                  json={"type": "notebook", "content": NOTEBOOK}).status_code == 201

    def reads(token: str) -> int:
        return server(hub, "teacher1", "GET", "api/contents/lecture.ipynb", token).status_code

    def writes(token: str) -> int:
        return server(hub, "teacher1", "PUT", "api/contents/lecture.ipynb", token,
                      json={"type": "notebook", "content": NOTEBOOK}).status_code

    def all_read(tokens_: list[str]) -> set[int]:
        with ThreadPoolExecutor(8) as pool:
            return set(pool.map(reads, tokens_))

    made = share(hub, teacher, kind="read-only", group="lecture60", minutes=90)

    def member_token(name: str) -> str:
        """What a member's browser holds after logging in to the teacher's server: a token with
        the server's access scope and the identify scopes (demo members cannot log in here)."""
        scopes = ["access:servers!server=teacher1/", f"read:users:groups!user={name}",
                  f"read:users:name!user={name}"]
        r = requests.post(f"{hub.url}/hub/api/users/{name}/tokens", headers=admin, timeout=30,
                          json={"expires_in": 3600, "scopes": scopes})
        assert r.status_code == 201, r.text
        return r.json()["token"]

    with ThreadPoolExecutor(8) as pool:
        member_tokens = list(pool.map(member_token, members))
    assert all_read(member_tokens) == {200}
    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(writes, member_tokens[:5])) == {403}
    revoke(hub, teacher, made["id"])  # revoked at once
    assert all_read(member_tokens) == {403}

    # A short broadcast: every member's access was shown above; here three members read while it
    # lasts (a few requests, well inside its 15 s even on a loaded machine), then it ends by itself.
    made = share(hub, teacher, kind="read-only", group="lecture60", expires_in=15)
    assert all_read(member_tokens[:3]) == {200}
    wait_for(lambda: not api(hub, "GET", f"shares/{made['id']}", teacher).json()["active"], 40,
             "the broadcast to expire", interval=0.5)  # 15 s of asking: twice a second will do
    wait_for(lambda: reads(member_tokens[0]) == 403, 10, "the hub share to be revoked")
    assert all_read(member_tokens) == {403}
    assert api(hub, "GET", f"shares/{made['id']}", teacher).json()["end_reason"] == "expired"


# -- 5. auto-start ---------------------------------------------------------------------------------

def test_auto_start_link_starts_the_server_only_when_allowed(hub, tokens) -> None:
    owner = tokens["student2"]  # student2's server has never run
    ta = {"Authorization": f"token {tokens['student1']}"}
    manual = share(hub, owner, kind="read-only", user="student1")
    r = requests.get(f"{hub.url}/services/classhub/shares/{manual['id']}/open", headers=ta,
                     allow_redirects=False, timeout=30)
    assert r.status_code == 409 and "must start" in r.json()["message"]
    browser = HubSession(hub, "student1")  # a browser gets a page saying so
    html_page = {"Accept": "text/html,application/xhtml+xml"}
    page = browser.get(f"/services/classhub/shares/{manual['id']}/open", headers=html_page)
    assert page.status_code == 409 and "must start it" in page.text
    assert "text/html" in page.headers["Content-Type"]
    page = browser.get("/services/classhub/shares", headers=html_page)  # the sharing page
    assert page.status_code == 200 and "Share my server" in page.text
    assert not requests.get(f"{hub.url}/hub/api/users/student2", headers={"Authorization": f"token {owner}"},
                            timeout=10).json()["servers"]
    auto = share(hub, owner, kind="read-only", link=True, minutes=30, auto_start=True)
    r = requests.get(f"{hub.url}{auto['open_url']}", headers=ta, allow_redirects=False, timeout=120)
    assert r.status_code == 302, r.text
    assert r.headers["Location"] == "/user/student2/"
    assert server(hub, "student2", "GET", "api/contents", tokens["student1"]).status_code == 200
    log = audit(hub)
    assert {("student2", "share_created"), ("student1", "share_link_accepted"),
            ("student1", "share_opened"), ("student1", "share_auto_started")} <= set(log)


def audit(hub: LocalHub) -> list[tuple[str, str]]:
    from hub_ext import store
    from hub_ext.store.models import AuditLog

    sessions = store.connect(f"sqlite:///{hub.data_dir / 'classhub.sqlite'}")
    with sessions() as session:
        return [(e.actor, e.action) for e in session.query(AuditLog).order_by(AuditLog.id)]



# -- course setting (last: it changes the course's TA access) ------------------------------------

def test_course_can_require_shares_for_tas(hub, tokens, student1) -> None:
    """TAs open students' servers through the course's TA role unless the course turns that off
    (at once, without a hub restart); then the TA needs the student's share."""
    assert api(hub, "GET", "courses/demo101/sharing", tokens["ta1"]).json()["ta_server_access"] is None
    r = api(hub, "PUT", "courses/demo101/sharing", tokens["student2"], json={"ta_server_access": False})
    assert r.status_code == 403
    r = api(hub, "PUT", "courses/demo101/sharing", tokens["teacher1"], json={"ta_server_access": "no"})
    assert r.status_code == 400 and "ta_server_access" in r.json()["message"]
    r = api(hub, "PUT", "courses/demo101/sharing", tokens["teacher1"], json={"ta_server_access": False})
    assert r.status_code == 200 and r.json()["ta_server_access"] is False
    ta = tokens["ta1"]
    assert server(hub, "student1", "GET", "api/contents/week1.ipynb", ta).status_code == 403
    made = share(hub, tokens["student1"], kind="edit", user="ta1")
    saved = server(hub, "student1", "PUT", "api/contents/ta-help.txt", ta,  # refused a moment ago
                   json={"type": "file", "format": "text", "content": "try this\n"})
    assert saved.status_code == 201, saved.text
    revoke(hub, tokens["student1"], made["id"])
    assert server(hub, "student1", "GET", "api/contents/ta-help.txt", ta).status_code == 403
