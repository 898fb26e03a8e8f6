"""Assignments on Kubernetes: a real hub on the fake cluster (the second run mode).

The fake kubelet runs each container's real command as a local process; the home mount path
points at a local folder per user (as tests/test_templates_kube.py does). What a student notices:
starting the assignment gives their pod the assignment's files (seeded by the init container, as a
template's), and Submit takes their folder, read through their own server with their own
credentials; the teacher downloads it. Autograded, the submission becomes a grading job whose pod
has no service-account token, no home, the profile's limits and a grader that becomes uid 65534
(not the student's): the fake kubelet mounts the job's Secret root-only at /grading/in and an
emptyDir at /grading/work, the grader runs the student's notebook there, and the service reads
the result from the pod's log, as on a cluster: the student's score and feedback (a hidden test
failed, with their code's own words: it ran as 65534 and could not read the inputs). The
helm-values NetworkPolicy selects that pod. The teacher sees the student's home size, measured by
the node's kubelet (its stats summary) while the student's server runs (docs/teachers/
autograding.md, docs/admins/course-data.md).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import sys
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import nbformat
import pytest
import requests
import yaml

from hub_ext.backends import autograde
from tests.hubproc import api, wait_for
from tests.kubefake.netpol import selects
from tests.kubehub import KubeHub, process_cluster
from tests.test_autograde_units import HIDDEN
from tests.test_autograde_units import source_notebook as source

pytestmark = pytest.mark.cluster

NODES = [{"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi"}}]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.kubefake.training import TrainingOperator

    for fake in process_cluster(tmp_path_factory, NODES):
        TrainingOperator(fake)  # grading jobs are PyTorchJobs
        # the grading image's `python` (with nbclient): this test's own, as an image's ENV PATH
        fake.kubelet.image_env["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        yield fake


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
c.ClasshubKubeSpawner.profiles = [
    {{"slug": "cpu", "kind": "cpu", "default": True, "cpu_limit": "2", "mem_limit": "2Gi"}},
]
c.ClasshubJobs.interval = 0.5
"""
    hub = KubeHub(tmp_path_factory.mktemp("kubeassignmentshub"), cluster.kubeconfig_path,
                  start_timeout=60, extra_config=config)
    hub.start()
    yield hub
    hub.stop()


#: The student's answer (the notebook's "answer" cell).
ANSWER = """import os

def double(x):
    if x > 10:
        readable = os.access("/grading/in/grading.json", os.R_OK)
        raise ValueError(f"uid={os.getuid()} inputs={readable}")
    return 2 * x
"""

#: the classhub API as tests.hubproc.api calls it, with the time a pod start may take on a busy machine
service = functools.partial(api, timeout=120)


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
        z.writestr("lab1.ipynb", nbformat.writes(autograde.student_version(source())))
    r = service(hub, "POST", "courses/k101/templates/lab1/versions?home_folder=lab1", teacher,
                data=archive.getvalue(), headers={"Content-Type": "application/zip"})
    assert r.status_code == 201, r.text
    due = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    r = service(hub, "POST", "courses/k101/assignments", teacher,
                json={"name": "lab1", "template": "lab1", "due_at": due})
    assert r.status_code == 201, r.text
    r = service(hub, "PUT", "courses/k101/assignments/lab1/autograde", teacher, json={
        "notebooks": {"lab1.ipynb": json.loads(nbformat.writes(source()))}, "profile": "cpu",
        "time_limit": 30})
    assert r.status_code == 200, r.text

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
    # the student's answer: right for small numbers; for others it says who runs it and whether
    # the grader's inputs are readable (the hidden test calls it with 21)
    notebook = autograde.student_version(source())
    notebook.cells[1].source = ANSWER
    r = requests.put(f"{hub.url}/user/student1/api/contents/{quote('lab1/lab1.ipynb')}",
                     json={"type": "notebook", "content": json.loads(nbformat.writes(notebook))},
                     headers={"Authorization": f"token {student}"}, timeout=30)
    assert r.status_code == 200, r.text
    r = service(hub, "POST", "courses/k101/assignments/lab1/submissions", student)
    assert r.status_code == 201, r.text
    assert (r.json()["files"], r.json()["late"]) == (3, False)
    submitted = r.json()["id"]

    # the teacher sees the student's home size while the student's server runs (the node's
    # kubelet measures the home volume); the teacher's own server is not running: no size
    r = requests.put(f"{hub.url}/user/student1/api/contents/{quote('weights.bin')}",
                     json={"type": "file", "format": "base64",
                           "content": base64.b64encode(os.urandom(1024 * 1024)).decode()},
                     headers={"Authorization": f"token {student}"}, timeout=30)
    assert r.status_code == 201, r.text
    r = service(hub, "GET", "courses/k101/storage", teacher)
    assert r.status_code == 200, r.text
    homes = {h["user"]: h["bytes"] for h in r.json()["homes"]}
    assert r.json()["homes_from"] == "kubelet" and homes["teacher1"] is None, r.json()
    assert 1024 * 1024 <= homes["student1"] < 2 * 1024 * 1024, r.json()
    mine = service(hub, "GET", "storage/me", student).json()
    assert mine["bytes"] == homes["student1"], mine

    # the grading job's pod: no token, no home, the profile's limits, a grader that drops to 65534
    import kubernetes

    client = kubernetes.config.new_client_from_config(config_file=str(hub.kubeconfig))
    core = kubernetes.client.CoreV1Api(client)
    pods = wait_for(lambda: core.list_namespaced_pod(
        "default", label_selector="classhub.io/grading=true").items, 60, "the grading pod")
    pod = pods[0].to_dict()
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert spec["automount_service_account_token"] is False
    mounts = [m["mount_path"] for m in container["volume_mounts"] or []]
    assert not any("serviceaccount" in m for m in mounts) and not any("homes" in m for m in mounts), mounts
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}
    assert container["command"][-4:] == ["--drop-to", "65534", "--work", "/grading/work"]
    names = [e["name"] for e in container["env"]]  # the operator's torchrun variables, nothing of ours
    assert "CLASSHUB_JOB_ID" in names and not [n for n in names if "TOKEN" in n or "JUPYTERHUB" in n
                                               or "DB" in n], names
    student_pod = core.read_namespaced_pod("jupyter-student1", "default").to_dict()
    student_uid = ((student_pod["spec"]["security_context"] or {}).get("run_as_user")
                   or (student_pod["spec"]["containers"][0]["security_context"] or {}).get("run_as_user"))
    assert student_uid != 65534
    # the NetworkPolicy of helm-values selects the grading pod as the cluster holds it
    policy = yaml.safe_load((Path(__file__).parents[1] / "helm-values" / "grading-networkpolicy.yaml")
                            .read_text())
    policy["metadata"]["namespace"] = "default"
    kubernetes.client.NetworkingV1Api(client).create_namespaced_network_policy("default", policy)
    (stored,) = kubernetes.client.NetworkingV1Api(client).list_namespaced_network_policy("default").items
    assert selects(client.sanitize_for_serialization(stored), pods[0].metadata.labels)
    client.close()

    # the grader ran in the pod (the Secret's inputs, the notebook as 65534) and its result came
    # back through the pod's log: the student's score and feedback
    def graded():
        got = service(hub, "GET", f"courses/k101/assignments/lab1/submissions/{submitted}", student).json()
        return (got.get("feedback") or {}).get("state") in ("done", "failed") and got
    got = wait_for(graded, 180, "the grading to end")
    if os.geteuid() != 0:  # the fake kubelet maps only this account: the grader cannot become 65534
        assert got["feedback"]["state"] == "failed" and "did not finish" in got["feedback"]["message"]
    else:
        assert got["feedback"]["state"] == "done", got["feedback"]
        assert (got["score"], got["max_score"]) == (3, 6), got["feedback"]
        cells = {c["grade_id"]: c for c in got["feedback"]["notebooks"][0]["cells"]}
        assert {k: (c["status"], c["score"]) for k, c in cells.items()} == {
            "q1": ("failed", 0), "q2": ("passed", 3), "essay": ("manual", None)}, cells
        assert "uid=65534 inputs=False" in cells["q1"]["message"], cells["q1"]
        assert HIDDEN not in json.dumps(got) and "hidden-secret-check" not in json.dumps(got)

    r = service(hub, "GET", "courses/k101/assignments/lab1/download", teacher)
    assert r.status_code == 200, r.text
    got = zipfile.ZipFile(io.BytesIO(r.content))
    assert sorted(got.namelist()) == ["student1/README.md", "student1/answer.py", "student1/lab1.ipynb"]
    assert got.read("student1/answer.py") == b"y = 3\n"
