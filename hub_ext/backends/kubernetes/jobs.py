"""Kubernetes objects of a distributed job: a suspended PyTorchJob and its coscheduling PodGroup.

Why these objects and this order (README, "Distributed jobs"):
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
- **Kueue** (a setting): the job carries the course's LocalQueue in `kueue.x-k8s.io/queue-name`
  and stays suspended for Kueue to admit; classhub then only shows status.

The objects are plain dicts validated in the tests against the upstream CRD schemas
(tests/data/crds): the `kubeflow-training` SDK's models would pin an older Kubernetes client than
the one classhub uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner.clients import shared_client

from hub_ext.backends.jobs import ENDED, PENDING, RUNNING, Launch, ReplicaStatus
from hub_ext.backends.kubernetes import client
from hub_ext.backends.kubernetes.capacity import KubernetesBackend
from hub_ext.core.admission import NodeState, Snapshot
from hub_ext.core.jobs import RESERVED_ENV
from hub_ext.core.resources import ResourceVector, sum_vectors

__all__ = [
    "JOB_LABEL",
    "KUEUE_QUEUE_LABEL",
    "POD_GROUP_LABEL",
    "KubernetesJobs",
    "admit_patch",
    "pod_group",
    "pytorch_job",
    "replica_types",
]

PYTORCH_API = "kubeflow.org/v1"
POD_GROUP_API = "scheduling.x-k8s.io/v1alpha1"
#: The label coscheduling reads on pods to find their PodGroup.
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_LABEL = "classhub.io/job"
USER_LABEL = "classhub.io/user"
COURSE_LABEL = "classhub.io/course"
HOSTNAME = "kubernetes.io/hostname"


class KubeJobError(ValueError):
    """A job shape a PyTorchJob cannot express; the message says what to change."""


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
    return {"app.kubernetes.io/managed-by": "classhub", JOB_LABEL: launch.job_id,
            USER_LABEL: _label_value(launch.owner), COURSE_LABEL: _label_value(launch.course)}


def _label_value(text: str) -> str:
    """A label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in text)[:63]
    return cleaned.strip("._-") or "x"


def _resources(request: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Requests, and limits for what must not be shared (GPUs and memory), as for notebooks."""
    requests = dict(request)
    limits = {k: v for k, v in requests.items() if k == "memory" or k.startswith("nvidia.com/")}
    out: dict[str, dict[str, str]] = {"requests": requests}
    if limits:
        out["limits"] = limits
    return out


def _template(launch: Launch, role: str, image: str, scheduler: str | None,
              nodes: Sequence[str] | None) -> dict[str, Any]:
    env = [{"name": k, "value": v} for k, v in sorted(launch.env.items()) if k not in RESERVED_ENV]
    env.append({"name": "CLASSHUB_JOB_ID", "value": launch.job_id})
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{
            "name": "pytorch",  # the container the training operator fills in
            "image": image,
            "command": list(launch.command),
            "env": env,
            "resources": _resources(launch.requests.get(role, {})),
            **({"workingDir": launch.workdir} if launch.workdir.startswith("/") else {}),
        }],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if nodes:
        spec["affinity"] = _affinity(nodes)
    labels = {**_labels(launch), POD_GROUP_LABEL: launch.job_id}
    return {"metadata": {"labels": labels}, "spec": spec}


def _affinity(nodes: Sequence[str]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": sorted(set(nodes))}]}]}}}


def pytorch_job(launch: Launch, *, namespace: str, image: str, scheduler: str | None = None,
                kueue_queue: str | None = None) -> dict[str, Any]:
    """The job's PyTorchJob, created suspended (classhub, or Kueue with `kueue_queue`, admits it)."""
    labels = _labels(launch)
    if kueue_queue:
        labels[KUEUE_QUEUE_LABEL] = kueue_queue
    specs = {
        kind: {"replicas": count, "restartPolicy": "OnFailure" if launch.max_restarts else "Never",
               "template": _template(launch, role, image, scheduler, None)}
        for kind, role, count in replica_types(launch)
    }
    return {
        "apiVersion": PYTORCH_API,
        "kind": "PyTorchJob",
        "metadata": {"name": launch.job_id, "namespace": namespace, "labels": labels},
        "spec": {
            "runPolicy": {
                "suspend": True,
                "cleanPodPolicy": "All",
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


# ---------------------------------------------------------------------------------------------
# The backend: creates, admits, watches and stops those objects (hub_ext.backends.jobs.JobBackend).

OPERATOR_JOB_LABEL = "training.kubeflow.org/job-name"
OPERATOR_TYPE_LABEL = "training.kubeflow.org/replica-type"
OPERATOR_INDEX_LABEL = "training.kubeflow.org/replica-index"


class KubernetesJobs:
    """Runs jobs as PyTorchJobs (see the module docstring). `core` is a kubernetes_asyncio
    CoreV1Api, `custom` a CustomObjectsApi of the same client; None: the clients KubeSpawner
    shares (in-cluster config or $KUBECONFIG), made at first use."""

    def __init__(self, core: Any = None, custom: Any = None, *, namespace: str, image: str,
                 scheduler: str | None = None, kueue_queue: str | None = None,
                 pod_annotations: Mapping[str, str] | None = None) -> None:
        """`kueue_queue`: the LocalQueue of a course (``{course}`` is replaced), when Kueue
        admits; None when classhub does."""
        self._core, self._custom = core, custom
        self.namespace, self.image, self.scheduler = namespace, image, scheduler
        self.kueue_queue = kueue_queue
        self.pod_annotations = dict(pod_annotations or {})

    @property
    def core(self) -> Any:
        if self._core is None:
            self._core = client.core_v1()
        return self._core

    @property
    def custom(self) -> Any:
        if self._custom is None:
            client.core_v1()  # loads the configuration once
            self._custom = shared_client("CustomObjectsApi")
        return self._custom

    # -- capacity
    async def nodes(self, held: Mapping[str, Sequence[str]], other: Any = None,
                    running: Sequence[Launch] = ()) -> tuple[NodeState, ...]:
        """Free capacity per node from the pods, minus replicas admitted but not bound yet (their
        pods do not exist yet, and their room must not be given twice)."""
        capacity = await KubernetesBackend(api=self.core).capacity_snapshot()
        bound = await self._bound_replicas()
        missing: dict[str, list[ResourceVector]] = {}
        for launch in running:
            for replica in launch.replicas:
                if (launch.job_id, replica.rank) not in bound:
                    request = ResourceVector.from_k8s(launch.requests.get(replica.role, {}))
                    missing.setdefault(replica.node, []).append(request)
        nodes = Snapshot.from_capacity(capacity, 0.0).nodes
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
            if pod.spec.node_name and OPERATOR_TYPE_LABEL in labels:
                out.add((labels[JOB_LABEL], _rank(labels)))
        return out

    def devices_for(self, node: str, resource: str, count: int, taken: set[str]) -> list[str]:
        return []  # the device plugin picks the devices on the node

    # -- running
    async def launch(self, launch: Launch) -> None:
        queue = self.kueue_queue.format(course=launch.course) if self.kueue_queue else None
        objects = (("scheduling.x-k8s.io", "v1alpha1", "podgroups",
                    pod_group(launch, namespace=self.namespace)),
                   ("kubeflow.org", "v1", "pytorchjobs",
                    self._with_annotations(pytorch_job(launch, namespace=self.namespace, image=self.image,
                                                       scheduler=self.scheduler, kueue_queue=queue))))
        for group, version, plural, body in objects:
            try:
                await self.custom.create_namespaced_custom_object(group, version, self.namespace,
                                                                  plural, body)
            except ApiException as e:
                if e.status != 409:  # 409: made before this crash or retry; keep it
                    raise
        if queue is None:
            await self.custom.patch_namespaced_custom_object(
                "kubeflow.org", "v1", self.namespace, "pytorchjobs", launch.job_id, admit_patch(launch),
                _content_type="application/merge-patch+json")

    def _with_annotations(self, job: dict[str, Any]) -> dict[str, Any]:
        if self.pod_annotations:
            for spec in job["spec"]["pytorchReplicaSpecs"].values():
                spec["template"]["metadata"]["annotations"] = dict(self.pod_annotations)
        return job

    async def status(self, launch: Launch) -> dict[tuple[str, int], ReplicaStatus]:
        pods = await self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{OPERATOR_JOB_LABEL}={launch.job_id}")
        by_rank = {r.rank: r for r in launch.replicas}
        out = {(r.role, r.index): ReplicaStatus(PENDING) for r in launch.replicas}
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

    async def stop(self, launch: Launch, grace: float) -> None:
        for group, version, plural in (("kubeflow.org", "v1", "pytorchjobs"),
                                       ("scheduling.x-k8s.io", "v1alpha1", "podgroups")):
            try:
                await self.custom.delete_namespaced_custom_object(
                    group, version, self.namespace, plural, launch.job_id,
                    grace_period_seconds=int(grace), propagation_policy="Foreground")
            except ApiException as e:
                if e.status != 404:
                    raise
        selector = f"{OPERATOR_JOB_LABEL}={launch.job_id}"
        for _ in range(int((grace + 60) * 5)):  # the pods go with their owner
            pods = await self.core.list_namespaced_pod(self.namespace, label_selector=selector)
            if not pods.items:
                return
            await asyncio.sleep(0.2)

    async def logs(self, launch: Launch, role: str, index: int, offset: int, limit: int) -> bytes:
        rank = next((r.rank for r in launch.replicas if (r.role, r.index) == (role, index)), 0)
        kind, number = ("master", 0) if rank == 0 else ("worker", rank - 1)
        try:
            text = await self.core.read_namespaced_pod_log(f"{launch.job_id}-{kind}-{number}", self.namespace)
        except ApiException:
            return b""
        return text.encode()[offset:offset + limit]


def _rank(labels: Mapping[str, str]) -> int:
    """Master 0 is rank 0, Worker i is rank i + 1 (as the training operator numbers them)."""
    index = int(labels.get(OPERATOR_INDEX_LABEL, "0") or 0)
    return index if labels.get(OPERATOR_TYPE_LABEL, "").lower() == "master" else index + 1


def _exit_code(pod: Any, phase: str) -> int | None:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        terminated = status.state.terminated if status.state else None
        if terminated is not None:
            return terminated.exit_code
    return 0 if phase == "Succeeded" else None
