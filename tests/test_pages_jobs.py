"""The Jobs page (``/services/classhub/jobs``) fetched like a browser does, on the session's hub
with the job service and a 3-GPU inventory (the same hub configuration as test_jobs_hub).

What a person sees: a job that waits shows its state, its place in the queue and why it waits,
and Home counts it; a teacher sees the course's queue in queue order with Cancel, a TA sees it
without Cancel (the API refuses them), another student sees none of it and is refused; Cancel,
called as the page calls it (the page's XSRF token and the login cookie), cancels; a submit the
API refuses answers its sentence and queues nothing. Without the job service the page says jobs
are not enabled and no nav bar offers them.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta, timezone
from html import unescape
from html.parser import HTMLParser

import pytest

from tests.hubproc import HubSession, api, traits, wait_for
from tests.test_jobs_hub import CONFIG
from tests.test_jobs_hub import JOBS as JOB_TRAITS

JOBS = "/services/classhub/jobs"
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


class _Rows(HTMLParser):
    """The job rows of a page: (table id, job id) -> the cells' text and the buttons offered."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, str], dict] = {}
        self.sections: list[str] = []
        self._table = ""
        self._row: dict | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.sections.append(a["id"] or "")
        if tag == "table":
            self._table = a.get("id") or ""
        elif tag == "tr" and "classhub-job" in (a.get("class") or ""):
            self._row = {"state": a.get("data-state"), "cells": [], "buttons": []}
            self.rows[(self._table, a.get("data-id") or "")] = self._row
        elif tag == "td" and self._row is not None:
            self._row["cells"].append("")
        elif tag == "button" and self._row is not None:
            self._row["buttons"].append((a.get("class") or "").split()[-1])

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._row["cells"]:
            self._row["cells"][-1] += data


def rows(html: str) -> _Rows:
    parser = _Rows()
    parser.feed(html)
    return parser


def cells(row: dict) -> dict[str, str]:
    names = ("job", "who", "state", "size", "place", "why", "submitted", "started")
    return {n: " ".join(unescape(c).split()) for n, c in zip(names, row["cells"], strict=False)}


def page_api(session: HubSession, method: str, path: str, **kwargs):
    """Call the API as the page's script does: the login cookie and the page's XSRF token."""
    html = session.get(JOBS).text
    xsrf = re.search(r'"X-XSRFToken": "([^"]+)"', html).group(1)
    return session.http.request(method, f"{session.hub.url}/services/classhub/api/{path}", timeout=30,
                                headers={"X-XSRFToken": xsrf, "Accept": "application/json"}, **kwargs)


@pytest.fixture(scope="module")
def hub(shared_hubs):
    return shared_hubs.get(CONFIG + traits(JOB_TRAITS))


@pytest.fixture(scope="module")
def people(hub) -> dict[str, HubSession]:
    return {u: HubSession(hub, u) for u in ("teacher1", "ta1", "student1", "student2")}


@pytest.fixture(scope="module")
def waiting(hub, people):
    """student1's "holder" runs on all 3 GPUs; "waiter" (1 GPU) waits for them."""
    token = people["student1"].new_token()
    holder = api(hub, "POST", "jobs", token, json={"name": "holder", "command": SLEEP,
                                                   "resources": {"nvidia.com/gpu": 3}})
    assert holder.status_code == 201, holder.text
    holder = holder.json()["id"]
    wait_for(lambda: api(hub, "GET", f"jobs/{holder}", token).json()["state"] == "running", 60,
             "holder running")
    waiter = api(hub, "POST", "jobs", token, json={"name": "waiter", "command": ["true"],
                                                   "resources": {"nvidia.com/gpu": 1}}).json()["id"]
    wait_for(lambda: api(hub, "GET", f"jobs/{waiter}", token).json()["reason_code"], 30, "a reason")
    yield {"holder": holder, "waiter": waiter, "token": token}
    for job_id in (holder, waiter):
        api(hub, "POST", f"jobs/{job_id}/cancel", token)
    for job_id in (holder, waiter):
        wait_for(lambda j=job_id: api(hub, "GET", f"jobs/{j}", token).json()["state"]
                 in ("cancelled", "succeeded", "failed"), 30, f"{job_id} to end")


@pytest.mark.hub
def test_my_jobs_show_their_state_place_and_why_one_waits(people, waiting):
    student = people["student1"]
    r = student.get(JOBS)
    assert r.status_code == 200 and "text/html" in r.headers["Content-Type"]
    assert f'href="{JOBS}"' in r.text  # the nav bar and the tabs link the page
    page = rows(r.text)
    holder = page.rows[("my-jobs-table", waiting["holder"])]
    waiter = page.rows[("my-jobs-table", waiting["waiter"])]
    assert cells(holder)["state"] == "running" and cells(holder)["size"] == "1 x 3 nvidia.com/gpu"
    assert cells(holder)["started"] and cells(holder)["why"] == ""
    got = cells(waiter)
    assert got["state"] == "queued" and got["who"] == "demo101" and got["place"] == "1"
    # the first blocked job holds the reservation: it starts when the holder ends, and says so
    assert "next to start" in got["why"] and "1st in demo101's queue" in got["why"], got
    assert "waits for what your job holder (until " in got["why"], got
    # its estimate is the holder's max runtime's end, the time the sentence names; times go out
    # as ISO 8601, which the page shows in the reader's one format (data-local-times)
    job = {j: api(student.hub, "GET", f"jobs/{waiting[j]}", waiting["token"]).json()
           for j in ("holder", "waiter")}
    ends = datetime.fromisoformat(job["holder"]["started_at"]) + \
        timedelta(seconds=job["holder"]["max_runtime"])
    estimate = datetime.fromisoformat(job["waiter"]["estimated_start"])
    assert abs((estimate - ends).total_seconds()) < 1, (estimate, ends)
    assert f"(until {ends.astimezone(timezone.utc):%Y-%m-%dT%H:%M}Z at the latest)" in got["why"], got
    assert re.search(r'class="job-reason[^"]*" data-local-times>', r.text)
    assert "classhub-logs" in waiter["buttons"] and "classhub-cancel" in waiter["buttons"]
    assert not any(s.startswith("queue-") for s in page.sections)  # a student sees no queue
    assert '<option>demo101</option>' in r.text  # the submit form's course
    home = " ".join(unescape(re.sub(r"<[^>]+>", " ", student.get("/services/classhub/").text)).split())
    assert "Mine: 1 running, 1 waiting." in home, home
    # the counts the home page's script asks every few seconds: mine, and my courses' for staff
    assert page_api(student, "GET", "job-counts").json() == {
        "mine": {"running": 1, "waiting": 1}, "courses": {}}
    teacher = page_api(people["teacher1"], "GET", "job-counts").json()  # (other modules' jobs too)
    assert teacher["courses"]["demo101"]["running"] >= 1 <= teacher["courses"]["demo101"]["waiting"]
    teacher_home = people["teacher1"].get("/services/classhub/").text
    assert re.search(r'<li data-course="demo101">demo101: <span data-count="running">\d+</span> running, '
                     r'<span data-count="waiting">\d+</span> waiting', teacher_home)


@pytest.mark.hub
def test_staff_see_the_course_queue_and_cancel_only_where_the_api_allows(hub, people, waiting):
    holder, waiter = waiting["holder"], waiting["waiter"]
    teacher = rows(people["teacher1"].get(JOBS).text)
    queue = [job for (table, job) in teacher.rows if table == "queue-table-demo101"]
    assert queue.index(holder) < queue.index(waiter)  # running first, then by place in the queue
    row = teacher.rows[("queue-table-demo101", waiter)]
    assert cells(row)["who"] == "student1" and "classhub-cancel" in row["buttons"]
    ta = rows(people["ta1"].get(JOBS).text)
    row = ta.rows[("queue-table-demo101", waiter)]
    assert "classhub-logs" in row["buttons"] and "classhub-cancel" not in row["buttons"]
    refused = page_api(people["ta1"], "POST", f"jobs/{waiter}/cancel")
    assert refused.status_code == 403 and "only teachers of demo101" in refused.json()["message"]
    other = people["student2"].get(JOBS).text
    assert waiter not in other and "queue-demo101" not in other
    refused = page_api(people["student2"], "POST", f"jobs/{waiter}/cancel")
    assert refused.status_code == 404
    assert f"No job {waiter} among the jobs you can see" in refused.json()["message"]


@pytest.mark.hub
def test_cancel_as_the_page_does_it(hub, people, waiting):
    r = page_api(people["student1"], "POST", f"jobs/{waiting['waiter']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
    r = page_api(people["teacher1"], "POST", f"jobs/{waiting['holder']}/cancel")
    assert r.status_code == 202, r.text
    wait_for(lambda: api(hub, "GET", f"jobs/{waiting['holder']}", waiting["token"]).json()["state"]
             == "cancelled", 30, "holder cancelled")
    page = rows(people["student1"].get(JOBS).text)
    for job_id in (waiting["holder"], waiting["waiter"]):
        row = page.rows[("my-jobs-table", job_id)]
        assert cells(row)["state"] == "cancelled" and "classhub-cancel" not in row["buttons"]


@pytest.mark.hub
def test_a_bad_submit_answers_the_apis_sentence_and_queues_nothing(hub, people):
    student = people["student1"]
    before = len(rows(student.get(JOBS).text).rows)
    # what the form posts for 4 replicas x 1 GPU on a 3-GPU hub
    r = page_api(student, "POST", "jobs", json={"course": "demo101", "command": ["true"], "replicas": 4,
                                                 "resources": {"cpu": "1", "nvidia.com/gpu": 1}})
    assert r.status_code == 400 and "can never start" in r.json()["message"], r.text
    r = page_api(student, "POST", "jobs", json={"course": "demo101", "command": ["true"],
                                                 "name": "no spaces please", "resources": {"cpu": "1"}})
    assert r.status_code == 400 and "job name" in r.json()["message"], r.text
    assert len(rows(student.get(JOBS).text).rows) == before


@pytest.mark.unit
def test_without_the_job_service_the_page_says_so_and_no_nav_offers_jobs():
    from hub_ext.core.authz import Caller
    from hub_ext.service.pages.render import environment

    namespace = {"base_url": "/hub/", "prefix": "/", "classhub": "/services/classhub/",
                 "caller": Caller(name="student1"), "user": None, "static_url": lambda p, **k: p,
                 "classhub_static": lambda p: p, "xsrf_token": "x", "page_title": "classhub: jobs",
                 "services": [], "parsed_scopes": set(), "classhub_jobs": False}
    html = environment().get_template("jobs.html").render(**namespace, enabled=False)
    assert "Distributed jobs are not enabled on this hub." in html
    assert f'href="{JOBS}"' not in html and 'id="submit-form"' not in html
