"""The Cluster page in Chromium against a real hub in Kubernetes mode (tests/kubehub.py) on the
fake cluster: the admin reaches it from the hub's nav bar, sees every node with its GPUs and MIG
slices, and sees a student's server pod and a job's replica pod appear on the node the
scheduler bound them to, with who holds them, within 5 s of their start and without a reload
(the service's own watch on every pod, not a list per look); the Grafana link the deployer
configured is there; a pod's GPU use comes from Prometheus (a fake DCGM answer); the course
quota's resource picker names the cluster's devices.
"""

from __future__ import annotations

import sys
import time

import pytest

from tests.browser import Clicks, hub_login, screenshot
from tests.hubproc import api, wait_for
from tests.kubefake.training import SCHEDULER_NAME
from tests.kubehub import jobs_cluster, request_server, running_hub, wait_ready, wait_stopped
from tests.test_culler_kube import FakePrometheus

pytestmark = pytest.mark.browser

NS = "classhub-cluster"
GRAFANA = "https://grafana.example.org/d/classhub"
NODES = [
    {"name": "gpu-node", "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2",
                                         "nvidia.com/mig-1g.18gb": "7"},
     "labels": {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/mig.strategy": "mixed"}},
    {"name": "cpu-node", "allocatable": {"cpu": "8", "memory": "32Gi"}},
]
EXTRA = f"""
c.ClasshubJobs.namespace = "{NS}"
c.ClasshubJobs.scheduler_name = "{SCHEDULER_NAME}"
c.ClasshubJobs.interval = 0.5
c.ClasshubJobs.grace = 2
c.ClasshubService.grafana_url = "{GRAFANA}"
"""
FOLLOWS_WITHIN_MS = 5_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from jobs_cluster(tmp_path_factory, NODES, NS)


@pytest.fixture(scope="module")
def prometheus():
    fake = FakePrometheus()  # NVIDIA's DCGM exporter's GPU use per pod, as Prometheus answers it
    yield fake
    fake.server.shutdown()


@pytest.fixture(scope="module")
def hub(cluster, prometheus, tmp_path_factory):
    extra = EXTRA + f'c.ClasshubPrometheus.url = "{prometheus.url}"\n'
    yield from running_hub(cluster, tmp_path_factory, NS, extra)


def _node_of(cluster, match) -> str:
    return wait_for(lambda: next((p["spec"].get("nodeName") for p in cluster.list("pods", NS)
                                  if match(p) and p["spec"].get("nodeName")), None), 30, "a bound pod")


def test_the_cluster_page_follows_a_server_and_a_job_on_their_nodes(hub, cluster, prometheus, page):
    admin = hub.login("admin").new_token()
    assert api(hub, "POST", "courses", admin, json={"name": "gpu101"}).status_code == 201
    r = api(hub, "PUT", "courses/gpu101/members", admin,
            json={"add": [{"username": "student1", "role": "student"}]})
    assert r.status_code == 200, r.text

    hub_login(page, hub.url, "admin", hub.password)
    clicks = Clicks(page)
    clicks.click("a.classhub-nav-link >> text=Cluster")                       # the hub's nav bar
    page.wait_for_selector("h1:text('Cluster')")
    assert clicks.count == 1
    assert page.get_attribute("#cluster-grafana", "href") == GRAFANA
    gpu_node = page.locator("section.classhub-node[data-node='gpu-node']")
    assert "NVIDIA-H200" in gpu_node.inner_text() and "MIG mixed" in gpu_node.inner_text()
    assert gpu_node.locator("tr[data-resource='nvidia.com/mig-1g.18gb']").count() == 1
    assert page.locator("section.classhub-node[data-node='cpu-node']").count() == 1

    # homes on NFS-like storage: the job's replica may land on another node than the server
    cluster.create("persistentvolumeclaims", {"metadata": {"name": "claim-student1"}, "spec": {
        "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}, NS)
    student = hub.login("student1")
    token = student.new_token()
    request_server(student)
    wait_ready(student, 60)
    try:
        node = _node_of(cluster, lambda p: p["metadata"].get("annotations", {})
                        .get("hub.jupyter.org/username") == "student1")
        server = page.locator(f"section.classhub-node[data-node='{node}'] "
                              "tr.classhub-holding[data-kind='server'][data-name='student1']")
        server.wait_for(timeout=FOLLOWS_WITHIN_MS)
        assert "gpu101" in server.inner_text()
        # how busy its GPU is, from Prometheus (DCGM), and where that comes from
        pod = next(p["metadata"]["name"] for p in cluster.list("pods", NS)
                   if p["metadata"].get("annotations", {}).get("hub.jupyter.org/username") == "student1")
        prometheus.utilization = {pod: 87.0}
        server.locator(".classhub-gpu-use:text('GPU 87% busy')").wait_for(timeout=FOLLOWS_WITHIN_MS)
        assert prometheus.url in page.inner_text("#cluster-gpu-use")

        r = api(hub, "POST", "jobs", token, json={
            "name": "sleeper", "command": [sys.executable, "-c", "import time; time.sleep(120)"],
            "resources": {"cpu": "1"}})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        try:
            try:
                wait_for(lambda: api(hub, "GET", f"jobs/{job_id}", token).json()["state"]
                         == "running", 90, "the job to run")
            except AssertionError:
                raise AssertionError(api(hub, "GET", f"jobs/{job_id}", token).text) from None
            started = time.monotonic()
            node = _node_of(cluster, lambda p: p["metadata"].get("labels", {})
                            .get("classhub.io/job") == job_id)
            row = page.locator(f"section.classhub-node[data-node='{node}'] "
                               f"tr.classhub-holding[data-kind='job'][data-name='{job_id}']")
            row.wait_for(timeout=FOLLOWS_WITHIN_MS)
            assert time.monotonic() - started < FOLLOWS_WITHIN_MS / 1000
            assert "student1" in row.inner_text() and "1 CPU" in row.inner_text()
            screenshot(page, "page-cluster-kubernetes")
        finally:
            api(hub, "POST", f"jobs/{job_id}/cancel", token)
    finally:
        student.hub_api("DELETE", "users/student1/server")
        wait_stopped(student, 60)

    # the course quota's picker names the cluster's devices in plain words, with their counts
    page.goto(f"{hub.url}/services/classhub/courses/gpu101#limits")
    options = page.locator("#cq-res-pick option")
    labels = {options.nth(i).get_attribute("value"): options.nth(i).inner_text()
              for i in range(options.count())}
    assert labels["nvidia.com/mig-1g.18gb"].startswith("MIG slice 1g.18gb (7 on the cluster)")
    assert labels["nvidia.com/gpu"].startswith("whole GPU, NVIDIA H200 (2 on the cluster)")
