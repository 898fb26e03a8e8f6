"""Distributed jobs through a real hub in Kubernetes mode (tests/kubehub.py), on the fake cluster
with its training-operator and coscheduling stand-ins; the fake kubelet runs each replica's
command as a process with the pod's environment.

What a student would notice: a job submitted through the API becomes a PyTorchJob, runs its two
replicas with the ranks the operator gives, ends succeeded, and its replicas' logs are readable;
the replicas mount the student's home claim (as the hub's spawner names it) at the home and start
in the folder the job was submitted from.
"""

from __future__ import annotations

import sys

import pytest

from tests.hubproc import api, wait_for
from tests.kubefake.training import SCHEDULER_NAME
from tests.kubehub import jobs_cluster, running_hub

pytestmark = pytest.mark.cluster

NS = "classhub-jobs"
NODES = [{"name": f"node-{i}", "allocatable": {"cpu": "8", "memory": "32Gi"}} for i in range(2)]
#: An image no default names: a replica carrying it was made with the hub's setting.
JOB_IMAGE = "registry.example.org/classhub/jobs:7"
#: The job service's settings as a deployer writes them, in the hub's jupyterhub_config.py after
#: configure(c) (z2jh: hub.config.ClasshubJobs): the service runs in its own process and gets
#: them only through configure()'s hand-over (docs/configuration.md, "Configuration: one channel, traits").
EXTRA = f"""
c.ClasshubJobs.namespace = "{NS}"
c.ClasshubJobs.scheduler_name = "{SCHEDULER_NAME}"
c.ClasshubJobs.image = "{JOB_IMAGE}"
c.ClasshubJobs.interval = 0.5
c.ClasshubJobs.grace = 2
"""
PRINT_RANK = "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from jobs_cluster(tmp_path_factory, NODES, NS)


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    yield from running_hub(cluster, tmp_path_factory, NS, EXTRA)


def test_a_job_submitted_to_a_kubernetes_mode_hub_runs_as_a_pytorchjob(hub, cluster):
    admin = hub.login("admin").new_token()
    assert api(hub, "POST", "courses", admin, json={"name": "gpu101"}).status_code == 201
    r = api(hub, "PUT", "courses/gpu101/members", admin,
            json={"add": [{"username": "student1", "role": "student"}]})
    assert r.status_code == 200, r.text
    student = hub.login("student1").new_token()
    # The claim student1's server made (KubeSpawner's claim-{user_server}), on NFS-like storage.
    cluster.create("persistentvolumeclaims", {"metadata": {"name": "claim-student1"}, "spec": {
        "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}, NS)
    body = {"name": "ranks", "command": [sys.executable, "-c", PRINT_RANK], "replicas": 2,
            "resources": {"cpu": "1"}, "workdir": "lab3"}
    r = api(hub, "POST", "jobs", student, json=body)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    done = wait_for(lambda: (j := api(hub, "GET", f"jobs/{job_id}", student).json())["state"]
                    in ("succeeded", "failed", "cancelled") and j, 120, "the job to end")
    assert done["state"] == "succeeded", done["events"]
    replicas = [p for p in cluster.list("pods", NS)
                if p["metadata"]["labels"].get("training.kubeflow.org/job-name") == job_id]
    pods = {p["metadata"]["labels"]["training.kubeflow.org/replica-type"]: p["spec"]["nodeName"]
            for p in replicas}
    assert [r["node"] for r in done["replicas"]] == [pods["master"], pods["worker"]]  # as placed
    for pod in replicas:  # the home the student's notebook mounts, and the folder they were in
        volume = pod["spec"]["volumes"][0]
        assert volume["persistentVolumeClaim"] == {"claimName": "claim-student1"}
        assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": volume["name"],
                                                                  "mountPath": "/home/jovyan"}]
        assert pod["spec"]["containers"][0]["workingDir"] == "/home/jovyan/lab3"
        assert pod["spec"]["containers"][0]["image"] == JOB_IMAGE  # c.ClasshubJobs.image
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME  # c.ClasshubJobs.scheduler_name
    obj = cluster.get("pytorchjobs", job_id, NS)
    assert obj["metadata"]["labels"]["classhub.io/user"] == "student1"
    assert obj["spec"]["runPolicy"]["suspend"] is False
    assert cluster.get("podgroups", job_id, NS)["spec"]["minMember"] == 2
    log = api(hub, "GET", f"jobs/{job_id}/logs?index=1", student)
    assert log.status_code == 200 and "rank 1 of 2" in log.text
