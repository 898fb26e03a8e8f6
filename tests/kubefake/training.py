"""A training-operator stand-in (PyTorchJob) and coscheduling's all-or-nothing binding of PodGroups.

Attach it to a running cluster: ``TrainingOperator(cluster)``. It registers ``pytorchjobs``
(kubeflow.org/v1) and ``podgroups`` (scheduling.x-k8s.io/v1alpha1) and then, on every change:

- **PyTorchJob** (as kubeflow's training operator v1 does): while ``runPolicy.suspend`` is true it
  keeps no pods and sets the conditions Created and Suspended; once un-suspended it creates one
  pod per replica, ``<job>-master-0`` and ``<job>-worker-<i>``, from the replica type's template,
  with the operator's labels (``training.kubeflow.org/job-name``, ``replica-type``,
  ``replica-index``), an ownerReference to the job, and the environment it gives the ``pytorch``
  container (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK and the PET_* variables). Conditions:
  Created, Running (every pod Running), Succeeded (the Master succeeded), Failed (a pod failed);
  Suspended is set back to False when the job runs.
- **Coscheduling** (scheduler-plugins): pods whose ``schedulerName`` is
  ``scheduler-plugins-scheduler`` and that carry ``scheduling.x-k8s.io/pod-group`` are bound only
  all together: once a group's ``minMember`` pods exist, every pending pod of it is placed with the
  fake scheduler's filters on a copy of the nodes' usage; if one does not fit, none is bound, each
  gets a FailedScheduling event and the PodGroup stays Pending.

A test double only: nothing in the product imports it.
"""

from __future__ import annotations

import contextlib
from copy import deepcopy
from fractions import Fraction
from typing import Any

from . import status
from .admission import admit_create
from .objects import now_iso
from .scheduler import pod_requests
from .store import Event

SCHEDULER_NAME = "scheduler-plugins-scheduler"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
MASTER_PORT = "23456"


class TrainingOperator:
    """Drives PyTorchJobs and binds PodGroups all or nothing (see the module docstring)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.jobs = cluster.register_crd("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
        self.groups = cluster.register_crd("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups")
        self._scheduled = False
        cluster.call(self._attach)

    def _attach(self) -> None:
        self.store = self.cluster.store
        self.pods = self.store.registry.lookup("", "v1", "pods")
        self.store.listeners.append(self._on_event)

    def _on_event(self, event: Event | None) -> None:
        if event is not None and event.rtype.key not in (self.jobs.key, self.groups.key, self.pods.key,
                                                         ("", "nodes")):
            return
        if not self._scheduled:
            self._scheduled = True
            self.cluster.loop.call_soon(self.sync)

    def sync(self) -> None:
        self._scheduled = False
        for job in list(self.store.list(self.jobs)):
            if not job["metadata"].get("deletionTimestamp"):
                self._reconcile(job)
        self._coschedule()

    # ----- PyTorchJob ---------------------------------------------------------------------------
    def _job_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return [p for p in self.store.list(self.pods, namespace)
                if (p["metadata"].get("labels") or {}).get(JOB_NAME) == name]

    def _reconcile(self, job: dict[str, Any]) -> None:
        md, spec = job["metadata"], job.get("spec") or {}
        namespace, name = md["namespace"], md["name"]
        suspended = bool((spec.get("runPolicy") or {}).get("suspend"))
        pods = self._job_pods(namespace, name)
        if suspended:
            for pod in pods:
                if not pod["metadata"].get("deletionTimestamp"):
                    self.store.delete(self.pods, namespace, pod["metadata"]["name"], 0)
            self._conditions(job, {"Created": True, "Suspended": True})
            return
        specs = spec.get("pytorchReplicaSpecs") or {}
        world = sum(int(s.get("replicas", 1)) for s in specs.values())
        existing = {p["metadata"]["name"] for p in pods}
        rank = 0
        for kind in ("Master", "Worker"):
            for index in range(int((specs.get(kind) or {}).get("replicas", 0))):
                pod_name = f"{name}-{kind.lower()}-{index}"
                if pod_name not in existing:
                    self._create_pod(job, kind, index, rank, world, specs[kind]["template"])
                rank += 1
        pods = self._job_pods(namespace, name)
        phases = [(p.get("status") or {}).get("phase", "Pending") for p in pods]
        master = [(p.get("status") or {}).get("phase") for p in pods
                  if (p["metadata"].get("labels") or {}).get(REPLICA_TYPE) == "master"]
        conditions = {"Created": True, "Suspended": False}
        if "Failed" in phases:
            conditions["Failed"] = True
        elif master and master[0] == "Succeeded":
            conditions["Succeeded"] = True
        elif pods and len(pods) == world and all(ph == "Running" for ph in phases):
            conditions["Running"] = True
        self._conditions(job, conditions)

    def _create_pod(self, job: dict[str, Any], kind: str, index: int, rank: int, world: int,
                    template: dict[str, Any]) -> None:
        md = job["metadata"]
        tmeta = template.get("metadata") or {}
        spec = deepcopy(template.get("spec") or {})
        master = f"{md['name']}-master-0"
        env = {"MASTER_ADDR": master, "MASTER_PORT": MASTER_PORT, "WORLD_SIZE": str(world),
               "RANK": str(rank), "PET_MASTER_ADDR": master, "PET_MASTER_PORT": MASTER_PORT,
               "PET_NNODES": str(world), "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(rank)}
        for container in spec.get("containers") or []:
            if container.get("name") == "pytorch":
                given = [e for e in container.get("env") or [] if e.get("name") not in env]
                container["env"] = given + [{"name": k, "value": v} for k, v in env.items()]
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"{md['name']}-{kind.lower()}-{index}", "namespace": md["namespace"],
                "labels": {**(tmeta.get("labels") or {}), JOB_NAME: md["name"],
                           REPLICA_TYPE: kind.lower(), REPLICA_INDEX: str(index),
                           "training.kubeflow.org/operator-name": "pytorchjob-controller"},
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                     "name": md["name"], "uid": md["uid"], "controller": True,
                                     "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }
        with contextlib.suppress(status.ApiError):  # made by an earlier pass
            self.store.create(self.pods, md["namespace"], admit_create(self.store, self.pods,
                                                                       md["namespace"], body))

    def _conditions(self, job: dict[str, Any], wanted: dict[str, bool]) -> None:
        current = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}
        if all(current.get(t, {}).get("status") == ("True" if v else "False") for t, v in wanted.items()):
            return

        def update(obj: dict[str, Any]) -> None:
            conditions = {c["type"]: c for c in (obj.setdefault("status", {}).get("conditions") or [])}
            for kind, value in wanted.items():
                text = "True" if value else "False"
                if kind in conditions and conditions[kind]["status"] == text:
                    continue
                if kind not in conditions and not value:
                    continue
                conditions[kind] = {"type": kind, "status": text, "reason": f"PyTorchJob{kind}",
                                    "message": f"PyTorchJob {obj['metadata']['name']} is "
                                               f"{'' if value else 'not '}{kind.lower()}.",
                                    "lastUpdateTime": now_iso(), "lastTransitionTime": now_iso()}
            obj["status"]["conditions"] = list(conditions.values())

        self.store.mutate(self.jobs, job["metadata"]["namespace"], job["metadata"]["name"], update)

    # ----- coscheduling -------------------------------------------------------------------------
    def _coschedule(self) -> None:
        scheduler = self.cluster.scheduler
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in self.store.list(self.pods):
            labels = pod["metadata"].get("labels") or {}
            if pod["spec"].get("schedulerName") == SCHEDULER_NAME and POD_GROUP_LABEL in labels:
                groups.setdefault((pod["metadata"]["namespace"], labels[POD_GROUP_LABEL]), []).append(pod)
        for (namespace, name), members in groups.items():
            group = self.store.find(self.groups, namespace, name)
            pending = [p for p in members if not p["spec"].get("nodeName")
                       and not p["metadata"].get("deletionTimestamp")]
            if group is None or not pending:
                continue
            if len(members) < int((group.get("spec") or {}).get("minMember", 1)):
                continue  # not every member exists yet
            plan = self._place(scheduler, pending)
            if plan is None:
                for pod in pending:
                    scheduler.recorder.record(
                        pod, "Warning", "FailedScheduling",
                        f"0/{len(self.store.list(scheduler.nodes))} nodes are available: pod group "
                        f"{name} needs {len(pending)} pods placed at once and they do not fit.",
                        SCHEDULER_NAME)
                self._group_phase(namespace, name, "Pending")
                continue
            for pod, node in plan:
                scheduler.bind(pod, node)
            self._group_phase(namespace, name, "Scheduled")

    def _place(self, scheduler: Any, pods: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]] | None:
        used = {node: (dict(totals), count) for node, (totals, count) in scheduler._used().items()}
        plan = []
        for pod in pods:
            fits = [n["metadata"]["name"] for n in self.store.list(scheduler.nodes)
                    if not scheduler.filter_node(pod, n, used.get(n["metadata"]["name"], ({}, 0)))[0]]
            if not fits:
                return None
            node = sorted(fits)[0]
            totals, count = used.get(node, ({}, 0))
            for res, qty in pod_requests(pod).items():
                totals[res] = totals.get(res, Fraction(0)) + qty
            used[node] = (totals, count + 1)
            plan.append((pod, node))
        return plan

    def _group_phase(self, namespace: str, name: str, phase: str) -> None:
        current = self.store.find(self.groups, namespace, name)
        if current is None or (current.get("status") or {}).get("phase") == phase:
            return
        def set_phase(obj: dict[str, Any]) -> None:
            obj.setdefault("status", {}).update({"phase": phase, "scheduleStartTime": now_iso()})

        self.store.mutate(self.groups, namespace, name, set_phase)
