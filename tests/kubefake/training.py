"""Training-operator stand-ins (PyTorchJob, Trainer v2 TrainJob) and coscheduling's
all-or-nothing binding of PodGroups.

Attach it to a running cluster: ``TrainingOperator(cluster)``. It registers ``pytorchjobs``
(kubeflow.org/v1), ``trainjobs`` and ``clustertrainingruntimes`` (trainer.kubeflow.org/v1alpha1,
with the ``torch-distributed`` runtime Kubeflow Trainer v2.3.0 installs) and ``podgroups``
(scheduling.x-k8s.io/v1alpha1) and then, on every change:

- **PyTorchJob** (as kubeflow's training operator v1 does): while ``runPolicy.suspend`` is true it
  keeps no pods and sets the conditions Created and Suspended; once un-suspended it creates one
  pod per replica, ``<job>-master-0`` and ``<job>-worker-<i>``, from the replica type's template,
  with the operator's labels (``training.kubeflow.org/job-name``, ``replica-type``,
  ``replica-index``), an ownerReference to the job, and the environment it gives the ``pytorch``
  container (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK and the PET_* variables). Conditions:
  Created, Running (every pod Running), Succeeded (the Master succeeded), Failed (a pod failed);
  Suspended is set back to False when the job runs.
- **TrainJob** (as Kubeflow Trainer v2's controller and its JobSet do, one JobSet's worth of pods
  without the JobSet and Job objects in between): while ``spec.suspend`` is true it keeps no pods
  and sets Suspended=True (reason Suspended); once un-suspended, Suspended=False (reason Resumed)
  and ``numNodes`` pods of the runtime's ``node`` replicated job, ``<job>-node-0-<i>-<random>``
  (host name ``<job>-node-0-<i>``, subdomain ``<job>``), from the runtime's pod template with
  the job's ``spec.runtimePatches`` merged in, ``spec.trainer``'s image, command, args and
  resources on the ``node`` container, its env, then the torch plugin's PET_NNODES,
  PET_NPROC_PER_NODE, PET_NODE_RANK (from the completion index), PET_MASTER_ADDR
  (``<job>-node-0-0.<job>``) and PET_MASTER_PORT (29500); JobSet's and the Job controller's labels
  (``jobset.sigs.k8s.io/jobset-name``, ``batch.kubernetes.io/job-completion-index``, ...),
  restartPolicy OnFailure unless the template says otherwise, an ownerReference to the TrainJob.
  Complete=True (AllJobsCompleted) when every pod succeeded, Failed=True (FailedJobs) when one
  failed, as the trainer copies them from its JobSet. No Created condition: v2 has none.
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
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
TRAINER_PORT = "29500"
#: manifests/base/runtimes/torch_distributed.yaml of kubeflow/trainer v2.3.0 (its spec).
TORCH_DISTRIBUTED = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
        "name": "node",
        "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                     "spec": {"template": {"spec": {"containers": [
                         {"name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}]}}}},
    }]}}},
}


class TrainingOperator:
    """Drives PyTorchJobs and binds PodGroups all or nothing (see the module docstring)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.jobs = cluster.register_crd("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
        self.groups = cluster.register_crd("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups")
        self.trainjobs = cluster.register_crd("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
        self.runtimes = cluster.register_crd("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime",
                                             "clustertrainingruntimes", namespaced=False)
        self._scheduled = False
        cluster.call(self._attach)

    def _attach(self) -> None:
        self.store = self.cluster.store
        self.pods = self.store.registry.lookup("", "v1", "pods")
        self.store.create(self.runtimes, None, deepcopy(TORCH_DISTRIBUTED))
        self.store.listeners.append(self._on_event)

    def _on_event(self, event: Event | None) -> None:
        if event is not None and event.rtype.key not in (self.jobs.key, self.groups.key, self.pods.key,
                                                         self.trainjobs.key, ("", "nodes")):
            return
        if not self._scheduled:
            self._scheduled = True
            self.cluster.loop.call_soon(self.sync)

    def sync(self) -> None:
        self._scheduled = False
        for job in list(self.store.list(self.jobs)):
            if not job["metadata"].get("deletionTimestamp"):
                self._reconcile(job)
        for job in list(self.store.list(self.trainjobs)):
            if not job["metadata"].get("deletionTimestamp"):
                self._reconcile_trainjob(job)
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

    # ----- TrainJob (Kubeflow Trainer v2) -------------------------------------------------------
    def _reconcile_trainjob(self, job: dict[str, Any]) -> None:
        md, spec = job["metadata"], job.get("spec") or {}
        namespace, name = md["namespace"], md["name"]
        pods = [p for p in self.store.list(self.pods, namespace)
                if (p["metadata"].get("labels") or {}).get(JOBSET_NAME) == name]
        current = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}
        if spec.get("suspend"):
            for pod in pods:
                if not pod["metadata"].get("deletionTimestamp"):
                    self.store.delete(self.pods, namespace, pod["metadata"]["name"], 0)
            self._trainjob_conditions(job, {"Suspended": ("True", "Suspended", "TrainJob is suspended")})
            return
        wanted: dict[str, tuple[str, str, str]] = {}
        if current.get("Suspended", {}).get("status") == "True":
            wanted["Suspended"] = ("False", "Resumed", "TrainJob is resumed")
        finished = any(current.get(t, {}).get("status") == "True" for t in ("Complete", "Failed"))
        runtime = self.store.find(self.runtimes, None, (spec.get("runtimeRef") or {}).get("name", ""))
        trainer = spec.get("trainer") or {}
        nodes = int(trainer.get("numNodes") or ((runtime or {}).get("spec") or {}).get("mlPolicy", {})
                    .get("numNodes", 1))
        if runtime is not None and not finished:
            have = {(p["metadata"].get("labels") or {}).get(COMPLETION_INDEX) for p in pods}
            for index in range(nodes):
                if str(index) not in have:
                    self._create_trainjob_pod(job, runtime, index, nodes)
        phases = [(p.get("status") or {}).get("phase", "Pending") for p in pods]
        if "Failed" in phases:
            wanted["Failed"] = ("True", "FailedJobs", "jobset failed due to one or more job failures")
        elif len(phases) == nodes and all(ph == "Succeeded" for ph in phases):
            wanted["Complete"] = ("True", "AllJobsCompleted", "jobset completed successfully")
        self._trainjob_conditions(job, wanted)

    def _create_trainjob_pod(self, job: dict[str, Any], runtime: dict[str, Any], index: int,
                             nodes: int) -> None:
        md, spec = job["metadata"], job["spec"]
        jobset = deepcopy(runtime["spec"]["template"]["spec"])
        for patch in spec.get("runtimePatches") or []:
            jobset = _merge(jobset, ((patch.get("trainingRuntimeSpec") or {}).get("template") or {})
                            .get("spec") or {})
        replicated = next(r for r in jobset["replicatedJobs"] if r["name"] == "node")
        template = replicated["template"]["spec"]["template"]
        pod_spec = template["spec"]
        trainer = spec.get("trainer") or {}
        name = md["name"]
        for container in pod_spec["containers"]:
            if container["name"] != "node":
                continue
            for key, field in (("image", "image"), ("command", "command"), ("args", "args"),
                               ("resources", "resourcesPerNode")):
                if trainer.get(field) is not None:
                    container[key] = deepcopy(trainer[field])
            gpus = any(k.endswith("/gpu") for k in ((trainer.get("resourcesPerNode") or {})
                                                      .get("limits") or {}))
            proc = str(trainer.get("numProcPerNode") or ("auto" if gpus else 1))
            pet = [{"name": "PET_NNODES", "value": str(nodes)}, {"name": "PET_NPROC_PER_NODE", "value": proc},
                   {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {
                       "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}},
                   {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
                   {"name": "PET_MASTER_PORT", "value": TRAINER_PORT}]
            env = {e["name"]: e for e in container.get("env") or []}
            env.update({e["name"]: e for e in [*(trainer.get("env") or []), *pet]})
            container["env"] = list(env.values())
            container["ports"] = [{"containerPort": int(TRAINER_PORT)}]
        pod_spec.setdefault("restartPolicy", "OnFailure")  # JobSet's default
        pod_spec.update(hostname=f"{name}-node-0-{index}", subdomain=name)
        tmeta = template.get("metadata") or {}
        job_name = f"{name}-node-0"
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "generateName": f"{job_name}-{index}-", "namespace": md["namespace"],
                "labels": {**(tmeta.get("labels") or {}), JOBSET_NAME: name,
                           "jobset.sigs.k8s.io/replicatedjob-name": "node",
                           "jobset.sigs.k8s.io/job-index": "0",
                           "batch.kubernetes.io/job-name": job_name, "job-name": job_name,
                           COMPLETION_INDEX: str(index)},
                "annotations": {**(tmeta.get("annotations") or {}), COMPLETION_INDEX: str(index)},
                "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                     "name": name, "uid": md["uid"], "controller": True,
                                     "blockOwnerDeletion": True}],
            },
            "spec": pod_spec,
        }
        with contextlib.suppress(status.ApiError):  # refused (a quota): the Job controller retries
            self.store.create(self.pods, md["namespace"], admit_create(self.store, self.pods,
                                                                       md["namespace"], body))

    def _trainjob_conditions(self, job: dict[str, Any], wanted: dict[str, tuple[str, str, str]]) -> None:
        current = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}
        if all((current.get(t) or {}).get("status") == v[0] and current[t]["reason"] == v[1]
               for t, v in wanted.items()):
            return

        def update(obj: dict[str, Any]) -> None:
            conditions = {c["type"]: c for c in (obj.setdefault("status", {}).get("conditions") or [])}
            for kind, (value, reason, message) in wanted.items():
                conditions[kind] = {"type": kind, "status": value, "reason": reason, "message": message,
                                    "lastTransitionTime": now_iso()}
            obj["status"]["conditions"] = list(conditions.values())

        self.store.mutate(self.trainjobs, job["metadata"]["namespace"], job["metadata"]["name"], update)

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


def _merge(base: Any, patch: Any) -> Any:
    """A strategic merge patch as far as runtime patches need it: maps merge, lists of named
    items (containers, volumes, env, replicated jobs) merge by name, other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = _merge(base.get(key), value) if key in base else deepcopy(value)
        return out
    named = (isinstance(base, list) and isinstance(patch, list)
             and all(isinstance(i, dict) and "name" in i for i in [*base, *patch]))
    if named:
        items = {i["name"]: i for i in base}
        for item in patch:
            old = items.get(item["name"])
            items[item["name"]] = deepcopy(item) if old is None else _merge(old, item)
        return list(items.values())
    return deepcopy(patch)
