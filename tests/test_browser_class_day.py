"""A class day in Chromium against a real ``classhub local`` hub, without surprises (issue 32).

- a teacher publishes ``lab1/`` from the Templates page, which says where the files land and
  lists each version's files; a student who starts it from the JupyterLab panel goes through
  the "Starting lab1" page (it follows the start) and lands in JupyterLab in ``lab1/``, with the
  template's files, in at most 3 clicks;
- no classhub page scrolls sideways in a 1280 px window, and the course's audit log reads as
  sentences with the time and the details folded; Add says how added people log in.

Clicks are counted (tests/browser.py); the session's demo hub serves the module.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import requests
from playwright.sync_api import Error as PlaywrightError

from tests.browser import Clicks, hub_login, screenshot
from tests.hubproc import HubSession, LocalHub, api, start_server, wait_for

if TYPE_CHECKING:
    from tests.conftest import SharedHubs

pytestmark = pytest.mark.browser

#: Clicks from a student's JupyterLab to their files of a template started from the panel:
#: the panel's tab, Start, and "Restart and start" on the Starting page (the server runs).
STUDENT_STARTS_TEMPLATE_FROM_PANEL = 3
LAB_TIMEOUT = 120_000  # JupyterLab loads megabytes of JavaScript on 2 shared cores
LAB_READY = "#jp-main-dock-panel"
PANEL_TAB = ".jp-SideBar .lm-TabBar-tab[data-id='classhub-panel']"


def notebook(text: str) -> str:
    return json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": [text]}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


#: A checkout that tests a panel built elsewhere (a git worktree) names it with JUPYTER_PATH;
#: JupyterHub passes only ``Spawner.env_keep`` to servers (its defaults, plus this one).
KEEP_JUPYTER_PATH = """
c.Spawner.env_keep = ["PATH", "PYTHONPATH", "CONDA_ROOT", "CONDA_DEFAULT_ENV", "VIRTUAL_ENV", "LANG",
                      "LC_ALL", "JUPYTERHUB_SINGLEUSER_APP", "JUPYTER_PATH"]
"""


@pytest.fixture(scope="module")
def hub(shared_hubs: SharedHubs) -> Iterator[LocalHub]:
    """The session's demo hub (tests/conftest.py, SharedHubs), not a hub of its own: lab1 is the
    only template of demo101 there (no other module of the demo hub publishes one). Afterwards
    the servers started here are stopped and student2's limits lifted."""
    hub = shared_hubs.get(KEEP_JUPYTER_PATH if os.environ.get("JUPYTER_PATH") else "")
    yield hub
    admin = HubSession(hub, "admin").new_token()
    r = api(hub, "PUT", "courses/demo101/quota/users/student2", admin, json={})
    assert r.status_code == 200, r.text
    for user in ("teacher1", "student1"):
        requests.delete(f"{hub.url}/hub/api/users/{user}/server",
                        headers={"Authorization": f"token {admin}"}, timeout=60)
    for user in ("teacher1", "student1"):
        wait_for(lambda u=user: not requests.get(
            f"{hub.url}/hub/api/users/{u}", headers={"Authorization": f"token {admin}"},
            timeout=10).json()["servers"], 60, f"{user}'s server to stop")


def home_of(hub: LocalHub, user: str) -> Path:
    home = hub.data_dir / "homes" / user
    home.mkdir(parents=True, exist_ok=True)
    return home


def new_page(browser, hub: LocalHub, user: str, timeout: int = 60_000):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(timeout)
    page = context.new_page()
    hub_login(page, hub.url, user, hub.password)
    return context, page


def test_a_template_published_from_a_folder_lands_as_that_folder(hub, browser):
    lab1 = home_of(hub, "teacher1") / "lab1"
    (lab1 / "data").mkdir(parents=True)
    (lab1 / "intro.ipynb").write_text(notebook("Welcome to lab 1"))
    (lab1 / "data" / "points.csv").write_text("x,y\n1,2\n")
    start_server(hub, "teacher1", HubSession(hub, "teacher1").new_token())

    # the teacher picks lab1/: the form says the files land in lab1/, the top is a choice too
    context, page = new_page(browser, hub, "teacher1")
    page.goto(f"{hub.url}/services/classhub/templates")
    page.click("#pub-tree button.classhub-pick[data-path=lab1]")
    assert page.input_value("#pub-land-folder") == "lab1"
    assert page.locator("#pub-land-in").is_checked()
    assert "in lab1/ of their home" in page.inner_text("#pub-land-says")
    page.check("#pub-land-top")
    assert "at the top of their home" in page.inner_text("#pub-land-says")
    page.check("#pub-land-in")
    page.fill("#pub-name", "lab1")
    page.fill("#pub-desc", "Lab 1")
    page.click("#publish")
    page.wait_for_selector("#page-status:text('Published demo101/lab1 v1 (2 files)')")
    card = page.locator("#t-demo101-lab1")
    assert card.locator(".classhub-lands").inner_text() == "lab1/"
    card.locator(".classhub-latest-files summary").click()
    assert card.locator(".classhub-latest-files li").all_inner_texts() == [
        "lab1/data/points.csv", "lab1/intro.ipynb"]
    card.locator("summary:text('Versions')").click()
    row = card.locator(".classhub-versions tbody tr").first
    row.locator(".classhub-files summary").click()
    assert "lab1/intro.ipynb" in row.locator(".classhub-files").inner_text()
    screenshot(page, "page-templates-files")
    context.close()

    # a student in JupyterLab: the panel's Start, then the Starting page's confirmation
    student1 = home_of(hub, "student1")
    (student1 / "mine.txt").write_text("my own notes\n")
    start_server(hub, "student1", HubSession(hub, "student1").new_token())
    context, page = new_page(browser, hub, "student1", timeout=LAB_TIMEOUT)
    page.goto(f"{hub.url}/user/student1/lab")
    page.wait_for_selector(LAB_READY)
    page.wait_for_selector(PANEL_TAB)
    clicks = Clicks(page)
    clicks.click(PANEL_TAB)                                                   # 1
    panel = page.locator("#classhub-panel")
    clicks.click_locator(panel.get_by_role("button", name="Start or re-seed from lab1"))  # 2
    page.wait_for_url(re.compile(r"/services/classhub/templates/demo101/lab1/start$"))
    assert "Starting lab1" in page.inner_text("h1")
    assert "in lab1/" in page.inner_text("#start-where")
    ask = page.locator("#start-ask")
    assert "will restart" in ask.inner_text()
    # each step the page shows is also written to the browser's console, read after it moved on
    steps: list[str] = []
    page.on("console", lambda m: steps.append(m.text[len("classhub start: "):])
            if m.text.startswith("classhub start: ") else None)
    clicks.click("#start-confirm")                                            # 3
    try:  # the Starting page with the hub's first messages, while it lasts
        page.wait_for_selector("#start-log li", state="attached", timeout=30_000)
        screenshot(page, "page-template-starting")
    except PlaywrightError:
        pass  # JupyterLab opened first: the messages are checked below
    page.wait_for_url(re.compile(r"/user/student1/lab/tree/lab1$"), timeout=LAB_TIMEOUT)
    page.locator(".jp-DirListing-item:has-text('intro.ipynb')").wait_for(timeout=LAB_TIMEOUT)
    assert page.locator(".jp-DirListing-item:has-text('data')").count() == 1
    crumbs = page.locator(".jp-FileBrowser .jp-BreadCrumbs").first.inner_text()
    assert "lab1" in crumbs
    assert clicks.count <= STUDENT_STARTS_TEMPLATE_FROM_PANEL
    # the page said what it did while it followed the start (with the hub's own progress
    # messages between, when the spawn lasted long enough to send any)
    assert steps[0] == "Asked the hub to start your server from lab1.", steps
    assert steps[-1] == "Your server is ready; opening JupyterLab at lab1/…", steps
    assert "Welcome to lab 1" in (student1 / "lab1" / "intro.ipynb").read_text()
    assert (student1 / "lab1" / "data" / "points.csv").read_text() == "x,y\n1,2\n"
    assert not (student1 / "intro.ipynb").exists()  # nothing at the top of the home
    assert (student1 / "mine.txt").read_text() == "my own notes\n"
    context.close()


#: Every classhub page a teacher reaches (the Starting page has its own test above).
PAGES = ["/services/classhub/", "/services/classhub/courses/demo101", "/services/classhub/templates",
         "/services/classhub/shares", "/services/classhub/jobs", "/services/classhub/no-such-page"]


def test_no_page_scrolls_sideways_at_1280px_and_the_audit_log_reads_as_sentences(hub, browser):
    teacher = HubSession(hub, "teacher1").new_token()
    r = api(hub, "PUT", "courses/demo101/quota/users/student2", teacher,
            json={"gpu_hours_per_week": 2, "servers": 1})
    assert r.status_code == 200, r.text
    long_name = "a-folder-with-a-very-long-name-" * 6  # long names wrap instead of widening a page
    (home_of(hub, "teacher1") / long_name).mkdir()
    context, page = new_page(browser, hub, "teacher1")
    wide = {}
    for path in PAGES:
        page.goto(f"{hub.url}{path}")
        page.wait_for_load_state("networkidle")
        # folded lists and details count too
        page.evaluate("() => document.querySelectorAll('details').forEach((d) => { d.open = true; })")
        width = page.evaluate("() => [document.scrollingElement.scrollWidth, "
                              "document.scrollingElement.clientWidth]")
        if width[0] > width[1]:
            wide[path] = width
    assert wide == {}, f"pages wider than a 1280 px window: {wide}"

    page.goto(f"{hub.url}/services/classhub/courses/demo101")
    entry = page.locator("#audit-table tr.classhub-audit-entry").first
    entry.wait_for()
    assert entry.locator(".classhub-audit-sentence").inner_text() == (
        "teacher1 set student2's limits to GPU-hours per week 2, servers 1")
    assert not entry.locator("details").evaluate("d => d.open")  # the details are folded
    entry.locator("summary").click()
    assert "quota.user.set" in entry.locator(".classhub-audit-details").inner_text()
    # Add says how the people it adds log in (the roster preview says it too)
    assert "demo password" in page.inner_text("#add-member .classhub-login-help")  # DemoAuthenticator

    # The long course page: one click on its section links brings a section into view, and the
    # links stay at the top of the window for the next jump.
    links = page.locator("#section-links a")
    assert links.all_inner_texts() == [
        "Assignments", "Competitions", "Members", "Limits", "Usage this week", "Running servers",
        "No-cull windows and TA access", "Data", "Audit log"]
    page.evaluate("() => window.scrollTo(0, 0)")
    links.filter(has_text="Audit log").click()
    page.wait_for_function("""() => {
        const title = document.querySelector('#audit h2').getBoundingClientRect();
        const links = document.getElementById('section-links').getBoundingClientRect();
        return window.scrollY > 0 && title.top >= links.bottom && title.bottom <= window.innerHeight;
    }""")  # scrolled to it, in view and not under the links
    nav = page.locator("#section-links").bounding_box()
    assert nav is not None and nav["y"] == 0, nav
    context.close()
