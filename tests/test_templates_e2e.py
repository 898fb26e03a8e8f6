"""Templates end to end on a real ``classhub local`` hub (must show 1, local mode), and who may.

What a teacher and a student notice: the teacher publishes the files of a folder of their own
JupyterLab (non-ASCII names included), a student starts from the template in one call and sees
the files in their JupyterLab, a re-seed after v2 keeps the student's edit with the teacher's copy
beside it and adds new files; a student cannot publish, a teacher of another course sees nothing,
a malicious archive is refused with a sentence and nothing is stored.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.archives import zip_bytes
from tests.hubproc import HubSession, LocalHub, api, start_server, tokens_with_an_outsider, wait_for

pytestmark = pytest.mark.hub

COURSE = "demo101"
CAFE = "café ü.txt"
README_V1 = "# Lab 1\nRun every cell.\n"
README_V2 = "# Lab 1 (fixed)\nRun every cell, then the last one again.\n"
STUDENT_README = "# Lab 1\nMy notes: cell 3 needs more epochs.\n"


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = LocalHub(data_dir=hub_root / "templates-e2e").start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    return tokens_with_an_outsider(hub, ("teacher1", "student1"), "teacher2", "teacher")


def contents(hub: LocalHub, user: str, token: str, method: str, path: str, **kwargs) -> requests.Response:
    url = f"{hub.url}/user/{user}/api/contents/{quote(path)}"
    return requests.request(method, url, headers={"Authorization": f"token {token}"}, timeout=30, **kwargs)


def put_text(hub: LocalHub, user: str, token: str, path: str, text: str) -> None:
    r = contents(hub, user, token, "PUT", path, json={"type": "file", "format": "text", "content": text})
    assert r.status_code in (200, 201), r.text


def read_text(hub: LocalHub, user: str, token: str, path: str) -> str:
    r = contents(hub, user, token, "GET", path, params={"content": "1", "type": "file", "format": "text"})
    assert r.status_code == 200, (path, r.text)
    return r.json()["content"]


def raw(hub: LocalHub, user: str, token: str, path: str) -> bytes:
    r = contents(hub, user, token, "GET", path, params={"content": "1", "type": "file", "format": "base64"})
    assert r.status_code == 200, (path, r.text)
    return base64.b64decode(r.json()["content"])


def names(hub: LocalHub, user: str, token: str, path: str = "") -> set[str]:
    r = contents(hub, user, token, "GET", path, params={"content": "1"})
    assert r.status_code == 200, r.text
    return {item["name"] for item in r.json()["content"]}


def marker(hub: LocalHub, user: str) -> dict:
    return json.loads((hub.data_dir / "homes" / user / ".classhub" / "template.json").read_text())


def test_publish_start_reseed_end_to_end(hub: LocalHub, tokens: dict[str, str]):
    teacher, student = tokens["teacher1"], tokens["student1"]
    start_server(hub, "teacher1", teacher)
    # the teacher prepares a folder in their own JupyterLab
    for folder in ("lab1", "lab1/data"):
        r = contents(hub, "teacher1", teacher, "PUT", folder, json={"type": "directory"})
        assert r.status_code == 201, r.text
    put_text(hub, "teacher1", teacher, "lab1/README.md", README_V1)
    put_text(hub, "teacher1", teacher, f"lab1/{CAFE}", "crème brûlée\n")
    put_text(hub, "teacher1", teacher, "lab1/data/values.csv", "x,y\n1,2\n")
    notebook = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Étude 1"}], "metadata": {},
                "nbformat": 4, "nbformat_minor": 5}
    r = contents(hub, "teacher1", teacher, "PUT", "lab1/étude.ipynb",
                 json={"type": "notebook", "content": notebook})
    assert r.status_code == 201, r.text

    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/versions", teacher,
            json={"source": {"server_path": "lab1"}, "profile": "cpu", "description": "First lab"})
    assert r.status_code == 201, r.text
    v1 = r.json()
    assert (v1["version"], v1["files"], v1["profile"]) == (1, 4, "cpu")  # 4 files; the folder is none

    # the student sees it and starts from it in one call
    listed = api(hub, "GET", f"courses/{COURSE}/templates", student).json()
    assert [(t["name"], t["latest"]["version"]) for t in listed] == [("lab1", 1)]
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/start", student)
    assert r.status_code == 200, r.text
    assert r.json()["server"]["ready"] and r.json()["seeded"]["summary"] == {"added": 5}
    assert {"README.md", CAFE, "data"} <= names(hub, "student1", student)
    assert read_text(hub, "student1", student, CAFE) == "crème brûlée\n"
    assert read_text(hub, "student1", student, "data/values.csv") == "x,y\n1,2\n"
    assert raw(hub, "student1", student, "étude.ipynb") == raw(hub, "teacher1", teacher, "lab1/étude.ipynb")
    seeded = marker(hub, "student1")
    assert (seeded["template"], seeded["version"]) == (f"{COURSE}/lab1", "1")

    # the student works; the teacher fixes the README and adds a file, publishes v2
    put_text(hub, "student1", student, "README.md", STUDENT_README)
    put_text(hub, "teacher1", teacher, "lab1/README.md", README_V2)
    put_text(hub, "teacher1", teacher, "lab1/lab2.py", "print('part 2')\n")
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/versions", teacher,
            json={"source": {"server_path": "lab1"}, "profile": "cpu"})
    assert r.status_code == 201 and r.json()["version"] == 2, r.text

    # re-seed: the edit is kept, the teacher's copy beside it, the new file added
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/start", student)
    assert r.status_code == 200, r.text
    summary = r.json()["seeded"]["summary"]
    assert summary.get("student_modified") == 1 and summary.get("added") == 1, summary
    assert read_text(hub, "student1", student, "README.md") == STUDENT_README
    assert read_text(hub, "student1", student, "README.template-v2.md") == README_V2
    assert read_text(hub, "student1", student, "lab2.py") == "print('part 2')\n"
    assert read_text(hub, "student1", student, CAFE) == "crème brûlée\n"
    assert marker(hub, "student1")["version"] == "2"
    # the publishes are in the audit log, v1 is unchanged on disk
    versions = api(hub, "GET", f"courses/{COURSE}/templates/lab1", student).json()["versions"]
    assert [v["version"] for v in versions] == [1, 2] and versions[0]["files"] == 4


def test_a_student_cannot_publish_or_change_settings(hub: LocalHub, tokens: dict[str, str]):
    student = tokens["student1"]
    r = api(hub, "POST", f"courses/{COURSE}/templates/mine/versions", student,
            json={"source": {"server_path": ""}})
    assert r.status_code == 403 and "teacher" in r.json()["message"]
    r = api(hub, "PUT", f"courses/{COURSE}/template-settings", student, json={"reseed": "on_start"})
    assert r.status_code == 403
    assert api(hub, "GET", f"courses/{COURSE}/templates/mine", student).status_code == 404


def test_a_teacher_of_another_course_sees_and_publishes_nothing(hub: LocalHub, tokens: dict[str, str]):
    other = tokens["teacher2"]
    for method, path, body in (("GET", "templates", None), ("GET", "templates/lab1", None),
                               ("POST", "templates/lab1/versions", {"source": {"server_path": ""}}),
                               ("POST", "templates/lab1/start", None)):
        r = api(hub, method, f"courses/{COURSE}/{path}", other, json=body)
        assert r.status_code == 404, (path, r.text)
        assert "among yours" in r.json()["message"]
    # nor may a student name another course's template (or a path) in their spawn options
    student = {"Authorization": f"token {tokens['student1']}"}
    requests.delete(f"{hub.url}/hub/api/users/student1/server", headers=student, timeout=30)
    wait_for(lambda: not requests.get(f"{hub.url}/hub/api/users/student1", headers=student, timeout=10)
             .json()["servers"], 30, "student1's server to stop")
    r = requests.post(f"{hub.url}/hub/api/users/student1/server", timeout=30,
                      headers={"Authorization": f"token {tokens['student1']}"},
                      json={"template": {"course": "other101", "name": "lab1"}})
    assert r.status_code == 404 and "among yours" in r.text, r.text
    r = requests.post(f"{hub.url}/hub/api/users/student1/server", timeout=30,
                      headers={"Authorization": f"token {tokens['student1']}"},
                      json={"template": {"course": COURSE, "name": "../../etc"}})
    assert r.status_code == 400 and "template name" in r.text


def restart(hub: LocalHub, user: str, token: str) -> None:
    """Stop the user's server and start it again without options (as the hub's home page does)."""
    headers = {"Authorization": f"token {token}"}
    requests.delete(f"{hub.url}/hub/api/users/{user}/server", headers=headers, timeout=30)
    wait_for(lambda: not requests.get(f"{hub.url}/hub/api/users/{user}", headers=headers, timeout=10)
             .json()["servers"], 30, f"{user}'s server to stop")
    start_server(hub, user, token)




def test_archives_bad_ones_refused_and_nothing_stored(hub: LocalHub, tokens: dict[str, str]):
    teacher = tokens["teacher1"]
    path = f"courses/{COURSE}/templates/uploaded/versions"
    headers = {"Content-Type": "application/zip"}
    evil = zip_bytes({"ok.txt": b"x", "../evil.txt": b"owned"})
    r = api(hub, "POST", path, teacher, data=evil, headers=headers)
    assert r.status_code == 400, r.text
    assert "Not published" in r.json()["message"] and "'..'" in r.json()["message"]
    r = api(hub, "POST", path, teacher, data=b"not an archive", headers=headers)
    assert r.status_code == 400 and "archive" in r.json()["message"]
    assert api(hub, "GET", f"courses/{COURSE}/templates/uploaded", teacher).status_code == 404
    root = hub.data_dir / "templates"
    assert not any((root / ".staging").iterdir())
    assert not (hub.data_dir.parent / "evil.txt").exists()

    # a good tar archive with metadata in the query becomes v1
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo("notes/intro.md")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"hello\n"))
    r = api(hub, "POST", f"{path}?description=From%20a%20tarball&profile=cpu", teacher,
            data=out.getvalue(), headers={"Content-Type": "application/gzip"})
    assert r.status_code == 201, r.text
    published = r.json()
    assert (published["version"], published["source"], published["description"]) == (
        1, "archive", "From a tarball")
    assert published["files"] == 1  # notes/intro.md; the folder notes is not a file

    # a zip of a subfolder with 2 files is announced and listed as 2 files (folders are none)
    zipped = f"courses/{COURSE}/templates/zipped"
    r = api(hub, "POST", f"{zipped}/versions", teacher,
            data=zip_bytes({"sub/a.txt": b"a\n", "sub/b.txt": b"bb\n"}), headers=headers)
    assert r.status_code == 201, r.text
    assert (r.json()["files"], r.json()["bytes"]) == (2, 5)
    (listed,) = api(hub, "GET", zipped, teacher).json()["versions"]
    assert listed["files"] == 2


def test_template_settings_and_the_page(hub: LocalHub, tokens: dict[str, str]):
    teacher, student = tokens["teacher1"], tokens["student1"]
    assert api(hub, "GET", f"courses/{COURSE}/template-settings", student).json()["reseed"] == "manual"
    r = api(hub, "PUT", f"courses/{COURSE}/template-settings", teacher, json={"reseed": "sometimes"})
    assert r.status_code == 400 and "on_start" in r.json()["message"]
    r = api(hub, "PUT", f"courses/{COURSE}/template-settings", teacher, json={"reseed": "on_start"})
    assert r.status_code == 200 and r.json()["reseed"] == "on_start"
    # on_start: the next plain start (no template option) re-seeds the newest version
    put_text(hub, "teacher1", teacher, "lab1/lab3.py", "print('part 3')\n")
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/versions", teacher,
            json={"source": {"server_path": "lab1"}})
    assert r.status_code == 201 and r.json()["version"] == 3, r.text
    restart(hub, "student1", student)
    assert read_text(hub, "student1", student, "lab3.py") == "print('part 3')\n"
    assert read_text(hub, "student1", student, "README.md") == STUDENT_README
    assert marker(hub, "student1")["version"] == "3"
    page = requests.get(f"{hub.url}/services/classhub/templates", timeout=30,
                        headers={"Authorization": f"token {student}"})
    assert page.status_code == 200 and ">Start</a>" in page.text and "lab1" in page.text


def test_a_teacher_publishes_from_the_browser_with_their_own_login(hub: LocalHub, tokens: dict[str, str]):
    """No API token: the browser's OAuth login to classhub may read the teacher's own server
    (the service's oauth_client_allowed_scopes include access:servers!user), nobody else's."""
    teacher = tokens["teacher1"]
    model = requests.get(f"{hub.url}/hub/api/users/teacher1", headers={"Authorization": f"token {teacher}"},
                         timeout=10).json()
    if not (model["servers"].get("") or {}).get("ready"):
        start_server(hub, "teacher1", teacher)
    assert contents(hub, "teacher1", teacher, "PUT", "browser", json={"type": "directory"}).status_code in (
        201, 200)
    put_text(hub, "teacher1", teacher, "browser/hello.py", "print('hi')\n")
    browser = HubSession(hub, "teacher1")
    page = browser.get("/services/classhub/templates", headers={"Accept": "text/html"})  # OAuth dance
    assert page.status_code == 200, page.text
    xsrf = json.loads(page.text.split('"X-XSRFToken": ', 1)[1].split(",", 1)[0])
    r = browser.http.post(f"{hub.url}/services/classhub/api/courses/{COURSE}/templates/browser/versions",
                          json={"source": {"server_path": "browser"}}, headers={"X-XSRFToken": xsrf},
                          timeout=60)
    assert r.status_code == 201, r.text
    assert r.json()["files"] == 1 and r.json()["created_by"] == "teacher1"
