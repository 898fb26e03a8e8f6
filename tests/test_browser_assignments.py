"""Assignments in Chromium against a real ``classhub local`` hub (docs/teachers/assignments.md).

The journey a course lives through, as the tutorial walks it (docs/tutorials/first-class.md,
"8. An autograded assignment"; each step ends with `follows_the_tutorial`): the teacher releases an
assignment with the course page's form and turns autograding on with the page's autograding form
(the source notebook, a profile of the course, a time limit; a wrong file is refused with the
API's sentence and the form keeps what was chosen) (docs/teachers/autograding.md); two students
submit with the course page's Submit (the second after the due date, marked late); each
submission is graded as a job and each student reads their score and feedback on the course
page; the teacher reads the submissions table with the scores, downloads every last submission
as one zip and exports the grades of the whole roster as CSV. Setup writes the students' work
into their homes, as their earlier work in JupyterLab would be there, and moves the due date
through the API (the page's form sets the dates of a new assignment only).
"""

from __future__ import annotations

import io
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest
import requests
from nbformat.v4 import new_code_cell, new_notebook

from hub_ext.backends import autograde
from tests.browser import Clicks, hub_login, screenshot
from tests.hubproc import BUSY_MACHINE, HubSession, LocalHub, api, traits, wait_for
from tests.tutorial import follows_the_tutorial

pytestmark = pytest.mark.browser

COURSE = "demo101"
LAB1 = ".classhub-assignment[data-assignment=lab1]"  # the assignment's card on the course page
CONFIG = """
c.ClasshubLocalSpawner.profiles = [
    {"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True},
]
"""


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    data = hub_root / "assignments-browser"
    data.mkdir()
    (data / "jupyterhub_config.py").write_text(
        BUSY_MACHINE + CONFIG + traits({"ClasshubJobs": {"interval": 0.5, "gpu_discovery_command": ["true"],
                                                         "use_nvml": False}}))
    hub = LocalHub(data_dir=data).start()
    yield hub
    hub.stop()


def _source():
    """The teacher's source: an answer cell, a test with a hidden part (2 points), a test (3)."""
    def meta(grade_id: str, **flags) -> dict:
        return {"nbgrader": {"grade_id": grade_id, "grade": False, "solution": False, "locked": False,
                             "schema_version": 3, **flags}}
    return new_notebook(cells=[
        new_code_cell("def double(x):\n    raise NotImplementedError()\n",
                      metadata=meta("answer", solution=True)),
        new_code_cell("assert double(1) == 2\n### BEGIN HIDDEN TESTS\nassert double(21) == 42\n"
                      "### END HIDDEN TESTS\n", metadata=meta("q1", grade=True, points=2)),
        new_code_cell("assert double(0) == 0\n", metadata=meta("q2", grade=True, points=3)),
    ])


def _answered(body: str) -> str:
    nb = autograde.student_version(_source())
    nb.cells[0].source = body
    return nbformat.writes(nb)


def _graded(hub: LocalHub, token: str, student: str) -> dict:
    def done():
        mine = api(hub, "GET", f"courses/{COURSE}/assignments/lab1/submissions", token).json()
        return mine and (mine[-1].get("feedback") or {}).get("state") == "done" and mine[-1]
    return wait_for(done, 240, f"{student}'s submission to be graded")


def _course_page(page, hub: LocalHub) -> None:
    page.goto(f"{hub.url}/services/classhub/courses/{COURSE}")
    page.wait_for_selector("#assignments")


def test_release_two_submissions_one_late_and_download(hub, browser, tmp_path):
    teacher = HubSession(hub, "teacher1").new_token()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("lab1.ipynb", nbformat.writes(autograde.student_version(_source())))
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/versions?home_folder=lab1", teacher,
            data=archive.getvalue(), headers={"Content-Type": "application/zip"})
    assert r.status_code == 201, r.text
    for student, answer, body in (("student1", "x = 1\n", "def double(x):\n    return 2 * x\n"),
                                  ("student2", "x = 2\n", "def double(x):\n    return 2 if x == 1 else 0\n")):
        work = hub.data_dir / "homes" / student / "lab1"
        work.mkdir(parents=True)
        (work / "answer.py").write_text(answer)
        (work / "lab1.ipynb").write_text(_answered(body))

    # the teacher releases it on the course page and turns autograding on with its form
    source = tmp_path / "lab1.ipynb"
    source.write_text(nbformat.writes(_source()))
    misnamed = tmp_path / "lab1-source.ipynb"  # the same notebook, named as no released file
    misnamed.write_text(nbformat.writes(_source()))
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
    card = page.locator(".classhub-assignment[data-assignment=lab1]")
    assert card.count() == 1
    assert "Off: submissions are kept, not graded." in card.locator(".classhub-autograde").inner_text()
    clicks.click(f"{LAB1} .classhub-autograde-edit summary")
    form = card.locator(".classhub-autograde-form")
    assert form.locator("select[name=profile] option").all_inner_texts() == ["CPU only (cpu)"]
    form.locator("input[name=time_limit]").fill("60")
    # a detour the tutorial does not take: a source named as no notebook of the release is
    # refused with the API's sentence, and the form stays open with what was chosen
    form.locator("input[name=notebooks]").set_input_files(str(misnamed))
    form.locator("button[type=submit]").click()
    refusal = form.locator(".classhub-autograde-status")
    refusal.filter(has_text="has no lab1-source.ipynb").wait_for()
    assert "name a notebook of the assignment's files" in refusal.inner_text()
    assert form.is_visible() and form.locator("input[name=time_limit]").input_value() == "60"
    assert "Off:" in card.locator(".classhub-autograde-settings").inner_text()
    with page.expect_file_chooser() as chooser:
        clicks.click(f"{LAB1} .classhub-autograde-form input[name=notebooks]")
    chooser.value.set_files(str(source))
    clicks.click(f"{LAB1} .classhub-autograde-save")
    page.wait_for_selector("#page-status:has-text('Autograding on for lab1: 5 points in lab1.ipynb')")
    follows_the_tutorial(clicks, "TEACHER_RELEASES_AND_AUTOGRADES")
    settings = page.inner_text(".classhub-assignment[data-assignment=lab1] .classhub-autograde")
    assert "On: lab1.ipynb, 5 points" in settings and "profile cpu" in settings, settings
    assert "time limit 60 s" in settings and "q1 (2), q2 (3)" in settings, settings
    assert "double(21)" not in page.content()  # the hidden test stays with the service
    r = api(hub, "GET", f"courses/{COURSE}/assignments/lab1/autograde", teacher)
    assert (r.json()["profile"], r.json()["time_limit"], r.json()["owner"]) == ("cpu", 60, "teacher1")

    # a student submits from the course page and sees the time of their submission
    student_context = browser.new_context(viewport={"width": 1280, "height": 900})
    spage = student_context.new_page()
    hub_login(spage, hub.url, "student1", hub.password)
    _course_page(spage, hub)
    clicks = Clicks(spage)
    clicks.click(".classhub-assignment[data-assignment=lab1] .classhub-assignment-submit")
    spage.wait_for_selector("#page-status:has-text('Submitted lab1: 2 files')")
    assert "Your last submission" in spage.inner_text(".classhub-my-submission")
    assert spage.locator("text=Download all").count() == 0  # the staff's table is not theirs
    assert spage.locator(".classhub-autograde").count() == 0  # nor the grading settings
    # graded as a job: the student reads their score and, unfolded, each cell's result
    _graded(hub, HubSession(hub, "student1").new_token(), "student1")
    _course_page(spage, hub)
    assert "Score 5 / 5" in spage.inner_text(".classhub-my-submission")
    clicks.click(".classhub-assignment[data-assignment=lab1] .classhub-feedback summary")
    feedback = spage.inner_text(".classhub-feedback")
    assert "q1" in feedback and "passed" in feedback and "HIDDEN" not in spage.content()
    follows_the_tutorial(clicks, "STUDENT_SUBMITS_AND_READS_FEEDBACK")
    screenshot(spage, "page-assignment-feedback")
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
    _graded(hub, HubSession(hub, "student2").new_token(), "student2")
    _course_page(lpage, hub)
    lpage.click(".classhub-assignment[data-assignment=lab1] .classhub-feedback summary")
    feedback = lpage.inner_text(".classhub-feedback")  # the hidden test failed, its line not shown
    assert "Score 3 / 5" in lpage.inner_text(".classhub-my-submission") and "failed" in feedback
    assert "double(21)" not in lpage.content() and "[hidden test]" in feedback
    late_context.close()

    # a student who joined late and submitted nothing is in the gradebook too (no score)
    r = api(hub, "PUT", f"courses/{COURSE}/members", teacher,
            json={"add": [{"username": "student3", "role": "student"}]})
    assert r.status_code == 200, r.text

    # the teacher's table, and every last submission in one download
    _course_page(page, hub)
    table = page.inner_text(".classhub-submissions")
    assert "student1" in table and "student2" in table and "late" in table
    screenshot(page, "page-assignments")
    clicks = Clicks(page)
    with page.expect_download() as download:
        clicks.click(".classhub-assignment-download")
    got = zipfile.ZipFile(download.value.path())
    assert sorted(got.namelist()) == ["student1/answer.py", "student1/lab1.ipynb", "student2/answer.py",
                                      "student2/lab1.ipynb"]
    assert got.read("student2/answer.py") == b"x = 2\n"
    # the scores in the table, and the grades of the roster as CSV for the LMS gradebook
    assert "5 / 5" in table and "3 / 5" in table
    with page.expect_download() as download:
        clicks.click(".classhub-grades-csv")
    assert Path(download.value.path()).read_text().splitlines() == [
        "username,score,max,late,submitted", "student1,5,5,0,1", "student2,3,5,1,1", "student3,,5,0,0"]
    follows_the_tutorial(clicks, "TEACHER_DOWNLOADS_AND_EXPORTS")
    context.close()
    assert requests.get(f"{hub.url}/services/classhub/api/health", timeout=10).status_code == 200
