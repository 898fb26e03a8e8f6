"""A student's tokens in Kubernetes mode, attacked: each test is the attack,
replayed against what kube-apiserver would receive (the objects classhub builds) or against the
classhub service itself, and fails where the attack worked.

- A distributed job's replica runs the student's code: it must hold no token of the namespace's
  ServiceAccount (a notebook holds none: KubeSpawner mounts no token without a service account),
  neither as a PyTorchJob's pod nor as a TrainJob's, where a runtime patch has no
  ``automountServiceAccountToken`` field; nor does a grading pod, which promises "no
  service-account token" (docs/teachers/autograding.md, "Isolation") with either job kind.
- The template publisher pod's upload token is one-time: a second fetch with it (a replay, a
  copy in another pod) gets nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from hub_ext.backends.jobs import Launch, ReplicaLaunch
from hub_ext.backends.kubernetes import jobs as kube
from tests.inproc import InProcessService
from tests.test_jobs_kube import PYTORCHJOB, TRAINJOB

pytestmark = pytest.mark.unit

#: Where the ServiceAccount admission plugin mounts a pod's API token (DefaultAPITokenMountPath).
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"

HOME = kube.Home({"name": "home", "persistentVolumeClaim": {"claimName": "claim-mallory"}},
                 {"name": "home", "mountPath": "/home/jovyan"}, "classhub", uid=1000, gid=100, fs_gid=100)
GRADING = {"secret": "classhub-grading-0123abcd", "items": json.dumps([["f0", "grading.json"]])}


def _launch(sandbox: dict | None = None) -> Launch:
    return Launch(job_id="steal-token-1a2b3c4d", owner="mallory", course="gpu101",
                  command=("sh", "-c", f"cat {TOKEN_PATH}/token"), env={}, workdir="",
                  master_port=0, replicas=(ReplicaLaunch("worker", 0, 0, "n1"),
                                           ReplicaLaunch("worker", 1, 1, "n2")),
                  max_runtime=600, requests={"worker": {"cpu": "1"}}, sandbox=sandbox or {})


def _token_mounted(pod_spec: dict, container: dict) -> bool:
    """Whether kube-apiserver's ServiceAccount admission would mount the API token into
    ``container`` of ``pod_spec``: unless the pod says ``automountServiceAccountToken: false`` (and
    no service account is named whose own setting we would have to know), or the container
    already has a mount at the token's path (the plugin then leaves it alone)."""
    if pod_spec.get("automountServiceAccountToken") is False:
        return False
    return not any(m.get("mountPath") == TOKEN_PATH for m in container.get("volumeMounts") or ())


@pytest.mark.parametrize("sandbox", [None, GRADING], ids=["student-job", "grading-job"])
def test_a_pytorchjobs_replicas_hold_no_service_account_token(sandbox):
    job = kube.pytorch_job(_launch(sandbox), namespace="classhub", image="img",
                           home=None if sandbox else HOME)
    jsonschema.validate(job, PYTORCHJOB)
    for kind, spec in job["spec"]["pytorchReplicaSpecs"].items():
        pod = spec["template"]["spec"]
        assert "serviceAccountName" not in pod
        for container in pod["containers"]:
            assert not _token_mounted(pod, container), f"{kind}'s {container['name']} gets the token"


@pytest.mark.parametrize("sandbox", [None, GRADING], ids=["student-job", "grading-job"])
def test_a_trainjobs_replicas_hold_no_service_account_token(sandbox):
    """Trainer merges classhub's runtime patch into the runtime's pod (torch-distributed names no
    service account and leaves the token to the admission): the patch must keep it out."""
    job = kube.train_job(_launch(sandbox), namespace="classhub", image="img",
                         home=None if sandbox else HOME, nodes=["n1", "n2"])
    jsonschema.validate(job, TRAINJOB)
    [patch] = job["spec"]["runtimePatches"]
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    assert "serviceAccountName" not in pod
    [container] = pod["containers"]
    assert container["name"] == kube.TRAINER_NODE
    assert not _token_mounted(pod, container), "the trainer's node container gets the token"
    # the mount in the way is a volume the pod has, and the rest of the pod is unchanged
    assert {m["name"] for m in container["volumeMounts"]} <= {v["name"] for v in pod["volumes"]}
    if sandbox is None:
        assert HOME.mount in container["volumeMounts"] and HOME.volume in pod["volumes"]


async def test_the_publisher_pods_upload_token_fetches_the_tree_once(service: InProcessService,
                                                                     tmp_path: Path):
    """A publish in progress: the service holds the checked tree for its publisher pod, under an
    id and a token the pod gets in its spec. The pod's fetch gets it; a second fetch with the same
    id and token (a replay, another pod with a copy) is a 404, as for any unknown upload."""
    tree = tmp_path / "upload.tar"
    tree.write_bytes(b"the checked tree, with the assignment not open yet")
    uploads = service.settings.setdefault("template_uploads", {})
    uploads["0123456789abcdef0123456789abcdef"] = (tree, "s3cret-one-time")
    path = "template-uploads/0123456789abcdef0123456789abcdef"

    wrong = await service.request("GET", path, headers={"Authorization": "token guessed"})
    assert wrong.code == 404
    first = await service.request("GET", path, headers={"Authorization": "token s3cret-one-time"})
    assert first.code == 200 and first.body == tree.read_bytes()
    again = await service.request("GET", path, headers={"Authorization": "token s3cret-one-time"})
    assert again.code == 404, "the one-time upload token fetched the tree a second time"
