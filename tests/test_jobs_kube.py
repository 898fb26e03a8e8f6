"""The Kubernetes objects of a distributed job, checked against the upstream CRD schemas.

What a cluster admin would notice if this failed: the API server refusing classhub's PyTorchJob
(422), a job whose pods start before classhub admitted it (not suspended), pods that the gang
scheduler binds one by one (no PodGroup, or minMember below the replicas), Kueue never seeing
the job (no queue label), or replicas placed elsewhere than decided (no node affinity).
Schemas: tests/data/crds (sources and versions in its README).
"""

from __future__ import annotations

import json
from dataclasses import replace
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
TRAINJOB = schema("trainer.kubeflow.org_trainjobs.yaml", "v1alpha1")


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


ALL_GPU_TAINTS = ["amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe", "habana.ai/gaudi",
                  "nvidia.com/gpu"]


def test_every_extended_resource_a_replica_asks_for_has_a_limit():
    """The API server refuses a device plugin's resource requested without an equal limit."""
    job = replace(launch({"worker": 1}, ["a"]), requests={"worker": {
        "amd.com/gpu": "1", "example.com/fpga": "2", "cpu": "4", "memory": "8Gi"}})
    obj = kube.pytorch_job(job, namespace="classhub", image="img")
    spec = next(iter(obj["spec"]["pytorchReplicaSpecs"].values()))
    resources = spec["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"amd.com/gpu": "1", "example.com/fpga": "2", "memory": "8Gi"}


@pytest.mark.parametrize(
    ("resource", "keys"),
    [
        # every GPU taint key always (admission may place any job on a node with only GPU
        # taints), then the resource's own as ExtendedResourceToleration adds it
        ("nvidia.com/mig-1g.10gb.me", [*ALL_GPU_TAINTS, "nvidia.com/mig-1g.10gb.me"]),
        ("amd.com/gpu", ALL_GPU_TAINTS),
        ("nvidia.com/gpu", ALL_GPU_TAINTS),
    ],
)
def test_the_replicas_tolerate_the_taints_of_the_gpus_they_ask_for(resource, keys):
    job = replace(launch({"worker": 2}, ["a", "b"]), requests={"worker": {resource: "1", "cpu": "4"}},
                  pods={"worker": {"tolerations": [
                      {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                      {"key": "lab", "operator": "Exists", "effect": "NoSchedule"}]}})
    obj = kube.pytorch_job(job, namespace="classhub", image="img")
    jsonschema.validate(obj, PYTORCHJOB)
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        tolerations = spec["template"]["spec"]["tolerations"]
        assert [t["key"] for t in tolerations] == [*keys, "lab"]  # each once, the profile's kept
        assert all(t["operator"] == "Exists" and t["effect"] == "NoSchedule" for t in tolerations)


def test_max_restarts_becomes_the_backoff_limit():
    job = replace(launch({"worker": 2}, ["a", "b"]), max_restarts=2)
    obj = kube.pytorch_job(job, namespace="classhub", image="img")
    jsonschema.validate(obj, PYTORCHJOB)
    assert obj["spec"]["runPolicy"]["backoffLimit"] == 2
    assert {s["restartPolicy"] for s in obj["spec"]["pytorchReplicaSpecs"].values()} == {"OnFailure"}


async def test_the_replicas_mount_the_students_home_as_the_hubs_kubespawner_expands_it(monkeypatch):
    """What a student notices: `classhub job submit -- python train.py` from ~/lab3 finds
    train.py, because every replica mounts their notebook's home claim at the same path, starts
    in lab3 and runs as the notebook's uid/gid/fsGroup. The volume comes from the spawner's own
    expansion of z2jh-style settings, so a user name with "@" reaches Kubernetes escaped."""
    from spawner.kube import ClasshubKubeSpawner

    monkeypatch.setattr("kubespawner.spawner.load_config", lambda **_: None)  # no cluster needed
    monkeypatch.setattr("kubespawner.spawner.shared_client", lambda *_: None)
    user = type("User", (), {"name": "ann@uni.example", "id": 7, "url": "/user/ann@uni.example/"})()
    spawner = ClasshubKubeSpawner(
        _mock=True, user=user, namespace="classhub", uid=1000, gid=100, fs_gid=100,
        volumes={"home": {"name": "volume-{user_server}",
                          "persistentVolumeClaim": {"claimName": "{pvc_name}"}}},
        volume_mounts={"home": {"name": "volume-{user_server}", "mountPath": "/home/jovyan"},
                       "shm": {"name": "shm", "mountPath": "/dev/shm"}})
    answer = json.loads(json.dumps(await spawner.home_volume()))  # as the hub's endpoint sends it
    home = kube.Home.from_answer(answer)
    assert home.claim == spawner.pvc_name and "@" not in home.claim and home.namespace == "classhub"

    job = replace(launch({"worker": 2}, ["gpu-a", "gpu-b"]), workdir="lab3")
    obj = merge_patch(kube.pytorch_job(job, namespace="classhub", image="img", home=home),
                      kube.admit_patch(job))
    jsonschema.validate(obj, PYTORCHJOB)
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        assert pod["volumes"] == [{"name": home.volume["name"],
                                   "persistentVolumeClaim": {"claimName": spawner.pvc_name}}]
        assert container["volumeMounts"] == [{"name": home.volume["name"], "mountPath": "/home/jovyan"}]
        assert container["workingDir"] == "/home/jovyan/lab3"
        assert container["securityContext"] == {"runAsUser": 1000, "runAsGroup": 100}
        assert pod["securityContext"] == {"fsGroup": 100}
    assert "workingDir" not in kube.pytorch_job(job, namespace="classhub", image="img")[
        "spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]  # no home: as before


def test_with_trainer_v2_a_job_is_a_valid_suspended_trainjob_admitted_by_one_merge_patch():
    """A site running Kubeflow Trainer v2 (c.ClasshubJobs.job_kind = "trainjob"): the API server takes the
    TrainJob (422 otherwise), nothing runs before classhub un-suspends it, the replicas mount the
    student's home and start in the submitted folder, and the patch that admits it places them
    without dropping what the runtime patch carried (a merge patch replaces lists whole)."""
    job = replace(launch({"worker": 2}, ["gpu-a", "gpu-b"]), workdir="lab3")
    home = kube.Home({"name": "home", "persistentVolumeClaim": {"claimName": "claim-ann"}},
                     {"name": "home", "mountPath": "/home/jovyan"}, "classhub", uid=1000, gid=100, fs_gid=100)
    obj = kube.train_job(job, namespace="classhub", image="img", home=home, annotations={"a": "1"})
    jsonschema.validate(obj, TRAINJOB)
    spec = obj["spec"]
    assert spec["suspend"] is True and spec["runtimeRef"] == {"name": "torch-distributed"}
    assert (spec["trainer"]["numNodes"], spec["trainer"]["numProcPerNode"]) == (2, 1)
    assert spec["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "4"
    assert spec["trainer"]["command"][-3:] == ["/home/jovyan/lab3", "python", "train.py"]
    env = {e["name"]: e for e in spec["trainer"]["env"]}
    assert env["WORLD_SIZE"]["value"] == "2" and "PET_NNODES" not in env  # the trainer's own
    assert obj["metadata"]["labels"]["classhub.io/user"] == "ann-uni.example"
    assert obj["metadata"]["labels"]["classhub.io/course"] == "gpu101"
    [patch] = spec["runtimePatches"]
    assert patch["manager"] == "classhub.io/jobs"
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert node["name"] == "node" and pod["metadata"]["annotations"] == {"a": "1"}
    assert pod["metadata"]["labels"]["classhub.io/course"] == "gpu101"
    assert kube.POD_GROUP_LABEL not in pod["metadata"]["labels"]
    # the home, and an empty folder where the API token would be mounted (no token for the replica)
    assert pod["spec"]["volumes"] == [dict(home.volume), kube._NO_TOKEN_VOLUME]
    assert "affinity" not in pod["spec"]
    assert pod["spec"]["containers"] == [{"name": "node",
                                          "volumeMounts": [dict(home.mount), kube._NO_TOKEN_MOUNT],
                                          "securityContext": {"runAsUser": 1000, "runAsGroup": 100}}]
    assert pod["spec"]["securityContext"] == {"fsGroup": 100}

    placed = kube.train_job(job, namespace="classhub", image="img", home=home, annotations={"a": "1"},
                            nodes=["gpu-b", "gpu-a"])
    admitted = merge_patch(obj, kube.train_job_admit_patch(placed))
    jsonschema.validate(admitted, TRAINJOB)
    assert admitted["spec"]["suspend"] is False
    assert admitted["spec"]["trainer"] == spec["trainer"]  # immutable in the CRD: untouched
    pod_after = admitted["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod_after["spec"]["volumes"] == pod["spec"]["volumes"]
    assert pod_after["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["gpu-a", "gpu-b"]

    obj["spec"]["trainer"]["numNodes"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, TRAINJOB)
    with pytest.raises(kube.KubeJobError, match="one role"):
        kube.train_job(launch({"master": 1, "worker": 1}, ["a", "b"]), namespace="classhub", image="img")
    with pytest.raises(kube.KubeJobError, match="start with a letter"):
        kube.train_job(replace(job, job_id="3d-unet-1a2b3c4d"), namespace="classhub", image="img")
