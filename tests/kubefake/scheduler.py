"""A fake kube-scheduler: binds pending pods to nodes where they fit, else marks them
Unschedulable and records a ``FailedScheduling`` event with the real scheduler's wording.

First the VolumeBinding PreFilter (a missing, deleted or unbound claim keeps the pod off every
node); then filters run in the default plugin order (NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit); the first failing plugin gives a node's reason(s), and the reasons are
counted per node and sorted like ``FitError.Error()``::

    0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector,
    2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: ...
"""

from __future__ import annotations

import asyncio
from collections import Counter
from fractions import Fraction
from typing import Any

from . import status
from .events import EventRecorder
from .objects import set_condition
from .quantity import QuantityError, parse_quantity
from .store import Event, Store

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
SCHEDULER = "default-scheduler"


def _qty(value: Any) -> Fraction:
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError):
        return Fraction(0)


def pod_requests(pod: dict[str, Any]) -> dict[str, Fraction]:
    """Effective requests: sum over containers, at least the largest init container, plus overhead.

    Requests were already defaulted from limits at create time (as the API server does).
    """
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for res, qty in ((container.get("resources") or {}).get("requests") or {}).items():
            total[res] = total.get(res, Fraction(0)) + _qty(qty)
    for container in spec.get("initContainers") or []:
        for res, qty in ((container.get("resources") or {}).get("requests") or {}).items():
            total[res] = max(total.get(res, Fraction(0)), _qty(qty))
    for res, qty in (spec.get("overhead") or {}).items():
        total[res] = total.get(res, Fraction(0)) + _qty(qty)
    return total


def is_terminated(pod: dict[str, Any]) -> bool:
    """Succeeded/Failed pods no longer hold node resources."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """True when any toleration matches the taint (key/operator/value/effect)."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        op = tol.get("operator") or "Equal"
        if not tol.get("key"):
            if op == "Exists":
                return True
            continue
        if tol["key"] != taint.get("key"):
            continue
        if op == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _match_expression(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        try:
            have, want = int(labels[key]), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def matches_node_selection(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """nodeSelector AND required nodeAffinity (terms ORed, expressions ANDed)."""
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    for term in terms:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        field_ok = all(_match_expression(f, {"metadata.name": node["metadata"]["name"]}) for f in fields)
        if (exprs or fields) and field_ok and all(_match_expression(e, labels) for e in exprs):
            return True
    return False


class Scheduler:
    """Schedules pods whose ``spec.schedulerName`` is ``default-scheduler``."""

    def __init__(self, store: Store, recorder: EventRecorder, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.recorder = recorder
        self.loop = loop
        self.pods = store.registry.lookup("", "v1", "pods")
        self.nodes = store.registry.lookup("", "v1", "nodes")
        self._generation = 0  # bumps on changes that can make a pending pod fit
        self._attempted: dict[str, int] = {}
        self._scheduled = False
        self.enabled = True
        store.listeners.append(self._on_event)

    # ----- triggers -----------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        key = event.rtype.key
        if key in (("", "nodes"), ("", "persistentvolumeclaims")):  # a claim bound/created/deleted
            self._generation += 1
        elif key == ("", "pods"):
            old, new = event.old, event.obj
            if event.type == "DELETED" or (old and is_terminated(new) and not is_terminated(old)):
                self._generation += 1
            elif event.type == "MODIFIED" and old and old.get("spec") != new.get("spec"):
                self._attempted.pop(new["metadata"]["uid"], None)
            if event.type == "DELETED":
                self._attempted.pop(new["metadata"]["uid"], None)
        else:
            return
        self.kick()

    def kick(self) -> None:
        """Run a scheduling pass soon."""
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self.sync)

    # ----- the pass ------------------------------------------------------------------------------
    def sync(self) -> None:
        """Try every pending pod that has not failed against the current cluster state."""
        self._scheduled = False
        if not self.enabled:
            return
        assert self.pods is not None
        pending = [
            p
            for p in self.store.list(self.pods)
            if not p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and p["spec"].get("schedulerName", SCHEDULER) == SCHEDULER
            and (p.get("status") or {}).get("phase", "Pending") == "Pending"
            and self._attempted.get(p["metadata"]["uid"]) != self._generation
        ]
        pending.sort(
            key=lambda p: (
                -int(p["spec"].get("priority") or 0),
                p["metadata"]["creationTimestamp"],
                int(p["metadata"]["resourceVersion"]),
            )
        )
        for pod in pending:
            self._schedule(pod)

    def _used(self) -> dict[str, tuple[dict[str, Fraction], int]]:
        assert self.pods is not None
        used: dict[str, tuple[dict[str, Fraction], int]] = {}
        for pod in self.store.list(self.pods):
            node = pod["spec"].get("nodeName")
            if not node or is_terminated(pod):
                continue
            totals, count = used.get(node, ({}, 0))
            for res, qty in pod_requests(pod).items():
                totals[res] = totals.get(res, Fraction(0)) + qty
            used[node] = (totals, count + 1)
        return used

    def filter_node(
        self, pod: dict[str, Any], node: dict[str, Any], used: tuple[dict[str, Fraction], int]
    ) -> tuple[list[str], bool]:
        """Reasons the pod cannot go to ``node`` ([] when it fits) and whether they are resolvable."""
        spec = pod.get("spec") or {}
        tolerations = spec.get("tolerations") or []
        if (node.get("spec") or {}).get("unschedulable") and not tolerates(
            tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        ):
            return ["node(s) were unschedulable"], False
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
                return [
                    f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
                ], False
        if not matches_node_selection(pod, node):
            return ["node(s) didn't match Pod's node affinity/selector"], False
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        totals, count = used
        reasons = []
        if count + 1 > int(_qty(allocatable.get("pods", "110"))):
            reasons.append("Too many pods")
        for res, want in sorted(pod_requests(pod).items(), key=lambda kv: _resource_order(kv[0])):
            if want <= 0:
                continue
            if totals.get(res, Fraction(0)) + want > _qty(allocatable.get(res, "0")):
                reasons.append(f"Insufficient {res}")
        return reasons, True

    def _schedule(self, pod: dict[str, Any]) -> None:
        assert self.nodes is not None and self.pods is not None
        nodes = self.store.list(self.nodes)
        refusal = volume_prefilter(self.store, pod)
        if refusal and nodes:
            self._attempted[pod["metadata"]["uid"]] = self._generation
            n = len(nodes)
            preemption = f"preemption: 0/{n} nodes are available: {n} {NOT_HELPFUL}."
            self._unschedulable(pod, f"0/{n} nodes are available: {refusal}. {preemption}")
            return
        used = self._used()
        feasible, reasons = [], Counter()
        resolvable = 0
        for node in nodes:
            node_reasons, can_preempt = self.filter_node(
                pod, node, used.get(node["metadata"]["name"], ({}, 0))
            )
            if not node_reasons:
                feasible.append(node)
            else:
                reasons.update(node_reasons)
                resolvable += int(can_preempt)
        if feasible:
            best = max(feasible, key=lambda n: (self._score(pod, n, used), n["metadata"]["name"]))
            self.bind(pod, best["metadata"]["name"])
            return
        self._attempted[pod["metadata"]["uid"]] = self._generation
        self._unschedulable(pod, self.fit_error(len(nodes), reasons, resolvable))

    @staticmethod
    def fit_error(num_nodes: int, reasons: Counter, resolvable: int) -> str:
        """The scheduler's FitError text (reasons histogram sorted as strings, then preemption)."""
        if num_nodes == 0:
            return "no nodes available to schedule pods"
        parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
        msg = f"0/{num_nodes} nodes are available: {', '.join(parts)}."
        post = []
        if num_nodes - resolvable:
            post.append(f"{num_nodes - resolvable} {NOT_HELPFUL}")
        if resolvable:
            post.append(f"{resolvable} {NO_VICTIMS}")
        return f"{msg} preemption: 0/{num_nodes} nodes are available: {', '.join(sorted(post))}."

    def _score(self, pod: dict[str, Any], node: dict[str, Any], used: dict[str, Any]) -> Fraction:
        """LeastAllocated over cpu and memory."""
        allocatable = node["status"].get("allocatable") or {}
        totals = used.get(node["metadata"]["name"], ({}, 0))[0]
        want = pod_requests(pod)
        score = Fraction(0)
        for res in ("cpu", "memory"):
            cap = _qty(allocatable.get(res, "0"))
            if cap > 0:
                score += (cap - totals.get(res, Fraction(0)) - want.get(res, Fraction(0))) / cap
        return score

    def _unschedulable(self, pod: dict[str, Any], message: str) -> None:
        md = pod["metadata"]

        def mark(p: dict[str, Any]) -> None:
            set_condition(p.setdefault("status", {}), "PodScheduled", "False", "Unschedulable", message)

        stored = self.store.mutate(self.pods, md["namespace"], md["name"], mark)  # type: ignore[arg-type]
        if stored is not None:
            self.recorder.record(stored, "Warning", "FailedScheduling", message, SCHEDULER)

    def bind(self, pod: dict[str, Any], node_name: str) -> dict[str, Any]:
        """Assign the pod to a node (what a pods/binding POST does); 409 if already bound."""
        md = pod["metadata"]
        current = self.store.get(self.pods, md["namespace"], md["name"])  # type: ignore[arg-type]
        if current["spec"].get("nodeName"):
            raise status.conflict(
                "",
                "pods",
                md["name"],
                f'pod {md["name"]} is already assigned to node "{current["spec"]["nodeName"]}"',
            )

        def assign(p: dict[str, Any]) -> None:
            p["spec"]["nodeName"] = node_name
            set_condition(p.setdefault("status", {}), "PodScheduled", "True")

        stored = self.store.mutate(self.pods, md["namespace"], md["name"], assign)  # type: ignore[arg-type]
        assert stored is not None
        self.recorder.record(
            stored,
            "Normal",
            "Scheduled",
            f"Successfully assigned {md['namespace']}/{md['name']} to {node_name}",
            SCHEDULER,
        )
        return stored


def volume_prefilter(store: Store, pod: dict[str, Any]) -> str | None:
    """The VolumeBinding plugin's PreFilter: why the pod's claims keep it off every node, if so
    (a missing claim, a claim being deleted, an immediate-binding claim not bound yet)."""
    pvc_type = store.registry.lookup("", "v1", "persistentvolumeclaims")
    assert pvc_type is not None
    unbound = False
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if not claim:
            continue
        pvc = store.find(pvc_type, pod["metadata"]["namespace"], claim)
        if pvc is None:
            return f'persistentvolumeclaim "{claim}" not found'
        if pvc["metadata"].get("deletionTimestamp"):
            return f'persistentvolumeclaim "{claim}" is being deleted'
        unbound = unbound or (pvc.get("status") or {}).get("phase") != "Bound"
    return "pod has unbound immediate PersistentVolumeClaims" if unbound else None


def _resource_order(res: str) -> tuple[int, str]:
    order = {"cpu": 0, "memory": 1, "ephemeral-storage": 2}
    return (order.get(res, 3), res)
