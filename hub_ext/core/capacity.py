"""What the cluster can give right now: a capacity snapshot computed from plain node and pod data.

Why this module exists: the profile list shows "N free now", quota admission and gang admission
decide whether a request can start, and the admin dashboard shows over-commit. All of them need
the same figure the Kubernetes scheduler uses: a node's free capacity is its allocatable minus the
requests of the non-terminated pods bound to it. Computing it here, from the JSON of plain node
and pod list calls, keeps it a pure function (docs/architecture.md, rule 1): the kubernetes backend lists
nodes and pods, the local backend describes its one machine in the same shape, and both get the
same answer.

Terms:
- allocatable: `status.allocatable`, what the kubelet offers to pods;
- used: the effective requests (`resources.pod_requests`) of pods bound to the node
  (`spec.nodeName`) whose phase is not Succeeded/Failed, plus one `pods` slot each;
- free: `allocatable - used`, never below zero; `overcommit` keeps the part of `used` that
  exceeds allocatable (a node that lost a GPU, a pod bound by hand) so it can be reported;
- schedulable: not cordoned (`spec.unschedulable`) and Ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from types import MappingProxyType
from typing import Any

from .resources import (
    MIG_PRODUCT_MARKER,
    PODS,
    ZERO,
    MigProfile,
    ResourceVector,
    is_gpu_resource,
    is_mig_resource,
    parse_single_mig_product,
    pod_requests,
    sum_vectors,
)

__all__ = [
    "GPU_PRODUCT_LABEL",
    "GPU_SHARING_STRATEGY_LABEL",
    "MIG_STRATEGY_LABEL",
    "TERMINATED_PHASES",
    "CapacitySnapshot",
    "NodeCapacity",
    "Taint",
    "is_terminated",
    "tolerates",
]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""Set by GPU feature discovery: e.g. NVIDIA-H200, NVIDIA-A100-SXM4-40GB-MIG-1g.5gb, ...-SHARED."""
GPU_SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
"""time-slicing, mps or none."""
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
"""none, single or mixed."""

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
"""Pods in these phases hold no resources: the scheduler no longer counts them."""

_HARD_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class Taint:
    """A node taint; only NoSchedule and NoExecute keep pods away (PreferNoSchedule is a hint)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    @property
    def is_hard(self) -> bool:
        return self.effect in _HARD_TAINT_EFFECTS

    @classmethod
    def from_k8s(cls, taint: Mapping[str, Any]) -> Taint:
        return cls(
            str(taint.get("key", "")),
            str(taint.get("value") or ""),
            str(taint.get("effect", "")),
        )


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """True when one of the pod's `tolerations` (k8s JSON) tolerates `taint`, as in k8s.

    Empty effect matches every effect; empty key with operator Exists matches every taint;
    operator Equal (the default) also compares values.
    """
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = toleration.get("key") or ""
        if key and key != taint.key:
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" or (
            operator == "Equal" and (toleration.get("value") or "") == taint.value
        ):
            return True
    return False


def _check_request(request: ResourceVector) -> None:
    if (
        not request.is_nonnegative()
        or request.select(lambda name: name != PODS).is_zero()
    ):
        raise ValueError(
            f"a request to fit must be nonnegative and ask for something, got {request!r}"
        )


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class NodeCapacity:
    """One node's capacity, usage and the labels that decide which profiles it can serve."""

    name: str
    allocatable: ResourceVector
    used: ResourceVector = ZERO
    pod_count: int = 0
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True

    @property
    def schedulable(self) -> bool:
        """New pods can land here: not cordoned and Ready."""
        return self.ready and not self.unschedulable

    @cached_property
    def free(self) -> ResourceVector:
        """What a new pod can still get: allocatable - used, never below zero."""
        return (self.allocatable - self.used).clamp()

    @cached_property
    def overcommit(self) -> ResourceVector:
        """How far `used` exceeds allocatable, per resource (zero on a healthy node)."""
        return (self.used - self.allocatable).clamp()

    @property
    def is_overcommitted(self) -> bool:
        return not self.overcommit.is_zero()

    @property
    def gpu_product(self) -> str | None:
        """The GPU model as GPU feature discovery labels it, e.g. NVIDIA-H200; None without GPUs."""
        return self.labels.get(GPU_PRODUCT_LABEL) or None

    @property
    def gpu_sharing_strategy(self) -> str | None:
        """time-slicing or mps when GPUs are shared as `nvidia.com/gpu.shared`; else None."""
        value = self.labels.get(GPU_SHARING_STRATEGY_LABEL)
        return value if value and value != "none" else None

    @property
    def mig_strategy(self) -> str | None:
        """The MIG strategy: "mixed", "single" or None (no MIG).

        The `nvidia.com/mig.strategy` label wins when present; otherwise mixed is recognised by
        `nvidia.com/mig-*` resources and single by a product label containing -MIG-.
        """
        label = self.labels.get(MIG_STRATEGY_LABEL)
        if label in ("single", "mixed"):
            return label
        if label == "none":
            return None
        if any(is_mig_resource(name) for name in self.allocatable):
            return "mixed"
        if MIG_PRODUCT_MARKER in (self.gpu_product or ""):
            return "single"
        return None

    @property
    def single_mig_profile(self) -> MigProfile | None:
        """Under the MIG single strategy, the slice shape behind `nvidia.com/gpu` (from the label:
        `NVIDIA-A100-SXM4-40GB-MIG-1g.5gb`, `...-MIG-1g.10gb.me`, `...-MIG-1g.5gb-SHARED`)."""
        single = parse_single_mig_product(self.gpu_product or "")
        if self.mig_strategy != "single" or single is None:
            return None
        return single[1]

    @property
    def gpu_resources(self) -> tuple[str, ...]:
        """The GPU resource names this node offers (whole, MIG, shared)."""
        return tuple(name for name in self.allocatable if is_gpu_resource(name))

    def matches(self, node_selector: Mapping[str, str] | None) -> bool:
        """True when every label in `node_selector` is on this node with that value."""
        return not node_selector or all(
            self.labels.get(k) == v for k, v in node_selector.items()
        )

    def admits(
        self,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
    ) -> bool:
        """Could a new pod with this selector (and tolerations) be placed here at all?

        `tolerations=None` means "do not look at taints" (the caller already picked nodes meant
        for the pod); a list, even empty, is checked against the node's hard taints.
        """
        if not self.schedulable or not self.matches(node_selector):
            return False
        if tolerations is None:
            return True
        return all(
            tolerates(tolerations, taint) for taint in self.taints if taint.is_hard
        )

    def copies_that_fit(self, request: ResourceVector, *, when_empty: bool = False) -> int:
        """How many pods with `request` still fit in `free` (one `pods` slot each, if counted).

        `when_empty`: in `allocatable` instead, as if no pod ran here. Why: a request that fits
        no node even when empty never starts, whatever stops; the profile list tells that apart
        from "all in use right now"."""
        _check_request(request)
        room = self.allocatable if when_empty else self.free
        if PODS in self.allocatable and PODS not in request:
            request = request + ResourceVector({PODS: 1})
        return min(int(room[name] // amount) for name, amount in request.items())

    @classmethod
    def from_k8s(
        cls, node: Mapping[str, Any], used: ResourceVector = ZERO, pod_count: int = 0
    ) -> NodeCapacity:
        """From the JSON of a Node object (as `list_node` returns it)."""
        metadata = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        name = metadata.get("name") or ""
        if not name:
            raise ValueError("node without metadata.name")
        try:
            allocatable = ResourceVector.from_k8s(status.get("allocatable") or {})
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"node {name}: status.allocatable: {exc}") from None
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        return cls(
            name=name,
            allocatable=allocatable,
            used=used,
            pod_count=pod_count,
            labels=_frozen(metadata.get("labels") or {}),
            taints=tuple(Taint.from_k8s(t) for t in spec.get("taints") or ()),
            unschedulable=bool(spec.get("unschedulable", False)),
            ready=ready,
        )


def _items(
    objects: Iterable[Mapping[str, Any]] | Mapping[str, Any],
) -> Iterable[Mapping[str, Any]]:
    """Accept a list of objects or a whole list response (`{"kind": "PodList", "items": [...]}`)."""
    if isinstance(objects, Mapping):
        return objects.get("items") or ()
    return objects


def is_terminated(pod: Mapping[str, Any]) -> bool:
    """Succeeded and Failed pods hold nothing any more."""
    return (pod.get("status") or {}).get("phase") in TERMINATED_PHASES


@dataclass(frozen=True)
class PodUsage:
    """What one pod holds: its requests, on its node ("" while the scheduler has not bound it),
    and for whom when the reader knows (``holder``: e.g. ("server", user, server name) or
    ("job", job id, ""); the Cluster page shows who holds what on each node)."""

    node: str
    requests: ResourceVector
    holder: tuple[str, str, str] | None = None


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """The pod's `PodUsage`, or None when it holds nothing (Succeeded or Failed)."""
    if is_terminated(pod):
        return None
    return PodUsage((pod.get("spec") or {}).get("nodeName") or "", pod_requests(pod))


@dataclass(frozen=True)
class CapacitySnapshot:
    """Capacity of every node at one moment, with totals and "how many fit" queries.

    Built by `from_k8s(nodes, pods)`; immutable, so a handler, the admission loop and the metrics
    exporter can share one snapshot without locking.
    """

    nodes: tuple[NodeCapacity, ...]
    pending_unbound: int = 0
    """Non-terminated pods not yet bound to a node: demand the scheduler has not placed."""

    @classmethod
    def from_k8s(
        cls,
        nodes: Iterable[Mapping[str, Any]] | Mapping[str, Any],
        pods: Iterable[Mapping[str, Any]] | Mapping[str, Any],
    ) -> CapacitySnapshot:
        """From the JSON of node and pod list calls (lists of objects or whole list responses).

        Pods bound to nodes that are not in `nodes` are ignored: they hold nothing that this
        snapshot could offer.
        """
        return cls.from_usage(nodes, (pod_usage(pod) for pod in _items(pods)))

    @classmethod
    def from_usage(
        cls,
        nodes: Iterable[Mapping[str, Any]] | Mapping[str, Any],
        usage: Iterable[PodUsage | None],
    ) -> CapacitySnapshot:
        """From node JSON and each pod's `pod_usage` (None for a pod that holds nothing).

        Why separate: a live view of the cluster (a watch on every pod) keeps each pod's usage
        from the last time the pod changed, so a snapshot costs a sum, not a parse of every pod.
        """
        per_node: dict[str, list[ResourceVector]] = {}
        unbound = 0
        for held in usage:
            if held is None:
                continue
            if not held.node:
                unbound += 1
                continue
            per_node.setdefault(held.node, []).append(held.requests)
        built = []
        for node in _items(nodes):
            name = (node.get("metadata") or {}).get("name")
            requests = per_node.get(name, [])
            used = sum_vectors(requests)
            if requests:
                used = used + ResourceVector({PODS: len(requests)})
            built.append(
                NodeCapacity.from_k8s(node, used=used, pod_count=len(requests))
            )
        return cls(
            nodes=tuple(sorted(built, key=lambda n: n.name)), pending_unbound=unbound
        )

    @cached_property
    def by_name(self) -> Mapping[str, NodeCapacity]:
        return MappingProxyType({node.name: node for node in self.nodes})

    def node(self, name: str) -> NodeCapacity:
        """The node called `name`; KeyError if the snapshot has none."""
        return self.by_name[name]

    @cached_property
    def total_allocatable(self) -> ResourceVector:
        """Sum of allocatable over all nodes, schedulable or not."""
        return sum_vectors(node.allocatable for node in self.nodes)

    @cached_property
    def total_used(self) -> ResourceVector:
        """Sum of exact requests of running/pending bound pods over all nodes."""
        return sum_vectors(node.used for node in self.nodes)

    @cached_property
    def total_free(self) -> ResourceVector:
        """Sum of per-node free over all nodes (over-commit on one node does not eat another's)."""
        return sum_vectors(node.free for node in self.nodes)

    @cached_property
    def total_overcommit(self) -> ResourceVector:
        return sum_vectors(node.overcommit for node in self.nodes)

    @property
    def overcommitted_nodes(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes if node.is_overcommitted)

    def eligible_nodes(
        self,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
    ) -> tuple[NodeCapacity, ...]:
        """Schedulable nodes matching the selector (and tolerating taints, if tolerations given)."""
        return tuple(
            node for node in self.nodes if node.admits(node_selector, tolerations)
        )

    def free_for(
        self,
        resource_name: str,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
    ) -> Fraction:
        """Free amount of one resource on the schedulable nodes a selector allows.

        This is a sum across nodes: 6 GPUs free may be 3 + 3, which a 4-GPU pod cannot use; use
        `max_fit` to ask whether a whole request fits.
        """
        return sum(
            (
                node.free[resource_name]
                for node in self.eligible_nodes(node_selector, tolerations)
            ),
            Fraction(0),
        )

    def max_fit(
        self,
        request: ResourceVector,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
        *,
        when_empty: bool = False,
    ) -> int:
        """How many pods with `request` could start right now, each wholly on one node.

        This is the "N free now" a profile shows. Every copy also takes a `pods` slot on nodes
        that report one. Raises ValueError for a negative or empty request (an empty request
        fits without bound, which is never what a profile means). `when_empty`: how many would
        fit if no pod ran; zero means the request can never start on these nodes.
        """
        _check_request(request)
        nodes = self.eligible_nodes(node_selector, tolerations)
        return sum(node.copies_that_fit(request, when_empty=when_empty) for node in nodes)

    def most_allocatable(
        self,
        resource_name: str,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
    ) -> Fraction:
        """The most of one resource any single eligible node offers (0 with no such node): what
        a request that fits nowhere is compared with, since a pod cannot span nodes."""
        return max(
            (node.allocatable[resource_name] for node in self.eligible_nodes(node_selector, tolerations)),
            default=Fraction(0),
        )
