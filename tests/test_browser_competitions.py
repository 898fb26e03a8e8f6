"""Competitions in Chromium against a real ``classhub local`` hub (docs/teachers/competitions.md).

The journey of a challenge: the teacher creates a competition with the course page's form,
picking the hidden labels file in the same form (a broken file first: its sentence, then the
fixed one with the same Create); three students submit predictions (the first
with the page's upload, the other two through the API, as a script or the JupyterLab panel
would); the first student reads the public leaderboard with their rank and how many submissions
they have left today; the teacher sees both splits; after the end (moved through the API, the
way the other tests move dates) the student reads the final, private leaderboard. Each step
counts its clicks, picking a file in the browser's file chooser being one. In between, the
teacher lets the competition take notebooks on its card, and the student's "Submit notebook"
shows it pending until its job has run, then the page shows it scored.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest
import requests
from nbformat.v4 import new_code_cell, new_notebook

from tests.browser import Clicks, hub_login, screenshot
from tests.hubproc import HubSession, LocalHub, api
from tests.tutorial import follows_the_tutorial

pytestmark = pytest.mark.browser

COURSE = "demo101"
C = f"courses/{COURSE}/competitions"
IDS = [f"img{i:03d}" for i in range(20)]
TRUTH = {k: ("cat" if i % 3 else "dog") for i, k in enumerate(IDS)}
TEACHER_CREATES = 2  # the labels file's chooser, then Create (the other fields are typed)
STUDENT_SUBMITS = 2  # the predictions file's chooser, then Submit predictions
TEACHER_TAKES_NOTEBOOKS = 2  # open "Notebooks and scoring script", then Take notebooks (profile typed)
CONFIG = """
c.ClasshubLocalSpawner.profiles = [
    {"slug": "cpu", "display_name": "CPU only", "kind": "cpu", "default": True},
]
c.ClasshubJobs.gpu_discovery_command = ["true"]
c.ClasshubJobs.use_nvml = False
c.ClasshubJobs.interval = 0.5
"""


def _predictions(wrong: int) -> bytes:
    """A predictions file with its first ``wrong`` answers flipped."""
    flip = {"cat": "dog", "dog": "cat"}
    rows = [(k, v if i >= wrong else flip[v]) for i, (k, v) in enumerate(TRUTH.items())]
    return ("id,prediction\n" + "".join(f"{k},{v}\n" for k, v in rows)).encode()


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    data = hub_root / "competitions-browser"
    data.mkdir()
    (data / "jupyterhub_config.py").write_text(CONFIG)  # a profile for the notebooks' jobs
    hub = LocalHub(data_dir=data).start()
    yield hub
    hub.stop()


def _course_page(page, hub: LocalHub) -> None:
    page.goto(f"{hub.url}/services/classhub/courses/{COURSE}")
    page.wait_for_selector("#competitions")


def _pick(clicks: Clicks, selector: str, path: Path) -> None:
    """Choose ``path`` in the file chooser a click on ``selector`` opens (one click)."""
    with clicks.page.expect_file_chooser() as chooser:
        clicks.click(selector)
    chooser.value.set_files(str(path))


def _board(page, split: str) -> list[list[str]]:
    rows = page.locator(f".classhub-competition[data-competition=digits] table[data-split={split}] tbody tr")
    return [[cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()]
            for i in range(rows.count())]


def test_create_with_labels_three_submissions_and_both_leaderboards(hub, browser, tmp_path: Path):
    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\n" + "".join(f"{k},{v}\n" for k, v in TRUTH.items()))
    mine = tmp_path / "predictions.csv"
    mine.write_bytes(_predictions(wrong=2))  # 90% right

    # the teacher creates it and uploads the hidden labels in one form
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    hub_login(page, hub.url, "teacher1", hub.password)
    _course_page(page, hub)
    clicks = Clicks(page)
    page.fill("#cc-name", "digits")
    page.fill("#cc-title", "Cats or dogs")
    page.fill("#cc-public", "0.5")
    page.fill("#cc-limit", "2")
    ends = datetime.now().astimezone() + timedelta(hours=2)  # the browser's local time
    page.fill("#cc-ends", ends.strftime("%Y-%m-%dT%H:%M"))
    # a labels file with a repeated id: the sentence says which line to fix, the form keeps the
    # fields, and Create with the fixed file uploads the labels of the competition already made
    broken = tmp_path / "broken.csv"
    broken.write_text("id,label\nimg000,dog\nimg000,cat\n")
    _pick(clicks, "#cc-labels", broken)
    clicks.click("#create-competition button[type=submit]")
    page.wait_for_selector("#cc-status:has-text(\"repeats the id 'img000'\")")
    clicks = Clicks(page)
    _pick(clicks, "#cc-labels", labels)
    clicks.click("#create-competition button[type=submit]")
    page.wait_for_selector("#page-status:has-text('Created digits with 20 hidden labels.')")
    assert clicks.count == TEACHER_CREATES
    follows_the_tutorial(clicks, "TEACHER_CREATES_COMPETITION")
    card = page.locator(".classhub-competition[data-competition=digits]")
    assert "Cats or dogs" in card.inner_text() and "no hidden labels yet" not in card.inner_text()

    # two students submit through the API (all wrong, all right: ranked last and first on any split);
    # student3 is not a demo login: the admin adds them and makes their token
    admin = HubSession(hub, "admin").new_token()
    r = api(hub, "PUT", f"courses/{COURSE}/members", admin,
            json={"add": [{"username": "student3", "role": "student"}]})
    assert r.status_code == 200, r.text
    r = requests.post(f"{hub.url}/hub/api/users/student3/tokens", json={"expires_in": 3600},
                      headers={"Authorization": f"token {admin}"}, timeout=30)
    assert r.status_code == 201, r.text
    tokens = {"student2": HubSession(hub, "student2").new_token(), "student3": r.json()["token"]}
    for student, wrong in (("student2", len(IDS)), ("student3", 0)):
        token = tokens[student]
        r = api(hub, "POST", f"{C}/digits/submissions", token, data=_predictions(wrong),
                headers={"Content-Type": "text/csv"})
        assert r.status_code == 201, r.text

    # the first student uploads on the page: the score, their rank, one submission left today
    scontext = browser.new_context(viewport={"width": 1280, "height": 900})
    spage = scontext.new_page()
    hub_login(spage, hub.url, "student1", hub.password)
    _course_page(spage, hub)
    scard = spage.locator(".classhub-competition[data-competition=digits]")
    assert "2 left today" in scard.inner_text()
    clicks = Clicks(spage)
    _pick(clicks, "#cp-digits", mine)
    clicks.click(".classhub-competition[data-competition=digits] .classhub-competition-submit button")
    spage.wait_for_selector("#page-status:has-text('Scored digits: public score')")
    assert clicks.count == STUDENT_SUBMITS
    follows_the_tutorial(clicks, "STUDENT_SUBMITS_PREDICTIONS")
    assert "1 left today" in scard.inner_text()
    assert spage.locator(".classhub-my-predictions tbody tr").count() == 1
    public = _board(spage, "public")
    assert [(r[0], r[1]) for r in public] == [("1", "student3"), ("2", "student1"), ("3", "student2")]
    assert public[0][2] == "1.0000" and all(r[3] for r in public)  # the score, the time of the best
    assert spage.locator("table[data-split=private]").count() == 0  # private: after the end
    assert spage.locator(".classhub-leaderboard tr.table-primary").inner_text().split()[1] == "student1"
    screenshot(spage, "page-competition-student")

    # notebooks: the teacher lets the competition take them on its card; the student's notebook
    # (it waits for the test's go, so its pending state is seen) is scored when its job has run
    _course_page(page, hub)
    clicks = Clicks(page)
    digits = ".classhub-competition[data-competition=digits]"
    clicks.click(f"{digits} .classhub-competition-jobs summary")
    page.fill("#cr-profile-digits", "cpu")
    clicks.click(f"{digits} .classhub-competition-runner button[type=submit]")
    page.wait_for_selector("#page-status:has-text('digits takes notebooks: they run on cpu and write "
                           "predictions.csv')")
    assert clicks.count == TEACHER_TAKES_NOTEBOOKS
    follows_the_tutorial(clicks, "TEACHER_TAKES_NOTEBOOKS")
    gate = Path(tempfile.mkdtemp(prefix="classhub-gate-"))
    os.chmod(gate, 0o755)
    notebook = tmp_path / "model.ipynb"
    notebook.write_text(nbformat.writes(new_notebook(cells=[new_code_cell(
        f"import os, time\nwhile not os.path.exists({str(gate / 'go')!r}):\n    time.sleep(0.2)\n"
        f"open('predictions.csv', 'w').write({mine.read_text()!r})\n")])))
    try:
        _course_page(spage, hub)
        clicks = Clicks(spage)
        _pick(clicks, "#cn-digits", notebook)
        clicks.click(f"{digits} .classhub-competition-notebook button")
        spage.wait_for_selector("#page-status:has-text('Submitted your notebook to digits')")
        assert clicks.count == STUDENT_SUBMITS
        follows_the_tutorial(clicks, "STUDENT_SUBMITS_NOTEBOOK")
        spage.wait_for_selector('.classhub-my-predictions tr[data-state="pending"] '
                                '.badge:has-text("pending")')
        assert "0 left today" in scard.inner_text()  # the pending notebook holds the day's last place
        screenshot(spage, "page-competition-notebook-pending")
        (gate / "go").touch()
        spage.wait_for_selector("#page-status:has-text('Your submission to digits was scored.')",
                                timeout=180_000)
    finally:
        shutil.rmtree(gate, ignore_errors=True)
    assert spage.locator('.classhub-my-predictions tr[data-state="scored"]').count() == 2

    # the teacher sees both splits, and how many took part
    _course_page(page, hub)
    assert len(_board(page, "public")) == 3 and len(_board(page, "private")) == 3
    assert "3 student(s) submitted." in card.inner_text()

    # after the end: the final, private leaderboard for the students, and no more uploads
    teacher = HubSession(hub, "teacher1").new_token()
    now = datetime.now(timezone.utc)
    r = api(hub, "PUT", f"{C}/digits", teacher, json={"opens_at": (now - timedelta(days=1)).isoformat(),
                                                      "ends_at": (now - timedelta(minutes=1)).isoformat()})
    assert r.status_code == 200, r.text
    _course_page(spage, hub)
    final = _board(spage, "private")
    assert len(final) == 3 and final[0][1] == "student3" and final[2][1] == "student2"
    assert "Private leaderboard (final)" in scard.inner_text() and "closed" in scard.inner_text()
    assert spage.locator("table[data-split=public]").count() == 0
    assert spage.locator("#cp-digits").is_disabled()
    scontext.close()
    context.close()
    assert requests.get(f"{hub.url}/services/classhub/api/health", timeout=10).status_code == 200
