"""The JupyterLab panel in Debian's Chromium against a real ``classhub local`` hub (issue 15).

The journeys: a student opens the classhub panel and sees their quota and their course's
templates; shares a notebook with the TA from the file browser's context menu; the TA opens it
from "Shared with me", sees it read-only (banner, no typing, no kernel error, no unsaved mark,
Shift+Enter keeps the outputs, closing asks nothing, no refusals in the owner's log) and copies it to
their own server, where the copy is editable; a student submits a Python script as a job from
the file browser's context menu and reads its log from the panel's Jobs section (issue 17).
Clicks are counted (docs/teachers/lab-panel.md, "The JupyterLab panel").
"""

from __future__ import annotations

import io
import re
import tarfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.browser import Clicks, cut_off_at_the_right, form_layout_problems, hub_login, screenshot
from tests.hubproc import (
    HubSession,
    LocalHub,
    api,
    hub_with_config,
    start_server,
    start_servers,
    traits,
    wait_for,
)

pytestmark = pytest.mark.browser

NOTEBOOK = {
    "nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                                     "display_name": "Python 3"}},
    "cells": [{"cell_type": "code", "id": "c1", "execution_count": 1, "metadata": {},
               "source": "print(6 * 7)",
               "outputs": [{"output_type": "stream", "name": "stdout", "text": "42\n"}]}],
}
SCRIPT = 'import os\nprint("job output:", 6 * 7, "in", os.path.basename(os.getcwd()))\n'
COURSE = "demo101"
LABELS = "".join(f"img{i},{'cat' if i % 3 else 'dog'}\n" for i in range(12))
LAB_READY = "#jp-main-dock-panel"
PANEL_TAB = ".jp-SideBar .lm-TabBar-tab[data-id='classhub-panel']"


def context_menu_dialog(page, filename: str, label: str):
    """Right-click ``filename`` in the file browser and pick ``label``: the clicks so far (2)
    and the dialog it opened."""
    item = page.locator(f".jp-DirListing-item[title*='{filename}']")
    item.wait_for()
    clicks = Clicks(page)
    clicks.click_locator(item, button="right")
    clicks.click_locator(page.locator(".lm-Menu-item", has_text=label))
    return clicks, page.locator(".jp-Dialog")


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    """The module's one hub. The job service runs in every local hub; a cycle a second lets a
    short job end quickly. The culler cycles every second too, with the site's timeouts (hours)
    until the culler's journey, last, gives the course short ones (`culling_policy`): one hub and
    one server for every journey, not a second hub for the culler's."""
    hub = hub_with_config(hub_root, "lab-panel", "c.ClasshubService.share_interval = 0.5\n"
                          "c.ClasshubJobs.interval = 1\n" + traits({"ClasshubCuller": {"interval": 1}}))
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: LocalHub) -> dict[str, str]:
    return {name: HubSession(hub, name).new_token() for name in ("admin", "student1", "ta1", "teacher1")}


@pytest.fixture(scope="module")
def course(hub: LocalHub, tokens: dict[str, str]) -> None:
    """The demo course with a quota, a template, and TAs who need a share (no blanket access)."""
    r = api(hub, "PUT", f"courses/{COURSE}/quota", tokens["admin"],
            json={"resources": {"cpu": "8", "memory": "16Gi"}, "servers": 30, "gpu_hours_per_week": 40})
    assert r.status_code == 200, r.text
    r = api(hub, "PUT", f"courses/{COURSE}/quota/users/student1", tokens["teacher1"],
            json={"resources": {"cpu": "4", "memory": "8Gi"}, "servers": 1, "gpu_hours_per_week": 10})
    assert r.status_code == 200, r.text
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        info = tarfile.TarInfo("intro.md")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"hello\n"))
    r = api(hub, "POST", f"courses/{COURSE}/templates/lab1/versions?description=Lab%201", tokens["teacher1"],
            data=archive.getvalue(), headers={"Content-Type": "application/gzip"})
    assert r.status_code == 201, r.text
    r = api(hub, "PUT", f"courses/{COURSE}/sharing", tokens["teacher1"], json={"ta_server_access": False})
    assert r.status_code == 200, r.text
    # a competition with its hidden labels (docs/teachers/competitions.md): the panel's section
    ends = (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()
    r = api(hub, "POST", f"courses/{COURSE}/competitions", tokens["teacher1"],
            json={"name": "digits", "title": "Cats or dogs", "metric": "accuracy", "ends_at": ends,
                  "daily_limit": 3})
    assert r.status_code == 201, r.text
    r = api(hub, "PUT", f"courses/{COURSE}/competitions/digits/labels", tokens["teacher1"],
            data=f"id,label\n{LABELS}".encode(), headers={"Content-Type": "text/csv"})
    assert r.status_code == 200, r.text


def server_api(hub: LocalHub, owner: str, method: str, path: str, token: str, **kwargs) -> requests.Response:
    return requests.request(method, f"{hub.url}/user/{owner}/{path}", timeout=30,
                            headers={"Authorization": f"token {token}"}, **kwargs)


@pytest.fixture(scope="module")
def servers(hub: LocalHub, tokens: dict[str, str], course: None) -> None:
    start_servers(hub, {user: tokens[user] for user in ("student1", "ta1")})
    r = server_api(hub, "student1", "PUT", "api/contents/week1.ipynb", tokens["student1"],
                   json={"type": "notebook", "content": NOTEBOOK})
    assert r.status_code in (200, 201), r.text


def open_lab(page, hub: LocalHub, user: str, path: str = "lab") -> None:
    hub_login(page, hub.url, user, hub.password)
    page.goto(f"{hub.url}/user/{user}/{path}")
    page.wait_for_selector(LAB_READY, timeout=90_000)
    page.wait_for_selector(PANEL_TAB, timeout=60_000)


def test_student_opens_the_panel_and_sees_quota_and_templates(page, hub, servers) -> None:
    open_lab(page, hub, "student1", "lab?reset")
    clicks = Clicks(page)
    clicks.click(PANEL_TAB)
    panel = page.locator("#classhub-panel")
    panel.get_by_role("heading", name="Quota").wait_for()
    assert clicks.count == 1
    # the running server holds one of one allowed server: a full bar, with the numbers
    assert panel.get_by_text("Servers: 1 of 1").is_visible()
    assert panel.get_by_label(f"{COURSE}: GPU-hours this week, 0.0 of 10 h").count() == 1
    assert panel.get_by_text("CPU cores:").count() == 1
    templates = panel.locator("section[aria-labelledby='classhub-templates']")
    assert templates.get_by_text(f"lab1 ({COURSE})").is_visible()
    assert templates.get_by_role("button", name="Start or re-seed from lab1").is_visible()
    assert panel.get_by_role("heading", name="My server").is_visible()
    screenshot(page, "lab-panel")
    # palette commands exist for the panel's actions
    palette = page.locator(".lm-CommandPalette-content")
    box = page.locator(".lm-CommandPalette-input")
    labels = ("Open the classhub panel", "classhub: Share…", "classhub: Keep my server running",
              "classhub: Submit as job…")

    def listed() -> bool:
        if not (box.is_visible() and box.input_value() == "classhub"):
            palette_search(page, "classhub")  # opened again when JupyterLab closed it meanwhile
        return all(palette.get_by_text(label, exact=True).count() == 1 for label in labels)

    wait_for(listed, 60, f"the command palette listing {labels}")
    page.keyboard.press("Escape")

    # JupyterLab's dark theme: the panel takes its colours from the theme
    for theme, dark in (("JupyterLab Dark", True), ("JupyterLab Light", False)):
        use_theme(page, theme)
        # the theme's stylesheet applies in steps: wait until the background and the text both
        # follow it (the text stays readable: light on dark, dark on light)
        wait_for(lambda d=dark: is_dark(page, "#classhub-panel") == d
                 and is_dark(page, "#classhub-panel h3", "color") != d, 30, f"the panel in {theme}")


def palette_search(page, text: str) -> None:
    """Type ``text`` into JupyterLab's command palette. The palette is a modal that closes when it
    loses the focus (a panel refresh may take it), so this waits until the search box is open and
    holds the text, opening it again by its shortcut from the main area when it closed."""
    box = page.locator(".lm-CommandPalette-input")

    def searching() -> bool:
        if not box.is_visible():
            page.locator("#jp-main-dock-panel").click(position={"x": 5, "y": 5})
            page.keyboard.press("Control+Shift+C")
        try:
            box.fill(text, timeout=2000)
        except PlaywrightTimeout:
            return False
        return box.is_visible() and box.input_value() == text

    wait_for(searching, 30, f"the command palette searching {text!r}")


def use_theme(page, theme: str) -> None:
    """Choose ``theme`` in the command palette, as a user does, until JupyterLab says it is in use
    (``data-jp-theme-name`` on the body). The palette closes when a panel refresh takes the focus,
    even between the search and the Enter: then it is opened and searched again."""
    item = page.locator(".lm-CommandPalette-item.lm-mod-active", has_text=f"Use Theme: {theme}")

    def in_use() -> bool:
        if page.evaluate("document.body.dataset.jpThemeName") == theme:
            return True
        palette_search(page, f"Use Theme: {theme}")
        try:
            item.wait_for(timeout=5000)
        except PlaywrightTimeout:
            return False
        page.keyboard.press("Enter")  # the palette re-renders its items as it filters: no click target
        try:
            page.wait_for_function(f"document.body.dataset.jpThemeName === {theme!r}", timeout=5000)
        except PlaywrightTimeout:
            return False
        return True

    wait_for(in_use, 60, f"JupyterLab to use the theme {theme!r}")


def is_dark(page, selector: str, prop: str = "backgroundColor") -> bool:
    """Whether the element's colour (``prop``) is dark (relative luminance under 0.3)."""
    rgb = page.evaluate(f"getComputedStyle(document.querySelector({selector!r})).{prop}")
    r, g, b = (int(x) / 255 for x in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.3


def test_student_shares_from_the_file_browser_and_the_ta_opens_it_read_only(browser, hub, tokens,
                                                                              servers) -> None:
    student = browser.new_context(viewport={"width": 1280, "height": 900})
    ta = browser.new_context(viewport={"width": 1280, "height": 900})
    student.set_default_timeout(30_000)
    ta.set_default_timeout(30_000)
    try:
        page = student.new_page()
        open_lab(page, hub, "student1", "lab?reset")  # JupyterLab's default layout: the file browser
        clicks, dialog = context_menu_dialog(page, "week1.ipynb", "Share…")
        # each label on its control's line, for every choice of "With" (the course's select is
        # shown only for "My course")
        form = dialog.locator(".classhub-share-form")
        dialog.get_by_label("With").select_option("course")
        assert dialog.get_by_label("Course").is_visible()
        assert form_layout_problems(form) == []
        dialog.get_by_label("With").select_option("user")
        dialog.get_by_label("User name").fill("ta1")
        assert form_layout_problems(form) == []
        screenshot(page, "lab-share")
        clicks.click_locator(dialog.get_by_role("button", name="Share"))
        page.get_by_text("Shared week1.ipynb with ta1.").wait_for()
        assert clicks.count <= 3, clicks.count
        made = api(hub, "GET", "shares", tokens["student1"]).json()
        mine = made["shares"] if isinstance(made, dict) else made
        assert [(s["kind"], s["target"], s["path"]) for s in mine if s["active"]] == [
            ("read-only", "ta1", "week1.ipynb")]

        # the TA: their own JupyterLab, the panel, "Shared with me" -> a new tab
        tapage = ta.new_page()
        open_lab(tapage, hub, "ta1")
        ta_clicks = Clicks(tapage)
        ta_clicks.click(PANEL_TAB)
        link = tapage.locator(".classhub-shared-with-me a", has_text="week1.ipynb from student1")
        with ta.expect_page() as opened:
            ta_clicks.click_locator(link)
        nb = opened.value
        nb.set_default_timeout(60_000)
        authorize = nb.get_by_role("button", name="Authorize")
        wait_for(lambda: nb.locator(LAB_READY).count() or authorize.count(), 90,
                 "JupyterLab or the hub's question whether student1's server may identify the TA")
        if authorize.count():
            # JupyterHub asks once whether student1's server may identify the TA: the hub's own
            # one-time question for any server not one's own, not a step of the panel
            authorize.click()
        nb.wait_for_selector(LAB_READY, timeout=90_000)
        assert ta_clicks.count <= 2, ta_clicks.count
        banner = nb.locator(".classhub-banner")
        banner.wait_for()
        assert "Read-only: shared by student1" in banner.inner_text()
        cell = nb.locator(".jp-Cell .cm-content", has_text="print(6 * 7)").first
        cell.wait_for()
        cell.click()
        nb.keyboard.type("import os")
        nb.keyboard.press("Enter")
        assert cell.inner_text() == "print(6 * 7)"
        # no kernel was started, and no dialog about one
        assert nb.locator(".jp-Dialog").count() == 0
        sessions = server_api(hub, "student1", "GET", "api/sessions", tokens["student1"]).json()
        assert sessions == []
        # JupyterLab's read-only document: never marked unsaved; Shift+Enter and "Save as" say
        # why they do nothing (no "Select Kernel", the saved outputs stay)
        tab = nb.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="week1.ipynb")
        assert "jp-mod-dirty" not in (tab.get_attribute("class") or "")
        nb.keyboard.press("Shift+Enter")
        nb.locator(".Toastify__toast", has_text="Shared read-only: it does not run here").wait_for()
        assert nb.locator(".jp-Dialog").count() == 0
        assert nb.locator(".jp-OutputArea-output", has_text="42").is_visible()
        nb.keyboard.press("Control+Shift+S")  # JupyterLab's "Save As…"
        nb.locator(".Toastify__toast", has_text="nothing is saved here").wait_for()
        assert nb.locator(".jp-Dialog").count() == 0
        assert "jp-mod-dirty" not in (tab.get_attribute("class") or "")
        # the file browser lists what is shared, nothing else
        assert nb.locator(".jp-DirListing-itemName").all_inner_texts() == ["week1.ipynb"]
        screenshot(nb, "lab-readonly")
        # JupyterLab's polling (kernels, sessions, terminals, the folder, its layout) is answered,
        # not refused: 10 s of the TA looking leave no refusal in student1's server log
        seen = len(hub.log_path.read_text(errors="replace"))
        nb.wait_for_timeout(10_000)
        window = hub.log_path.read_text(errors="replace")[seen:].splitlines()
        refused = [line for line in window
                   if "/user/student1/" in line and (" 403 " in line or "classhub: refused" in line)]
        assert refused == [], "\n".join(refused)

        banner.get_by_role("button", name="Copy to my server").click()
        nb.get_by_text("Copied to your server as week1-from-student1.ipynb.").wait_for()
        copy = server_api(hub, "ta1", "GET", "api/contents/week1-from-student1.ipynb", tokens["ta1"])
        assert copy.status_code == 200, copy.text
        assert copy.json()["writable"] is True
        assert copy.json()["content"]["cells"][0]["source"] == "print(6 * 7)"
        edited = {**NOTEBOOK, "cells": [{**NOTEBOOK["cells"][0], "source": "print('mine now')"}]}
        r = server_api(hub, "ta1", "PUT", "api/contents/week1-from-student1.ipynb", tokens["ta1"],
                       json={"type": "notebook", "content": edited})
        assert r.status_code == 200, r.text
        # the student's notebook is untouched, outputs included
        original = server_api(hub, "student1", "GET", "api/contents/week1.ipynb", tokens["student1"]).json()
        assert original["content"]["cells"][0]["source"] == "print(6 * 7)"
        assert original["content"]["cells"][0]["outputs"][0]["text"] == "42\n"
        # closing the read-only notebook asks nothing
        tab.locator(".lm-TabBar-tabCloseIcon").click()
        tab.wait_for(state="detached")
        assert nb.locator(".jp-Dialog").count() == 0
    finally:
        student.close()
        ta.close()


def test_student_submits_a_script_as_a_job_and_reads_its_log(page, hub, tokens, servers) -> None:
    r = server_api(hub, "student1", "PUT", "api/contents/hello_job.py", tokens["student1"],
                   json={"type": "file", "format": "text", "content": SCRIPT})
    assert r.status_code in (200, 201), r.text
    open_lab(page, hub, "student1", "lab?reset")  # the file browser
    clicks, dialog = context_menu_dialog(page, "hello_job.py", "Submit as job…")
    assert dialog.get_by_label("Replicas").input_value() == "1"
    assert dialog.get_by_label("GPUs per replica").input_value() == "0"
    assert dialog.get_by_label("Course").count() == 0  # in one course: not asked
    screenshot(page, "lab-submit-job")
    clicks.click_locator(dialog.get_by_role("button", name="Submit"))  # the defaults as they are
    page.locator(".Toastify__toast", has_text=f"Submitted hello-job ({COURSE})").wait_for()
    jobs = [j for j in api(hub, "GET", "jobs", tokens["student1"]).json()["jobs"] if j["name"] == "hello-job"]
    assert [(j["command"], j["course"], j["roles"][0]["replicas"]) for j in jobs] == [
        (["python", "hello_job.py"], COURSE, 1)]

    # the Jobs section lists it; "Logs" opens its log in the main area, read while it runs
    clicks.click(PANEL_TAB)
    row = page.locator("#classhub-panel .classhub-jobs li", has_text=f"hello-job ({COURSE})")
    row.wait_for()
    clicks.click_locator(row.get_by_role("button", name="Logs of job hello-job"))
    log = page.locator(".classhub-job-log-text")
    wait_for(lambda: "job output: 42 in student1" in log.inner_text(), 90, "the job's output in its log")
    assert clicks.count == 5, clicks.count
    page.locator(".classhub-job-log-status", has_text="succeeded").wait_for(timeout=60_000)
    # the panel follows the job to its end without a refresh
    row.filter(has_text="succeeded").wait_for(timeout=30_000)
    assert row.get_by_role("button", name="Cancel job hello-job").count() == 0
    screenshot(page, "lab-job-log")

    # a competition from the panel: select the predictions CSV in the file browser, Submit…;
    # the score comes back as a notification, the panel shows the rank and what is left today
    r = server_api(hub, "student1", "PUT", "api/contents/predictions.csv", tokens["student1"],
                   json={"type": "file", "format": "text",
                         "content": "id,prediction\n" + LABELS})
    assert r.status_code in (200, 201), r.text
    clicks = Clicks(page)
    clicks.click(".jp-SideBar .lm-TabBar-tab[data-id='filebrowser']")
    clicks.click_locator(page.locator(".jp-DirListing-item[title*='predictions.csv']"))
    clicks.click(PANEL_TAB)
    competition = page.locator("#classhub-panel .classhub-competitions li[data-competition=digits]")
    assert "not submitted yet; 3 of 3 left today" in competition.inner_text()
    clicks.click_locator(competition.get_by_role("button", name="Submit a predictions CSV to Cats or dogs",
                                                 exact=False))
    page.locator(".Toastify__toast", has_text="Scored Cats or dogs: public accuracy 1.0000.").wait_for()
    # minutes into this JupyterLab, JupyterLab's own question whether to fetch Jupyter's news (a
    # toast at its start) never came: classhub's settings answer it (setup.py, OVERRIDES)
    assert page.locator(".Toastify__toast", has_text="Jupyter news").count() == 0
    notification = server_api(hub, "student1", "GET",
                              "lab/api/settings/@jupyterlab/apputils-extension:notification",
                              tokens["student1"]).json()["schema"]["properties"]
    defaults = (notification["fetchNews"]["default"], notification["checkForUpdates"]["default"])
    assert defaults == ("false", False), defaults
    competition.filter(has_text="best public accuracy 1.0000, rank 1 of 1; 2 of 3 left today").wait_for()
    assert clicks.count == 4, clicks.count
    mine = api(hub, "GET", f"courses/{COURSE}/competitions/digits/submissions", tokens["student1"]).json()
    assert len(mine) == 1 and mine[0]["public_score"] == 1.0
    # the competition's line is long (its end, score, rank, what is left): its buttons wrap
    # under it in the narrow panel instead of being cut off at its edge
    assert cut_off_at_the_right(page, "#classhub-panel", "button") == []
    assert re.search(r"ends [A-Z][a-z]{2} \d{1,2}, \d{4}, \d{1,2}:\d\d\s?[AP]M:", competition.inner_text()), (
        "the panel shows times as the classhub pages do")
    screenshot(page, "lab-competition")


def culling_policy(hub: LocalHub, admin_token: str) -> None:
    """The course's servers are warned after 10 s of idleness and would be stopped after 4
    minutes (an admin's course policy, docs/admins/culler.md): long enough for the test, short
    enough to see a warning. The warning comes no earlier than 10 s after the server's last
    activity, and the cull no earlier than 230 s after the warning."""
    for kind in ("gpu", "mig", "shared", "cpu"):
        r = api(hub, "PUT", f"culling/courses/{COURSE}/policy", admin_token,
                json={"kind": kind, "idle_timeout": 240, "warn_before": 230})
        assert r.status_code == 200, r.text


def _last_activity(hub: LocalHub, token: str) -> datetime:
    model = requests.get(f"{hub.url}/hub/api/users/student1", headers={"Authorization": f"token {token}"},
                         timeout=10).json()
    return datetime.fromisoformat(model["servers"][""]["last_activity"].replace("Z", "+00:00"))


def test_culler_warning_is_a_notification_with_a_working_keep_running(page, hub, tokens, servers) -> None:
    """Last in the module: the course's short culling policy would stop its servers."""
    culling_policy(hub, tokens["admin"])
    token = tokens["student1"]
    start_server(hub, "student1", token)  # running since the `servers` fixture
    open_lab(page, hub, "student1")
    toast = page.locator(".Toastify__toast", has_text="will be stopped in")
    toast.wait_for(timeout=90_000)
    assert "because it is idle" in toast.inner_text()
    warned = api(hub, "GET", "culling/me", token).json()["warnings"]
    assert [w["server_name"] for w in warned] == [""]
    screenshot(page, "lab-culler")

    clicked = datetime.now(timezone.utc)
    toast.get_by_role("button", name="Keep running").click()
    page.get_by_text("Your server keeps running.").wait_for()
    wait_for(lambda: page.locator(".Toastify__toast", has_text="will be stopped in").count() == 0, 10,
             "the warning's notification to close")
    # the hub now says the server was used just now: what the culler decides from
    assert _last_activity(hub, token) >= clicked - timedelta(seconds=2)

    def warning_moved() -> bool:
        now = api(hub, "GET", "culling/me", token).json()["warnings"]
        return all(w["cull_at"] > warned[0]["cull_at"] for w in now)

    wait_for(warning_moved, 60, "the culler to drop (or push back) the warning after 'keep running'")
    server = requests.get(f"{hub.url}/hub/api/users/student1", headers={"Authorization": f"token {token}"},
                          timeout=10).json()["servers"][""]
    assert server["ready"]
