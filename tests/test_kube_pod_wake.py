"""The spawner's pod reflector wakes a start the moment its pod runs (no poll interval), against
the fake API server: a student's server is reported ready when the cluster says it runs.

What would break it: KubeSpawner's reflector writing pods some other way than the dict it holds
(a relist replaces the dict; each watch event sets or pops a key), a waiter woken by another
pod's change but not by its own, or a cancelled start leaving its waiter behind.
"""

from __future__ import annotations

import asyncio
import contextlib

import kubernetes_asyncio
import pytest

from hub_ext.backends.kubernetes import servers
from hub_ext.backends.kubernetes.reflectors import WakingPodReflector
from tests.kubefake import FakeCluster
from tests.kubefake.waiting import async_wait_for

pytestmark = pytest.mark.cluster

NODES = [{"name": "cpu-0", "allocatable": {"cpu": "8", "memory": "32Gi"}}]


def pod(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"component": "singleuser-server"}},
            "spec": {"containers": [{"name": "notebook", "image": "python:3.11"}]}}


async def waiting_on(watching: WakingPodReflector, key: str) -> None:
    """Until a wait for ``key`` is registered (the task has checked its condition and sleeps)."""
    async def registered() -> bool:
        return key in watching._waiters
    await async_wait_for(registered, timeout=10, what=f"a wait for {key}")


def running(pod: dict | None) -> bool:
    status = (pod or {}).get("status") or {}
    return (status.get("phase") == "Running" and bool(status.get("podIP"))
            and all(c.get("ready") for c in status.get("containerStatuses") or [{}]))


@pytest.fixture
def cluster(tmp_path):
    with FakeCluster(nodes=NODES) as fake:
        fake.write_kubeconfig(tmp_path / "config")
        yield fake


@pytest.fixture
async def reflector(cluster):
    client = await kubernetes_asyncio.config.new_client_from_config(
        config_file=str(cluster.kubeconfig_path))
    async with client:
        core = kubernetes_asyncio.client.CoreV1Api(client)
        watching = WakingPodReflector(namespace="default", labels={"component": "singleuser-server"})
        watching.api = core
        await watching.start()
        try:
            yield watching, core
        finally:
            await watching.stop()


async def test_a_waiter_gets_the_pod_it_created_once_it_runs(reflector):
    watching, core = reflector
    attempt = await servers.create(core, "pod", "default", pod("jupyter-s1"), 10)
    assert attempt.created and attempt.uid, attempt

    found = await asyncio.wait_for(watching.until(
        "default/jupyter-s1",
        lambda p: p is not None and p["metadata"]["uid"] == attempt.uid and running(p)), 30)

    assert found["metadata"]["uid"] == attempt.uid
    assert running(found)
    assert watching._waiters == {}  # nothing left waiting once answered


async def test_a_deletion_wakes_its_waiter_and_a_cancelled_wait_leaves_nothing(reflector, cluster):
    watching, core = reflector
    await servers.create(core, "pod", "default", pod("jupyter-s2"), 10)
    await asyncio.wait_for(watching.until("default/jupyter-s2", lambda p: p is not None), 30)

    gone = asyncio.ensure_future(watching.until("default/jupyter-s2", lambda p: p is None))
    never = asyncio.ensure_future(watching.until("default/jupyter-s3", lambda p: p is not None))
    await waiting_on(watching, "default/jupyter-s2")
    await waiting_on(watching, "default/jupyter-s3")
    await core.delete_namespaced_pod("jupyter-s2", "default", grace_period_seconds=0)
    assert await asyncio.wait_for(gone, 30) is None

    never.cancel()
    with pytest.raises(asyncio.CancelledError):
        await never
    assert watching._waiters == {}


async def test_a_relist_wakes_every_waiter(reflector):
    """A watch restart lists every pod again and replaces the reflector's dict: waiters of pods
    that changed meanwhile must see the new list."""
    watching, core = reflector
    watching.watch_task.cancel()  # no watch events: only the list can tell of the new pod
    with contextlib.suppress(asyncio.CancelledError):
        await watching.watch_task
    seen = asyncio.ensure_future(watching.until("default/jupyter-s4", lambda p: p is not None))
    await waiting_on(watching, "default/jupyter-s4")
    await core.create_namespaced_pod("default", pod("jupyter-s4"))
    assert not seen.done()
    await watching._list_and_update()  # what a watch restart does first
    assert (await asyncio.wait_for(seen, 30))["metadata"]["name"] == "jupyter-s4"
