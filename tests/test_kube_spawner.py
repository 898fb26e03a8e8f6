"""ClasshubKubeSpawner in a real JupyterHub process, against the fake cluster.

What a student notices: JupyterLab opens through the proxy and survives a hub restart; a GPU
profile that no node can serve ends, within the start timeout, with a sentence naming the missing
GPU, and leaves nothing behind but their existing files; a flaky API server delays a spawn but
does not break it.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.hubproc import wait_for
from tests.kubefake import FakeCluster
from tests.kubehub import (
    KubeHub,
    process_cluster,
    progress_events,
    request_server,
    server_model,
    wait_ready,
    wait_stopped,
)

pytestmark = pytest.mark.cluster

# The hub's start_timeout. A pod's jupyterhub-singleuser takes up to ~20 s to answer on two busy
# cores; 40 s (the spawner gives up 3 s earlier) keeps every spawn here inside it.
START_TIMEOUT = 40
NAMESPACE = "default"

PROFILES = """
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
c.KubeSpawner.profile_list = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {
        "display_name": "One GPU",
        "slug": "gpu",
        "kubespawner_override": {
            "extra_resource_guarantees": {"nvidia.com/gpu": "1"},
            "extra_resource_limits": {"nvidia.com/gpu": "1"},
        },
    },
    {"display_name": "Course B", "slug": "course-b", "kubespawner_override": {"namespace": "course-b"}},
]
"""

CPU_NODES = [
    {"name": "cpu-0", "allocatable": {"cpu": "8", "memory": "32Gi"}},
    {"name": "cpu-1", "allocatable": {"cpu": "8", "memory": "32Gi"}},
]

NO_GPU = (
    "No node has a free nvidia.com/gpu right now (0/2 nodes available: 2 Insufficient "
    "nvidia.com/gpu). Try again later or pick another profile."
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from process_cluster(tmp_path_factory, CPU_NODES)


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    hub = KubeHub(tmp_path_factory.mktemp("kubehub"), cluster.kubeconfig_path,
                  namespace=NAMESPACE, start_timeout=START_TIMEOUT, extra_config=PROFILES)
    hub.start()
    yield hub
    hub.stop()


def pod(cluster: FakeCluster, user: str) -> dict[str, Any] | None:
    return cluster.get("pods", f"jupyter-{user}", NAMESPACE)


def pvc(cluster: FakeCluster, user: str) -> dict[str, Any] | None:
    return cluster.get("persistentvolumeclaims", f"claim-{user}", NAMESPACE)


def lab_page(session) -> Any:
    page = session.get(f"/user/{session.username}/lab")
    ok = page.status_code == 200 and f"/user/{session.username}/" in page.url
    return page if ok and "JupyterLab" in page.text else None


def test_jupyterlab_opens_and_survives_a_hub_restart(hub, cluster):
    student = hub.login("student1")
    assert request_server(student).status_code in (201, 202)
    wait_ready(student, START_TIMEOUT + 10)
    page = wait_for(lambda: lab_page(student), 30, "JupyterLab of student1", interval=0.3)
    assert '"baseUrl": "/user/student1/"' in page.text
    running = pod(cluster, "student1")
    assert running["status"]["phase"] == "Running"
    home = pvc(cluster, "student1")
    assert home is not None, "the student got no home volume"
    assert home["spec"]["resources"]["requests"]["storage"] == "10Gi"
    mounts = running["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "home", "mountPath": "/home/jovyan"} in [
        {k: m[k] for k in ("name", "mountPath")} for m in mounts
    ]

    hub.restart()  # SIGTERM with cleanup_servers = False: the pod keeps running
    student = hub.login("student1")
    assert server_model(student)["ready"], "the restarted hub lost the running server"
    wait_for(lambda: lab_page(student), 30, "JupyterLab of student1 after the restart", interval=0.3)
    assert pod(cluster, "student1")["metadata"]["uid"] == running["metadata"]["uid"]

    assert student.hub_api("DELETE", "users/student1/server").status_code in (202, 204)
    wait_stopped(student, 30)
    wait_for(lambda: pod(cluster, "student1") is None, 20, "student1's pod to be deleted")
    assert pvc(cluster, "student1") is not None, "stopping a server must keep the student's files"


def _collect(session, sink: dict[str, Any], timeout: float) -> None:
    try:
        sink["events"] = list(progress_events(session, timeout))
    except Exception as exc:
        sink["error"] = exc


def test_unschedulable_gpu_spawn_says_why_and_cleans_up(hub, cluster):
    # student2 already has a home volume with their files; teacher1 has none yet.
    kept = cluster.create("persistentvolumeclaims", {
        "metadata": {"name": "claim-student2"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
    }, NAMESPACE)
    sessions = [hub.login("teacher1"), hub.login("student2")]
    results: dict[str, dict[str, Any]] = {}
    threads = []
    for session in sessions:
        assert request_server(session, {"profile": "gpu"}).status_code in (201, 202)
        results[session.username] = sink = {}
        thread = threading.Thread(target=_collect, args=(session, sink, START_TIMEOUT + 20))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(START_TIMEOUT + 30)

    for name, sink in results.items():
        assert "error" not in sink, f"{name}: {sink.get('error')!r}"
        messages = [event.get("message", "") for event in sink["events"]]
        assert NO_GPU in messages, f"{name} never saw why: {messages}"
        final = sink["events"][-1]
        # classhub's sentence, not JupyterHub's start timeout: it failed for its reason, before
        # that (a check of the wall clock would only measure how busy the machine is)
        assert final.get("failed") and final["message"] == f"Spawn failed: {NO_GPU}", final
        assert "Traceback" not in " ".join(messages)

    for session in sessions:
        wait_stopped(session, 20)
    wait_for(lambda: pod(cluster, "teacher1") is None and pod(cluster, "student2") is None, 20,
             "the unschedulable pods to be deleted")
    assert pvc(cluster, "teacher1") is None, "the failed attempt left the PVC it created"
    assert pvc(cluster, "student2")["metadata"]["uid"] == kept["metadata"]["uid"], (
        "a PVC that existed before the attempt (the student's files) was deleted"
    )


def test_quota_refusal_is_a_sentence_and_leaves_nothing(hub, cluster):
    rule = cluster.faults.add(
        403, verbs="create", path=r"/namespaces/default/pods$", count=1,
        message='pods "jupyter-admin" is forbidden: exceeded quota: course-quota, requested: '
                "requests.cpu=100m, used: requests.cpu=4, limited: requests.cpu=4",
    )
    admin = hub.login("admin")
    assert request_server(admin).status_code in (201, 202, 400)
    # The progress stream also answers after the spawn ended: its failure, from the hub's
    # record of the failed spawn (a refusal may end before this test looks).
    events = list(progress_events(admin, 30))
    wait_stopped(admin, 20)
    assert rule.hits == 1
    final = events[-1] if events else {}
    assert final.get("failed"), events
    assert final["message"].startswith(
        "Spawn failed: Your server needs more than the resource quota has left (pods "
    ), final
    assert "Stop another of your servers or pick a smaller profile" in final["message"]
    assert pod(cluster, "admin") is None
    assert pvc(cluster, "admin") is None, "the refused attempt left the PVC it created"


def test_flaky_api_server_delays_spawns_but_they_succeed(hub, cluster):
    rules = [
        cluster.faults.add(500, verbs="create", path=r"/persistentvolumeclaims$", count=2),
        cluster.faults.add(429, verbs="create", path=r"/namespaces/default/pods$", count=2),
        cluster.faults.add(503, verbs="create", path=r"/namespaces/default/pods$", count=1),
    ]
    ta = hub.login("ta1")
    assert request_server(ta).status_code in (201, 202)
    wait_for(lambda: pod(cluster, "ta1"), START_TIMEOUT, "ta1's pod to be created")
    assert cluster.drop_watches() > 0
    wait_for(lambda: len(cluster.open_watches()) >= 2, 10, "the hub to watch again")
    cluster.drop_watches(abrupt=True)
    wait_ready(ta, START_TIMEOUT + 10)
    assert [rule.hits for rule in rules] == [2, 2, 1], "the faults were not all injected"
    wait_for(lambda: lab_page(ta), 30, "JupyterLab of ta1", interval=0.3)

    assert ta.hub_api("DELETE", "users/ta1/server").status_code in (202, 204)
    wait_stopped(ta, 30)
    wait_for(lambda: pod(cluster, "ta1") is None, 20, "ta1's pod to be deleted")
    leftovers = [p["metadata"]["name"] for p in cluster.list("pods", NAMESPACE)]
    assert leftovers == [], f"pods leaked: {leftovers}"
    claims = sorted(c["metadata"]["name"] for c in cluster.list("persistentvolumeclaims", NAMESPACE))
    assert claims.count("claim-ta1") == 1 and all(c.startswith("claim-") for c in claims), claims


def test_a_failed_first_watch_is_explained_and_the_next_spawn_recovers(hub, cluster):
    # The first spawn into course-b starts KubeSpawner's pod reflector there; its first list fails.
    cluster.create("namespaces", {"metadata": {"name": "course-b"}}, None)
    rule = cluster.faults.add(500, verbs="list", path=r"/namespaces/course-b/pods$", count=1)
    # KubeSpawner starts the events reflector alongside and cancels it when the pods one fails;
    # holding its first list makes that cancel land mid-list (what load did by chance).
    slow = cluster.faults.add_latency(5, verbs="list", path=r"/namespaces/course-b/events$", count=1)
    teacher = hub.login("teacher1")
    assert request_server(teacher, {"profile": "course-b"}).status_code in (201, 202, 400, 500)
    events = list(progress_events(teacher, 30)) if server_model(teacher) else []
    wait_stopped(teacher, 20)
    assert (rule.hits, slow.hits) == (1, 1)
    if events:  # the spawn failed before the progress stream connected otherwise
        assert events[-1]["message"].startswith(
            "Spawn failed: The cluster could not start your server (API server error 500"
        ), events[-1]
        assert events[-1]["message"].endswith("Try again in a minute; if it keeps happening, tell "
                                              "the hub admin."), events[-1]

    # The next spawn recovers: both reflectors were restarted (the events one's start had been
    # cancelled mid-list; a spawn awaiting its first load used to wait until the timeout).
    assert request_server(teacher, {"profile": "course-b"}).status_code in (201, 202)
    wait_ready(teacher, START_TIMEOUT + 10)
    assert cluster.get("pods", "jupyter-teacher1", "course-b")["status"]["phase"] == "Running"
    assert teacher.hub_api("DELETE", "users/teacher1/server").status_code in (202, 204)
    wait_stopped(teacher, 30)
    wait_for(lambda: cluster.get("pods", "jupyter-teacher1", "course-b") is None, 20,
             "teacher1's pod in course-b to be deleted")
