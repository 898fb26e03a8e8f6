"""Kubernetes objects of a distributed job: a suspended PyTorchJob and its coscheduling PodGroup.

Why these objects and this order (docs/admins/jobs.md, "Running distributed jobs"):
- **PyTorchJob** (`kubeflow.org/v1`, the training operator): the operator creates the Master and
  Worker pods with the torchrun environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, PET_*)
  and reports the conditions Created/Running/Succeeded/Failed/Suspended. classhub creates it
  **suspended** (`runPolicy.suspend`), so nothing is scheduled before classhub's gang admission
  decided; admitting is one patch that un-suspends it with the decided nodes as a required node
  affinity. The object is named by the job id: re-creating it after a crash answers 409 and
  changes nothing.
- **PodGroup** (`scheduling.x-k8s.io/v1alpha1`, scheduler-plugins' coscheduling): minMember =
  every replica, so the cluster's gang scheduler also binds the pods all or nothing, even if
  something else took the capacity between classhub's decision and the binding.
- **TrainJob** (a setting, `trainer.kubeflow.org/v1alpha1`, Kubeflow Trainer v2): the same job as
  one TrainJob on a ClusterTrainingRuntime (`torch-distributed` by default), created suspended
  (`spec.suspend`); the trainer runs it as a JobSet of `numNodes` pods with the PET_* variables.
  Image, command, environment and resources go in `spec.trainer`; what a TrainJob has no field
  for (the home volume and ids, tolerations, node selector, labels, the decided nodes) goes in
  classhub's entry of `spec.runtimePatches` (manager `classhub.io/jobs`), which the trainer
  merges into the runtime's pod template. Admitting is one merge patch: un-suspend, and that
  entry again with the nodes (a merge patch replaces a list whole; the trainer's webhook lets
  runtimePatches change in the request that un-suspends, since v2.3). No PodGroup: a TrainJob
  cannot name a scheduler, and gang binding is the runtime's (`podGroupPolicy.coscheduling`,
  which makes a PodGroup named after the job).
- **Kueue** (a setting): the job carries the course's LocalQueue in `kueue.x-k8s.io/queue-name`
  and stays suspended for Kueue to start; classhub's ledger still counts the course's quota (the
  LocalQueues feed one ClusterQueue without course quotas, `kueue.py`, docs/kueue.md).
- **The student's home**: every replica mounts the volume the owner's notebook pod mounts at its
  home, as the hub's KubeSpawner expands it for that user (`Home`, from
  ``ClasshubKubeSpawner.home_volume`` through the hub), runs in the submission's folder inside it,
  as the notebook's uid/gid/fsGroup. A claim that does not exist, or a ReadWriteOnce claim the
  replicas would need on more than one node, refuses the launch with a sentence
  (`KubernetesJobs.check_home`).

The PyTorchJob and PodGroup are plain dicts validated in the tests against the upstream CRD
schemas (tests/data/crds): the `kubeflow-training` SDK's models would pin an older Kubernetes
client than the one classhub uses. The TrainJob is built with the models of
`kubeflow-trainer-api` (pydantic only) and validated against its CRD too.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner.clients import shared_client

from hub_ext.backends.jobs import ENDED, PENDING, RUNNING, Launch, ReplicaStatus
from hub_ext.backends.kubernetes import client, labels
from hub_ext.backends.kubernetes.capacity import KubernetesBackend
from hub_ext.backends.kubernetes.informer import JobClusterView, JobPod
from hub_ext.backends.kubernetes.kueue import LocalQueues
from hub_ext.core.admission import NodeState, Snapshot
from hub_ext.core.jobs import RESERVED_ENV
from hub_ext.core.resources import (
    GPU_TAINT_KEYS,
    ResourceVector,
    gpu_tolerations,
    is_extended_resource,
    sum_vectors,
)

__all__ = [
    "JOB_LABEL",
    "KUEUE_QUEUE_LABEL",
    "POD_GROUP_LABEL",
    "Home",
    "KubernetesJobs",
    "admit_patch",
    "pod_group",
    "pytorch_job",
    "replica_types",
    "train_job",
    "train_job_admit_patch",
]

PYTORCH_API = "kubeflow.org/v1"
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"
#: classhub's key in a TrainJob's spec.runtimePatches (a domain-prefixed path, as the webhook wants).
PATCH_MANAGER = "classhub.io/jobs"
#: The replicated job and container of the trainer nodes in Kubeflow's runtimes.
TRAINER_NODE = "node"
TRAINER_PORT = 29500  # the torch plugin's PET_MASTER_PORT
#: Labels JobSet and the Job controller put on a TrainJob's pods.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
POD_GROUP_API = "scheduling.x-k8s.io/v1alpha1"
#: The label coscheduling reads on pods to find their PodGroup.
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_LABEL = labels.JOB_LABEL
USER_LABEL = "classhub.io/user"
COURSE_LABEL = "classhub.io/course"
HOSTNAME = "kubernetes.io/hostname"


class KubeJobError(ValueError):
    """A job shape a PyTorchJob cannot express; the message says what to change."""


@dataclass(frozen=True)
class Home:
    """The owner's home as their notebook pod mounts it (``ClasshubKubeSpawner.home_volume``,
    expanded and escaped by KubeSpawner): the replicas mount the same volume at the same path and
    run with the same ids, so the files the student sees are the files the job sees."""

    volume: Mapping[str, Any]
    mount: Mapping[str, Any]
    namespace: str = ""
    uid: int | None = None
    gid: int | None = None
    fs_gid: int | None = None
    supplemental_gids: tuple[int, ...] = field(default=())

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any]) -> Home:
        def number(key: str) -> int | None:
            return None if answer.get(key) is None else int(answer[key])
        return cls(dict(answer["volume"]), dict(answer["mount"]), str(answer.get("namespace") or ""),
                   number("uid"), number("gid"), number("fs_gid"),
                   tuple(int(g) for g in answer.get("supplemental_gids") or ()))

    @property
    def path(self) -> str:
        return str(self.mount["mountPath"])

    @property
    def claim(self) -> str | None:
        return (self.volume.get("persistentVolumeClaim") or {}).get("claimName")

    def workdir(self, relative: str) -> str:
        """The submission's folder (relative to the home, checked by hub_ext.core.jobs)."""
        return posixpath.normpath(posixpath.join(self.path, relative)) if relative else self.path


def replica_types(launch: Launch) -> list[tuple[str, str, int]]:
    """(PyTorchJob replica type, classhub role, replicas): rank 0 is the Master.

    A job of one role becomes one Master and the rest Workers of the same request; a job of two
    roles whose first has one replica becomes Master (the first role) and Workers (the second).
    """
    roles: dict[str, int] = {}
    for replica in launch.replicas:
        roles[replica.role] = roles.get(replica.role, 0) + 1
    names = list(roles)
    if len(names) == 1:
        out = [("Master", names[0], 1)]
        if roles[names[0]] > 1:
            out.append(("Worker", names[0], roles[names[0]] - 1))
        return out
    if len(names) == 2 and roles[names[0]] == 1:
        return [("Master", names[0], 1), ("Worker", names[1], roles[names[1]])]
    raise KubeJobError("on Kubernetes a job is a PyTorchJob: one role, or a master role of one "
                       "replica and one worker role")


def _labels(launch: Launch) -> dict[str, str]:
    found = {"app.kubernetes.io/managed-by": "classhub", JOB_LABEL: launch.job_id,
             USER_LABEL: _label_value(launch.owner), COURSE_LABEL: _label_value(launch.course)}
    if launch.sandbox:
        found["classhub.io/grading"] = "true"  # helm-values' NetworkPolicy denies these pods all traffic
    return found


def _label_value(text: str) -> str:
    """A label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in text)[:63]
    return cleaned.strip("._-") or "x"


def _resources(request: Mapping[str, str], profile_limits: Mapping[str, str] | None = None,
               ) -> dict[str, dict[str, str]]:
    """Requests, and limits for what must not be shared (GPUs and memory), as for notebooks; a
    role that named a profile gets that profile's CPU and memory limits, as its notebook would."""
    requests = dict(request)
    # every device plugin's resource needs a limit equal to its request (the API server refuses
    # "Limit must be set for non overcommitable resources"), not only NVIDIA's
    limits = {k: v for k, v in requests.items() if k == "memory" or is_extended_resource(k)}
    limits.update(profile_limits or {})
    out: dict[str, dict[str, str]] = {"requests": requests}
    if limits:
        out["limits"] = limits
    return out


def _template(launch: Launch, role: str, image: str, scheduler: str | None,
              nodes: Sequence[str] | None, home: Home | None = None,
              pod_group: bool = True) -> dict[str, Any]:
    env = [{"name": k, "value": v} for k, v in sorted(launch.env.items()) if k not in RESERVED_ENV]
    env.append({"name": "CLASSHUB_JOB_ID", "value": launch.job_id})
    pod: Mapping[str, Any] = launch.pods.get(role, {})
    # The taints of the GPUs the replica asks for, as a notebook's (one function for both); and
    # every GPU taint key always: admission places any job on nodes with only GPU taints.
    tolerations = gpu_tolerations([*sorted(GPU_TAINT_KEYS), *launch.requests.get(role, {})])
    tolerations += [dict(t) for t in pod.get("tolerations", ()) if t not in tolerations]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{
            "name": "pytorch",  # the container the training operator fills in
            "image": image,
            "command": list(launch.command),
            "env": env,
            "resources": _resources(launch.requests.get(role, {}), pod.get("limits")),
            **({"workingDir": launch.workdir} if launch.workdir.startswith("/") else {}),
        }],
        "tolerations": tolerations,
        # A replica runs the student's code: no token of the namespace's ServiceAccount to
        # present to the API server (a notebook gets none either: KubeSpawner's default).
        "automountServiceAccountToken": False,
    }
    if pod.get("node_selector"):  # a profile's node selector (GPU model, MIG layout), as a notebook's
        spec["nodeSelector"] = dict(pod["node_selector"])
    if launch.sandbox.get("secret"):
        _grading_pod(spec, launch.sandbox)
    elif home is not None:
        _mount_home(spec, home, launch.workdir)
    if scheduler:
        spec["schedulerName"] = scheduler
    if nodes:
        spec["affinity"] = _affinity(nodes)
    labels = {**_labels(launch), **({POD_GROUP_LABEL: launch.job_id} if pod_group else {})}
    return {"metadata": {"labels": labels}, "spec": spec}


#: Where a grading pod finds its one-time inputs (the Secret, root-only) and works (an emptyDir).
GRADING_INPUTS, GRADING_WORK = "/grading/in", "/grading/work"
#: The account the student's notebook runs under in a grading pod (the grader drops to it after
#: reading its inputs as root): not a student's uid (those come from the hub), not the hub's.
GRADER_UID = 65534
GRADING_LABEL = "classhub.io/grading"


def _grading_pod(spec: dict[str, Any], sandbox: Mapping[str, str]) -> None:
    """A grading job's pod (docs/teachers/autograding.md, "Isolation"): no service-account token
    and no service links (nothing to reach the API server or the hub with), no home, the inputs
    from the job's Secret readable by root only, a scratch folder; the container starts as root
    with only the capabilities to hand the scratch folder over and switch accounts
    (hub_ext.backends.grader --drop-to), no privilege escalation."""
    import json as _json

    items = [{"key": key, "path": path, "mode": 0o400} for key, path in _json.loads(sandbox["items"])]
    spec["automountServiceAccountToken"] = False
    spec["enableServiceLinks"] = False
    spec["volumes"] = [
        {"name": "grading-inputs", "secret": {"secretName": sandbox["secret"], "defaultMode": 0o400,
                                              "items": items}},
        {"name": "grading-work", "emptyDir": {"sizeLimit": "2Gi"}},
    ]
    container = spec["containers"][0]
    container["volumeMounts"] = [
        {"name": "grading-inputs", "mountPath": GRADING_INPUTS, "readOnly": True},
        {"name": "grading-work", "mountPath": GRADING_WORK},
    ]
    container["workingDir"] = GRADING_WORK
    container["securityContext"] = {
        "runAsUser": 0, "runAsGroup": 0, "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "SETUID", "SETGID"]},
    }
    container["env"] = [e for e in container["env"] if e["name"] == "CLASSHUB_JOB_ID"]


def _mount_home(spec: dict[str, Any], home: Home, workdir: str) -> None:
    """The home volume at the notebook's home path, the submission's folder as the working
    directory, and the notebook's ids (as KubeSpawner's make_pod sets them)."""
    container = spec["containers"][0]
    container["volumeMounts"] = [dict(home.mount)]
    container["workingDir"] = home.workdir(workdir)
    spec["volumes"] = [dict(home.volume)]
    ids = {"runAsUser": home.uid, "runAsGroup": home.gid}
    if any(v is not None for v in ids.values()):
        container["securityContext"] = {k: v for k, v in ids.items() if v is not None}
    pod_ids: dict[str, Any] = {"fsGroup": home.fs_gid} if home.fs_gid is not None else {}
    if home.supplemental_gids:
        pod_ids["supplementalGroups"] = list(home.supplemental_gids)
    if pod_ids:
        spec["securityContext"] = pod_ids


def _affinity(nodes: Sequence[str]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": sorted(set(nodes))}]}]}}}


def pytorch_job(launch: Launch, *, namespace: str, image: str, scheduler: str | None = None,
                kueue_queue: str | None = None, home: Home | None = None) -> dict[str, Any]:
    """The job's PyTorchJob, created suspended (classhub, or Kueue with `kueue_queue`, admits it);
    with `home`, its replicas mount the owner's home and run in the submission's folder."""
    labels = _labels(launch)
    if kueue_queue:
        labels[KUEUE_QUEUE_LABEL] = kueue_queue
    specs = {
        kind: {"replicas": count, "restartPolicy": "OnFailure" if launch.max_restarts else "Never",
               "template": _template(launch, role, image, scheduler, None, home)}
        for kind, role, count in replica_types(launch)
    }
    return {
        "apiVersion": PYTORCH_API,
        "kind": "PyTorchJob",
        "metadata": {"name": launch.job_id, "namespace": namespace, "labels": labels},
        "spec": {
            "runPolicy": {
                "suspend": True,
                # a grading job's pod stays until its result is read from its log (drop_sandbox)
                "cleanPodPolicy": "None" if launch.sandbox else "All",
                "backoffLimit": launch.max_restarts,
                "activeDeadlineSeconds": max(1, int(launch.max_runtime)),
                "schedulingPolicy": {"minAvailable": launch.world_size},
            },
            "pytorchReplicaSpecs": specs,
        },
    }


def admit_patch(launch: Launch) -> dict[str, Any]:
    """The merge patch that admits a suspended PyTorchJob on the nodes classhub decided: the
    Master's template gets rank 0's node, the Workers' the nodes of the other replicas (a
    template serves all Workers, so they may land on any of those nodes; the PodGroup and the
    capacity classhub reserved keep them together)."""
    ranked = sorted(launch.replicas, key=lambda r: r.rank)
    nodes = {"Master": [ranked[0].node], "Worker": [r.node for r in ranked[1:]]}
    specs = {kind: {"template": {"spec": {"affinity": _affinity(nodes[kind])}}}
             for kind, _role, _count in replica_types(launch)}
    return {"spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": specs}}


#: Addresses a job's replicas may not reach (as z2jh's singleuser policy keeps notebooks from
#: them): the cluster's private networks (other users' pods and services, the nodes; the shared
#: 100.64.0.0/10 that some clusters give pods) and the link-local range that holds the cloud's
#: metadata server (169.254.169.254: node credentials). IPv6 has no allowed block at all.
PRIVATE_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                    "169.254.0.0/16")


def job_network_policy(launch: Launch, *, namespace: str, owner: Mapping[str, Any]) -> dict[str, Any]:
    """The NetworkPolicy that fences one job's replicas (docs/deploy-jobs.md, "Jobs' network").

    Why one per job: a job's replicas talk to each other on ports nobody authenticates (torch's
    rendezvous store, NCCL), so another student's job that reaches them can join, feed or hang the
    training; a manifest cannot say "the pods of the same job", a policy per job can. Selected by
    it, a replica accepts connections only from its own job's pods and opens them only to those,
    to DNS (port 53), and to public addresses (datasets, package indexes), not to private ones
    nor the cloud's metadata server (`PRIVATE_NETWORKS`). Owned by the job (`owner`: its
    apiVersion, kind, name and uid), so the garbage collector removes it with the job. Grading
    pods get none: their policy denies everything, and policies only add allowed paths."""
    own = {"podSelector": {"matchLabels": {JOB_LABEL: launch.job_id}}}
    dns = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"classhub-job-{launch.job_id}", "namespace": namespace,
                     "labels": _labels(launch),
                     "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                          "name": owner["metadata"]["name"],
                                          "uid": owner["metadata"]["uid"]}]},
        "spec": {
            "podSelector": {"matchLabels": {JOB_LABEL: launch.job_id}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [own]}],
            "egress": [{"to": [own]}, {"ports": dns},
                       {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_NETWORKS)}}]}],
        },
    }


def pod_group(launch: Launch, *, namespace: str, schedule_timeout: int = 120) -> dict[str, Any]:
    """The coscheduling PodGroup: all replicas bound together or none."""
    per_role = {role: ResourceVector.from_k8s(request) for role, request in launch.requests.items()}
    total = sum_vectors(per_role.get(r.role, ResourceVector()) for r in launch.replicas)
    return {
        "apiVersion": POD_GROUP_API,
        "kind": "PodGroup",
        "metadata": {"name": launch.job_id, "namespace": namespace, "labels": _labels(launch)},
        "spec": {"minMember": launch.world_size, "minResources": total.to_k8s(),
                 "scheduleTimeoutSeconds": schedule_timeout},
    }


def train_job(launch: Launch, *, namespace: str, image: str, runtime: str = "torch-distributed",
              kueue_queue: str | None = None, home: Home | None = None,
              annotations: Mapping[str, str] | None = None,
              nodes: Sequence[str] | None = None) -> dict[str, Any]:
    """The job's TrainJob (Kubeflow Trainer v2), created suspended, on the ClusterTrainingRuntime
    `runtime`: one role of `world_size` identical nodes. The pod is the PyTorchJob's (`_template`),
    split between `spec.trainer` and classhub's runtime patch; `nodes`: the decided nodes, as a
    required node affinity (`train_job_admit_patch`)."""
    from kubeflow_trainer_api import models as m  # pydantic models, imported when first used

    roles = {r.role for r in launch.replicas}
    if len(roles) != 1:
        raise KubeJobError("with Kubeflow Trainer a job is a TrainJob: one role whose replicas "
                           "all ask for the same resources")
    # The TrainJob's name must be an RFC 1035 label, and JobSet's pod host names
    # <job>-node-0-<rank> must fit in 63 characters.
    longest = f"{launch.job_id}-{TRAINER_NODE}-0-{launch.world_size - 1}"
    if not launch.job_id[:1].isalpha() or len(longest) > 63:
        raise KubeJobError(f"with Kubeflow Trainer a job's name must start with a letter and be at most "
                           f"{63 - len(longest) + len(launch.job_id) - 9} characters long; rename the job")
    pod = _template(launch, roles.pop(), image, None, nodes, home, pod_group=False)
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    command = list(launch.command)
    if container.get("workingDir"):  # a TrainJob has no working directory: start there
        command = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', container["workingDir"], *command]
    master = f"{launch.job_id}-{TRAINER_NODE}-0-0.{launch.job_id}"  # JobSet's pod DNS name
    rank = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}
    env = [*container["env"], {"name": "MASTER_ADDR", "value": master},  # as a PyTorchJob gives
           {"name": "MASTER_PORT", "value": str(TRAINER_PORT)},
           {"name": "WORLD_SIZE", "value": str(launch.world_size)}, {"name": "RANK", "valueFrom": rank}]
    # A runtime patch has no automountServiceAccountToken: an empty folder mounted where the
    # token would go keeps the ServiceAccount admission from mounting it (`_NO_TOKEN_MOUNT`).
    node_container = {"name": TRAINER_NODE,
                      "volumeMounts": [*container.get("volumeMounts", ()), _NO_TOKEN_MOUNT],
                      "securityContext": container.get("securityContext")}
    spec = {**spec, "volumes": [*spec.get("volumes", ()), _NO_TOKEN_VOLUME]}
    metadata: dict[str, Any] = {"labels": pod["metadata"]["labels"]}
    if annotations:
        metadata["annotations"] = dict(annotations)
    pod_patch = {"metadata": metadata,
                 "spec": {"containers": [{k: v for k, v in node_container.items() if v}],
                          **{k: spec[k] for k in ("volumes", "securityContext", "nodeSelector",
                                                   "tolerations", "affinity") if k in spec}}}
    replicated = {"name": TRAINER_NODE, "template": {"spec": {"template": pod_patch}}}
    labels = _labels(launch)
    if kueue_queue:
        labels[KUEUE_QUEUE_LABEL] = kueue_queue
    job = m.TrainerV1alpha1TrainJob(
        api_version=TRAINJOB_API, kind="TrainJob",
        metadata=m.IoK8sApimachineryPkgApisMetaV1ObjectMeta(name=launch.job_id, namespace=namespace,
                                                            labels=labels),
        spec=m.TrainerV1alpha1TrainJobSpec(
            suspend=True,
            runtime_ref=m.TrainerV1alpha1RuntimeRef(name=runtime),
            active_deadline_seconds=max(1, int(launch.max_runtime)),
            trainer=m.TrainerV1alpha1Trainer(
                image=image, command=command, num_nodes=launch.world_size, num_proc_per_node=1,
                env=[m.IoK8sApiCoreV1EnvVar.from_dict(e) for e in env],
                resources_per_node=m.IoK8sApiCoreV1ResourceRequirements.from_dict(container["resources"])),
            runtime_patches=[m.TrainerV1alpha1RuntimePatch(
                manager=PATCH_MANAGER,
                training_runtime_spec=m.TrainerV1alpha1TrainingRuntimeSpecPatch.from_dict(
                    {"template": {"spec": {"replicatedJobs": [replicated]}}}))]))
    return job.to_dict()


#: Where the ServiceAccount admission mounts a pod's API token, and the empty, read-only
#: folder a TrainJob's replica gets there instead: the admission mounts the token into no
#: container that already has a mount at that path (a PyTorchJob's pods say
#: ``automountServiceAccountToken: false``, which Trainer's runtime patches cannot).
_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
_NO_TOKEN_VOLUME = {"name": "classhub-no-api-token", "emptyDir": {"sizeLimit": "1Mi"}}
_NO_TOKEN_MOUNT = {"name": "classhub-no-api-token", "mountPath": _TOKEN_PATH, "readOnly": True}


def train_job_admit_patch(placed: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that admits a suspended TrainJob, from `train_job(..., nodes=...)`:
    un-suspend, and classhub's runtime patch with the nodes (all pods share one template, so each
    may land on any of them; the capacity classhub reserved keeps them there)."""
    return {"spec": {"suspend": False, "runtimePatches": placed["spec"]["runtimePatches"]}}


# ---------------------------------------------------------------------------------------------
# The backend: creates, admits, watches and stops those objects (hub_ext.backends.jobs.JobBackend).

OPERATOR_JOB_LABEL = "training.kubeflow.org/job-name"
OPERATOR_TYPE_LABEL = "training.kubeflow.org/replica-type"
OPERATOR_INDEX_LABEL = "training.kubeflow.org/replica-index"


#: kind -> (group, version, plural) of the job object.
JOB_KINDS = {"pytorchjob": ("kubeflow.org", "v1", "pytorchjobs"),
             "trainjob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs")}


class KubernetesJobs:
    """Runs jobs as PyTorchJobs or TrainJobs (see the module docstring). `core` is a
    kubernetes_asyncio CoreV1Api, `custom` a CustomObjectsApi of the same client; None: the
    clients KubeSpawner shares (in-cluster config or $KUBECONFIG), made at first use."""

    def __init__(self, core: Any = None, custom: Any = None, *, namespace: str, image: str,
                 scheduler: str | None = None, kueue_queue: str | None = None,
                 pod_annotations: Mapping[str, str] | None = None,
                 home_of: Callable[[str], Awaitable[Mapping[str, Any] | None]] | None = None,
                 kind: str = "pytorchjob", runtime: str = "torch-distributed",
                 kueue_cluster_queue: str = "classhub", watch: bool = True,
                 isolate: bool = True) -> None:
        """`kueue_queue`: the LocalQueue of a course (``{course}`` is replaced), when Kueue
        admits; None when classhub does. `kueue_cluster_queue`: the one ClusterQueue every
        course's LocalQueue feeds (docs/kueue.md). `home_of(user)`: the home volume the user's notebook
        pod mounts (`Home.from_answer`'s fields: the hub's ``ClasshubKubeSpawner.home_volume``),
        None for none; without it the replicas mount nothing. `kind`: ``pytorchjob`` or
        ``trainjob`` (on the ClusterTrainingRuntime `runtime`). `watch`: keep a live view of the
        cluster (`JobClusterView`: nodes and pods by watch) instead of listing at every look.
        `isolate`: fence each job's replicas with a NetworkPolicy of its own
        (`job_network_policy`)."""
        if kind not in JOB_KINDS:
            raise ValueError(f"kind must be one of {', '.join(JOB_KINDS)}, not {kind!r}")
        self._core, self._custom = core, custom
        self.namespace, self.image, self.scheduler = namespace, image, scheduler
        self.kind, self.runtime = kind, runtime
        self.kueue_queue = kueue_queue
        self.kueue_cluster_queue = kueue_cluster_queue
        self._local_queues: LocalQueues | None = None
        self.pod_annotations = dict(pod_annotations or {})
        self.home_of = home_of
        self.watch = watch
        self.isolate = isolate
        self._view: JobClusterView | None = None
        self._networking: Any = None

    @property
    def core(self) -> Any:
        if self._core is None:
            self._core = client.core_v1()
        return self._core

    @property
    def networking(self) -> Any:
        """A NetworkingV1Api on the same API client as `custom` (the jobs' policies)."""
        if self._networking is None:
            from kubernetes_asyncio.client import NetworkingV1Api

            self._networking = NetworkingV1Api(self.custom.api_client)
        return self._networking

    @property
    def custom(self) -> Any:
        if self._custom is None:
            client.core_v1()  # loads the configuration once
            self._custom = shared_client("CustomObjectsApi")
        return self._custom

    # -- the live view
    async def live(self) -> JobClusterView | None:
        """The watch-kept view of nodes and pods (started at the first look); None when the
        service may not watch the cluster (then every look lists)."""
        if not self.watch:
            return None
        if self._view is None:
            namespace = self.namespace
            self._view = JobClusterView(self.core, lambda pod: job_pod(pod, namespace))
        return self._view if await self._view.start() else None

    async def close(self) -> None:
        """Stop the watches (the service's end)."""
        if self._view is not None:
            await self._view.stop()
            self._view = None

    def changed_jobs(self) -> set[str] | None:
        """The jobs whose pods changed since the loop last asked (None: not known, look at all)."""
        view = self._view
        return view.take_changed_jobs() if view is not None and view.watching else None

    # -- capacity
    async def nodes(self, held: Mapping[str, Sequence[str]], other: Any = None,
                    running: Sequence[Launch] = ()) -> tuple[NodeState, ...]:
        """Free capacity per node from the pods, minus replicas admitted but not bound yet (their
        pods do not exist yet, and their room must not be given twice)."""
        view = await self.live()
        if view is not None:
            nodes = view.nodes()
            bound = {(p.job, p.rank) for launch in running for p in view.job_pods(launch.job_id)
                     if p.node}
        else:
            capacity = await KubernetesBackend(api=self.core).capacity_snapshot()
            nodes = Snapshot.from_capacity(capacity, 0.0).nodes
            bound = await self._bound_replicas()
        missing: dict[str, list[ResourceVector]] = {}
        for launch in running:
            for replica in launch.replicas:
                if (launch.job_id, replica.rank) not in bound:
                    request = ResourceVector.from_k8s(launch.requests.get(replica.role, {}))
                    missing.setdefault(replica.node, []).append(request)
        if not missing:
            return nodes
        return tuple(
            NodeState(node.name, node.allocatable,
                      (node.free - sum_vectors(missing.get(node.name, []))).clamp(),
                      node.gpu_product, node.schedulable)
            for node in nodes)

    async def _bound_replicas(self) -> set[tuple[str, int]]:
        pods = await self.core.list_namespaced_pod(self.namespace, label_selector=JOB_LABEL)
        out = set()
        for pod in pods.items:
            labels = pod.metadata.labels or {}
            if pod.spec.node_name and (OPERATOR_TYPE_LABEL in labels or COMPLETION_INDEX in labels):
                out.add((labels[JOB_LABEL], _rank(labels)))
        return out

    def devices_for(self, node: str, resource: str, count: int, taken: set[str],
                    product: str | None = None) -> list[str]:
        return []  # the device plugin picks the devices on the node

    async def queue_refusal(self, course: str) -> str | None:
        """With Kueue: make the course's LocalQueue (feeding `kueue_cluster_queue`) if absent;
        the sentence why jobs must not be handed over to it, or None (docs/kueue.md)."""
        if not self.kueue_queue:
            return None
        if self._local_queues is None:
            self._local_queues = LocalQueues(self.custom, self.namespace, self.kueue_cluster_queue)
        return await self._local_queues.refusal(self.kueue_queue.format(course=course), course)

    # -- running
    async def launch(self, launch: Launch) -> None:
        queue = self.kueue_queue.format(course=launch.course) if self.kueue_queue else None
        home = None if launch.sandbox else await self.check_home(launch)
        group, version, plural = JOB_KINDS[self.kind]
        if self.kind == "trainjob":
            def trainjob(nodes: Sequence[str] | None = None) -> dict[str, Any]:
                return train_job(launch, namespace=self.namespace, image=self.image, runtime=self.runtime,
                                 kueue_queue=queue, home=home, annotations=self.pod_annotations, nodes=nodes)
            objects = [(group, version, plural, trainjob())]
            admit = train_job_admit_patch(trainjob([r.node for r in launch.replicas]))
        else:
            objects = [("scheduling.x-k8s.io", "v1alpha1", "podgroups",
                        pod_group(launch, namespace=self.namespace)),
                       (group, version, plural,
                        self._with_annotations(pytorch_job(launch, namespace=self.namespace, image=self.image,
                                                           scheduler=self.scheduler, kueue_queue=queue,
                                                           home=home)))]
            admit = admit_patch(launch)
        made: Any = None
        for group, version, plural, body in objects:
            try:
                made = await self.custom.create_namespaced_custom_object(group, version, self.namespace,
                                                                         plural, body)
            except ApiException as e:
                if e.status != 409:  # 409: made before this crash or retry; keep it
                    raise
                made = await self.custom.get_namespaced_custom_object(
                    group, version, self.namespace, plural, body["metadata"]["name"])
        if self.isolate and not launch.sandbox:  # fenced before it is admitted (the job is last)
            await self._fence(launch, made)
        if queue is None:
            await self.custom.patch_namespaced_custom_object(
                group, version, self.namespace, plural, launch.job_id, admit,
                _content_type="application/merge-patch+json")

    async def _fence(self, launch: Launch, job: Mapping[str, Any]) -> None:
        """Create the job's NetworkPolicy (`job_network_policy`), owned by the job object."""
        body = job_network_policy(launch, namespace=self.namespace, owner=job)
        try:
            await self.networking.create_namespaced_network_policy(self.namespace, body)
        except ApiException as e:
            if e.status == 409:  # made before this crash or retry
                return
            if e.status == 403:
                raise KubeJobError(
                    f"the hub may not create NetworkPolicies in namespace {self.namespace}, which fence "
                    "each job's replicas from other jobs; an admin applies helm-values/jobs-rbac.yaml "
                    "again (it grants that), or sets c.ClasshubJobs.isolate_jobs = False") from None
            raise

    async def check_home(self, launch: Launch) -> Home | None:
        """The owner's home for the replicas (None: their notebook mounts none, or no `home_of`);
        KubeJobError with a sentence when the replicas could not mount it: another namespace, a
        claim that does not exist (never started server), a claim that is not ReadWriteMany
        needed on more than one node (this job's replicas, and pods already holding it)."""
        answer = await self.home_of(launch.owner) if self.home_of is not None else None
        if not answer:
            return None
        home = Home.from_answer(answer)
        if home.namespace and home.namespace != self.namespace:
            raise KubeJobError(
                f"your home volume is in namespace {home.namespace} and jobs run in {self.namespace}, "
                f"so the replicas cannot mount it; ask an admin to set CLASSHUB_JOB_NAMESPACE to "
                f"{home.namespace}")
        if home.claim is None:  # NFS, hostPath, ...: mounted exactly as the notebook mounts it
            return home
        try:
            claim = await self.core.read_namespaced_persistent_volume_claim(home.claim, self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            raise KubeJobError(f"your home volume {home.claim} does not exist yet: start your "
                               "server once (that creates it), then submit the job again") from None
        modes = set((claim.status.access_modes if claim.status else None)
                    or claim.spec.access_modes or ["ReadWriteOnce"])
        if "ReadWriteMany" not in modes:
            await self._check_single_attach(launch, home.claim, modes)
        return home

    async def _check_single_attach(self, launch: Launch, claim: str, modes: set[str]) -> None:
        """A ReadWriteOnce claim is mounted by one node at a time (ReadWriteOncePod: one pod):
        refuse a job that would need it on more (a pod waiting for it would hang in
        ContainerCreating with a Multi-Attach error until the start timeout)."""
        pods = await self.core.list_namespaced_pod(self.namespace)
        holders: dict[str, str] = {}  # running pods that mount the claim -> their node
        for pod in pods.items:
            if (launch.job_id in ((pod.metadata.labels or {}).get(OPERATOR_JOB_LABEL),
                                  (pod.metadata.labels or {}).get(JOBSET_NAME_LABEL))
                    or not pod.spec.node_name
                    or (pod.status and pod.status.phase in ("Succeeded", "Failed"))):
                continue
            if any(v.persistent_volume_claim and v.persistent_volume_claim.claim_name == claim
                   for v in pod.spec.volumes or ()):
                holders[pod.metadata.name] = pod.spec.node_name
        placed = sorted({r.node for r in launch.replicas if r.node})
        nodes = set(placed) | set(holders.values())
        one_pod = modes == {"ReadWriteOncePod"}
        if (launch.world_size + len(holders) > 1) if one_pod else len(nodes) > 1:
            where = f"this job's replicas are placed on {', '.join(placed)}" if placed else ""
            held = ", ".join(f"{name} on {node}" for name, node in sorted(holders.items()))
            mode = "ReadWriteOncePod: one pod" if one_pod else "ReadWriteOnce: one node"
            raise KubeJobError(
                f"your home volume {claim} is {mode} at a time can mount it, and "
                + " and ".join(p for p in (where, held and f"{held} already mount it") if p)
                + "; submit a job that fits on one node (and stop your server if it runs on another), "
                "or ask an admin for a ReadWriteMany storage class (e.g. NFS) for homes")

    def _with_annotations(self, job: dict[str, Any]) -> dict[str, Any]:
        if self.pod_annotations:
            for spec in job["spec"]["pytorchReplicaSpecs"].values():
                spec["template"]["metadata"]["annotations"] = dict(self.pod_annotations)
        return job

    async def status(self, launch: Launch) -> dict[tuple[str, int], ReplicaStatus]:
        by_rank = {r.rank: r for r in launch.replicas}
        out = {(r.role, r.index): ReplicaStatus(PENDING) for r in launch.replicas}
        view = await self.live()
        if view is not None:  # memory: what the pod watch saw last
            for seen in view.job_pods(launch.job_id):
                replica = by_rank.get(seen.rank)
                if replica is None:
                    continue
                if seen.phase == "Running":
                    out[(replica.role, replica.index)] = ReplicaStatus(RUNNING, None, seen.node)
                elif seen.phase in ("Succeeded", "Failed"):
                    out[(replica.role, replica.index)] = ReplicaStatus(ENDED, seen.exit_code, seen.node)
            return out
        pods = await self.core.list_namespaced_pod(self.namespace, label_selector=self._selector(launch))
        for pod in pods.items:
            replica = by_rank.get(_rank(pod.metadata.labels or {}))
            if replica is None:
                continue
            phase = pod.status.phase if pod.status else "Pending"
            node = pod.spec.node_name or ""
            if phase == "Running":
                out[(replica.role, replica.index)] = ReplicaStatus(RUNNING, None, node)
            elif phase in ("Succeeded", "Failed"):
                out[(replica.role, replica.index)] = ReplicaStatus(ENDED, _exit_code(pod, phase), node)
        return out

    def _selector(self, launch: Launch) -> str:
        """The job's pods: the training operator's label, or JobSet's for a TrainJob."""
        return f"{JOBSET_NAME_LABEL if self.kind == 'trainjob' else OPERATOR_JOB_LABEL}={launch.job_id}"

    async def stop(self, launch: Launch, grace: float) -> None:
        objects = [JOB_KINDS[self.kind]]
        if self.kind == "pytorchjob":
            objects.append(("scheduling.x-k8s.io", "v1alpha1", "podgroups"))
        for group, version, plural in objects:
            try:
                await self.custom.delete_namespaced_custom_object(
                    group, version, self.namespace, plural, launch.job_id,
                    grace_period_seconds=int(grace), propagation_policy="Foreground")
            except ApiException as e:
                if e.status != 404:
                    raise
        selector = self._selector(launch)
        view = await self.live()
        for _ in range(int((grace + 60) * 5)):  # the pods go with their owner
            if view is not None:
                if not view.job_pods(launch.job_id):
                    return
            elif not (await self.core.list_namespaced_pod(self.namespace, label_selector=selector)).items:
                return
            await asyncio.sleep(0.2)

    async def prepare_sandbox(self, files: Mapping[str, bytes]) -> dict[str, str]:
        """A Secret holding a grading job's inputs (its graded notebooks, the teacher's sources,
        the settings with the nonce) and the grader's own code (hub_ext.backends.grader and what
        it imports), so any Jupyter image with nbclient grades; mounted root-only by the pod."""
        import base64
        import json as _json
        import secrets as _secrets

        bundle = {**files, **grader_bundle()}
        name = f"classhub-grading-{_secrets.token_hex(8)}"
        keys = [(f"f{i}", path) for i, path in enumerate(sorted(bundle))]
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "classhub", GRADING_LABEL: "true"}},
                "data": {key: base64.b64encode(bundle[path]).decode() for key, path in keys}}
        await self.core.create_namespaced_secret(self.namespace, body)
        return {"secret": name, "items": _json.dumps(keys)}

    async def drop_sandbox(self, sandbox: Mapping[str, str]) -> None:
        name = sandbox.get("secret")
        if not name or not name.startswith("classhub-grading-"):
            return
        try:
            await self.core.delete_namespaced_secret(name, self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise

    async def logs(self, launch: Launch, role: str, index: int, offset: int, limit: int) -> bytes:
        rank = next((r.rank for r in launch.replicas if (r.role, r.index) == (role, index)), 0)
        kind, number = ("master", 0) if rank == 0 else ("worker", rank - 1)
        name = f"{launch.job_id}-{kind}-{number}"
        try:
            if self.kind == "trainjob":  # the Job controller names pods with a random tail
                pods = await self.core.list_namespaced_pod(
                    self.namespace, label_selector=f"{self._selector(launch)},{COMPLETION_INDEX}={rank}")
                if not pods.items:
                    return b""
                name = max(pods.items, key=lambda p: str(p.metadata.creation_timestamp or "")).metadata.name
            text = await self.core.read_namespaced_pod_log(name, self.namespace)
        except ApiException:
            return b""
        return text.encode()[offset:offset + limit]


def grader_bundle() -> dict[str, bytes]:
    """The grader's code as files under ``lib/`` (the grading pod's image need not have classhub):
    hub_ext.backends.grader, .autograde, .notebook_run, .competition_runner, .sandbox_job and
    hub_ext.core.grading, with empty package files."""
    import hub_ext

    root = __import__("pathlib").Path(hub_ext.__file__).resolve().parent
    out = {f"lib/hub_ext/{p}": b"" for p in ("__init__.py", "core/__init__.py", "backends/__init__.py")}
    for p in ("backends/grader.py", "backends/autograde.py", "core/grading.py",
              "backends/competition_runner.py", "backends/sandbox_job.py", "backends/notebook_run.py"):
        out[f"lib/hub_ext/{p}"] = (root / p).read_bytes()
    return out


def job_pod(pod: Mapping[str, Any], namespace: str) -> JobPod | None:
    """A replica pod of a classhub job in `namespace` as the live view keeps it (None for any
    other pod): the same labels `_bound_replicas` and `status` read from a list."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    job = labels.get(JOB_LABEL)
    if not job or meta.get("namespace") != namespace or not (
            OPERATOR_TYPE_LABEL in labels or COMPLETION_INDEX in labels):
        return None
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    code = None
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is not None:
            code = terminated.get("exitCode")
            break
    if code is None and phase == "Succeeded":
        code = 0
    return JobPod(job, _rank(labels), phase, (pod.get("spec") or {}).get("nodeName") or "", code)


def _rank(labels: Mapping[str, str]) -> int:
    """Master 0 is rank 0, Worker i is rank i + 1 (as the training operator numbers them); a
    TrainJob's pod: its completion index (PET_NODE_RANK)."""
    if COMPLETION_INDEX in labels:
        return int(labels[COMPLETION_INDEX])
    index = int(labels.get(OPERATOR_INDEX_LABEL, "0") or 0)
    return index if labels.get(OPERATOR_TYPE_LABEL, "").lower() == "master" else index + 1


def _exit_code(pod: Any, phase: str) -> int | None:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        terminated = status.state.terminated if status.state else None
        if terminated is not None:
            return terminated.exit_code
    return 0 if phase == "Succeeded" else None
