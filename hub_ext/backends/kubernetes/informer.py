"""A live view of the cluster's capacity in the hub process: a watch on every pod, nodes listed
every few seconds.

Why: every start checks "is there room for this profile" and every spawn form shows "N free
now". Listing and decoding every pod of the cluster for each of them made a 300-student class
start cost the hub's event loop seconds of CPU. A watch (KubeSpawner's own ``ResourceReflector``,
the way it follows its pods) keeps each pod in memory as it changes, and each pod's usage is
parsed once per change and only that usage is kept (not the pod's JSON); a snapshot is then a
sum. Nodes change rarely and are few: a list at most every ``node_ttl`` seconds, in the background
once the first list is there.

When the hub may not watch pods in every namespace (a namespaced Role), the view falls back to
the two list calls of ``KubernetesBackend.capacity_snapshot`` for every snapshot, and says so
once in the log.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from kubespawner.reflector import MultiNamespaceResourceReflector
from traitlets import default, validate
from traitlets.config import LoggingConfigurable

from hub_ext.core.capacity import CapacitySnapshot, PodUsage, pod_usage

from .capacity import KubernetesBackend
from .jobs import JOB_LABEL

#: KubeSpawner's annotations on a server's pod: the user's and the server's names, unescaped.
USER_ANNOTATION = "hub.jupyter.org/username"
SERVER_ANNOTATION = "hub.jupyter.org/servername"


def holder_of(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    """Whom a pod serves: ("server", user, server name) for a pod KubeSpawner started,
    ("job", job id, "") for a replica of a classhub job, None for anything else."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    if labels.get(JOB_LABEL):
        return ("job", str(labels[JOB_LABEL]), "")
    if labels.get("component") == "singleuser-server" and annotations.get(USER_ANNOTATION):
        return ("server", str(annotations[USER_ANNOTATION]),
                str(annotations.get(SERVER_ANNOTATION) or ""))
    return None


def usage_of(pod: dict[str, Any]) -> PodUsage | None:
    """The pod's usage with whom it serves (`holder_of`): a few strings more per pod."""
    usage = pod_usage(pod)
    holder = holder_of(pod) if usage is not None else None
    return usage if usage is None or holder is None else PodUsage(usage.node, usage.requests, holder)

#: Stamps of `_PodUsages` changes, unique in the process (a relisted dict is a new object).
_stamps = itertools.count(1)


class _PodUsages(dict):
    """What the reflector keeps of each pod: its `PodUsage` (None: holds nothing), by pod key,
    stamped anew at every change.

    Why not the pod: KubeSpawner's reflector keeps each object as its whole JSON, a tree of a
    few hundred Python objects per pod that nothing here reads again, for every pod of the
    cluster. The hub keeps them for its lifetime and every full garbage collection walks them,
    on the hub's event loop (hub_ext.heap). Parsing the usage when the pod arrives also spares
    the snapshot a comparison of every pod's version."""

    def __init__(self, pods: dict[str, Any] | None = None) -> None:
        super().__init__((key, usage_of(pod)) for key, pod in (pods or {}).items())
        self.stamp = next(_stamps)

    def __setitem__(self, key: str, pod: dict[str, Any]) -> None:
        super().__setitem__(key, usage_of(pod))
        self.stamp = next(_stamps)

    def update(self, *args: Any, **kwargs: Any) -> None:  # every way in parses the pod
        for key, pod in dict(*args, **kwargs).items():
            self[key] = pod

    def pop(self, key: str, *default: Any) -> Any:
        self.stamp = next(_stamps)
        return super().pop(key, *default)


class _AllPods(MultiNamespaceResourceReflector):
    """Every pod of the cluster (terminated ones too: they are cheap to skip).

    Why longer watches than KubeSpawner's (10 s): each watch restart lists every pod of the
    cluster again, and during a class start that list (hundreds of pods, every 10 s) was a
    measurable part of the hub's extra CPU (docs/contributing/benchmarks.md, "Benchmarks and their
    history", the storm benchmark). The watch's events keep the view current between lists; a dead
    connection is still noticed by the reflector's read timeout (``request_timeout``, 60 s).
    """

    kind = "pods"

    @default("timeout_seconds")
    def _timeout_seconds_default(self) -> int:
        return 300

    @default("restart_seconds")
    def _restart_seconds_default(self) -> int:
        return 300

    @default("resources")
    def _resources_default(self) -> _PodUsages:
        return _PodUsages()

    @validate("resources")
    def _keep_usage_only(self, proposal: dict[str, Any]) -> _PodUsages:
        """The reflector's list replaces the whole dict: keep each pod's usage only."""
        pods = proposal["value"]
        return pods if isinstance(pods, _PodUsages) else _PodUsages(pods)


def mark_failure_seen(future: asyncio.Future) -> None:
    """Mark a reflector's failed first load as seen, once the caller has told its reason.

    Why: an exception nobody retrieved is logged, with its traceback, when the garbage collector
    frees the future, at whatever moment that is. Python 3.11 formats a traceback with
    ``ast.parse``, and an ``ast.parse`` running inside another one (the collector may free the
    future during any allocation) fails the outer one with "AST constructor recursion depth
    mismatch": the hub's own imports, or a test, would fail far from the cause.
    """
    if future.done() and not future.cancelled():
        future.exception()


class LiveCapacity(LoggingConfigurable):
    """Capacity snapshots from a pod watch and a node list cached for ``node_ttl`` seconds."""

    def __init__(self, backend: KubernetesBackend, node_ttl: float = 5.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend = backend
        self.node_ttl = node_ttl
        self._pods: _AllPods | None = None
        self._started: asyncio.Task | None = None
        self._watching = False
        self._nodes: list[dict[str, Any]] = []
        self._nodes_at = float("-inf")
        self._nodes_lock = asyncio.Lock()
        self._relisting: asyncio.Future | None = None
        self._snapshot: tuple[list[dict[str, Any]], int, CapacitySnapshot] | None = None

    async def _start(self) -> None:
        try:
            self._pods = _AllPods(parent=self)
            self._pods.api = self.backend.api  # the caller's client (the spawner's shared one)
            await self._pods.start()
            self._watching = True
        except Exception as e:  # e.g. 403: no cluster-wide pod watch for this service account
            self.log.warning("classhub: no watch on the cluster's pods (%r); capacity comes from a "
                             "pod list at every look", e)
            if self._pods is not None:
                mark_failure_seen(self._pods.first_load_future)
                await self._pods.stop()
            self._pods = None

    async def _nodes_json(self) -> list[dict[str, Any]]:
        """The nodes as last listed. The first look waits for a list; later, a list older than
        ``node_ttl`` is refreshed in the background and the look answers from the last one.

        Why: nodes change rarely, and a start that found the list stale used to wait for the
        new one (with every start that came meanwhile, behind the lock): at a class start, a
        few starts every ``node_ttl`` seconds paid a node list for a change that almost never
        happened."""
        if self._nodes_at == float("-inf"):
            async with self._nodes_lock:  # one list for concurrent first looks
                if self._nodes_at == float("-inf"):
                    await self._list_nodes()
        elif time.monotonic() - self._nodes_at > self.node_ttl and (
                self._relisting is None or self._relisting.done()):
            self._relisting = asyncio.ensure_future(self._relist_nodes())
        return self._nodes

    async def _list_nodes(self) -> None:
        self._nodes = list((await self.backend._list("list_node")).get("items") or ())
        self._nodes_at = time.monotonic()

    async def _relist_nodes(self) -> None:
        try:
            await self._list_nodes()
        except Exception as e:  # the last list stays; the next look after node_ttl tries again
            self.log.warning("classhub: listing the cluster's nodes failed (%r); capacity uses "
                             "the last list", e)
            self._nodes_at = time.monotonic()

    async def snapshot(self) -> CapacitySnapshot:
        """The capacity now (the watch's view; nodes from a list at most ``node_ttl`` seconds and
        one list call old).

        The snapshot is kept until a pod changes or the nodes are listed again: a class start
        asks for one per start and per spawn form, far more often than the cluster changes, and
        summing every pod's usage for each was the larger part of a start's capacity check."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)
        if not self._watching:
            return await self.backend.capacity_snapshot()
        nodes = await self._nodes_json()
        assert self._pods is not None
        pods = self._pods.resources  # the reflector replaces the dict atomically when it relists
        if self._snapshot is None or self._snapshot[0] is not nodes or self._snapshot[1] != pods.stamp:
            self._snapshot = (nodes, pods.stamp, CapacitySnapshot.from_usage(nodes, list(pods.values())))
        return self._snapshot[2]

    async def placements(self) -> dict[tuple[str, str, str], tuple[str, ...]]:
        """Whom each bound pod serves -> its nodes (a job's replicas may be on several), from
        the watch (empty without one: the Cluster page then lists holdings without a node)."""
        await self.snapshot()  # starts the watch on first use
        if self._pods is None:
            return {}
        found: dict[tuple[str, str, str], list[str]] = {}
        for usage in list(self._pods.resources.values()):
            if usage is not None and usage.holder is not None and usage.node:
                found.setdefault(usage.holder, []).append(usage.node)
        return {holder: tuple(sorted(set(nodes))) for holder, nodes in found.items()}

    async def stop(self) -> None:
        if self._relisting is not None:
            self._relisting.cancel()
        if self._pods is not None:
            await self._pods.stop()


#: One live view per event loop (the hub has one), as KubeSpawner keeps one client per loop.
_views: dict[asyncio.AbstractEventLoop, LiveCapacity] = {}


def live_capacity(api: Any, node_ttl: float = 5.0) -> LiveCapacity:
    """The running loop's shared `LiveCapacity` (created on first use, with ``api`` for lists)."""
    loop = asyncio.get_running_loop()
    view = _views.get(loop)
    if view is None:
        view = _views[loop] = LiveCapacity(KubernetesBackend(api=api), node_ttl=node_ttl)
    return view
