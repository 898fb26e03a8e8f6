"""Preemption end to end through a real hub in Kubernetes mode (tests/kubehub.py) on the fake
cluster (one node with 3 GPUs; its kubelet runs each pod's command, sends SIGTERM on deletion;
the training-operator stand-in runs the PyTorchJobs): the story of tests/preemption_story.py, with
gpu101 guaranteed 2 GPUs by ``c.ClasshubJobs.course_shares`` and a 3 s grace period."""

from __future__ import annotations

import pytest

from tests import preemption_story as story
from tests.hubproc import api
from tests.kubefake import RUN_ANNOTATION
from tests.kubehub import jobs_cluster, running_hub

pytestmark = pytest.mark.cluster

NS = "classhub-jobs"
GRACE = 3
NODES = [{"name": "gpu-a", "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "3"},
          "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}}]
EXTRA = f"""
c.ClasshubKubeSpawner.profiles = [
    {{"slug": "cpu", "kind": "cpu", "default": True}},
    {{"slug": "gpu", "kind": "gpu", "gpu_product": "NVIDIA-H200"}},
]
# the notebook pod answers as jupyterhub-singleuser would (kubefake's stand-in, quick on a busy
# machine); the jobs' pods run their commands
c.KubeSpawner.extra_annotations = {{"{RUN_ANNOTATION}": "standin"}}
c.ClasshubJobs.namespace = "{NS}"
c.ClasshubJobs.interval = 0.5
c.ClasshubJobs.grace = {GRACE}
c.ClasshubJobs.course_shares = {{"gpu101": {{"nvidia.com/gpu": 2}}}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from jobs_cluster(tmp_path_factory, NODES, NS)


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    yield from running_hub(cluster, tmp_path_factory, NS, EXTRA)


def test_a_borrowing_pytorchjob_is_preempted_requeued_in_its_place_and_resumes(hub, cluster, tmp_path):
    admin = hub.login("admin").new_token()
    for course, members in (("gpu101", {"student1": "student", "student2": "student"}),
                            ("night101", {"owl": "student"})):
        assert api(hub, "POST", "courses", admin, json={"name": course}).status_code == 201
        r = api(hub, "PUT", f"courses/{course}/members", admin,
                json={"add": [{"username": u, "role": role} for u, role in members.items()]})
        assert r.status_code == 200, r.text
    tokens = {u: hub.login(u).new_token() for u in ("owl", "student1", "student2")}
    for user in ("owl", "student1"):  # their homes (KubeSpawner's claim-{user}), which jobs mount
        cluster.create("persistentvolumeclaims", {"metadata": {"name": f"claim-{user}"}, "spec": {
            "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}, NS)
    story.start_gpu_notebook(hub, admin, tokens["student2"], "student2", "gpu")
    notebook = cluster.get("pods", "jupyter-student2", NS)
    assert notebook["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"

    def notebook_kept() -> bool:
        pod = cluster.get("pods", "jupyter-student2", NS)
        return (pod is not None and pod["metadata"]["uid"] == notebook["metadata"]["uid"]
                and story.notebook_ready(hub, admin, "student2"))

    story.tell(hub, tokens, "gpu101", GRACE, tmp_path, notebook_kept)
