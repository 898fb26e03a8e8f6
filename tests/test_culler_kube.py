"""The idle culler in kubernetes mode: a real hub, ClasshubKubeSpawner, the fake cluster, whose
kubelet runs the real jupyterhub-singleuser (with classhub's extension) for each pod, and a tiny
fake Prometheus answering the DCGM GPU-utilisation query.

What a user notices: an idle server is warned, then stopped; a GPU pod that DCGM reports busy is
not stopped although nobody touches it, and is once its GPU goes quiet; an admin's persistent
server stays; a GPU spawn refused on a full cluster succeeds once the culler reclaimed an idle
holder. Timeouts are the real ones (minutes): the tests move the culler's clock forward
(``move_clock``, tests/test_culler_local.py) instead of sleeping through idle windows.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import requests

from tests.hubproc import HubSession, api, free_port, wait_for
from tests.kubehub import KubeHub, process_cluster, request_server, server_model, wait_ready, wait_stopped
from tests.test_culler_local import move_clock

pytestmark = pytest.mark.cluster

NODES = [
    {"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi"}},
    {"name": "h200-0", "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "2"},
     "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
]
QUERY = "max by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL)"


class FakePrometheus:
    """``GET /api/v1/query``: one sample per pod of `utilization`; remembers the queries."""

    def __init__(self) -> None:
        self.utilization: dict[str, float] = {}
        self.queries: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path != "/api/v1/query":
                    self.send_error(404)
                    return
                outer.queries.append(parse_qs(url.query)["query"][0])
                result = [{"metric": {"namespace": "default", "pod": pod}, "value": [0, str(value)]}
                          for pod, value in outer.utilization.items()]
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


CONFIG = """
c.ClasshubKubeSpawner.profiles = [
    {"slug": "cpu", "kind": "cpu", "default": True},
    {"slug": "gpu", "kind": "gpu", "gpu_product": "NVIDIA-H200"},
]
c.KubeSpawner.args = ["--ip=$(KUBEFAKE_POD_IP)", "--ServerApp.allow_root=True",
                      "--ServerApp.jpserver_extensions=hub_ext.singleuser=True"]
"""


@pytest.fixture(scope="module")
def prometheus():
    fake = FakePrometheus()
    yield fake
    fake.server.shutdown()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from process_cluster(tmp_path_factory, NODES)


@pytest.fixture(scope="module")
def hub(cluster, prometheus, tmp_path_factory):
    """Idle after 10 min, warned 5 min before, reclaimable after 5 min, a cycle every second."""
    data = tmp_path_factory.mktemp("kubeculler")
    culler = {"interval": 1, "warn_before": 300, "reclaim_after": 300, "pressure_check_interval": 1,
              "clock_file": str(data / "culler-clock"),
              "idle_timeouts": {"gpu": 600, "mig": 600, "shared": 600, "cpu": 600}}
    # the culler's settings as a deployer writes them (z2jh: hub.config.ClasshubCuller)
    settings = "".join(f"c.ClasshubCuller.{key} = {value!r}\n" for key, value in culler.items())
    settings += f"c.ClasshubPrometheus.url = {prometheus.url!r}\n"  # the culler's and the page's
    hub = KubeHub(data, cluster.kubeconfig_path, start_timeout=30, extra_config=CONFIG + settings)
    hub.clock = data / "culler-clock"
    hub.start()
    yield hub
    hub.stop()


def start(session, profile: str) -> None:
    assert request_server(session, {"user_options": {"profile": profile}}).status_code in (201, 202)
    wait_ready(session, 60)


def warnings(hub: KubeHub, token: str) -> list[dict]:
    return api(hub, "GET", "culling/me", token).json()["warnings"]


def test_idle_pod_culled_busy_gpu_pod_and_persistent_pod_kept(hub, cluster, prometheus):
    admin_token = HubSession(hub, "admin").new_token()
    r = api(hub, "PUT", "culling/persistent", admin_token, json={"user": "teacher1", "persistent": True})
    assert r.status_code == 200, r.text
    sessions = {u: hub.login(u) for u in ("teacher1", "student1", "student2")}
    tokens = {u: s.new_token() for u, s in sessions.items()}
    prometheus.utilization = {"jupyter-student1": 97.0}  # a training run nobody watches

    start(sessions["teacher1"], "cpu")
    start(sessions["student1"], "gpu")
    gpu_pod = cluster.get("pods", "jupyter-student1", "default")
    assert gpu_pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    start(sessions["student2"], "cpu")

    # 5 min 10 s later the idle CPU pod is warned; 10 min 20 s later it is stopped, its pod deleted.
    move_clock(hub, 310)
    wait_for(lambda: warnings(hub, tokens["student2"]), 40, "a warning for student2")
    move_clock(hub, 620)
    wait_stopped(sessions["student2"], 40)
    wait_for(lambda: cluster.get("pods", "jupyter-student2", "default") is None, 30, "student2's pod deleted")

    # The busy GPU pod (DCGM through Prometheus) and the persistent pod, idle as long: kept, unwarned.
    assert QUERY in prometheus.queries
    assert server_model(sessions["student1"])["ready"]
    assert warnings(hub, tokens["student1"]) == []
    assert server_model(sessions["teacher1"])["ready"]
    assert warnings(hub, tokens["teacher1"]) == []

    # The GPU goes quiet: now it is an idle GPU server like any other.
    prometheus.utilization = {"jupyter-student1": 0.0}
    wait_for(lambda: warnings(hub, tokens["student1"]), 40, "a warning for student1")
    move_clock(hub, 930)
    wait_stopped(sessions["student1"], 40)
    move_clock(hub, 0)
    text = requests.get(f"{hub.url}/services/classhub/metrics",
                        headers={"Authorization": f"token {admin_token}"}, timeout=30).text
    assert 'classhub_culls_total{reason="idle",resource="nvidia.com/gpu"} 1.0' in text
    assert 'classhub_culls_total{reason="idle",resource="cpu"} 1.0' in text
    assert server_model(sessions["teacher1"])["ready"]
    assert sessions["teacher1"].hub_api("DELETE", "users/teacher1/server").status_code in (202, 204)
    wait_stopped(sessions["teacher1"], 30)


def test_gpu_spawn_refused_on_a_full_cluster_succeeds_after_one_reclaim(hub, cluster, prometheus):
    sessions = {u: hub.login(u) for u in ("student1", "student2", "ta1")}
    # Both GPUs of the cluster are held by training runs (busy per DCGM) ...
    prometheus.utilization = {"jupyter-student1": 90.0, "jupyter-student2": 90.0}
    start(sessions["student1"], "gpu")
    start(sessions["student2"], "gpu")
    # ... which end; nobody comes back to the servers for 5 min 10 s.
    prometheus.utilization = {}
    move_clock(hub, 310)
    r = request_server(sessions["ta1"], {"user_options": {"profile": "gpu"}})
    assert r.status_code == 409, r.text
    assert "Capacity is being reclaimed" in r.json()["message"]

    wait_stopped(sessions["student1"], 30)  # the longest idle holder, reclaimed
    wait_for(lambda: cluster.get("pods", "jupyter-student1", "default") is None, 30, "student1's pod deleted")
    start(sessions["ta1"], "gpu")
    assert cluster.get("pods", "jupyter-ta1", "default")["spec"]["nodeName"] == "h200-0"
    admin_token = HubSession(hub, "admin").new_token()
    text = requests.get(f"{hub.url}/services/classhub/metrics",
                        headers={"Authorization": f"token {admin_token}"}, timeout=30).text
    assert 'classhub_culls_total{reason="reclaim_for_pressure",resource="nvidia.com/gpu"} 1.0' in text
    move_clock(hub, 0)
    for user in ("student2", "ta1"):
        sessions[user].hub_api("DELETE", f"users/{user}/server")
