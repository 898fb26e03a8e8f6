"""The course data journey in Chromium, in both run modes (issue 35): against a real
``classhub local`` hub, and against a Kubernetes-mode hub (tests/kubehub.py) whose servers are pods
of the fake cluster (tests/kubefake) mounting the course's folder of an NFS export.

A teacher uploads a 200 MB file on the course page's Data section and watches the progress bar
climb (the file goes in 8 MiB chunks, each a Content-Range PUT); the file is listed with its
size. A student, whose server was running before the upload, opens ``~/data/demo101`` in
JupyterLab, opens the course's README read-only, and trying to delete it from the file browser
gets JupyterLab's error dialog with classhub's sentence; the file is still there. The teacher
sees every member's home size; the student's course page has no Upload and no home sizes.

On Kubernetes the student's folder is a ``readOnly`` mount (the fake kubelet makes it a
read-only bind mount, tests/test_kubefake_volumes.py): the student's server sees the read-only
mount and says why; the kernel refuses the write whatever the server says. Homes are volumes the
hub cannot read there: their sizes come from the node's kubelet (its stats summary, through the
API server), so the running student's home has a size and the stopped teacher's shows a dash.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser import Clicks, screenshot
from tests.hubproc import HubSession, LocalHub, api, start_server
from tests.kubehub import process_cluster, request_server, running_hub, wait_ready

pytestmark = pytest.mark.browser

COURSE = "demo101"
MIB = 1024 * 1024
BIG = 200 * MIB
LAB_TIMEOUT = 90_000  # JupyterLab loads megabytes of JavaScript on 2 shared cores
#: Clicks after logging in: Upload (the file is chosen in the browser's own dialog).
TEACHER_UPLOADS = 1
#: Right-click the file, Delete (Move to Trash), confirm: JupyterLab's own three.
STUDENT_TRIES_TO_DELETE = 3


NFS_SERVER, NFS_PATH = "nfs.example.edu", "/exports/courses"
KUBE_NODES = [{"name": "cpu-node", "allocatable": {"cpu": "16", "memory": "64Gi"}}]


@pytest.fixture(scope="module", params=["local", "kubernetes"])
def hub(request, hub_root: Path, tmp_path_factory):
    """One hub per run mode; ``hub.course_data`` is the folder holding the courses' folders."""
    if request.param == "local":
        hub = LocalHub(data_dir=hub_root / "course-data-browser").start()
        hub.course_data = hub.data_dir / "course-data"
        yield hub
        hub.stop()
        return
    export = tmp_path_factory.mktemp("nfs-export")
    # the hub pod's mount of the export (helm-values/course-data-nfs.yaml) is the export itself here
    extra = f"""
c.ClasshubCourseData.root_dir = "{export}"
c.ClasshubCourseData.volume = {{"nfs": {{"server": "{NFS_SERVER}", "path": "{NFS_PATH}"}}}}
c.KubeSpawner.working_dir = "/home/jovyan"  # the image's WORKDIR: ~/data/<course> is data/<course>
# what the images' classhub-singleuser.json enables (images/README.md)
c.KubeSpawner.args = c.KubeSpawner.args + ["--ServerApp.jpserver_extensions=hub_ext.singleuser=True"]
"""
    for cluster in process_cluster(tmp_path_factory, KUBE_NODES):
        cluster.export_nfs(NFS_SERVER, NFS_PATH, export)
        for hub in running_hub(cluster, tmp_path_factory, "default", extra):
            hub.course_data = export
            admin = HubSession(hub, "admin").new_token()
            assert api(hub, "POST", "courses", admin, json={"name": COURSE}).status_code == 201
            r = api(hub, "PUT", f"courses/{COURSE}/members", admin, json={"add": [
                {"username": "teacher1", "role": "teacher"}, {"username": "student1", "role": "student"}]})
            assert r.status_code == 200, r.text
            yield hub


def logged_in_page(browser, hub: LocalHub, user: str, next_path: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(f"{hub.url}{next_path}")
    page.wait_for_selector("input[name=username]")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", hub.password)
    page.click("#login_submit")
    page.wait_for_load_state("domcontentloaded")
    return context, page


def test_a_teacher_uploads_200_mb_and_a_student_reads_but_cannot_delete(hub, browser, tmp_path):
    kube = not isinstance(hub, LocalHub)
    student = HubSession(hub, "student1")
    if kube:
        r = request_server(student)
        assert r.status_code in (201, 202), r.text
        wait_ready(student, 90)
    else:
        start_server(hub, "student1", student.new_token())
    teacher_token = HubSession(hub, "teacher1").new_token()
    r = api(hub, "PUT", f"courses/{COURSE}/data/files/README.md", teacher_token,
            data=b"# Cats\nOne image per file.\n", headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 201, r.text
    big = tmp_path / "scans.bin"
    with big.open("wb") as f:
        f.truncate(BIG)

    context, page = logged_in_page(browser, hub, "teacher1", f"/services/classhub/courses/{COURSE}")
    page.wait_for_selector("#data-table tr[data-path='README.md']")
    # record every value the progress bar shows while the upload runs
    page.evaluate("""() => { window.seen = [];
      new MutationObserver(() => window.seen.push(document.querySelector('#data-progress')
        .getAttribute('aria-valuenow'))).observe(document.querySelector('#data-progress'),
        {attributes: true, attributeFilter: ['aria-valuenow']}); }""")
    page.set_input_files("#data-files", str(big))
    clicks = Clicks(page)
    clicks.click("#data-upload button[type=submit]")
    page.wait_for_selector("#data-status:has-text('Uploaded 1 file(s).')", timeout=300_000)
    assert clicks.count == TEACHER_UPLOADS
    seen = [int(v) for v in page.evaluate("window.seen")]
    assert len(set(seen)) >= 10 and seen == sorted(seen) and seen[-1] == 100, seen
    row = page.locator("#data-table tr[data-path='scans.bin']")
    assert "200.0 MiB" in row.inner_text()
    homes = page.locator("#homes-table tr[data-user='student1']")
    homes.wait_for()
    if kube:  # the node's kubelet measures the running server's home; a stopped one's shows a dash
        assert "while its owner's server runs" in page.locator("#homes-note").inner_text()
        assert "B" in homes.locator("td").last.inner_text()
        teacher_home = page.locator("#homes-table tr[data-user='teacher1'] td").last
        assert teacher_home.inner_text().strip() == "\u2013"  # an en dash, not a made-up 0 B
    else:
        assert "B" in homes.inner_text()  # a size, not a dash
    screenshot(page, "page-course-data" + ("-kubernetes" if kube else ""))
    context.close()

    context, page = logged_in_page(browser, hub, "student1", f"/services/classhub/courses/{COURSE}")
    page.wait_for_selector("#data-table tr[data-path='scans.bin']")
    assert page.locator("#data-path").inner_text() == "~/data/demo101"
    assert page.locator("#data-upload").count() == 0 and page.locator("#homes-table").count() == 0
    assert page.locator(".classhub-data-delete").count() == 0
    page.goto(f"{hub.url}/user/student1/lab/tree/data/demo101")
    item = page.locator(".jp-DirListing-item[title*='README.md']")
    item.wait_for(timeout=LAB_TIMEOUT)
    assert page.locator(".jp-DirListing-item[title*='scans.bin']").count() == 1
    clicks = Clicks(page)
    clicks.click_locator(item, button="right")
    # "Move to Trash" where the server sends deleted files to the trash (jupyter-server's default)
    clicks.click_locator(page.locator(".lm-Menu-item", has_text=re.compile("^(Delete|Move to Trash)")))
    clicks.click_locator(page.locator(".jp-Dialog button.jp-mod-accept"))
    error = page.locator(".jp-Dialog", has_text="read-only")
    error.wait_for()
    assert "course's page" in error.inner_text()
    assert clicks.count == STUDENT_TRIES_TO_DELETE
    screenshot(page, "lab-course-data-read-only" + ("-kubernetes" if kube else ""))
    error.get_by_role("button").last.click()
    error.wait_for(state="detached")
    assert page.locator(".jp-DirListing-item[title*='README.md']").count() == 1
    context.close()
    assert (hub.course_data / COURSE / "README.md").exists()
