"""The Jobs page in Chromium against a real ``classhub local`` hub with the job service (the
session's hub of test_jobs_hub's configuration): a student goes from the hub's home to the Jobs
page, submits a 1-replica CPU job, sees it, opens its logs and reads what it printed, counting
clicks (the number in docs/teachers/jobs.md, "Distributed jobs: submit, run, watch, cancel"); a submit the API
refuses shows the API's sentence next to the form and queues nothing.
"""

from __future__ import annotations

import re

import pytest

from tests.browser import Clicks, hub_login, screenshot, words_cut_in_two
from tests.hubproc import HubSession, api, traits, wait_for
from tests.test_jobs_hub import CONFIG, JOBS
from tests.tutorial import follows_the_tutorial

pytestmark = pytest.mark.browser

#: The docs' number (docs/teachers/jobs.md): hub home -> Jobs, Submit, Logs.


@pytest.fixture(scope="module")
def hub(shared_hubs):
    return shared_hubs.get(CONFIG + traits(JOBS))


def test_a_student_submits_a_job_and_reads_its_log_by_clicking(hub, page):
    hub_login(page, hub.url, "student1", hub.password)
    clicks = Clicks(page)
    clicks.click("a.classhub-nav-link >> text=Jobs")                          # 1 the hub's nav bar
    page.wait_for_selector("h1:text('Jobs')")
    page.fill("#job-name", "answer")
    page.fill("#job-command", 'python -c "print(42)"')
    clicks.click("#job-submit")                                               # 2
    status = page.wait_for_selector("#page-status:has-text('Submitted answer')")
    job_id = re.search(r"\((answer-[^)]+)\)", status.inner_text()).group(1)
    row = page.locator(f"#my-jobs-table tr[data-id='{job_id}']")
    assert "1 x 1 cpu" in row.inner_text() and "demo101" in row.inner_text()
    clicks.click_locator(row.locator(".classhub-logs"))                       # 3
    page.wait_for_selector("#logs-text:has-text('42')", timeout=90_000)
    assert page.input_value("#logs-replica") == "worker-0"
    # the table follows the job through the API: it ends succeeded, with no Cancel left
    row.locator(".job-state:text('succeeded')").wait_for(timeout=60_000)
    assert row.locator(".classhub-cancel").count() == 0
    follows_the_tutorial(clicks, "STUDENT_SUBMITS_AND_READS_LOGS")
    screenshot(page, "page-jobs")

    # a job that could never start: the API's sentence next to the form, nothing queued
    before = page.locator("tr.classhub-job").count()
    page.fill("#job-command", 'python -c "print(42)"')  # the page reloaded after the submit
    page.fill("#job-replicas", "4")
    page.fill("#job-gpus", "1")
    page.click("#job-submit")
    page.wait_for_selector("#submit-status:has-text('can never start')")
    assert page.locator("tr.classhub-job").count() == before
    page.fill("#job-command", "python -c 'print(1)")
    page.click("#job-submit")
    page.wait_for_selector("#submit-status:has-text('unclosed')")


#: A time as an en-US reader's browser shows it on the classhub pages ("Dec 4, 2026, 2:20 PM").
US_TIME = r"[A-Z][a-z]{2} \d{1,2}, \d{4}, \d{1,2}:\d\d\s?[AP]M"


def test_a_waiting_job_says_what_it_waits_for_in_the_pages_one_time_format(hub, browser):
    """A job waiting behind the owner's running job names it and when it ends at the latest, and
    shows its times as the Submitted column does (one format: the reader's, here 12-hour)."""
    token = HubSession(hub, "student1").new_token()
    sleep = ["python", "-c", "import time; time.sleep(600)"]
    holder = api(hub, "POST", "jobs", token, json={"name": "holder", "command": sleep,
                                                   "resources": {"nvidia.com/gpu": 3}}).json()["id"]
    waiter = None
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US",
                                  timezone_id="America/New_York")
    try:
        wait_for(lambda: api(hub, "GET", f"jobs/{holder}", token).json()["state"] == "running", 60,
                 "holder running")
        waiter = api(hub, "POST", "jobs", token, json={"name": "waiter", "command": ["true"],
                                                       "resources": {"nvidia.com/gpu": 1}}).json()["id"]
        wait_for(lambda: "your job holder" in (api(hub, "GET", f"jobs/{waiter}", token).json()["reason"]
                                               or ""), 30, "the waiter's reason naming the holder")
        page = context.new_page()
        hub_login(page, hub.url, "student1", hub.password)
        page.goto(f"{hub.url}/services/classhub/jobs")
        row = page.locator(f"#my-jobs-table tr[data-id='{waiter}']")
        reason = row.locator(".job-reason").inner_text()
        assert "your job holder (until " in reason, reason
        assert not re.search(r"\d{4}-\d\d-\d\dT", reason), reason  # no ISO time left
        times = re.findall(US_TIME, reason)
        assert times, reason
        assert re.fullmatch(US_TIME, row.locator("td").nth(6).inner_text().strip())  # Submitted
        # nine columns at 1280 px: headers, course names and resources wrap between words only
        assert words_cut_in_two(page, "#my-jobs-table") == []
        screenshot(page, "page-jobs-waiting")
    finally:
        context.close()
        for job_id in (holder, waiter):
            if job_id:
                api(hub, "POST", f"jobs/{job_id}/cancel", token)
        for job_id in (holder, waiter):
            if job_id:
                wait_for(lambda j=job_id: api(hub, "GET", f"jobs/{j}", token).json()["state"]
                         in ("cancelled", "succeeded", "failed"), 30, f"{job_id} to end")
