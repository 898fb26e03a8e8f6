"""The Jobs page in Chromium against a real ``classhub local`` hub with the job service (the
session's hub of test_jobs_hub's configuration): a student goes from the hub's home to the Jobs
page, submits a 1-replica CPU job, sees it, opens its logs and reads what it printed, counting
clicks (the number in docs/teachers/jobs.md, "Distributed jobs: submit, run, watch, cancel"); a submit the API
refuses shows the API's sentence next to the form and queues nothing.
"""

from __future__ import annotations

import re

import pytest

from tests.browser import Clicks, hub_login, screenshot
from tests.hubproc import traits
from tests.test_jobs_hub import CONFIG, JOBS

pytestmark = pytest.mark.browser

#: The docs' number (docs/teachers/jobs.md): hub home -> Jobs, Submit, Logs.
STUDENT_SUBMITS_AND_READS_LOGS = 3


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
    assert clicks.count == STUDENT_SUBMITS_AND_READS_LOGS
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
