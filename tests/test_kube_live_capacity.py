"""The hub's live view of the cluster's capacity (a pod watch) agrees with a fresh list, follows
pods as they come and go, and falls back to lists when it may not watch."""

from __future__ import annotations

import asyncio
import gc
import logging

import kubernetes_asyncio
import pytest

from hub_ext.backends.kubernetes import KubernetesBackend
from hub_ext.backends.kubernetes.informer import LiveCapacity
from hub_ext.core.capacity import PodUsage
from tests.kubefake import FakeCluster
from tests.kubefake.waiting import async_wait_for

pytestmark = pytest.mark.cluster

NODES = [{"name": f"gpu-{i}", "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}}
         for i in range(2)]


def gpu_pod(name: str, gpus: int) -> dict:
    resources = {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                 "limits": {"nvidia.com/gpu": str(gpus)}}
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "python:3.11", "resources": resources}]}}


@pytest.fixture
def cluster(tmp_path):
    with FakeCluster(nodes=NODES) as fake:
        fake.write_kubeconfig(tmp_path / "config")
        yield fake


@pytest.fixture
async def backend(cluster):
    api_client = await kubernetes_asyncio.config.new_client_from_config(
        config_file=str(cluster.kubeconfig_path))
    async with api_client:
        yield KubernetesBackend(api=kubernetes_asyncio.client.CoreV1Api(api_client))


async def test_the_live_view_follows_pods_and_agrees_with_a_fresh_list(backend, cluster):
    cluster.create("pods", gpu_pod("before", 3), "default")
    live = LiveCapacity(backend, node_ttl=0)
    try:
        await async_wait_for(lambda: _uses(live, 3), timeout=20, what="the first pod bound")
        assert await live.snapshot() == await backend.capacity_snapshot()

        cluster.create("pods", gpu_pod("after", 4), "default")
        await async_wait_for(lambda: _uses(live, 7), timeout=20, what="7 GPUs used in the live view")
        assert await live.snapshot() == await backend.capacity_snapshot()

        await _delete_and_agree(live, backend, cluster, "before", gpus_left=4)
    finally:
        await live.stop()


async def test_a_snapshot_is_kept_until_a_pod_changes(backend, cluster):
    """A look with nothing changed reuses the last sum; a pod that comes or goes shows at once."""
    cluster.create("pods", gpu_pod("first", 1), "default")
    live = LiveCapacity(backend, node_ttl=600)
    try:
        await async_wait_for(lambda: _uses(live, 1), timeout=20, what="the first pod bound")
        kept = await live.snapshot()
        assert await live.snapshot() is kept
        cluster.create("pods", gpu_pod("second", 2), "default")
        await async_wait_for(lambda: _uses(live, 3), timeout=20, what="the second pod in the view")
        assert await live.snapshot() == await backend.capacity_snapshot()
        await _delete_and_agree(live, backend, cluster, "first", gpus_left=2)
    finally:
        await live.stop()


async def test_the_view_keeps_each_pods_usage_not_its_json(backend, cluster):
    """The hub keeps the view for its lifetime: a pod's JSON (a few hundred objects that every
    full garbage collection walks) is parsed into its usage on arrival and not kept; the view
    still follows a relist (the reflector's restart) and a pod that ends."""
    for i in range(3):
        cluster.create("pods", gpu_pod(f"p{i}", 1), "default")
    live = LiveCapacity(backend, node_ttl=0)
    try:
        await async_wait_for(lambda: _uses(live, 3), timeout=20, what="three pods bound")
        kept = live._pods.resources
        assert len(kept) == 3
        assert all(isinstance(usage, PodUsage) and usage.node.startswith("gpu-") for usage in kept.values())
        await live._pods._list_and_update()  # what a watch restart does: a fresh list
        assert live._pods.resources is not kept
        assert all(isinstance(usage, PodUsage) for usage in live._pods.resources.values())
        await _delete_and_agree(live, backend, cluster, "p0", gpus_left=2)
    finally:
        await live.stop()


async def test_nodes_are_listed_again_in_the_background(backend, cluster):
    """A look never waits for a node list once the first one is there: a stale list is
    refreshed behind it, so a new node shows at a later look, and a failed list keeps the last
    one (the view keeps answering, the warning says why)."""
    live = LiveCapacity(backend, node_ttl=0)
    try:
        assert len((await live.snapshot()).nodes) == 2
        rule = cluster.faults.add(500, verbs="list", path=r"^/api/v1/nodes", count=1)
        assert len((await live.snapshot()).nodes) == 2  # answered from the last list
        await async_wait_for(lambda: _hit(rule), timeout=20, what="the refused node list")
        cluster.create("nodes", {"metadata": {"name": "gpu-2"}, "status": {"allocatable": {
            "cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}}}, None)

        async def three_nodes() -> bool:
            return len((await live.snapshot()).nodes) == 3

        await async_wait_for(three_nodes, timeout=20, what="the new node in the view")
        assert await live.snapshot() == await backend.capacity_snapshot()
    finally:
        await live.stop()


async def _delete_and_agree(live: LiveCapacity, backend, cluster, pod: str, gpus_left: int) -> None:
    """Delete ``pod``; the view frees its GPUs and agrees with a fresh list again."""
    cluster.delete("pods", pod, "default")
    await async_wait_for(lambda: _uses(live, gpus_left), timeout=20, what=f"{pod}'s GPUs freed")
    assert await live.snapshot() == await backend.capacity_snapshot()


async def _hit(rule) -> bool:
    return rule.hits == 1


async def _uses(live: LiveCapacity, gpus: int) -> bool:
    """Whether the live view counts ``gpus`` GPUs in use."""
    return (await live.snapshot()).total_used["nvidia.com/gpu"] == gpus


async def test_without_a_cluster_wide_watch_the_view_lists_at_every_look(backend, cluster):
    """A hub whose service account may not list pods of every namespace (a namespaced Role)
    still answers from lists, through the same call the first look made; nothing crashes."""
    rule = cluster.faults.add(403, verbs="list", path=r"^/api/v1/pods", count=1,
                              message='pods is forbidden: User "system:serviceaccount:jhub:hub" '
                                      'cannot list resource "pods" at the cluster scope')
    live = LiveCapacity(backend, node_ttl=0)
    try:
        cluster.create("pods", gpu_pod("one", 2), "default")
        snapshot = await live.snapshot()  # the watch's first list is refused: lists from now on
        assert rule.hits == 1 and not live._watching
        assert snapshot == await backend.capacity_snapshot()
        cluster.create("pods", gpu_pod("two", 1), "default")

        async def agrees() -> bool:
            return await live.snapshot() == await backend.capacity_snapshot()

        await async_wait_for(agrees, timeout=20, what="the listed view to see the new pod")
    finally:
        await live.stop()


async def test_a_refused_watch_leaves_no_unseen_error_behind(backend, cluster):
    """The refused first list is told once, in the warning; nothing logs it again later, when
    the garbage collector frees the watch (on Python 3.11 that late traceback broke whatever
    ``ast.parse`` was running at that moment, such as an import)."""
    cluster.faults.add(403, verbs="list", path=r"^/api/v1/pods", count=1)
    loop = asyncio.get_running_loop()
    late: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: late.append(context["message"]))
    quiet = logging.getLogger("classhub-test-quiet")  # pytest's handlers keep records (and with
    quiet.propagate = False                           # them the watch) alive; this one does not
    live = LiveCapacity(backend, node_ttl=0, log=quiet)
    try:
        await live.snapshot()
        assert not live._watching
        gc.collect()
        assert late == []
    finally:
        loop.set_exception_handler(previous)
        await live.stop()
