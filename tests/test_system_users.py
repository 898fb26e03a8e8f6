"""--system-users: each student's server runs as their own Unix account with a private home."""

from __future__ import annotations

import json
import pwd
import re
import time

import pytest
import requests
import websocket

from tests.hubproc import HubSession, LocalHub, start_server, wait_for
from tests.system_accounts import system_users_hub

pytestmark = pytest.mark.hub

ACCOUNTS = ["jupyter-student1", "jupyter-student2"]


@pytest.fixture(scope="module")
def system_hub(hub_root):
    hub = LocalHub(data_dir=hub_root / "system", extra_args=["--system-users", "--create-system-users"])
    with system_users_hub(hub, ACCOUNTS) as started:
        yield started


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
