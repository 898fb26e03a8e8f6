"""A node as admission sees it, and a running job's release: the types both the snapshot
(hub_ext.core.admission.snapshot) and the assigner stand on.

Why a module of their own: the snapshot keeps the assigner's free-capacity index up to date
(docs/jobs-loop.md) and the assigner reads nodes; with the node type in the snapshot, the two
would import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from hub_ext.core.capacity import GPU_PRODUCT_LABEL, NodeCapacity
from hub_ext.core.resources import ResourceVector, is_gpu_taint

_NANO = 10**9

#: A running or reserved job's release: (end, job name, per-node amounts in nano-units), the
#: order in which backfill.py replays them.
Release = tuple[float, str, Mapping[int, Mapping[str, int]]]


@dataclass(frozen=True)
class NodeState:
    """One node: `free` is what a new pod can get now (allocatable minus every pod's requests)."""

    name: str
    allocatable: ResourceVector
    free: ResourceVector
    gpu_product: str | None = None
    schedulable: bool = True

    def __post_init__(self) -> None:
        if not self.free.is_nonnegative():
            raise ValueError(f"node {self.name}: free capacity must not be negative")

    @classmethod
    def from_capacity(cls, node: NodeCapacity) -> NodeState:
        """A node of the capacity snapshot the spawn form uses (pods already counted in `free`)."""
        return cls(
            name=node.name,
            allocatable=node.allocatable,
            free=node.free,
            gpu_product=node.labels.get(GPU_PRODUCT_LABEL) or None,
            # GPU taints do not count: job pods tolerate every GPU taint key (placement is
            # admission's, by node affinity); any other hard taint keeps jobs off the node
            schedulable=node.schedulable and not any(t.is_hard for t in node.taints
                                                      if not is_gpu_taint(t.key)),
        )

    @cached_property
    def free_nanos(self) -> Mapping[str, int]:
        """`free` in exact nano-units, computed once per node state (cycles reuse unchanged nodes)."""
        return MappingProxyType({name: amount.numerator * _NANO // amount.denominator
                                 for name, amount in self.free.items()})
