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
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import watch
from kubespawner.reflector import MultiNamespaceResourceReflector
from traitlets import default, validate
from traitlets.config import LoggingConfigurable

from hub_ext.core.admission.snapshot import NodeState
from hub_ext.core.capacity import CapacitySnapshot, NodeCapacity, PodUsage, pod_usage
from hub_ext.core.resources import PODS, ResourceVector, sum_vectors

from .capacity import KubernetesBackend
from .labels import JOB_LABEL

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

    async def pods_of(self) -> dict[tuple[str, str, str], tuple[str, ...]]:
        """Whom each bound pod serves -> the pods' names (to join with per-pod metrics such as
        the DCGM exporter's GPU utilisation), from the watch (empty without one)."""
        await self.snapshot()
        if self._pods is None:
            return {}
        found: dict[tuple[str, str, str], list[str]] = {}
        for key, usage in list(self._pods.resources.items()):
            if usage is not None and usage.holder is not None and usage.node:
                found.setdefault(usage.holder, []).append(key.rpartition("/")[2])
        return {holder: tuple(sorted(pods)) for holder, pods in found.items()}

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


# ---------------------------------------------------------------------------------------------
# The job service's live view: nodes and pods by watch, indexed for the admission loop.


@dataclass(frozen=True)
class JobPod:
    """What the job loop reads of one pod of a job's replica (from its labels and status)."""

    job: str
    rank: int
    phase: str
    node: str
    exit_code: int | None


#: pod JSON -> its `JobPod` when it is a replica of a classhub job, else None (the backend's rule).
JobPodOf = Callable[[dict[str, Any]], "JobPod | None"]


class _PodIndex(dict):
    """The pod watch's store for the job loop: by pod key, (`PodUsage` or None, `JobPod` or
    None), indexed by node and by job, with what changed since the loop last asked (the nodes
    whose usage changed, the jobs whose pods changed). A relist replaces the whole dict."""

    def __init__(self, pods: dict[str, Any] | None = None, job_pod: JobPodOf | None = None) -> None:
        super().__init__()
        self.job_pod = job_pod
        self.by_node: dict[str, dict[str, Any]] = {}
        self.by_job: dict[str, dict[str, JobPod]] = {}
        self.changed_nodes: set[str] = set()
        self.changed_jobs: set[str] = set()
        for key, pod in (pods or {}).items():
            self[key] = pod

    def __setitem__(self, key: str, pod: dict[str, Any]) -> None:
        self._forget(key)
        usage = pod_usage(pod)
        job = self.job_pod(pod) if self.job_pod is not None else None
        super().__setitem__(key, (usage, job))
        if usage is not None and usage.node:
            self.by_node.setdefault(usage.node, {})[key] = usage.requests
            self.changed_nodes.add(usage.node)
        if job is not None:
            self.by_job.setdefault(job.job, {})[key] = job
            self.changed_jobs.add(job.job)

    def _forget(self, key: str) -> None:
        old = super().get(key)
        if old is None:
            return
        usage, job = old
        if usage is not None and usage.node:
            self.by_node.get(usage.node, {}).pop(key, None)
            self.changed_nodes.add(usage.node)
        if job is not None:
            pods = self.by_job.get(job.job, {})
            pods.pop(key, None)
            if not pods:
                self.by_job.pop(job.job, None)
            self.changed_jobs.add(job.job)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, pod in dict(*args, **kwargs).items():
            self[key] = pod

    def pop(self, key: str, *default: Any) -> Any:
        self._forget(key)
        return super().pop(key, *default)


class _IndexedPods(_AllPods):
    """Every pod of the cluster, kept as `_PodIndex` entries (usage and job facts only)."""

    job_pod: JobPodOf | None = None

    @default("resources")
    def _resources_default(self) -> _PodIndex:
        return _PodIndex(job_pod=self.job_pod)

    @validate("resources")
    def _keep_usage_only(self, proposal: dict[str, Any]) -> _PodIndex:
        pods = proposal["value"]
        return pods if isinstance(pods, _PodIndex) else _PodIndex(pods, self.job_pod)


class JobClusterView(LoggingConfigurable):
    """The job service's live view of the cluster: a watch on every node and every pod.

    Why (docs/jobs-loop.md): the admission loop used to list every node and pod of the cluster
    at every cycle and every submit, and the pods of each running job. With the watches, a cycle
    reads memory: the nodes whose pods changed are summed again, the others are reused, and the
    loop follows only the jobs whose pods changed (`take_changed_jobs`). Without the permission
    to watch (no capacity-rbac.yaml), `watching` stays False and the backend lists as before.
    """

    def __init__(self, api: Any, job_pod: JobPodOf, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.api = api
        self.job_pod = job_pod
        self.watching = False
        self._pods: _IndexedPods | None = None
        self._started: asyncio.Future | None = None
        self._node_task: asyncio.Task | None = None
        self._node_json: dict[str, dict[str, Any]] = {}
        self._node_loaded: asyncio.Event | None = None
        self._node_changed: set[str] = set()
        self._node_states: dict[str, NodeState] = {}
        self._node_tuple: tuple[NodeState, ...] = ()
        self._seen_for_nodes: _PodIndex | None = None
        self._seen_for_jobs: _PodIndex | None = None

    async def start(self) -> bool:
        """Start both watches once; True when the view is live."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)
        return self.watching

    async def _start(self) -> None:
        try:
            self._node_loaded = asyncio.Event()
            self._node_task = asyncio.ensure_future(self._watch_nodes())
            pods = _IndexedPods(parent=self)
            pods.job_pod = self.job_pod
            pods.resources = _PodIndex(job_pod=self.job_pod)
            pods.api = self.api
            pods.on_failure = self._watch_failed  # the reflector gave up: list again
            await pods.start()
            self._pods = pods
            await asyncio.wait_for(self._node_loaded.wait(), 60)
            self.watching = True
        except Exception as e:  # e.g. 403: the job service may not watch the cluster
            self.log.warning("classhub jobs: no watch on the cluster's nodes and pods (%r); the "
                             "loop lists them at every cycle", e)
            await self.stop()

    def _watch_failed(self) -> None:
        self.log.warning("classhub jobs: the pod watch gave up; the loop lists the cluster again")
        self.watching = False

    async def _watch_nodes(self) -> None:
        """List the nodes once, then follow them by watch (list again after an error or a 410)."""
        version: str | None = None
        delay = 0.1
        while True:
            try:
                if version is None:
                    listing = await _list_json(self.api, "list_node")
                    self._node_json = {n["metadata"]["name"]: n for n in listing.get("items") or ()}
                    self._node_changed |= set(self._node_json) | set(self._node_states)
                    version = listing["metadata"]["resourceVersion"]
                    assert self._node_loaded is not None
                    self._node_loaded.set()
                stream = watch.Watch()
                async with stream.stream(self.api.list_node, resource_version=version,
                                         timeout_seconds=300, _preload_content=False) as events:
                    async for event in events:
                        node = event["raw_object"]
                        name = node["metadata"]["name"]
                        if event["type"] == "DELETED":
                            self._node_json.pop(name, None)
                        elif event["type"] in ("ADDED", "MODIFIED"):
                            self._node_json[name] = node
                        version = node["metadata"].get("resourceVersion") or version
                        self._node_changed.add(name)
                delay = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a 410 Gone, a dropped connection: list again
                self.log.warning("classhub jobs: the node watch stopped (%r); listing again", e)
                version = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    def nodes(self) -> tuple[NodeState, ...]:
        """Every node with what is free now (its pods' requests subtracted), sorted by name;
        only the nodes whose pods or object changed since the last call are computed again."""
        assert self._pods is not None
        index = self._pods.resources
        changed, self._node_changed = self._node_changed, set()
        if index is not self._seen_for_nodes:  # a relist: every node again
            self._seen_for_nodes = index
            changed |= set(self._node_json) | set(self._node_states)
        changed |= index.changed_nodes
        index.changed_nodes = set()
        if not changed:
            return self._node_tuple
        for name in changed:
            node = self._node_json.get(name)
            if node is None:
                self._node_states.pop(name, None)
                continue
            held = index.by_node.get(name, {})
            used = sum_vectors(held.values())
            if held:
                used = used + ResourceVector({PODS: len(held)})
            self._node_states[name] = NodeState.from_capacity(
                NodeCapacity.from_k8s(node, used=used, pod_count=len(held)))
        self._node_tuple = tuple(self._node_states[n] for n in sorted(self._node_states))
        return self._node_tuple

    def job_pods(self, job: str) -> list[JobPod]:
        """The pods of job `job` as last seen."""
        assert self._pods is not None
        return list(self._pods.resources.by_job.get(job, {}).values())

    def take_changed_jobs(self) -> set[str]:
        """The jobs whose pods changed since the last call (after a relist: every job's)."""
        assert self._pods is not None
        index = self._pods.resources
        changed, index.changed_jobs = index.changed_jobs, set()
        if index is not self._seen_for_jobs:
            self._seen_for_jobs = index
            changed |= set(index.by_job)
        return changed

    async def stop(self) -> None:
        if self._node_task is not None:
            self._node_task.cancel()
        if self._pods is not None:
            mark_failure_seen(self._pods.first_load_future)
            await self._pods.stop()
        self._pods = None
        self.watching = False


async def _list_json(api: Any, method: str) -> dict[str, Any]:
    """One list call's JSON, decoded on a worker thread (docs/architecture.md, rule 7)."""
    response = await getattr(api, method)(_preload_content=False)
    try:
        data = await response.read()
    finally:
        response.release()
    return await asyncio.to_thread(json.loads, data)
