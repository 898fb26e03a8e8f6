"""The classhub pages in Chromium against a real ``classhub local`` hub: the journeys of the
docs/teachers/pages.md, "The classhub pages", each counting its clicks and asserting the number
there (docs/tutorials/first-class.md, "Your first class", walks the same steps).

(a) a teacher adds two students by roster upload (one bad row shown with its line), sets a
    per-student limit and publishes a folder picked from the tree; a new student logs in and
    starts it; starting again while the server runs asks first and loses nothing;
(b) a student shares a notebook picked from the picker read-only with the TA, who opens it from
    "Shared with me";
(c) a teacher sees a student's usage chart and stops the student's server;
(d) an admin creates a course with the home page's form (a bad name shows the API's sentence);
(e) a teacher publishes a template by uploading a zip archive;
(f) the spawn form (JupyterHub's ``/hub/spawn``, classhub's profiles) shows "N free now" per
    profile and why one is disabled.

One hub serves the module; nothing is created through the API in the journeys themselves
(setup writes files into homes, as a user's earlier work would be there).
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
import requests

from tests.browser import Clicks, screenshot
from tests.hubproc import HubSession, LocalHub, start_server, wait_for
from tests.tutorial import follows_the_tutorial

pytestmark = pytest.mark.browser

#: The docs' numbers (docs/teachers/pages.md): clicks of each journey after logging in.
LAB_TIMEOUT = 90_000  # JupyterLab loads megabytes of JavaScript on 2 shared cores

ROSTER = "username,role\nnewstudent1,student\nnewstudent2,student\nbad name!,student\n"


def notebook(text: str) -> str:
    return json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": [text]}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


DATA = Path(__file__).parent / "data" / "nvidia-smi"
#: The hub's GPUs (2 H200s, one split into 7 MIG slices, read from a saved ``nvidia-smi -L``) and
#: a catalog with a profile that cannot fit (two whole H200s: only one is not split), so the
#: spawn form shows both "N free now" and a disabled profile with its reason. Servers the
#: journeys start use the default (CPU) profile.
GPU_CONFIG = f"""
c.ClasshubLocalSpawner.gpu_discovery_command = ["cat", {str(DATA / "h200-2gpu-7x1g.txt")!r}]
c.ClasshubLocalSpawner.use_nvml = False
c.ClasshubLocalSpawner.profiles = [
    {{"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True}},
    {{"slug": "h200", "display_name": "Whole H200", "kind": "gpu", "gpu_product": "NVIDIA-H200"}},
    {{"slug": "h200-x2", "display_name": "Two H200s", "kind": "gpu", "gpu_product": "NVIDIA-H200",
     "gpu_count": 2}},
    {{"slug": "mig-1g", "display_name": "H200 MIG 1g.18gb", "kind": "mig", "mig_profile": "1g.18gb"}},
]
"""


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    data_dir = hub_root / "pages-browser"
    data_dir.mkdir()
    (data_dir / "jupyterhub_config.py").write_text(GPU_CONFIG)
    hub = LocalHub(data_dir=data_dir).start()
    yield hub
    hub.stop()


def home_of(hub: LocalHub, user: str) -> Path:
    home = hub.data_dir / "homes" / user
    home.mkdir(parents=True, exist_ok=True)
    return home


def login(page, hub: LocalHub, user: str, next_path: str) -> None:
    """The hub's login form, reached by following a classhub link (``next``)."""
    page.goto(f"{hub.url}{next_path}")
    page.wait_for_selector("input[name=username]")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", hub.password)
    page.click("#login_submit")
    page.wait_for_load_state("domcontentloaded")


def logged_in_page(browser, hub: LocalHub, user: str, next_path: str, timeout: int = 60_000):
    """A fresh browser context (a desktop-sized window) with ``user`` logged in on ``next_path``."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(timeout)
    page = context.new_page()
    login(page, hub, user, next_path)
    return context, page


def server_of(hub: LocalHub, user: str) -> dict | None:
    token = HubSession(hub, "admin").new_token()
    model = requests.get(f"{hub.url}/hub/api/users/{user}", timeout=30,
                         headers={"Authorization": f"token {token}"}).json()
    return (model.get("servers") or {}).get("")


def test_a_teacher_runs_a_course_by_clicking_and_a_new_student_starts_the_template(hub, browser):
    lab1 = home_of(hub, "teacher1") / "lab1"
    lab1.mkdir()
    (lab1 / "hello.ipynb").write_text(notebook("Hello from lab 1"))
    roster = hub.data_dir.parent / "roster.csv"
    roster.write_text(ROSTER)

    context, page = logged_in_page(browser, hub, "teacher1", "/hub/home")
    clicks = Clicks(page)
    clicks.click("a.classhub-nav-link >> text=classhub")                      # 1 the hub's nav
    page.wait_for_selector("h1:text('classhub')")
    screenshot(page, "page-home")
    clicks.click("a.classhub-course-link:text('demo101')")                    # 2
    page.wait_for_selector("#members-table")
    with page.expect_file_chooser() as chooser:
        clicks.click("#roster-file")                                          # 3 choose the CSV
    chooser.value.set_files(str(roster))
    page.wait_for_selector("#roster-preview:not(.d-none)")
    changes = page.inner_text("#roster-changes")
    assert "newstudent1" in changes and "newstudent2" in changes and "add as student" in changes
    error = page.inner_text(".classhub-roster-error")
    assert "line 4" in error and "bad name!" in error
    screenshot(page, "page-course-roster")
    members = page.inner_text("#members-table")
    assert "newstudent1" not in members  # nothing is applied by the preview
    clicks.click("#roster-import")                                            # 4
    page.wait_for_selector("#page-status:text('Roster imported')")
    assert "2 added" in page.inner_text("#page-status")
    assert "1 line(s) not imported" in page.inner_text("#page-status")
    assert "newstudent1" in page.inner_text("#members-table")
    row = page.locator("#student-limits tr[data-user=newstudent1]")
    row.locator(".classhub-limit-servers").fill("1")
    row.locator(".classhub-limit-hours").fill("5")
    clicks.click_locator(row.locator(".classhub-save-limit"))                 # 5
    row.locator(".classhub-status:text('Saved.')").wait_for()
    page.reload()
    row = page.locator("#student-limits tr[data-user=newstudent1]")
    assert row.locator(".classhub-limit-servers").input_value() == "1"
    clicks.click("a.classhub-nav-link >> text=Templates")                     # 6
    clicks.click("#start-own")                                                # 7 start my server
    clicks.click("#pub-tree button.classhub-pick[data-path=lab1]")            # 8 the folder
    assert "in lab1/ of their home" in page.inner_text("#pub-land-says")  # where the files land
    page.fill("#pub-name", "lab1")
    page.fill("#pub-desc", "Lab 1")
    clicks.click("#publish")                                                  # 9
    page.wait_for_selector("#page-status:text('Published demo101/lab1 v1')")
    assert "Lab 1" in page.inner_text("#t-demo101-lab1")
    assert page.inner_text("#t-demo101-lab1 .classhub-lands") == "lab1/"
    screenshot(page, "page-templates")
    follows_the_tutorial(clicks, "TEACHER_ROSTER_LIMIT_PUBLISH")
    context.close()

    # a student the roster added logs in with the demo password and starts the template
    context, page = logged_in_page(browser, hub, "newstudent1", "/services/classhub/templates",
                                   timeout=LAB_TIMEOUT)
    assert server_of(hub, "newstudent1") is None  # following the link spawned nothing
    clicks = Clicks(page)
    card = page.locator("#t-demo101-lab1")
    clicks.click_locator(card.locator(".classhub-start"))                     # 1
    # the Starting page starts the server at once (none runs) and opens JupyterLab in lab1/
    page.wait_for_url(re.compile(r"/user/newstudent1/lab/tree/lab1$"), timeout=LAB_TIMEOUT)
    page.locator(".jp-DirListing-item:has-text('hello.ipynb')").wait_for(timeout=LAB_TIMEOUT)
    follows_the_tutorial(clicks, "STUDENT_STARTS_TEMPLATE")
    home = hub.data_dir / "homes" / "newstudent1"
    assert "Hello from lab 1" in (home / "lab1" / "hello.ipynb").read_text()

    # starting again while the server runs: the student is asked first, and nothing is lost
    (home / "lab1" / "hello.ipynb").write_text(notebook("my own answer"))
    (home / "notes.txt").write_text("mine\n")
    started = server_of(hub, "newstudent1")["started"]
    page.goto(f"{hub.url}/services/classhub/templates")
    clicks = Clicks(page)
    card = page.locator("#t-demo101-lab1")
    clicks.click_locator(card.locator(".classhub-start"))                     # 1
    ask = page.locator("#start-ask")
    ask.wait_for()
    assert "will restart" in ask.inner_text() and "running kernels stop" in ask.inner_text()
    assert server_of(hub, "newstudent1")["started"] == started  # asking restarted nothing
    clicks.click("#start-confirm")                                            # 2
    page.wait_for_url(re.compile(r"/user/newstudent1/lab/tree/lab1$"), timeout=LAB_TIMEOUT)
    follows_the_tutorial(clicks, "STUDENT_RESTARTS_FROM_TEMPLATE")
    assert server_of(hub, "newstudent1")["started"] != started
    assert "my own answer" in (home / "lab1" / "hello.ipynb").read_text()
    assert (home / "notes.txt").read_text() == "mine\n"
    context.close()


def test_a_student_shares_a_picked_notebook_read_only_and_the_ta_opens_it(hub, browser):
    (home_of(hub, "student1") / "week1.ipynb").write_text(notebook("Week 1 answers"))
    context, page = logged_in_page(browser, hub, "student1", "/services/classhub/shares")
    clicks = Clicks(page)
    clicks.click("#start-own")                                                # 1
    clicks.click("#share-tree button.classhub-pick[data-path='week1.ipynb']")  # 2
    page.fill("#share-user", "ta1")  # typed; the names of my courses complete it
    assert page.locator("#share-people option[value=ta1]").count() == 1
    assert page.input_value("#share-kind") == "read-only"
    clicks.click("#share-submit")                                             # 3
    page.wait_for_selector("#page-status:text('Shared week1.ipynb read-only with ta1')")
    table = page.inner_text("#mine-table")
    assert "ta1" in table and "week1.ipynb" in table and "read-only" in table
    assert "With" in page.inner_text("#mine-table thead")
    follows_the_tutorial(clicks, "STUDENT_SHARES_NOTEBOOK")
    screenshot(page, "page-sharing")
    context.close()

    context, page = logged_in_page(browser, hub, "ta1", "/services/classhub/", timeout=LAB_TIMEOUT)
    clicks = Clicks(page)
    shared = page.locator(".classhub-with-me tr:has-text('student1')")
    assert "week1.ipynb" in shared.inner_text()
    clicks.click_locator(shared.locator("a.classhub-open"))                   # 1
    page.wait_for_load_state("domcontentloaded")
    if "/oauth2/authorize" in page.url:  # JupyterHub asks before opening another user's server
        clicks.click("form input[type=submit], form button[type=submit]")      # 2
    page.wait_for_url(re.compile(r"/user/student1/lab/tree/week1.ipynb"), timeout=LAB_TIMEOUT)
    page.locator(".jp-RenderedMarkdown:has-text('Week 1 answers')").wait_for(timeout=LAB_TIMEOUT)
    follows_the_tutorial(clicks, "TA_OPENS_SHARED_NOTEBOOK")
    assert server_of(hub, "ta1") is None  # the TA's own server was never spawned
    context.close()


def test_a_teacher_sees_the_usage_chart_and_stops_a_students_server(hub, browser):
    student = HubSession(hub, "student2")
    start_server(hub, "student2", student.new_token())
    context, page = logged_in_page(browser, hub, "teacher1", "/services/classhub/")
    clicks = Clicks(page)
    clicks.click("a.classhub-course-link:text('demo101')")                    # 1
    page.wait_for_selector("#usage-chart")
    chart = page.locator("#usage-chart")
    assert chart.locator(".classhub-chart-row[data-user=student2]").count() == 1
    usage = page.locator("#usage-table tr[data-user=student2] td")
    assert usage.nth(3).inner_text() == "1"  # one running server
    running = page.locator("#servers-table tr[data-user=student2]")
    assert "ready" in running.inner_text()
    screenshot(page, "page-course-usage")
    clicks.click_locator(running.locator(".classhub-stop"))                   # 2
    clicks.click_locator(running.locator(".classhub-stop-confirm"))           # 3
    page.wait_for_selector("#page-status:text(\"Stopped student2's server\")")
    assert page.locator("#servers-table tr[data-user=student2]").count() == 0
    follows_the_tutorial(clicks, "TEACHER_STOPS_SERVER")
    wait_for(lambda: server_of(hub, "student2") is None, 30, "student2's server to be gone")
    # a refusal shows the API's sentence next to the field, and changes nothing
    page.fill("#add-username", "bad name!")
    page.click("#add-member button[type=submit]")
    page.wait_for_selector("#add-status:has-text('whitespace')")
    assert "bad name!" in page.inner_text("#add-status")
    assert "bad name!" not in page.inner_text("#members-table")
    context.close()


def test_an_admin_creates_a_course_with_the_home_pages_form(hub, browser):
    context, page = logged_in_page(browser, hub, "admin", "/services/classhub/")
    page.wait_for_selector("#new-course")
    clicks = Clicks(page)
    page.fill("#new-course-name", "dl201")
    page.fill("#new-course-display", "Deep learning 201")
    clicks.click("#new-course button[type=submit]")                           # 1
    page.wait_for_url(re.compile(r"/services/classhub/courses/dl201$"))
    assert "Deep learning 201" in page.inner_text("h1")
    follows_the_tutorial(clicks, "ADMIN_CREATES_COURSE")
    # the home lists it under "All courses", and its link opens the course page
    page.goto(f"{hub.url}/services/classhub/")
    row = page.locator("#all-courses tr:has(a:text-is('dl201'))")
    assert "Deep learning 201" in row.inner_text()
    row.locator("a:text-is('dl201')").click()
    page.wait_for_url(re.compile(r"/services/classhub/courses/dl201$"))
    assert "Deep learning 201" in page.inner_text("h1")
    # a bad name: the API's sentence appears next to the field, and no course is created
    page.goto(f"{hub.url}/services/classhub/")
    page.fill("#new-course-name", "bad name!")
    page.click("#new-course button[type=submit]")
    page.wait_for_selector("#new-course-status:has-text('is not allowed')")
    status = page.inner_text("#new-course-status")
    assert "bad name!" in status and "1-63 letters, digits" in status
    assert "/courses/" not in page.url
    assert "bad name!" not in page.inner_text("#all-courses table")
    screenshot(page, "page-home-admin")
    context.close()


def test_a_teacher_publishes_a_template_by_uploading_an_archive(hub, browser, tmp_path):
    archive = tmp_path / "lab2.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("lab2.ipynb", notebook("Lab 2 from an archive"))
        z.writestr("data/points.csv", "x,y\n1,2\n")  # in a folder: folders are not counted as files
    context, page = logged_in_page(browser, hub, "teacher1", "/services/classhub/")
    clicks = Clicks(page)
    clicks.click("a.classhub-nav-link >> text=Templates")                     # 1
    page.wait_for_selector("#publish-form")
    page.fill("#pub-name", "lab2")
    page.fill("#pub-desc", "Lab 2 (uploaded)")
    with page.expect_file_chooser() as chooser:
        clicks.click("#pub-archive")                                          # 2 choose the zip
    chooser.value.set_files(str(archive))  # publishes on choosing; the page reloads
    page.wait_for_selector("#page-status:text('Published demo101/lab2 v1 (2 files)')")
    card = page.locator("#t-demo101-lab2")
    assert "lab2" in card.inner_text() and "v1" in card.inner_text()
    assert "Lab 2 (uploaded)" in card.inner_text()
    follows_the_tutorial(clicks, "TEACHER_UPLOADS_TEMPLATE_ARCHIVE")
    card.locator("summary:text('Versions')").click()
    cells = card.locator(".classhub-versions tbody tr").first.locator("td")
    assert [cells.nth(i).inner_text() for i in range(4)][::3] == ["v1", "2 files"]  # version, files
    cells.nth(3).locator("summary").click()  # the version's files, as they land in a home
    assert cells.nth(3).locator("li").all_inner_texts() == ["data/points.csv", "lab2.ipynb"]
    assert cells.nth(1).inner_text() == "teacher1"
    context.close()


def test_a_teacher_prepares_an_exam_that_students_do_not_see_yet(hub, browser, tmp_path):
    """Ticked before publishing, the version is the staff's until an assignment released from it
    opens (docs/teachers/templates.md): the teacher's page says so, a student's page lists nothing."""
    archive = tmp_path / "midterm.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("midterm.ipynb", notebook("Midterm"))
    context, page = logged_in_page(browser, hub, "teacher1", "/services/classhub/")
    clicks = Clicks(page)
    clicks.click("a.classhub-nav-link >> text=Templates")                     # 1
    page.wait_for_selector("#publish-form")
    page.fill("#pub-name", "midterm")
    clicks.click("#pub-staff-only")                                           # 2 staff only
    with page.expect_file_chooser() as chooser:
        clicks.click("#pub-archive")                                          # 3 choose the zip
    chooser.value.set_files(str(archive))
    page.wait_for_selector("#page-status:text('Published demo101/midterm v1 (1 file); the students "
                           "see it once an assignment released from it opens.')")
    badge = page.locator("#t-demo101-midterm .classhub-staff-only")
    assert badge.inner_text() == "students do not see it yet"
    assert clicks.count == 3
    context.close()
    context, page = logged_in_page(browser, hub, "student1", "/services/classhub/templates")
    page.wait_for_selector("h1:text('Templates')")
    assert page.locator("#t-demo101-midterm").count() == 0
    assert "midterm" not in page.inner_text("body")
    context.close()


def test_the_spawn_form_shows_whats_free_and_why_a_profile_is_disabled(hub, browser):
    # ta1's own server never runs in this module
    context, page = logged_in_page(browser, hub, "ta1", "/hub/spawn")
    page.wait_for_selector(".classhub-profiles")
    free = {p: page.inner_text(f".classhub-profile[data-profile='{p}'] .classhub-free")
            for p in ("cpu", "h200", "h200-x2", "mig-1g")}
    assert free == {"cpu": "available", "h200": "1 free now", "h200-x2": "0 free now",
                    "mig-1g": "7 free now"}
    two = page.locator(".classhub-profile[data-profile='h200-x2']")
    # nothing is in use: this machine never has two whole H200s free (one is split into slices)
    assert "this machine has no place for it" in two.locator(".classhub-reason").inner_text()
    assert two.locator("input[type=radio]").is_disabled()
    assert page.locator("#profile-cpu").is_checked()
    assert page.locator("form input[type=submit], form button[type=submit]").first.is_visible()
    screenshot(page, "page-spawn")
    context.close()
