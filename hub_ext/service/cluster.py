"""The Cluster page: every node (or this machine) with its GPUs, MIG slices, shared GPUs, CPUs
and memory, what is held on it and by whom (server or job, user, course), how busy each GPU is
where that is known, and how many servers of each profile still fit; live, without a reload.

Who sees what (hub_ext.core.authz): hub admins the whole cluster (``/cluster``,
``READ_CLUSTER``); a course's teachers their course's slice (``/courses/<course>/cluster``,
``READ_COURSE_CLUSTER``: every node's totals, only the course's servers and jobs); students
nothing.

Where the facts come from (docs/architecture.md, rules 4 and 9): who holds what is the ledger
(one query of the unreleased reservations); the nodes are the live view of the cluster, a watch
on every pod (hub_ext.backends.kubernetes.informer, the same class the hub's spawner uses, here
in the service's own process), never a list of the cluster per request; in local mode this
machine (hub_ext.backends.local.view). The page asks ``api/.../cluster`` every two seconds and
redraws; the arithmetic is hub_ext.core.cluster's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel

from hub_ext.core import authz
from hub_ext.core.cluster import (
    Held,
    ProfileRoom,
    cluster_view,
    node_of_holdings,
    resource_choices,
    utilisation_source,
)
from hub_ext.core.profiles import Catalog, pod_settings
from hub_ext.core.resources import ResourceVector
from hub_ext.service.apidoc import model_schema, ok, op
from hub_ext.service.declare import needs
from hub_ext.service.handlers import APIHandler
from hub_ext.service.pages.render import PageHandler
from hub_ext.store.ledger import Ledger

__all__ = ["OPENAPI_PATHS", "ROUTES", "ClusterSource"]

#: Seconds a profile catalog read from the hub is reused (profiles change with the hub's config).
CATALOG_TTL = 30.0
#: Milliseconds between the page's looks at ``api/.../cluster``.
REFRESH_MS = 2000


class ClusterSource:
    """The service's one look at the cluster for the page: the ledger, the live node view and
    the profile catalog (cached), made on first use in the service's event loop."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.mode: str = settings.get("mode", "local")
        self.ledger = Ledger(settings["sessions"])
        self._machine: Any = None
        self._live: Any = None
        self._catalog: tuple[float, Catalog | None] = (float("-inf"), None)
        self._states: tuple[float, dict[str, list[str]]] = (float("-inf"), {})
        self._use: tuple[float, dict[str, int] | None] = (float("-inf"), {})

    # -- where the nodes come from
    def _machine_view(self) -> Any:
        if self._machine is None:
            from hub_ext.backends.local.view import MachineView

            jobs = self.settings.get("jobs")
            inventory = getattr(getattr(jobs, "backend", None), "inventory", None)
            if inventory is None:
                from hub_ext.backends.local import gpus
                from hub_ext.core.devices import Inventory

                inventory = Inventory(gpus.discover())
            self._machine = MachineView(inventory)
        return self._machine

    def _live_view(self) -> Any:
        if self._live is None:
            from hub_ext.backends.kubernetes import client
            from hub_ext.backends.kubernetes.informer import live_capacity

            jobs = self.settings.get("jobs")
            api = getattr(getattr(jobs, "backend", None), "core", None) or client.core_v1()
            self._live = live_capacity(api)
        return self._live

    async def _profiles(self, caller: authz.Caller) -> Catalog | None:
        """The hub's profile catalog (as the caller's spawner has it), read at most every
        CATALOG_TTL seconds; None when the hub has no classhub profiles or cannot say."""
        at, catalog = self._catalog
        if time.monotonic() - at < CATALOG_TTL:
            return catalog
        try:
            answer = await self.settings["hub_api"].profile_catalog(caller.name)
            catalog = Catalog.from_config(answer.get("profiles") or []) if answer.get("enabled") else None
        except Exception:  # the page still shows nodes and holdings
            catalog = None
        self._catalog = (time.monotonic(), catalog)
        return catalog

    # -- how busy each pod's GPUs are (Kubernetes)
    async def _gpu_by_pod(self) -> dict[str, int] | None:
        """GPU use per pod name from Prometheus (the DCGM exporter), asked at most every refresh;
        {} when no Prometheus is configured, None when it did not answer."""
        prometheus = self.settings.get("prometheus")
        if prometheus is None or not prometheus.url:
            return {}
        at, found = self._use
        if time.monotonic() - at < REFRESH_MS / 1000:
            return found
        found = await prometheus.gpu_by_pod()  # None: it did not answer; the page says so
        self._use = (time.monotonic(), found)
        return found

    # -- which devices local servers and jobs hold
    async def device_words(self, uuids: list[str]) -> list[str]:
        """The devices with these UUIDs in plain words ("GPU 0 (NVIDIA H200), MIG slice 2
        (1g.18gb)"): local mode only (a Kubernetes pod's devices are the device plugin's)."""
        if self.mode == "kubernetes" or not uuids:
            return []
        machine = self._machine or await asyncio.to_thread(self._machine_view)
        return [machine.inventory.words(u) for u in uuids]

    async def _server_devices(self) -> dict[str, list[str]]:
        """Ledger key of each running local server -> the device UUIDs its spawner recorded
        (``gpu_uuids`` in the spawner state, which the hub shows with ``admin:server_state``),
        asked at most every refresh."""
        at, found = self._states
        if time.monotonic() - at < REFRESH_MS / 1000:
            return found
        found = {}
        try:
            for user in await self.settings["hub_api"].users("active"):
                for name, server in (user.get("servers") or {}).items():
                    uuids = ((server or {}).get("state") or {}).get("gpu_uuids") or []
                    if uuids:
                        found[Ledger.server_key(user["name"], name)] = list(uuids)
        except Exception:  # the page still shows what is held, without which device
            found = {}
        self._states = (time.monotonic(), found)
        return found

    def _job_devices(self, job_ids: list[str]) -> dict[str, list[str]]:
        """Ledger key of each local job -> the device UUIDs its replicas run on (blocking)."""
        jobs = self.settings.get("jobs")
        if jobs is None or not job_ids:
            return {}
        return {Ledger.job_key(r.job_id): [u for rep in r.replicas
                                           for u in (rep.devices or {}).get("gpu_uuids", [])]
                for r in jobs.store.by_ids(job_ids)}

    # -- the quota pickers' names
    async def resource_choices(self, offered: list[str]) -> list[dict[str, str]]:
        """The resource names a course quota may limit, in plain words: the cluster's (or this
        machine's) devices with their counts, CPU and memory, and the names in `offered` (the
        course's profiles). Only `offered` when the cluster cannot be seen (the picker still
        works)."""
        try:
            if self.mode == "kubernetes":
                snapshot = await self._live_view().snapshot()
                return resource_choices(snapshot.nodes, offered)
            machine = self._machine or await asyncio.to_thread(self._machine_view)
            products = {r: machine.inventory.products_of(r) for r in machine.inventory.resources()}
            node = node_of_holdings(machine.name, machine.allocatable(), ())
            return resource_choices((node,), offered, where="on this machine", products=products)
        except Exception:  # no view of the cluster: the course's own names, still labelled
            return resource_choices((), offered)

    # -- the page's data
    async def view(self, caller: authz.Caller, courses: list[str] | None) -> dict[str, Any]:
        holdings = await asyncio.to_thread(self.ledger.holdings)
        catalog = await self._profiles(caller)
        profiles = catalog.profiles if catalog else ()
        if self.mode == "kubernetes":
            live = self._live_view()
            snapshot = await live.snapshot()
            placed = await live.placements()
            where = {(Ledger.server_key(u, n) if kind == "server" else Ledger.job_key(u)): nodes
                     for (kind, u, n), nodes in placed.items()}
            use = await self._gpu_by_pod()
            busy: dict[str, int] = {}
            for (kind, u, n), pods in (await live.pods_of()).items() if use else ():
                known = [use[p] for p in pods if p in use]
                if known:
                    busy[Ledger.server_key(u, n) if kind == "server" else Ledger.job_key(u)] = max(known)
            held = [_held(h, where.get(h.key, ()), utilisation=busy.get(h.key)) for h in holdings]
            rooms = [ProfileRoom(p.slug, p.display_name, snapshot.max_fit(
                p.request, pod_settings(p)["node_selector"], pod_settings(p)["tolerations"]),
                p.groups) for p in profiles]
            data = cluster_view(snapshot.nodes, held, profiles=rooms, courses=courses,
                                mode=self.mode, pending_unbound=snapshot.pending_unbound)
        else:
            # the first look may run GPU discovery (nvidia-smi): off the loop (architecture rule 7)
            machine = self._machine or await asyncio.to_thread(self._machine_view)
            allocatable = machine.allocatable()
            uuids = {**await self._server_devices(), **await asyncio.to_thread(
                self._job_devices, [Ledger.named(h.key) for h in holdings if h.kind == "job"])}
            held = [_held(h, (machine.name,), tuple(machine.inventory.words(u)
                                                    for u in uuids.get(h.key, ())))
                    for h in holdings]
            node = node_of_holdings(machine.name, allocatable, held)
            devices = await asyncio.to_thread(machine.devices)
            rooms = [ProfileRoom(p.slug, p.display_name,
                                 int(node.free[p.gpu_resource] // p.gpu_count) if p.gpu_resource else None,
                                 p.groups) for p in profiles]
            data = cluster_view((node,), held, devices=devices, profiles=rooms, courses=courses,
                                mode=self.mode)
        url = getattr(self.settings.get("prometheus"), "url", "")
        data["gpu_use_source"] = utilisation_source(self.mode, url, self._use[1] is None)
        data["grafana_url"] = self.settings.get("grafana_url") or None
        data["refresh_ms"] = REFRESH_MS
        return data


def _held(holding: Any, nodes: tuple[str, ...], devices: tuple[str, ...] = (),
          utilisation: int | None = None) -> Held:
    """A ledger holding as the page shows it."""
    return Held(kind=holding.kind, name=Ledger.named(holding.key), username=holding.username,
                course=holding.course, profile=holding.profile,
                resources=ResourceVector.from_k8s(holding.resources), nodes=tuple(nodes),
                devices=devices, utilisation=utilisation)


def source(settings: dict[str, Any]) -> ClusterSource:
    """The application's one `ClusterSource` (kept in its settings)."""
    if "cluster_source" not in settings:
        settings["cluster_source"] = ClusterSource(settings)
    return settings["cluster_source"]


async def _data(handler: APIHandler, course: str | None) -> dict[str, Any]:
    return await source(handler.settings).view(handler.caller, None if course is None else [course])


class _Cluster(PageHandler):
    page_title = "classhub: cluster"

    async def _page(self, course: str | None) -> None:
        data = await _data(self, course)
        base = f"api/courses/{course}/cluster" if course else "api/cluster"
        self.render_page("cluster.html", self.caller, data=data, course=course,
                         api=self.prefix + base)


class ClusterPage(_Cluster):
    """``GET /cluster``: the whole cluster (hub admins)."""

    @needs(authz.READ_CLUSTER)
    async def get(self) -> None:
        await self._page(None)


class CourseClusterPage(_Cluster):
    """``GET /courses/<course>/cluster``: what the course holds, on every node (its teachers)."""

    @needs(authz.READ_COURSE_CLUSTER, course="course")
    async def get(self, course: str) -> None:
        self.page_title = f"classhub: cluster, {course}"
        await self._page(course)


class ClusterHandler(APIHandler):
    """``GET /api/cluster``: the page's data (hub admins)."""

    @needs(authz.READ_CLUSTER)
    async def get(self) -> None:
        self.write(await _data(self, None))


class CourseClusterHandler(APIHandler):
    """``GET /api/courses/<course>/cluster``: the course's slice (its teachers)."""

    @needs(authz.READ_COURSE_CLUSTER, course="course")
    async def get(self, course: str) -> None:
        self.write(await _data(self, course))


ROUTES: list[tuple[str, type]] = [
    ("cluster", ClusterPage),
    (r"courses/([^/]+)/cluster", CourseClusterPage),
    ("api/cluster", ClusterHandler),
    (r"api/courses/([^/]+)/cluster", CourseClusterHandler),
]


# -- the answer's shape, for the OpenAPI document and the lab extension's types
class ResourceRow(BaseModel):
    name: str
    gpu: bool
    allocatable: str
    used: str
    free: str
    percent: int


class Holding(BaseModel):
    kind: str
    name: str
    user: str
    course: str | None
    profile: str | None
    nodes: list[str]
    started: str | None
    resources: dict[str, str]
    summary: str
    gpus: str
    devices: list[str]
    utilisation: int | None


class DeviceRow(BaseModel):
    uuid: str
    resource: str
    product: str
    utilisation: int | None


class Node(BaseModel):
    name: str
    ready: bool
    schedulable: bool
    gpu_product: str | None
    mig_strategy: str | None
    sharing: str | None
    resources: list[ResourceRow]
    devices: list[DeviceRow]
    holdings: list[Holding]


class ProfileFree(BaseModel):
    slug: str
    display_name: str
    free: int | None


class Totals(BaseModel):
    gpus: str
    held_gpus: str
    servers: int
    jobs: int
    pending_pods: int


class ClusterView(BaseModel):
    """The Cluster page's data: nodes with what they have and hold, holdings without a known
    node, servers per profile that still fit, totals, and the Grafana link when configured."""

    mode: str
    courses: list[str] | None
    nodes: list[Node]
    unplaced: list[Holding]
    profiles: list[ProfileFree]
    totals: Totals
    grafana_url: str | None
    gpu_use_source: str
    refresh_ms: int


def _html(what: str) -> dict[str, Any]:
    return {"200": {"description": what, "content": {"text/html": {}}}}


_VIEW = model_schema(ClusterView)
OPENAPI_PATHS: dict[str, Any] = {
    "/cluster": {"get": op("The Cluster page: every node, what it holds and for whom, live (HTML)",
                           "hub admins", _html("HTML page"))},
    "/courses/{course}/cluster": {"get": op(
        "The course's slice of the Cluster page: every node, the course's servers and jobs (HTML)",
        "teachers of the course and hub admins", _html("HTML page"),
        errors=("401", "403", "404"), params=("course",))},
    "/api/cluster": {"get": op(
        "Every node with its GPUs, CPUs and memory, who holds what, and how many servers of each "
        "profile still fit", "hub admins", ok("The cluster now", _VIEW))},
    "/api/courses/{course}/cluster": {"get": op(
        "Every node's totals with the course's servers and jobs on it, and how many servers of "
        "the course's profiles still fit", "teachers of the course and hub admins",
        ok("The course's slice", _VIEW), errors=("401", "403", "404"), params=("course",))},
}
