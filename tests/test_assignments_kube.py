"""Assignments on Kubernetes: a real hub on the fake cluster (the second run mode).

The fake kubelet runs each container's real command as a local process and mounts no volumes,
so the home mount path points at a local folder per user (as tests/test_templates_kube.py does).
What a student notices: starting the assignment gives their pod the assignment's files (seeded by
the init container, as a template's), and Submit takes their folder, read through their own
server with their own credentials; the teacher downloads it.
"""

from __future__ import annotations

import io
import sys
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.kubehub import KubeHub, process_cluster

pytestmark = pytest.mark.cluster

NODES = [{"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi"}}]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from process_cluster(tmp_path_factory, NODES)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kubeassignments")
    found = {name: root / name for name in ("templates", "homes", "submissions")}
    for user in ("teacher1", "student1"):
        (found["homes"] / user).mkdir(parents=True)
    found["templates"].mkdir()
    return found


@pytest.fixture(scope="module")
def hub(cluster, folders, tmp_path_factory):
    import kubernetes

    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    # the template volume: a ReadWriteMany PVC, as an admin would create it (the seeding init
    # container mounts it)
    kubernetes.client.CoreV1Api(client).create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "classhub-templates"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    client.close()
    homes, templates = folders["homes"], folders["templates"]
    config = f"""
c.ClasshubKubeSpawner.home_mount_path = "{homes}/{{username}}"
c.KubeSpawner.working_dir = "{homes}/{{username}}"
c.ClasshubTemplates.storage_dir = "{templates}"
c.ClasshubTemplates.mount_path = "{templates}"
c.ClasshubTemplates.seed_python = {sys.executable!r}
c.ClasshubAssignments.storage_dir = "{folders['submissions']}"
"""
    hub = KubeHub(tmp_path_factory.mktemp("kubeassignmentshub"), cluster.kubeconfig_path,
                  start_timeout=60, extra_config=config)
    hub.start()
    yield hub
    hub.stop()


def service(hub: KubeHub, method: str, path: str, token: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"token {token}", **kwargs.pop("headers", {})}
    return requests.request(method, f"{hub.url}/services/classhub/api/{path}", timeout=120,
                            headers=headers, **kwargs)


def test_start_and_submit_through_the_students_pod(hub: KubeHub, folders):
    admin = hub.login("admin").new_token()
    assert service(hub, "POST", "courses", admin, json={"name": "k101"}).status_code == 201
    r = service(hub, "PUT", "courses/k101/members", admin, json={"add": [
        {"username": "teacher1", "role": "teacher"}, {"username": "student1", "role": "student"}]})
    assert r.status_code == 200, r.text
    teacher, student = hub.login("teacher1").new_token(), hub.login("student1").new_token()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("README.md", "# Lab 1\n")
    r = service(hub, "POST", "courses/k101/templates/lab1/versions?home_folder=lab1", teacher,
                data=archive.getvalue(), headers={"Content-Type": "application/zip"})
    assert r.status_code == 201, r.text
    due = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    r = service(hub, "POST", "courses/k101/assignments", teacher,
                json={"name": "lab1", "template": "lab1", "due_at": due})
    assert r.status_code == 201, r.text

    # submitting before the server runs says what to do
    r = service(hub, "POST", "courses/k101/assignments/lab1/submissions", student)
    assert r.status_code == 409 and "start the assignment" in r.json()["message"], r.text
    r = service(hub, "POST", "courses/k101/assignments/lab1/start", student)
    assert r.status_code == 200, r.text
    assert (folders["homes"] / "student1" / "lab1" / "README.md").read_text() == "# Lab 1\n"
    r = requests.put(f"{hub.url}/user/student1/api/contents/{quote('lab1/answer.py')}",
                     json={"type": "file", "format": "text", "content": "y = 3\n"},
                     headers={"Authorization": f"token {student}"}, timeout=30)
    assert r.status_code == 201, r.text
    r = service(hub, "POST", "courses/k101/assignments/lab1/submissions", student)
    assert r.status_code == 201, r.text
    assert (r.json()["files"], r.json()["late"]) == (2, False)

    r = service(hub, "GET", "courses/k101/assignments/lab1/download", teacher)
    assert r.status_code == 200, r.text
    got = zipfile.ZipFile(io.BytesIO(r.content))
    assert sorted(got.namelist()) == ["student1/README.md", "student1/answer.py"]
    assert got.read("student1/answer.py") == b"y = 3\n"
