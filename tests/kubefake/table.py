"""Server-side printing (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``), which
``kubectl get`` asks for. Pods and nodes get kubectl's familiar columns; everything else
gets NAME and AGE.
"""

from __future__ import annotations

import time
from typing import Any

from .objects import get_condition, parse_time
from .registry import ResourceType


def age(timestamp: str | None) -> str:
    """kubectl-style short duration (``45s``, ``12m``, ``3h``, ``5d``)."""
    start = parse_time(timestamp)
    if start is None:
        return "<unknown>"
    seconds = max(int(time.time() - start), 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600 * 3:
        return f"{seconds // 60}m"
    if seconds < 86400 * 2:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _col(
    name: str, ctype: str = "string", fmt: str = "", priority: int = 0, desc: str = ""
) -> dict[str, Any]:
    return {"name": name, "type": ctype, "format": fmt, "description": desc or name, "priority": priority}


POD_COLUMNS = [
    _col("Name", fmt="name"),
    _col("Ready"),
    _col("Status"),
    _col("Restarts"),
    _col("Age"),
    _col("IP", priority=1),
    _col("Node", priority=1),
    _col("Nominated Node", priority=1),
    _col("Readiness Gates", priority=1),
]
NODE_COLUMNS = [
    _col("Name", fmt="name"),
    _col("Status"),
    _col("Roles"),
    _col("Age"),
    _col("Version"),
    _col("Internal-IP", priority=1),
    _col("External-IP", priority=1),
    _col("OS-Image", priority=1),
    _col("Kernel-Version", priority=1),
    _col("Container-Runtime", priority=1),
]
DEFAULT_COLUMNS = [_col("Name", fmt="name"), _col("Age")]


def pod_status_reason(pod: dict[str, Any]) -> str:
    """The STATUS column: waiting/terminated reasons win over the phase; Terminating last."""
    st = pod.get("status") or {}
    reason = st.get("reason") or st.get("phase") or "Pending"
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_row(pod: dict[str, Any]) -> list[Any]:
    st = pod.get("status") or {}
    statuses = st.get("containerStatuses") or []
    total = len(pod["spec"].get("containers") or [])
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        pod_status_reason(pod),
        restarts,
        age(pod["metadata"].get("creationTimestamp")),
        st.get("podIP") or "<none>",
        pod["spec"].get("nodeName") or "<none>",
        st.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _node_row(node: dict[str, Any]) -> list[Any]:
    ready = get_condition(node, "Ready")
    state = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = (node.get("status") or {}).get("nodeInfo") or {}
    addresses = {a["type"]: a["address"] for a in (node.get("status") or {}).get("addresses") or []}
    return [
        node["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        age(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def to_table(
    rtype: ResourceType,
    objects: list[dict[str, Any]],
    list_meta: dict[str, Any],
    include_object: str = "Metadata",
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1 Table`` for ``objects``."""
    if rtype.key == ("", "pods"):
        columns, row_fn = POD_COLUMNS, _pod_row
    elif rtype.key == ("", "nodes"):
        columns, row_fn = NODE_COLUMNS, _node_row
    else:
        columns = DEFAULT_COLUMNS

        def row_fn(o: dict[str, Any]) -> list[Any]:
            return [o["metadata"]["name"], age(o["metadata"].get("creationTimestamp"))]

    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": row_fn(obj)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    }
