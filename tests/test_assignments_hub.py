"""Assignments end to end through a real ``classhub local`` hub's proxy (one hub for the module).

What a teacher and students notice: the teacher releases an assignment from a template version;
a student starts it (the files land in their home as a template's do), submits, edits and
resubmits (both kept, the last counts); a second student submits late and is marked so, then is
refused once the teacher stops taking late work; the teacher downloads every last submission
as one zip. And what must never happen: a student reading another's submission, a link in the
submitted folder carrying a file of the hub into the submission, a TA of another course seeing
anything of this one.
"""

from __future__ import annotations

import io
import os
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.archives import zip_bytes
from tests.hubproc import HubSession, LocalHub, api, tokens_with_an_outsider

pytestmark = pytest.mark.hub

COURSE = "demo101"
NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
A = f"courses/{COURSE}/assignments"


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = LocalHub(data_dir=hub_root / "assignments").start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    return tokens_with_an_outsider(hub, ("teacher1", "ta1", "student1", "student2"), "ta9", "ta")




def _put(hub: LocalHub, user: str, token: str, path: str, text: str) -> None:
    r = requests.put(f"{hub.url}/user/{user}/api/contents/{quote(path)}",
                     json={"type": "file", "format": "text", "content": text},
                     headers={"Authorization": f"token {token}"}, timeout=30)
    assert r.status_code in (200, 201), r.text


def _iso(when: datetime) -> str:
    return when.isoformat()


def test_release_start_submit_resubmit_late_and_download(hub: LocalHub, tokens: dict[str, str]):
    teacher, student, other = tokens["teacher1"], tokens["student1"], tokens["student2"]
    # the teacher publishes the files (into the folder lab1 of each home) and releases them
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/versions?home_folder=lab1", teacher,
            data=zip_bytes({"lab1.ipynb": NOTEBOOK, "README.md": b"# Lab 1\n"}),
            headers={"Content-Type": "application/zip"})
    assert r.status_code == 201, r.text
    now = datetime.now(timezone.utc)
    r = api(hub, "POST", A, teacher, json={
        "name": "lab1", "title": "Lab 1: tensors", "template": "lab1",
        "due_at": _iso(now + timedelta(hours=1)), "late_policy": "accept-late"})
    assert r.status_code == 201, r.text
    assert (r.json()["version"], r.json()["folder"]) == (1, "lab1")
    r = api(hub, "POST", A, student, json={"name": "lab9", "template": "lab1", "due_at": _iso(now)})
    assert r.status_code == 403 and "Only a teacher" in r.json()["message"]

    # the student sees it open, starts it: the files are in their home, seeded as a template's
    (listed,) = api(hub, "GET", A, student).json()
    assert (listed["name"], listed["accepting"], listed["my_submissions"]) == ("lab1", True, [])
    r = api(hub, "POST", f"{A}/lab1/start", student, timeout=240)
    assert r.status_code == 200, r.text
    home = hub.data_dir / "homes" / "student1"
    assert (home / "lab1" / "lab1.ipynb").read_bytes() == NOTEBOOK

    # submit, edit, resubmit: both kept, the last one counts
    _put(hub, "student1", student, "lab1/answer.py", "x = 1\n")
    r = api(hub, "POST", f"{A}/lab1/submissions", student)
    assert r.status_code == 201, r.text
    first = r.json()
    assert (first["files"], first["late"], first["skipped"]) == (3, False, [])
    _put(hub, "student1", student, "lab1/answer.py", "x = 2\n")
    # a link planted in the folder: its target (the hub's cookie secret) must not be submitted
    secret = hub.data_dir / "jupyterhub_cookie_secret"
    os.symlink(secret, home / "lab1" / "notes.txt")
    r = api(hub, "POST", f"{A}/lab1/submissions", student)
    assert r.status_code == 201, r.text
    second = r.json()
    assert second["skipped"] == ["notes.txt (a symbolic link)"] and second["files"] == 3
    mine = api(hub, "GET", f"{A}/lab1/submissions", student).json()
    assert [(s["id"], s["latest"]) for s in mine] == [(first["id"], False), (second["id"], True)]
    r = api(hub, "GET", f"{A}/lab1/submissions/{second['id']}/files/answer.py", student)
    assert r.status_code == 200 and r.text == "x = 2\n" and r.headers["Content-Type"].startswith("text/plain")
    assert api(hub, "GET", f"{A}/lab1/submissions/{second['id']}/files/notes.txt", student).status_code == 404

    # another student sees none of it; a TA of another course sees nothing of the course
    assert api(hub, "GET", f"{A}/lab1/submissions", other).json() == []
    theirs = f"{A}/lab1/submissions/{first['id']}"
    for path in (theirs, f"{theirs}/files/answer.py"):
        r = api(hub, "GET", path, other)
        assert r.status_code == 404 and "x = " not in r.text, r.text
    assert api(hub, "GET", f"{A}/lab1/download", other).status_code == 403
    for path in (A, f"{A}/lab1/submissions", f"{A}/lab1/download", f"{A}/lab1/submissions/{first['id']}"):
        r = api(hub, "GET", path, tokens["ta9"])
        assert r.status_code == 404 and "x = " not in r.text, (path, r.text)

    # past the due date: the second student's submission is accepted, marked late
    r = api(hub, "PUT", f"{A}/lab1", teacher, json={"opens_at": _iso(now - timedelta(days=2)),
                                                    "due_at": _iso(now - timedelta(days=1))})
    assert r.status_code == 200, r.text
    work = hub.data_dir / "homes" / "student2" / "lab1"
    work.mkdir(parents=True)
    (work / "lab1.ipynb").write_bytes(NOTEBOOK)
    r = api(hub, "POST", f"{A}/lab1/submissions", other)
    assert r.status_code == 201 and r.json()["late"] is True, r.text
    # no late work any more: refused with the reason, nothing recorded
    assert api(hub, "PUT", f"{A}/lab1", teacher, json={"late_policy": "refuse"}).status_code == 200
    r = api(hub, "POST", f"{A}/lab1/submissions", other)
    assert r.status_code == 409 and "takes no late submissions" in r.json()["message"]

    # staff: the table (the TA too) and every last submission as one zip
    table = api(hub, "GET", f"{A}/lab1/submissions", tokens["ta1"]).json()
    assert [(s["student"], s["late"], s["latest"]) for s in table] == [
        ("student1", False, False), ("student1", False, True), ("student2", True, True)]
    r = api(hub, "GET", f"{A}/lab1/download", teacher)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(r.content))
    assert sorted(archive.namelist()) == ["student1/README.md", "student1/answer.py", "student1/lab1.ipynb",
                                          "student2/lab1.ipynb"]
    assert archive.read("student1/answer.py") == b"x = 2\n"
    assert secret.read_bytes().strip() not in r.content
    every = zipfile.ZipFile(io.BytesIO(api(hub, "GET", f"{A}/lab1/download?all=1", teacher).content))
    assert every.read(f"student1/{first['id']}/answer.py") == b"x = 1\n"

    # the count a dashboard shows
    r = requests.get(f"{hub.url}/services/classhub/metrics",
                     headers={"Authorization": f"token {tokens['admin']}"}, timeout=30)
    assert 'classhub_submissions_total{course="demo101",late="false"} 2.0' in r.text
    assert 'classhub_submissions_total{course="demo101",late="true"} 1.0' in r.text

    # the course page: the student's last submission with Start and Submit; the staff's table
    page = HubSession(hub, "student1").get(f"/services/classhub/courses/{COURSE}").text
    assert 'data-assignment="lab1"' in page and "Your last submission" in page
    assert "classhub-assignment-submit" in page and "Download all" not in page
    assert "Not submitted: notes.txt (a symbolic link)" in page
    staff_page = HubSession(hub, "ta1").get(f"/services/classhub/courses/{COURSE}").text
    assert "Download all (zip)" in staff_page and "classhub-submissions" in staff_page
    assert "student2" in staff_page and f"submissions/{second['id']}/files/answer.py" in staff_page
    assert 'id="release-assignment"' not in staff_page  # a TA does not release
    assert 'id="release-assignment"' in HubSession(hub, "teacher1").get(
        f"/services/classhub/courses/{COURSE}").text

    # the JupyterLab panel (its server side): the open assignment with my submissions, and Submit
    # relayed to the service as me
    panel = f"{hub.url}/user/student1/api/classhub/panel"
    auth = {"Authorization": f"token {student}"}
    state = requests.get(f"{panel}/state", headers=auth, timeout=60).json()
    (shown,) = state["assignments"]
    assert (shown["course"], shown["name"], len(shown["my_submissions"])) == (COURSE, "lab1", 2)
    r = requests.post(f"{panel}/service/courses/{COURSE}/assignments/lab1/submissions", headers=auth,
                      json={}, timeout=60)
    assert r.status_code == 409 and "takes no late submissions" in r.json()["message"], r.text

    # the course's audit log says who released, submitted and downloaded
    log = api(hub, "GET", f"courses/{COURSE}/audit?limit=50", teacher).json()["entries"]
    said = [e["sentence"] for e in log]
    assert "teacher1 released the assignment lab1 (lab1 v1)" in said
    assert "student2 submitted lab1 (1 files, late)" in said
    assert any(s.startswith("teacher1 downloaded 2 submissions of lab1") for s in said)
