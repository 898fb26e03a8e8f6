"""Turning what the hub, the store and the servers say into `ServerFacts` and policies.

Plain functions of plain data (hub JSON models, store rows), so the culler's cycle stays a thin
loop: gather -> `hub_ext.core.culling.decide` -> act.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from hub_ext.core.culling import CullPolicy, PolicyKey, ServerFacts, held_gpus, server_kind
from hub_ext.core.resources import ResourceVector

#: Profile kinds: the culler's timeouts are per kind (see ClasshubCuller.idle_timeouts).
KINDS = ("gpu", "mig", "shared", "cpu")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def device_units(resources: Mapping[str, Any]) -> dict[str, int]:
    """The GPU devices (whole, MIG, shared, other vendors') of a Kubernetes resource map from
    the ledger, by the one resource grammar (`hub_ext.core.culling.held_gpus`)."""
    vector = ResourceVector.from_k8s(dict(resources))
    return held_gpus({name: int(amount) for name, amount in vector.items()})


#: The profile kind of a server from the devices it holds: gpu, mig, shared or cpu.
kind_of = server_kind


def running_servers(users: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], str, dict[str, Any]]]:
    """(user model, server name, server model) of every ready, not pending, server."""
    out = []
    for user in users:
        for name, server in (user.get("servers") or {}).items():
            if server.get("ready") and not server.get("pending") and server.get("started"):
                out.append((user, name, server))
    return out


def server_facts(
    user: dict[str, Any],
    name: str,
    server: dict[str, Any],
    *,
    reservation: tuple[dict[str, Any], str | None] | None,
    persistent: bool,
    warned_at: datetime | None,
    gpu_utilization: float | None = None,
) -> ServerFacts:
    """Facts of one server from the hub model and the store (no answer from the server yet)."""
    devices = device_units(reservation[0]) if reservation else {}
    return ServerFacts(
        user=user["name"],
        server_name=name,
        started_at=parse_time(server["started"]),
        last_activity=parse_time(server.get("last_activity")),
        profile=kind_of(devices),
        course=reservation[1] if reservation else None,
        persistent=persistent,
        resources=devices,
        gpu_utilization=gpu_utilization,
        warned_at=warned_at,
    )


def with_report(facts: ServerFacts, report: Mapping[str, Any] | None) -> ServerFacts:
    """Facts updated with the server's own activity report (None: it did not answer)."""
    if not report:
        return facts
    kernels = report.get("kernels") or {}
    busy = kernels.get("busy", 0)
    gpu = report.get("gpu") or {}
    util = facts.gpu_utilization
    if gpu.get("status") == "ok" and isinstance(gpu.get("utilization"), int | float):
        util = max(util or 0.0, min(100.0, float(gpu["utilization"])))
    return replace(
        facts,
        busy_kernels=busy if isinstance(busy, int) and busy >= 0 else 0,
        last_kernel_activity=parse_time(report.get("last_kernel_activity")),
        gpu_utilization=util,
    )


def policies(
    site: Mapping[str, CullPolicy], course_rows: Iterable[Any]
) -> dict[PolicyKey, CullPolicy]:
    """The policy map for `decide`: site defaults per kind, then each course's overrides.

    A course row for kind "" applies to every kind of the course, and a row for one kind wins over
    it; NULL fields of a row take the site default of the kind. Course policies are keyed
    ``(kind, course)`` so that they win over the site's ``(kind, None)`` (see resolve_policy).
    """
    out: dict[PolicyKey, CullPolicy] = {(kind, None): policy for kind, policy in site.items()}
    if "cpu" in site:
        out[(None, None)] = site["cpu"]
    rows = sorted(course_rows, key=lambda r: (r.course, r.kind != ""))  # "" first, then kinds
    for row in rows:
        changes = {
            field: getattr(row, field)
            for field in ("idle_timeout", "max_age", "never_cull", "warn_before", "pressure_min_idle")
            if getattr(row, field) is not None
        }
        for kind in ([row.kind] if row.kind else list(site)):
            base = out.get((kind, row.course)) if row.kind else None
            out[(kind, row.course)] = replace(base or site.get(kind, CullPolicy()), **changes)
    return out
