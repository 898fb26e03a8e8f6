"""Course data on Kubernetes: the pod a student's server gets mounts the course's data volume
read-only, a teacher's read-write (hub_ext.backends.coursedata.pod_volumes through
ClasshubKubeSpawner.apply_selection), and the fake API server takes the pod as kube-apiserver
would: the read-only flag is what the kubelet enforces, so a student's write fails in the pod.

Object level: the spawner makes its pod manifest as it would for the hub (profiles, selection,
the courses its start read), the manifest is validated against Kubernetes' schema and created on
the fake cluster, and the stored pod is read back.
"""

from __future__ import annotations

import kubernetes_validate
import pytest
from kubernetes_asyncio.client import ApiClient

from hub_ext.core.profiles import Viewer
from tests.kubefake import FakeCluster

pytestmark = pytest.mark.cluster

NFS = {"nfs": {"server": "nfs.example.edu", "path": "/exports/courses"}}


@pytest.fixture(scope="module")
def cluster():
    with FakeCluster(nodes=[{"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi"}}]) as fake:
        yield fake


async def _pod(monkeypatch, user: str, courses: dict[str, str]) -> dict:
    from hub_ext.backends.coursedata import ClasshubCourseData
    from spawner.kube import ClasshubKubeSpawner

    monkeypatch.setattr("kubespawner.spawner.load_config", lambda **_: None)  # manifests only
    monkeypatch.setattr("kubespawner.spawner.shared_client", lambda *_: None)
    hub_user = type("User", (), {"name": user, "id": 7, "url": f"/user/{user}/", "admin": False})()
    spawner = ClasshubKubeSpawner(
        _mock=True, user=hub_user, namespace="default",
        profiles=[{"slug": "cpu", "kind": "cpu", "default": True}],
        course_data=ClasshubCourseData(volume=NFS),
        volumes={"home": {"name": "home", "emptyDir": {}}},
        volume_mounts={"home": {"name": "home", "mountPath": "/home/jovyan"}})
    spawner.course_roles = courses
    selection = spawner.catalog().select(Viewer(name=user, groups=frozenset(courses)), {})
    await spawner.apply_selection(selection)
    manifest = await spawner.get_pod_manifest()
    return ApiClient().sanitize_for_serialization(manifest)


async def test_students_mount_the_course_read_only_and_teachers_read_write(monkeypatch, cluster):
    version = kubernetes_validate.latest_version()
    pods = {}
    for user, courses in {"sam": {"ml101": "student"},
                          "tom": {"ml101": "teacher", "bio201": "student"},
                          "tara": {"ml101": "ta"}}.items():
        pod = await _pod(monkeypatch, user, courses)
        kubernetes_validate.validate(pod, version, strict=True)
        cluster.create("pods", pod)
        pods[user] = cluster.get("pods", pod["metadata"]["name"])
    for user, expected in {"sam": {"/home/jovyan/data/ml101": True},
                           "tom": {"/home/jovyan/data/ml101": False, "/home/jovyan/data/bio201": True},
                           "tara": {"/home/jovyan/data/ml101": False}}.items():
        spec = pods[user]["spec"]
        assert [v for v in spec["volumes"] if v["name"] == "course-data"] == [{"name": "course-data", **NFS}]
        mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]
                  if m["name"] == "course-data"}
        assert {path: m.get("readOnly", False) for path, m in mounts.items()} == expected, user
        assert all(m["subPath"] == path.rsplit("/", 1)[1] for path, m in mounts.items())
        # the home stays as it was, the course data beside it
        assert {"name": "home", "mountPath": "/home/jovyan"} in spec["containers"][0]["volumeMounts"]


async def test_a_user_in_no_course_gets_no_course_volume(monkeypatch):
    pod = await _pod(monkeypatch, "nobody", {})
    assert all(v["name"] != "course-data" for v in pod["spec"]["volumes"])
