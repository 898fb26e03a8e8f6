"""An assignment not open yet is not readable, nor startable, by its students: attacked through
a real hub's proxy.

An assignment does not exist for a student before its ``opens_at``
(docs/teachers/assignments.md). Its files are a template version, and the templates API, the
Templates and home pages, a start from the template through classhub, and a start through the
hub's own API with the ``template`` option all handed that version out: a scheduled exam could be
read, and its files seeded into the student's home, days before it opened. Each test sends what a
student would send (the REST API with their token, the pages with their browser login, the hub's
own API) and asserts what they would notice. The rules are docs/admins/security.md, "Security
model".
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from tests.archives import zip_bytes
from tests.hubproc import HubSession, LocalHub, api, tokens_with_an_outsider

pytestmark = pytest.mark.hub

COURSE = "demo101"
T = f"courses/{COURSE}/templates"
SECRET = "exam-questions-SECRET.md"
NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = LocalHub(data_dir=hub_root / "review").start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    return tokens_with_an_outsider(hub, ("teacher1", "ta1", "student1", "student2"), "s_out", "student")


def _iso(when: datetime) -> str:
    return when.isoformat()




@pytest.fixture(scope="module")
def scheduled_exam(hub: LocalHub, tokens: dict[str, str]) -> str:
    """The teacher publishes the exam's files and releases them as an assignment that opens in two
    days (the documented way: publish a template, then release it)."""
    teacher = tokens["teacher1"]
    r = api(hub, "POST", f"{T}/exam/versions?home_folder=exam", teacher,
            data=zip_bytes({"exam.ipynb": NOTEBOOK, SECRET: b"Q1: the question nobody may see yet\n"}),
            headers={"Content-Type": "application/zip"})
    assert r.status_code == 201, r.text
    now = datetime.now(timezone.utc)
    r = api(hub, "POST", f"courses/{COURSE}/assignments", teacher, json={
        "name": "exam", "title": "Final exam", "template": "exam",
        "opens_at": _iso(now + timedelta(days=2)), "due_at": _iso(now + timedelta(days=2, hours=3))})
    assert r.status_code == 201, r.text
    return "exam"


def test_a_student_cannot_read_or_start_an_assignment_before_it_opens(hub, tokens, scheduled_exam):
    student = tokens["student1"]
    # the assignment itself is hidden (as before)
    assert api(hub, "GET", f"courses/{COURSE}/assignments/exam", student).status_code == 404
    # ... and so are its files, on every endpoint that reads a template
    listed = api(hub, "GET", T, student)
    assert listed.status_code == 200, listed.text
    assert "exam" not in [t["name"] for t in listed.json()], listed.text
    assert api(hub, "GET", f"{T}/exam", student).status_code == 404
    assert api(hub, "GET", f"{T}/exam/versions/1", student).status_code == 404
    r = api(hub, "POST", f"{T}/exam/start", student, json={"version": 1}, timeout=240)
    assert r.status_code == 404, r.text
    r = api(hub, "POST", f"{T}/exam/start", student, json={}, timeout=240)
    assert r.status_code == 404, r.text
    assert not (hub.data_dir / "homes" / "student1" / "exam").exists()
    # a student of another course is told the course is none of theirs, as before
    assert api(hub, "GET", f"{T}/exam", tokens["s_out"]).status_code == 404


def test_the_pages_do_not_show_an_assignment_before_it_opens(hub, tokens, scheduled_exam):
    browser = HubSession(hub, "student2")
    for page in ("/services/classhub/templates", "/services/classhub/"):
        r = browser.get(page, headers={"Accept": "text/html"})
        assert r.status_code == 200, (page, r.status_code)
        assert SECRET not in r.text and "/exam/start" not in r.text, page
    r = browser.get(f"/services/classhub/templates/{COURSE}/exam/start", headers={"Accept": "text/html"})
    assert r.status_code == 404 and SECRET not in r.text


def test_the_hubs_own_api_does_not_seed_an_assignment_before_it_opens(hub, tokens, scheduled_exam):
    """The spawner's ``template`` option, sent to the hub directly (no classhub in the way)."""
    r = requests.post(f"{hub.url}/hub/api/users/student2/server",
                      json={"template": {"course": COURSE, "name": "exam"}},
                      headers={"Authorization": f"token {tokens['student2']}"}, timeout=240)
    try:
        assert r.status_code == 404, r.text
        assert not (hub.data_dir / "homes" / "student2" / "exam").exists()
    finally:
        requests.delete(f"{hub.url}/hub/api/users/student2/server",
                        headers={"Authorization": f"token {tokens['admin']}"}, timeout=120)


def test_staff_see_it_before_and_students_once_it_opens(hub, tokens, scheduled_exam):
    for staff in ("teacher1", "ta1"):
        listed = api(hub, "GET", T, tokens[staff]).json()
        assert "exam" in [t["name"] for t in listed], (staff, listed)
        assert api(hub, "GET", f"{T}/exam/versions/1", tokens[staff]).status_code == 200
    # the teacher opens it now: the students see the assignment and its files alike
    now = datetime.now(timezone.utc)
    r = api(hub, "PUT", f"courses/{COURSE}/assignments/exam", tokens["teacher1"],
            json={"opens_at": _iso(now - timedelta(minutes=1))})
    assert r.status_code == 200, r.text
    student = tokens["student1"]
    assert api(hub, "GET", f"courses/{COURSE}/assignments/exam", student).status_code == 200
    assert api(hub, "GET", f"{T}/exam/versions/1", student).status_code == 200
    assert "exam" in [t["name"] for t in api(hub, "GET", T, student).json()]


def test_an_exam_published_for_staff_only_is_hidden_from_the_publish_on(hub, tokens):
    """Publishing then releasing leaves a moment in which the files are an ordinary template; a
    version published ``staff_only`` is the staff's from the start, until an assignment released
    from it opens."""
    teacher, student = tokens["teacher1"], tokens["student1"]
    secret = "final-questions-SECRET.md"
    r = api(hub, "POST", f"{T}/final/versions?home_folder=final&staff_only=maybe", teacher,
            data=zip_bytes({secret: b"Q1\n"}), headers={"Content-Type": "application/zip"})
    assert r.status_code == 400 and "staff_only must be true or false" in r.text, r.text
    r = api(hub, "POST", f"{T}/final/versions?home_folder=final&staff_only=true", teacher,
            data=zip_bytes({"final.ipynb": NOTEBOOK, secret: b"Q1: not yet\n"}),
            headers={"Content-Type": "application/zip"})
    assert r.status_code == 201 and r.json()["staff_only"] is True, r.text

    assert "final" not in [t["name"] for t in api(hub, "GET", T, student).json()]
    assert api(hub, "GET", f"{T}/final/versions/1", student).status_code == 404
    r = api(hub, "POST", f"{T}/final/start", student, json={}, timeout=240)
    assert r.status_code == 404, r.text
    assert not (hub.data_dir / "homes" / "student1" / "final").exists()
    page = HubSession(hub, "student1").get("/services/classhub/templates", headers={"Accept": "text/html"})
    assert page.status_code == 200 and secret not in page.text
    # the teacher sees it, marked as not seen by the students yet (the API says so for the panel)
    latest = api(hub, "GET", f"{T}/final", teacher).json()["latest"]
    assert (latest["staff_only"], latest["students_see"]) == (True, False), latest
    page = HubSession(hub, "teacher1").get("/services/classhub/templates", headers={"Accept": "text/html"})
    assert secret in page.text and "students do not see it yet" in page.text

    # released and open: the students' like any assignment's files
    now = datetime.now(timezone.utc)
    r = api(hub, "POST", f"courses/{COURSE}/assignments", teacher, json={
        "name": "final", "title": "Final", "template": "final",
        "opens_at": _iso(now - timedelta(minutes=1)), "due_at": _iso(now + timedelta(hours=3))})
    assert r.status_code == 201, r.text
    assert api(hub, "GET", f"{T}/final/versions/1", student).status_code == 200
    assert api(hub, "GET", f"{T}/final", teacher).json()["latest"]["students_see"] is True
    page = HubSession(hub, "student1").get("/services/classhub/templates", headers={"Accept": "text/html"})
    assert secret in page.text and "students do not see it yet" not in page.text
