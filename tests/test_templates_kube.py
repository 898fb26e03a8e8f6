"""Templates on Kubernetes (must show 1, kubernetes mode): a real hub on the fake cluster.

The fake kubelet runs each container's real command as a local process and mounts no volumes,
so the test points the template volume's mount path and the home mount path at local folders:
the seeding container then runs the real ``python -m hub_ext.backends.templates_cli``
exactly as the pod spec says, reading the template storage the service wrote and writing the
student's "home volume". What a user notices: the teacher publishes from their own server, the
student's pod gets a seeding init container (a sidecar for a large template) with the template
PVC mounted read-only, and the student's JupyterLab shows the files with the marker of the version.
The same spawns carry the course's data volume (issue 35, spawn level): read-only in the student's
pod, read-write in the teacher's.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from urllib.parse import quote

import kubernetes_validate
import pytest
import requests

from tests.hubproc import api
from tests.kubefake.waiting import wait_for
from tests.kubehub import KubeHub, process_cluster, wait_ready

pytestmark = pytest.mark.cluster

NODES = [{"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi"}}]
CAFE = "café ü.txt"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from process_cluster(tmp_path_factory, NODES)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kubetemplates")
    found = {"templates": root / "templates", "homes": root / "homes", "course-data": root / "course-data"}
    for user in ("teacher1", "student1"):
        (found["homes"] / user).mkdir(parents=True)
    found["templates"].mkdir()
    return found


@pytest.fixture(scope="module")
def hub(cluster, folders, tmp_path_factory, v1_module):
    # the template volume: a ReadWriteMany PVC, as an admin would create it
    v1_module.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "classhub-templates"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    # the course data store (docs/admins/course-data.md): a ReadWriteMany PVC with a folder per course
    v1_module.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "course-data"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    homes, templates = folders["homes"], folders["templates"]
    config = f"""
c.ClasshubCourseData.volume = {{"persistentVolumeClaim": {{"claimName": "course-data"}}}}
c.ClasshubCourseData.mount_path = "/srv/course-data"
c.ClasshubCourseData.root_dir = "{folders['course-data']}"
c.ClasshubKubeSpawner.home_mount_path = "{homes}/{{username}}"
c.KubeSpawner.working_dir = "{homes}/{{username}}"
c.ClasshubTemplates.mount_path = "{templates}"
c.ClasshubTemplates.seed_python = {sys.executable!r}
c.ClasshubTemplates.sidecar_threshold = 4096
c.ClasshubTemplates.publisher_image = "quay.io/example/classhub-hub:test"
"""
    # The service has no mount of the volume: a publisher pod writes each version, with the
    # hub's c.ClasshubTemplates settings (configure() hands the section to the service).
    hub = KubeHub(tmp_path_factory.mktemp("kubetemplateshub"), cluster.kubeconfig_path,
                  start_timeout=60, extra_config=config)
    hub.start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def v1_module(cluster):
    import kubernetes

    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


#: the classhub API as tests.hubproc.api calls it, with the time a pod start may take on a busy machine
service = functools.partial(api, timeout=120)


def contents(hub: KubeHub, user: str, token: str, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(method, f"{hub.url}/user/{user}/api/contents/{quote(path)}", timeout=30,
                            headers={"Authorization": f"token {token}"}, **kwargs)


def test_publish_from_a_pod_and_seed_in_the_student_pod(hub: KubeHub, cluster, folders):
    admin = hub.login("admin").new_token()
    assert service(hub, "POST", "courses", admin, json={"name": "k101"}).status_code == 201
    r = service(hub, "PUT", "courses/k101/members", admin, json={"add": [
        {"username": "teacher1", "role": "teacher"}, {"username": "student1", "role": "student"}]})
    assert r.status_code == 200, r.text
    teacher_session, student_session = hub.login("teacher1"), hub.login("student1")
    teacher, student = teacher_session.new_token(), student_session.new_token()

    # the teacher's server (a pod) holds the files; publish reads them with the teacher's token
    assert teacher_session.hub_api("POST", "users/teacher1/server", json={}).status_code in (201, 202)
    wait_ready(teacher_session, 90)
    assert contents(hub, "teacher1", teacher, "PUT", "lab", json={"type": "directory"}).status_code == 201
    for name, text in (("README.md", "# Lab\n"), (CAFE, "crème\n")):
        r = contents(hub, "teacher1", teacher, "PUT", f"lab/{name}",
                     json={"type": "file", "format": "text", "content": text})
        assert r.status_code == 201, r.text
    r = service(hub, "POST", "courses/k101/templates/lab/versions", teacher,
                json={"source": {"server_path": "lab"}, "description": "on kubernetes"})
    assert r.status_code == 201, r.text
    # written by a short-lived publisher pod (gone now) onto the template volume
    assert list(folders["templates"].glob("c*/t*/v1-*/files/README.md"))
    started = [e for e in cluster.list("events", "default")
               if e["involvedObject"]["name"].startswith("classhub-publish") and e["reason"] == "Started"]
    assert started, "no publisher pod ran"
    pods = [p["metadata"]["name"] for p in cluster.list("pods", "default")]
    assert not [name for name in pods if name.startswith("classhub-publish")], pods

    # one call: the student's pod starts with the seeding init container
    r = service(hub, "POST", "courses/k101/templates/lab/start", student)
    assert r.status_code == 200, r.text
    pod = cluster.get("pods", "jupyter-student1", "default")
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    init = {c["name"]: c for c in pod["spec"].get("initContainers") or []}
    assert "classhub-seed" in init, pod["spec"]
    mounts = {m["name"]: m for m in init["classhub-seed"]["volumeMounts"]}
    assert mounts["classhub-templates"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["classhub-templates"]["persistentVolumeClaim"] == {
        "claimName": "classhub-templates", "readOnly": True}
    listing = contents(hub, "student1", student, "GET", "", params={"content": "1"}).json()
    assert {"README.md", CAFE} <= {item["name"] for item in listing["content"]}
    marker = json.loads((folders["homes"] / "student1" / ".classhub" / "template.json").read_text())
    assert (marker["template"], marker["version"]) == ("k101/lab", "1")

    # the course's data: read-only in the student's pod, read-write in the teacher's (issue 35)
    for user, read_only in (("student1", True), ("teacher1", False)):
        spec = cluster.get("pods", f"jupyter-{user}", "default")["spec"]
        data = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "course-data"]
        assert data == [{"name": "course-data", "mountPath": "/srv/course-data/k101", "subPath": "k101",
                         "readOnly": read_only}], (user, data)
        volume = {"name": "course-data", "persistentVolumeClaim": {"claimName": "course-data"}}
        assert volume in spec["volumes"]

    # uploads from the course page land on the store as the hub pod mounts it (root_dir), writable
    # by staff servers' read-write mounts (0644); a student's upload is refused
    r = service(hub, "PUT", "courses/k101/data/files/set/a.csv", teacher, data=b"x,y\n",
                headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 201, r.text
    placed = folders["course-data"] / "k101" / "set" / "a.csv"
    assert placed.read_bytes() == b"x,y\n" and oct(placed.stat().st_mode & 0o777) == "0o644"
    assert [f["path"] for f in service(hub, "GET", "courses/k101/data", student).json()["files"]] == [
        "set", "set/a.csv"]
    r = service(hub, "PUT", "courses/k101/data/files/b.csv", student, data=b"no",
                headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 403, r.text

    # v2 is large (over the test's 4 KiB threshold): a sidecar copies while JupyterLab starts
    big = "x" * 8000 + "\n"
    r = contents(hub, "teacher1", teacher, "PUT", "lab/big.txt",
                 json={"type": "file", "format": "text", "content": big})
    assert r.status_code == 201, r.text
    r = service(hub, "POST", "courses/k101/templates/lab/versions", teacher,
                json={"source": {"server_path": "lab"}})
    assert r.status_code == 201 and r.json()["version"] == 2, r.text
    r = service(hub, "POST", "courses/k101/templates/lab/start", student)
    assert r.status_code == 200, r.text
    pod = cluster.get("pods", "jupyter-student1", "default")
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    assert "classhub-seed" in {c["name"] for c in pod["spec"]["containers"]}
    assert "classhub-seed" not in {c["name"] for c in pod["spec"].get("initContainers") or []}
    wait_for(lambda: (folders["homes"] / "student1" / "big.txt").exists(), timeout=30, interval=0.2,
             what="the sidecar to copy big.txt")
    assert contents(hub, "student1", student, "GET", "big.txt",
                    params={"content": "1", "format": "text"}).json()["content"] == big
