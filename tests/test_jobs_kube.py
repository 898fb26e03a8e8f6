"""The Kubernetes objects of a distributed job, checked against the upstream CRD schemas.

What a cluster admin would notice if this failed: the API server refusing classhub's PyTorchJob
(422), a job whose pods start before classhub admitted it (not suspended), pods that the gang
scheduler binds one by one (no PodGroup, or minMember below the replicas), Kueue never seeing
the job (no queue label), or replicas placed elsewhere than decided (no node affinity).
Schemas: tests/data/crds (sources and versions in its README).
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from hub_ext.backends.jobs import Launch, ReplicaLaunch
from hub_ext.backends.kubernetes import jobs as kube
from tests.kubefake.patch import merge_patch

pytestmark = pytest.mark.unit

CRDS = Path(__file__).parent / "data" / "crds"


def schema(file: str, version: str) -> dict:
    crd = yaml.safe_load((CRDS / file).read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]


PYTORCHJOB = schema("kubeflow.org_pytorchjobs.yaml", "v1")
PODGROUP = schema("scheduling.x-k8s.io_podgroups.yaml", "v1alpha1")


def launch(roles: dict[str, int], nodes: list[str]) -> Launch:
    replicas, rank = [], 0
    for role, count in roles.items():
        for index in range(count):
            replicas.append(ReplicaLaunch(role, index, rank, nodes[rank]))
            rank += 1
    return Launch(job_id="resnet-ddp-1a2b3c4d", owner="ann@uni.example", course="gpu101",
                  command=("python", "train.py"), env={"EPOCHS": "3"}, workdir="",
                  master_port=0, replicas=tuple(replicas), max_runtime=3600,
                  requests={role: {"nvidia.com/gpu": "4", "cpu": "8", "memory": "64Gi"} for role in roles})


def test_a_two_node_job_is_a_valid_suspended_pytorchjob_with_a_podgroup():
    job = launch({"worker": 2}, ["gpu-a", "gpu-b"])
    obj = kube.pytorch_job(job, namespace="classhub", image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                           scheduler="scheduler-plugins-scheduler")
    assert "ann@uni" not in str(obj["metadata"]["labels"])  # label values are sanitised
    jsonschema.validate(obj, PYTORCHJOB)
    assert obj["spec"]["runPolicy"]["suspend"] is True  # nothing runs before admission
    assert obj["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2
    specs = obj["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 1)
    container = specs["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    pod_labels = specs["Worker"]["template"]["metadata"]["labels"]
    assert pod_labels[kube.POD_GROUP_LABEL] == job.job_id
    assert obj["metadata"]["labels"]["classhub.io/user"] == "ann-uni.example"
    assert obj["metadata"]["labels"]["classhub.io/course"] == "gpu101"
    group = kube.pod_group(job, namespace="classhub")
    jsonschema.validate(group, PODGROUP)
    assert group["spec"]["minMember"] == 2
    assert group["spec"]["minResources"]["nvidia.com/gpu"] == "8"

    admitted = merge_patch(obj, kube.admit_patch(job))
    jsonschema.validate(admitted, PYTORCHJOB)
    assert admitted["spec"]["runPolicy"]["suspend"] is False
    terms = {kind: spec["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        for kind, spec in admitted["spec"]["pytorchReplicaSpecs"].items()}
    assert terms == {"Master": ["gpu-a"], "Worker": ["gpu-b"]}
    kept = admitted["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert kept == [container]  # the patch keeps the container


def test_a_master_and_workers_map_to_the_replica_types_and_kueue_gets_the_queue():
    job = launch({"master": 1, "worker": 3}, ["n1", "n2", "n3", "n4"])
    obj = kube.pytorch_job(job, namespace="classhub", image="img", kueue_queue="gpu101-queue")
    jsonschema.validate(obj, PYTORCHJOB)
    assert obj["metadata"]["labels"][kube.KUEUE_QUEUE_LABEL] == "gpu101-queue"
    assert obj["spec"]["runPolicy"]["suspend"] is True  # Kueue un-suspends it
    specs = obj["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 3)


def test_shapes_a_pytorchjob_cannot_express_are_refused_with_a_sentence():
    with pytest.raises(kube.KubeJobError, match="master role of one replica"):
        kube.replica_types(launch({"ps": 2, "worker": 2}, ["a", "b", "c", "d"]))


def test_the_schemas_do_refuse_a_broken_object():
    """The check above can fail: the upstream schemas reject what the API server would."""
    obj = kube.pytorch_job(launch({"worker": 2}, ["a", "b"]), namespace="classhub", image="img")
    obj["spec"]["runPolicy"]["suspend"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, PYTORCHJOB)
    group = kube.pod_group(launch({"worker": 2}, ["a", "b"]), namespace="classhub")
    group["spec"]["minMember"] = "all"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(group, PODGROUP)


def test_max_restarts_becomes_the_backoff_limit():
    from dataclasses import replace

    job = replace(launch({"worker": 2}, ["a", "b"]), max_restarts=2)
    obj = kube.pytorch_job(job, namespace="classhub", image="img")
    jsonschema.validate(obj, PYTORCHJOB)
    assert obj["spec"]["runPolicy"]["backoffLimit"] == 2
    assert {s["restartPolicy"] for s in obj["spec"]["pytorchReplicaSpecs"].values()} == {"OnFailure"}
