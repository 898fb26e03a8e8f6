"""The Cluster page in Chromium against a real ``classhub local`` hub with the job service (the
session's hub of test_jobs_hub's configuration: three H200s described to both the spawner and
the service): an admin reaches it from the hub's nav bar, and sees a student's GPU server and a
running job appear on this machine, with who holds them, within 5 s of their start, without a
reload; the course quota's resource picker names this machine's GPUs; a teacher sees their
course's slice from the classhub pages; a student has no Cluster
tab and is refused the page.
"""

from __future__ import annotations

import re
import sys

import pytest
import requests

from tests.browser import Clicks, hub_login, screenshot
from tests.hubproc import HubSession, api, traits, wait_for
from tests.test_jobs_hub import CONFIG, GPU_PROFILE, JOBS

pytestmark = pytest.mark.browser

#: What the page promises: a start is on it within this many seconds (it asks every 2 s).
FOLLOWS_WITHIN_MS = 5_000


@pytest.fixture(scope="module")
def hub(shared_hubs):
    return shared_hubs.get(CONFIG + traits(JOBS))


@pytest.fixture(scope="module")
def tokens(hub) -> dict[str, str]:
    return {u: HubSession(hub, u).new_token() for u in ("admin", "student1", "student2")}


def _start_gpu_server(hub, user: str, token: str) -> None:
    headers = {"Authorization": f"token {token}"}
    r = requests.post(f"{hub.url}/hub/api/users/{user}/server", headers=headers,
                      json={"profile": GPU_PROFILE}, timeout=30)
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: requests.get(f"{hub.url}/hub/api/users/{user}", headers=headers, timeout=10)
             .json()["servers"].get("", {}).get("ready"), 90, f"{user}'s GPU server")


def _stop_server(hub, user: str, token: str) -> None:
    requests.delete(f"{hub.url}/hub/api/users/{user}/server",
                    headers={"Authorization": f"token {token}"}, timeout=60)


def test_the_admin_sees_a_server_and_a_job_appear_on_the_cluster_page(hub, tokens, page):
    hub_login(page, hub.url, "admin", hub.password)
    clicks = Clicks(page)
    clicks.click("a.classhub-nav-link >> text=Cluster")                       # the hub's nav bar
    page.wait_for_selector("h1:text('Cluster')")
    assert clicks.count == 1
    node = page.locator("section.classhub-node")
    assert node.count() == 1 and "nvidia.com/gpu" in node.inner_text()  # this machine, its GPUs
    assert page.locator("#cluster-profiles tr[data-profile='nvidia-h200-gpu']").count() == 1
    assert "from NVML on this machine" in page.inner_text("#cluster-gpu-use")  # where GPU use comes from

    student2 = tokens["student2"]
    try:
        _start_gpu_server(hub, "student2", student2)
        # the page follows the ledger by itself: no reload, a deadline, no fixed sleep
        server = node.locator("tr.classhub-holding[data-kind='server'][data-name='student2']")
        server.wait_for(timeout=FOLLOWS_WITHIN_MS)
        assert "1 nvidia.com/gpu" in server.inner_text() and "demo101" in server.inner_text()
        assert GPU_PROFILE in server.inner_text()
        # which GPU it holds, in words, on the Cluster page and on student2's classhub home
        assert re.search(r"on GPU [0-2] \(NVIDIA H200\)", server.inner_text()), server.inner_text()
        home_of_student2 = HubSession(hub, "student2").get("/services/classhub/").text
        assert re.search(r'id="my-server-devices">on GPU [0-2] \(NVIDIA H200\)<', home_of_student2)

        # student1's classhub home is open; its job counts follow the job without a reload
        home = page.context.browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        hub_login(home, hub.url, "student1", hub.password)
        home.goto(f"{hub.url}/services/classhub/")
        mine = home.locator("#jobs-mine [data-count=running]")
        before = int(mine.inner_text())
        r = api(hub, "POST", "jobs", tokens["student1"], json={
            "name": "sleeper", "command": [sys.executable, "-c", "import time; time.sleep(120)"],
            "resources": {"nvidia.com/gpu": 1}})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        try:
            wait_for(lambda: api(hub, "GET", f"jobs/{job_id}", tokens["student1"]).json()["state"]
                     == "running", 60, "the job to run")
            row = node.locator(f"tr.classhub-holding[data-kind='job'][data-name='{job_id}']")
            row.wait_for(timeout=FOLLOWS_WITHIN_MS)
            assert "student1" in row.inner_text() and "1 nvidia.com/gpu" in row.inner_text()
            assert re.search(r"on GPU [0-2] \(NVIDIA H200\)", row.inner_text())  # its replica's GPU
            home.wait_for_function(  # the home asks every 10 s while visible: a deadline, not a sleep
                f"document.querySelector('#jobs-mine [data-count=running]').textContent === '{before + 1}'",
                timeout=25_000)
            home.context.close()
            gpu = node.locator("tr[data-resource='nvidia.com/gpu']").inner_text()
            assert gpu.split()[1] == "2", gpu  # in use: the server's and the job's
            screenshot(page, "page-cluster")
        finally:
            api(hub, "POST", f"jobs/{job_id}/cancel", tokens["student1"])
    finally:
        _stop_server(hub, "student2", student2)

    # the course quota's picker names this machine's GPUs in plain words, with their count
    page.goto(f"{hub.url}/services/classhub/courses/demo101#limits")
    pick = page.locator("#cq-res-pick option[value='nvidia.com/gpu']")
    assert pick.inner_text().startswith("whole GPU, NVIDIA H200 (3 on this machine)")
    page.select_option("#cq-res-pick", "nvidia.com/gpu")
    page.click("#cq-res-add")
    assert "nvidia.com/gpu=" in page.input_value("#cq-res")


def test_a_teacher_sees_their_course_and_a_student_sees_no_cluster(hub, browser):
    for user, tab in (("teacher1", True), ("student1", False)):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        try:
            hub_login(page, hub.url, user, hub.password)
            assert page.locator("a.classhub-nav-link >> text=Cluster").count() == 0
            page.click("a.classhub-nav-link >> text=classhub")
            page.wait_for_load_state("domcontentloaded")
            link = page.locator("a.nav-link >> text=Cluster: demo101")
            assert link.count() == (1 if tab else 0)
            if tab:
                link.click()
                page.wait_for_selector("h1:text('Cluster: what demo101 holds')")
                assert page.locator("section.classhub-node").count() == 1
            else:
                response = page.goto(f"{hub.url}/services/classhub/courses/demo101/cluster")
                assert response.status == 403
                assert "teachers of demo101" in page.inner_text("body")
        finally:
            context.close()
