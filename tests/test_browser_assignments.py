"""Assignments in Chromium against a real ``classhub local`` hub (docs/teachers/assignments.md).

The journey a course lives through: the teacher releases an assignment with the course page's
form; two students submit with the course page's Submit (the second after the due date, marked
late); the teacher reads the submissions table and downloads every last submission as one zip.
Each step counts its clicks. Setup writes the students' work into their homes, as their earlier
work in JupyterLab would be there, and moves the due date through the API (the page has no
form for it yet).
"""

from __future__ import annotations

import io
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from tests.browser import Clicks, hub_login, screenshot
from tests.hubproc import HubSession, LocalHub, api

pytestmark = pytest.mark.browser

COURSE = "demo101"
TEACHER_RELEASES = 1  # the form's Release (the fields are typed)
STUDENT_SUBMITS = 1
TEACHER_DOWNLOADS = 1


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    hub = LocalHub(data_dir=hub_root / "assignments-browser").start()
    yield hub
    hub.stop()


def _course_page(page, hub: LocalHub) -> None:
    page.goto(f"{hub.url}/services/classhub/courses/{COURSE}")
    page.wait_for_selector("#assignments")


def test_release_two_submissions_one_late_and_download(hub, browser):
    teacher = HubSession(hub, "teacher1").new_token()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("lab1.ipynb", '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/versions?home_folder=lab1", teacher,
            data=archive.getvalue(), headers={"Content-Type": "application/zip"})
    assert r.status_code == 201, r.text
    for student, answer in (("student1", "x = 1\n"), ("student2", "x = 2\n")):
        work = hub.data_dir / "homes" / student / "lab1"
        work.mkdir(parents=True)
        (work / "answer.py").write_text(answer)

    # the teacher releases it on the course page
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    hub_login(page, hub.url, "teacher1", hub.password)
    _course_page(page, hub)
    clicks = Clicks(page)
    page.fill("#ra-name", "lab1")
    page.select_option("#ra-template", "lab1")
    due = datetime.now().astimezone() + timedelta(hours=2)  # the browser's local time
    page.fill("#ra-due", due.strftime("%Y-%m-%dT%H:%M"))
    page.select_option("#ra-policy", "accept-late")
    clicks.click("#release-assignment button[type=submit]")
    page.wait_for_selector("#page-status:has-text('Released lab1.')")
    assert clicks.count == TEACHER_RELEASES
    assert page.locator(".classhub-assignment[data-assignment=lab1]").count() == 1

    # a student submits from the course page and sees the time of their submission
    student_context = browser.new_context(viewport={"width": 1280, "height": 900})
    spage = student_context.new_page()
    hub_login(spage, hub.url, "student1", hub.password)
    _course_page(spage, hub)
    clicks = Clicks(spage)
    clicks.click(".classhub-assignment[data-assignment=lab1] .classhub-assignment-submit")
    spage.wait_for_selector("#page-status:has-text('Submitted lab1: 1 files')")
    assert "Your last submission" in spage.inner_text(".classhub-my-submission")
    assert clicks.count == STUDENT_SUBMITS
    assert spage.locator("text=Download all").count() == 0  # the staff's table is not theirs
    student_context.close()

    # past the due date, the second student's Submit says it is late, and the answer marks it
    now = datetime.now(timezone.utc)
    r = api(hub, "PUT", f"courses/{COURSE}/assignments/lab1", teacher, json={
        "opens_at": (now - timedelta(days=2)).isoformat(), "due_at": (now - timedelta(days=1)).isoformat()})
    assert r.status_code == 200, r.text
    late_context = browser.new_context(viewport={"width": 1280, "height": 900})
    lpage = late_context.new_page()
    hub_login(lpage, hub.url, "student2", hub.password)
    _course_page(lpage, hub)
    button = lpage.locator(".classhub-assignment[data-assignment=lab1] .classhub-assignment-submit")
    assert button.inner_text().strip() == "Submit (late)"
    Clicks(lpage).click_locator(button)
    lpage.wait_for_selector("#page-status:has-text('(late)')")
    assert "late" in lpage.inner_text(".classhub-my-submission")
    late_context.close()

    # the teacher's table, and every last submission in one download
    _course_page(page, hub)
    table = page.inner_text(".classhub-submissions")
    assert "student1" in table and "student2" in table and "late" in table
    screenshot(page, "page-assignments")
    clicks = Clicks(page)
    with page.expect_download() as download:
        clicks.click(".classhub-assignment-download")
    got = zipfile.ZipFile(download.value.path())
    assert sorted(got.namelist()) == ["student1/answer.py", "student2/answer.py"]
    assert got.read("student2/answer.py") == b"x = 2\n"
    assert clicks.count == TEACHER_DOWNLOADS
    context.close()
    assert requests.get(f"{hub.url}/services/classhub/api/health", timeout=10).status_code == 200
