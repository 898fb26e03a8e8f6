"""--system-users: each student's server runs as their own Unix account with a private home."""

from __future__ import annotations

import grp
import json
import pwd
import re
import subprocess
import time

import pytest
import requests
import websocket

from tests.hubproc import HubSession, LocalHub, api, start_server, wait_for
from tests.system_accounts import system_users_hub

pytestmark = pytest.mark.hub

ACCOUNTS = ["jupyter-student1", "jupyter-student2", "jupyter-outsider"]
#: The Unix groups of the courses' data folders (docs/admins/course-data.md), made by the test's hub.
COURSE_GROUPS = ["classhub-demo101", "classhub-other101"]


@pytest.fixture(scope="module")
def system_hub(hub_root):
    hub = LocalHub(data_dir=hub_root / "system", extra_args=["--system-users", "--create-system-users"])
    existed = {g for g in COURSE_GROUPS if _group_exists(g)}
    try:
        with system_users_hub(hub, ACCOUNTS) as started:
            yield started
    finally:
        for group in COURSE_GROUPS:
            if group not in existed and _group_exists(group):
                subprocess.run(["groupdel", group], check=False)


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def terminal_run(hub: LocalHub, user: str, token: str, command: str) -> str:
    """Run ``command`` in a JupyterLab terminal of ``user``'s server, return what it printed."""
    base = f"{hub.url}/user/{user}"
    headers = {"Authorization": f"token {token}"}
    r = requests.post(f"{base}/api/terminals", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    name = r.json()["name"]
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{hub.port}/user/{user}/terminals/websocket/{name}",
        header=[f"Authorization: token {token}"], timeout=30,
    )
    # The quotes keep the terminal's echo of the command from matching the marker itself.
    ws.send(json.dumps(["stdin", f'{command}; echo CLASSHUB""-DONE-$?\r']))
    output = ""
    deadline = time.monotonic() + 30
    while not re.search(r"CLASSHUB-DONE-\d+", output) and time.monotonic() < deadline:
        msg = json.loads(ws.recv())
        if msg[0] == "stdout":
            output += msg[1]
    ws.close()
    requests.delete(f"{base}/api/terminals/{name}", headers=headers, timeout=30)
    # What the command printed: after the echoed command line, before the marker.
    return output.split("-DONE-$?", 1)[-1].split("CLASSHUB-DONE-", 1)[0]


def test_servers_run_as_their_own_accounts_with_private_homes(system_hub):
    tokens = {}
    for user in ("student1", "student2"):
        tokens[user] = HubSession(system_hub, user).new_token()
        start_server(system_hub, user, tokens[user])
    homes = system_hub.data_dir / "homes"
    home2 = homes / "student2"

    # student2 keeps a file in their home, through their own server's contents API.
    r = requests.put(
        f"{system_hub.url}/user/student2/api/contents/secret.txt",
        headers={"Authorization": f"token {tokens['student2']}"},
        json={"type": "file", "format": "text", "content": "student2's answers"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    stat = (home2 / "secret.txt").stat()
    assert pwd.getpwuid(stat.st_uid).pw_name == "jupyter-student2"
    assert (home2.stat().st_mode & 0o777) == 0o700

    # From student1's terminal: who am I, and can I read or list student2's home?
    out = terminal_run(system_hub, "student1", tokens["student1"], "id -un")
    assert "jupyter-student1" in out
    out = terminal_run(system_hub, "student1", tokens["student1"], f"cat {home2}/secret.txt")
    assert "Permission denied" in out and "answers" not in out
    out = terminal_run(system_hub, "student1", tokens["student1"], f"ls {home2}")
    assert "Permission denied" in out and "secret.txt" not in out
    out = terminal_run(system_hub, "student1", tokens["student1"], f"ls {homes}")
    assert "Permission denied" in out

    # Through the contents API of student1's own server, even via a symlink in their home.
    terminal_run(system_hub, "student1", tokens["student1"], f"ln -s {home2} peek")
    headers = {"Authorization": f"token {tokens['student1']}"}
    for path in ("peek", "peek/secret.txt", "../student2/secret.txt", "%2E%2E/student2"):
        r = requests.get(f"{system_hub.url}/user/student1/api/contents/{path}",
                         headers=headers, timeout=30)
        # jupyter-server answers 403/404, or 500 when the OS refuses the read: never the data.
        assert r.status_code in (403, 404, 500), (path, r.status_code, r.text[:200])
        assert "answers" not in r.text and "secret.txt" not in r.text

    # And student1's own files are theirs.
    wait_for(lambda: (homes / "student1").exists(), 5, "student1's home")
    assert pwd.getpwuid((homes / "student1").stat().st_uid).pw_name == "jupyter-student1"


def test_course_data_is_read_by_members_and_closed_to_other_accounts(system_hub):
    """The course's data folder with real accounts (issue 35): student1's server has the course's
    group and reads the files at ~/data/demo101 but cannot write there; an account of another
    course cannot even list the folder."""
    admin, teacher = (HubSession(system_hub, u).new_token() for u in ("admin", "teacher1"))
    student = HubSession(system_hub, "student1").new_token()
    assert api(system_hub, "POST", "courses", admin, json={"name": "other101"}).status_code == 201
    r = api(system_hub, "PUT", "courses/other101/members", admin,
            json={"add": [{"username": "outsider", "role": "student"}]})
    assert r.status_code == 200, r.text
    r = requests.post(f"{system_hub.url}/hub/api/users/outsider/tokens", json={"expires_in": 3600},
                      headers={"Authorization": f"token {admin}"}, timeout=30)
    outsider = r.json()["token"]
    r = api(system_hub, "PUT", "courses/demo101/data/files/README.txt", teacher, data=b"cats\n",
            headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 201, r.text
    # servers (re)started now: the spawner gives the course's group and links the folder
    for user, token in (("student1", student), ("outsider", outsider)):
        requests.delete(f"{system_hub.url}/hub/api/users/{user}/server", timeout=30,
                        headers={"Authorization": f"token {admin}"})
        wait_for(lambda u=user: not _running(system_hub, admin, u), 30, f"{user}'s server to stop")
        start_server(system_hub, user, token)

    out = terminal_run(system_hub, "student1", student, "id -Gn; cat ~/data/demo101/README.txt")
    assert "classhub-demo101" in out and "cats" in out
    out = terminal_run(system_hub, "student1", student, "touch ~/data/demo101/mine.txt")
    assert "Permission denied" in out
    out = terminal_run(system_hub, "student1", student, "rm -f ~/data/demo101/README.txt")
    assert "Permission denied" in out
    folder = system_hub.data_dir / "course-data" / "demo101"
    out = terminal_run(system_hub, "outsider", outsider, f"ls {folder}; cat {folder}/README.txt")
    assert out.count("Permission denied") == 2 and "cats" not in out
    assert (folder / "README.txt").read_text() == "cats\n"


def _running(hub: LocalHub, token: str, user: str) -> bool:
    model = requests.get(f"{hub.url}/hub/api/users/{user}", timeout=30,
                         headers={"Authorization": f"token {token}"}).json()
    return bool((model.get("servers") or {}).get(""))
