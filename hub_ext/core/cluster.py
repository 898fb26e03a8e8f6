"""What the Cluster page shows: every node with what it has, what is held on it and by whom,
and how many servers of each profile still fit, as plain data.

Why a pure module (docs/architecture.md, rule 1): the page is the same in both run modes; only
where the facts come from differs. A backend gives the nodes (a Kubernetes cluster's live view,
or this machine described as one node), the ledger gives who holds what (servers and jobs, with
user and course), and this module joins them and cuts out a course's slice for its teachers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .capacity import NodeCapacity
from .resources import (
    CPU,
    MEMORY,
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    PODS,
    ResourceVector,
    gpu_kind,
    human_quantity,
    is_gpu_resource,
    parse_mig,
    sum_vectors,
)

__all__ = ["Device", "Held", "ProfileRoom", "cluster_view", "resource_choices", "resource_words",
           "utilisation_by_pod", "utilisation_source"]


@dataclass(frozen=True)
class Held:
    """One server or job that holds resources (an unreleased ledger reservation), and the node
    nodes it runs on when the backend knows them (none: not placed yet, or a view without
    owners; a job's replicas may run on several)."""

    kind: str  # "server" or "job"
    name: str  # the server's owner and name ("ada", "ada/gpu") or the job's id
    username: str
    course: str | None
    profile: str | None
    resources: ResourceVector
    nodes: tuple[str, ...] = ()
    started: str | None = None
    devices: tuple[str, ...] = ()  # which devices, in words (local mode: "GPU 0 (NVIDIA H200)")
    utilisation: int | None = None  # GPU use in percent (Kubernetes: Prometheus/DCGM), if known


@dataclass(frozen=True)
class Device:
    """One GPU, MIG slice or shared GPU of a node, when the backend sees devices (local mode),
    with its use in percent where the driver tells it."""

    node: str
    uuid: str
    resource: str
    product: str
    utilisation: int | None = None


@dataclass(frozen=True)
class ProfileRoom:
    """How many more servers of a profile fit now (None: nothing classhub counts limits it)."""

    slug: str
    display_name: str
    free: int | None
    courses: frozenset[str] = field(default_factory=frozenset)  # empty: offered to every course


def _amount(name: str, value: Fraction) -> str:
    """The amount without the resource's name (the row names it): "0.5", "~23.54 GiB"."""
    words = human_quantity(name, value).split()
    return " ".join(words[:2] if len(words) > 2 and words[1].endswith("B") else words[:1])


def _resource_rows(node: NodeCapacity) -> list[dict[str, Any]]:
    """GPU resources first (what a class waits for), then CPU and memory; the pods count left
    out (a scheduler detail, not something a teacher plans with)."""
    names = [n for n in node.allocatable if n != PODS]
    names.sort(key=lambda n: (0 if is_gpu_resource(n) else 1, n != "cpu", n))
    rows = []
    for name in names:
        total = node.allocatable[name]
        used = node.used[name]
        rows.append({
            "name": name, "gpu": is_gpu_resource(name),
            "allocatable": _amount(name, total), "used": _amount(name, used),
            "free": _amount(name, node.free[name]),
            "percent": 100 if total <= 0 and used > 0 else (
                0 if total <= 0 else min(100, round(100 * used / total))),
        })
    return rows


def _held_json(held: Held) -> dict[str, Any]:
    gpus = held.resources.select(is_gpu_resource)
    return {
        "kind": held.kind, "name": held.name, "user": held.username, "course": held.course,
        "profile": held.profile, "nodes": list(held.nodes), "started": held.started,
        "resources": held.resources.to_k8s(),
        "summary": held.resources.select(lambda n: n != PODS).human(),
        "gpus": gpus.human() if not gpus.is_zero() else "",
        "devices": list(held.devices),
        "utilisation": held.utilisation,
    }


def cluster_view(nodes: Sequence[NodeCapacity], held: Iterable[Held], *,
                 devices: Sequence[Device] = (), profiles: Sequence[ProfileRoom] = (),
                 courses: Sequence[str] | None = None, mode: str = "kubernetes",
                 pending_unbound: int = 0) -> dict[str, Any]:
    """The page's data.

    `courses`: None for the whole cluster (admins); else the slice of those courses (their
    teachers): every node and its totals (capacity is no secret, and a teacher plans with it),
    but only the servers and jobs of those courses, and only the profiles those courses offer.
    A holding whose node is unknown (or not among `nodes`) is listed under ``unplaced``.
    """
    holdings = [h for h in held if courses is None or h.course in courses]
    holdings.sort(key=lambda h: (h.kind, h.username, h.name))
    names = {n.name for n in nodes}
    out_nodes = []
    for node in nodes:
        out_nodes.append({
            "name": node.name, "ready": node.ready, "schedulable": node.schedulable,
            "gpu_product": node.gpu_product, "mig_strategy": node.mig_strategy,
            "sharing": node.gpu_sharing_strategy, "resources": _resource_rows(node),
            "devices": [{"uuid": d.uuid, "resource": d.resource, "product": d.product,
                         "utilisation": d.utilisation} for d in devices if d.node == node.name],
            "holdings": [_held_json(h) for h in holdings if node.name in h.nodes],
        })
    shown = [p for p in profiles
             if courses is None or not p.courses or p.courses & set(courses)]
    total_gpus = sum_vectors(n.allocatable.select(is_gpu_resource) for n in nodes)
    used_gpus = sum_vectors(h.resources.select(is_gpu_resource) for h in holdings)
    return {
        "mode": mode,
        "courses": list(courses) if courses is not None else None,
        "nodes": out_nodes,
        "unplaced": [_held_json(h) for h in holdings if not names & set(h.nodes)],
        "profiles": [{"slug": p.slug, "display_name": p.display_name, "free": p.free}
                     for p in shown],
        "totals": {"gpus": total_gpus.human() if not total_gpus.is_zero() else "none",
                   "held_gpus": used_gpus.human() if not used_gpus.is_zero() else "none",
                   "servers": sum(1 for h in holdings if h.kind == "server"),
                   "jobs": sum(1 for h in holdings if h.kind == "job"),
                   "pending_pods": pending_unbound},
    }


def node_of_holdings(name: str, allocatable: ResourceVector, held: Iterable[Held],
                     labels: Mapping[str, str] | None = None) -> NodeCapacity:
    """This machine as one node (local mode): what it has, and as used what the ledger says
    servers and jobs hold (the ledger is what the local spawner and job loop decided, and the
    processes they started hold exactly that)."""
    used = sum_vectors(h.resources.select(lambda n: n in allocatable) for h in held)
    return NodeCapacity(name=name, allocatable=allocatable, used=used,
                        labels=dict(labels or {}))


def resource_words(name: str, products: Sequence[str] = ()) -> str:
    """A resource name in plain words, as a quota picker shows it: "MIG slice 1g.10gb", "shared
    GPU, time-sliced", "whole GPU, NVIDIA H200", "CPU cores", "memory"; the name itself for
    what classhub has no words for."""
    if name == CPU:
        return "CPU cores"
    if name == MEMORY:
        return "memory"
    models = ", ".join(sorted({p.replace("-", " ") for p in products if p}))
    kind = gpu_kind(name)
    if kind == "mig":
        return f"MIG slice {parse_mig(name)}"
    if kind == "shared":
        if name == NVIDIA_GPU_SHARED:
            return "shared GPU, time-sliced" if not models else f"shared GPU, {models}, time-sliced"
        return f"shared MIG slice {parse_mig(name)}"
    if kind == "gpu":
        what = "whole GPU" if name == NVIDIA_GPU else f"whole GPU ({name.split('/')[0]})"
        return f"{what}, {models}" if models and name == NVIDIA_GPU else what
    return name


def resource_choices(nodes: Sequence[NodeCapacity], offered: Iterable[str], *,
                     where: str = "on the cluster",
                     products: Mapping[str, Sequence[str]] | None = None) -> list[dict[str, str]]:
    """The names a course quota may limit, each with its plain words: every GPU resource the
    nodes have (with how many there are `where`), CPU and memory, and the names the course's
    profiles use (which a cluster may lack: then they say so). GPU resources first.

    `products`: GPU models per resource name (a node's ``nvidia.com/gpu.product``, or the local
    inventory's devices), for the words of whole and shared GPUs.
    """
    totals = sum_vectors(n.allocatable.select(is_gpu_resource) for n in nodes)
    models: dict[str, set[str]] = {}
    for node in nodes:
        for name in node.allocatable.select(is_gpu_resource):
            if node.gpu_product:
                models.setdefault(name, set()).add(node.gpu_product)
    for name, found in (products or {}).items():
        models.setdefault(name, set()).update(found)
    names = set(totals) | {CPU, MEMORY} | set(offered)
    out = []
    for name in sorted(names, key=lambda n: (0 if is_gpu_resource(n) else 1, n)):
        words = resource_words(name, sorted(models.get(name, ())))
        if is_gpu_resource(name):
            count = totals[name]
            words += f" ({_amount(name, count)} {where})" if count > 0 else f" (none {where})"
        out.append({"name": name, "label": f"{words}: {name}" if words != name else name})
    return out


def utilisation_by_pod(answer: Any, pod_label: str = "pod") -> dict[str, int]:
    """GPU use in percent per pod name from a Prometheus instant-query answer (``/api/v1/query``
    of NVIDIA's DCGM exporter's ``DCGM_FI_DEV_GPU_UTIL``): the highest sample per pod, clamped
    to 0..100; samples without the pod label, or not numbers, are left out."""
    found: dict[str, int] = {}
    data = answer.get("data") if isinstance(answer, dict) else None
    samples = data.get("result") if isinstance(data, dict) else None
    for sample in samples if isinstance(samples, list) else []:
        if not isinstance(sample, dict):
            continue
        pod = (sample.get("metric") or {}).get(pod_label)
        try:
            value = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if isinstance(pod, str) and pod and value == value:  # NaN is not a number
            found[pod] = max(found.get(pod, 0), round(min(100.0, max(0.0, value))))
    return found


def utilisation_source(mode: str, prometheus_url: str, failed: bool = False) -> str:
    """Where the page's GPU utilisation comes from, or how to get it, in one sentence."""
    if mode != "kubernetes":
        return ("GPU use per device from NVML on this machine (the nvidia-ml-py package; MIG "
                "slices report none).")
    if not prometheus_url:
        return ("GPU use per pod comes from Prometheus (NVIDIA's DCGM exporter); none is "
                "configured: set c.ClasshubPrometheus.url (the idle culler uses it too) to show it here.")
    if failed:
        return f"GPU use per pod: Prometheus at {prometheus_url} did not answer; retrying."
    return f"GPU use per pod from Prometheus at {prometheus_url} (NVIDIA's DCGM exporter)."
