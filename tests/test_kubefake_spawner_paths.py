"""classhub's spawner failure paths against the truer fake, with realistic latencies on: image
pulls, container starts, volume provisioning and container shutdown take their time, deleted
claims stay Terminating while a pod uses them, admission refuses, the scheduler checks claims.

What a student notices: a profile that mounts a claim that does not exist, one whose service
account is missing (an admission 403), one the API server finds invalid (a 422 naming the field)
and one whose server never becomes ready each end before
the start timeout with a sentence saying what to do, and leave no pod and no new volume behind;
starting while the home volume of an earlier server is still being deleted waits for it to go
and then starts with a fresh one, instead of hanging on a volume that is about to vanish.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.hubproc import wait_for
from tests.kubefake import FakeCluster
from tests.kubehub import KubeHub, progress_events, request_server, wait_ready, wait_stopped

pytestmark = pytest.mark.cluster

START_TIMEOUT = 15
NAMESPACE = "default"
NODES = [
    {"name": "cpu-0", "allocatable": {"cpu": "8", "memory": "32Gi"}},
    {"name": "cpu-1", "allocatable": {"cpu": "8", "memory": "32Gi"}},
]
PROFILES = """
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
c.KubeSpawner.profile_list = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "Course data", "slug": "data", "kubespawner_override": {
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "course-data-typo"}}],
        "volume_mounts": [{"name": "home", "mountPath": "/home/jovyan"},
                          {"name": "data", "mountPath": "/data"}]}},
    {"display_name": "Robot", "slug": "robot", "kubespawner_override": {"service_account": "robot"}},
    {"display_name": "Bad port", "slug": "badport", "kubespawner_override": {
        "extra_container_config": {"ports": [{"name": "notebook-port", "containerPort": 70000}]}}},
    {"display_name": "Never ready", "slug": "stuck", "kubespawner_override": {
        "extra_container_config": {"readinessProbe": {"tcpSocket": {"port": 9}, "periodSeconds": 1}}}},
]
"""
SENTENCES = {
    "data": "Spawn failed: The storage volume course-data-typo that this profile mounts does not exist, "
    "so your server cannot start. Please tell the hub admin.",
    "robot": 'Spawn failed: The hub is not allowed to start your server (pods "jupyter-ta1" is forbidden: '
    'error looking up service account default/robot: serviceaccount "robot" not found). This is a setup '
    "problem: please tell the hub admin.",
    "badport": 'Spawn failed: The cluster rejected the settings of this profile (Pod "jupyter-admin" is '
    "invalid: spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and "
    "65535, inclusive). Pick another profile and tell your teacher about this one.",
    "stuck": f"Spawn failed: Your server did not become ready within {START_TIMEOUT} seconds. Try again "
    "in a minute.",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster(nodes=NODES, kubelet_mode="process", latencies="realistic") as fake:
        fake.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield fake


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


def _spawn(session: Any, profile: str, sink: dict[str, Any]) -> None:
    try:
        assert request_server(session, {"profile": profile}).status_code in (201, 202, 400, 500)
        sink["events"] = list(progress_events(session, START_TIMEOUT + 20))
    except Exception as exc:
        sink["error"] = exc


def test_spawns_that_cannot_start_say_why_and_leave_nothing(hub, cluster):
    users = {"teacher1": "data", "ta1": "robot", "admin": "badport", "student1": "stuck"}
    results: dict[str, dict[str, Any]] = {user: {} for user in users}
    threads = [threading.Thread(target=_spawn, args=(hub.login(user), profile, results[user]))
               for user, profile in users.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(START_TIMEOUT + 30)

    for user, profile in users.items():
        sink = results[user]
        assert "error" not in sink, f"{user}: {sink.get('error')!r}"
        final = sink["events"][-1] if sink["events"] else {}
        # its own sentence, not JupyterHub's start timeout: it failed for its reason, before that
        # (a check of the wall clock would only measure how busy the machine is)
        assert final.get("failed") and final["message"] == SENTENCES[profile], (user, sink["events"])
        assert "Traceback" not in " ".join(e.get("message", "") for e in sink["events"])
    for user in users:
        wait_stopped(hub.login(user), 20)
        wait_for(lambda u=user: pod(cluster, u) is None and pvc(cluster, u) is None, 20,
                 f"{user}'s failed attempt to leave no pod and no volume")


def test_a_start_waits_for_the_old_home_volume_to_go_and_makes_a_new_one(hub, cluster):
    # an earlier server's volume, still mounted by a pod that takes its time to stop
    old = cluster.create("persistentvolumeclaims", {
        "metadata": {"name": "claim-student2"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
    }, NAMESPACE)
    cluster.create("pods", {"metadata": {"name": "old-server"}, "spec": {
        "containers": [{"name": "notebook", "image": "busybox:1"}],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-student2"}}],
    }}, NAMESPACE)
    wait_for(lambda: (cluster.get("pods", "old-server", NAMESPACE) or {}).get("status", {}).get("phase")
             == "Running", 20, "the old server to run")
    cluster.delete("persistentvolumeclaims", "claim-student2", NAMESPACE)
    assert pvc(cluster, "student2")["metadata"]["deletionTimestamp"], "pvc-protection must hold it"

    student = hub.login("student2")
    assert request_server(student, {"profile": "cpu"}).status_code in (201, 202)
    posts = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"
    wait_for(lambda: sum(1 for m, p in cluster.requests if m == "POST" and p.startswith(posts)) >= 3, 20,
             "the spawner to retry the volume while the old one is Terminating")
    assert pod(cluster, "student2") is None, "a pod was created on a volume that is being deleted"

    cluster.delete("pods", "old-server", NAMESPACE)  # the old server stops; its volume goes
    wait_ready(student, START_TIMEOUT + 20)
    home = pvc(cluster, "student2")
    assert home is not None and home["metadata"]["uid"] != old["metadata"]["uid"]
    assert pod(cluster, "student2")["status"]["phase"] == "Running"

    assert student.hub_api("DELETE", "users/student2/server").status_code in (202, 204)
    wait_stopped(student, 30)
    wait_for(lambda: pod(cluster, "student2") is None, 20, "student2's pod to be deleted")
    assert pvc(cluster, "student2") is not None, "stopping a server must keep the student's files"
