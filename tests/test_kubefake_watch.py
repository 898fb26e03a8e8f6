"""Watch semantics (resourceVersion replay, 410 Gone, selectors, bookmarks, timeouts, dropped
connections) with kubernetes_asyncio, plus the sync client's watch."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import kubernetes
import kubernetes_asyncio
import pytest
import requests
from kubernetes_asyncio.client.rest import ApiException

from tests.kubefake import FakeCluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster(nodes=[], bookmark_interval=0.2) as c:
        c.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield c


@pytest.fixture
async def v1(cluster):
    client = await kubernetes_asyncio.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    async with client:
        yield kubernetes_asyncio.client.CoreV1Api(client)


@pytest.fixture
async def ns(v1):
    name = f"w-{uuid.uuid4().hex[:8]}"
    await v1.create_namespace({"metadata": {"name": name}})
    return name


async def collect(v1, ns, until: int | None = None, **kwargs) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of events until the stream ends or ``until`` events arrived."""
    events = []
    watch = kubernetes_asyncio.watch.Watch()
    async with watch.stream(v1.list_namespaced_config_map, ns, **kwargs) as stream:
        async for event in stream:
            md = event["raw_object"]["metadata"]
            events.append((event["type"], md.get("name"), md["resourceVersion"]))
            if until is not None and len(events) >= until:
                break
    return events


async def test_watch_replays_history_after_resource_version(v1, ns):
    a = await v1.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    start = a.metadata.resource_version
    await v1.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    await v1.patch_namespaced_config_map("a", ns, {"data": {"x": "1"}})
    await v1.delete_namespaced_config_map("b", ns)
    events = await asyncio.wait_for(collect(v1, ns, until=3, resource_version=start, timeout_seconds=5), 10)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    rvs = [int(rv) for _, _, rv in events]
    assert rvs == sorted(rvs) and rvs[0] > int(start)


async def test_watch_without_resource_version_starts_with_current_state(v1, ns):
    await v1.create_namespaced_config_map(ns, {"metadata": {"name": "existing"}})
    events = await asyncio.wait_for(collect(v1, ns, until=1, timeout_seconds=5), 10)
    assert events[0][:2] == ("ADDED", "existing")


async def test_watch_streams_live_changes(v1, ns):
    listed = await v1.list_namespaced_config_map(ns)
    task = asyncio.ensure_future(
        collect(v1, ns, until=2, resource_version=listed.metadata.resource_version, timeout_seconds=10)
    )
    await v1.create_namespaced_config_map(ns, {"metadata": {"name": "live"}})
    await v1.delete_namespaced_config_map("live", ns)
    events = await asyncio.wait_for(task, 10)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "live"), ("DELETED", "live")]


async def test_watch_honours_timeout_seconds(v1, ns):
    start = time.monotonic()
    events = await asyncio.wait_for(collect(v1, ns, resource_version="1", timeout_seconds=1), 10)
    elapsed = time.monotonic() - start
    assert events == []
    assert 0.9 <= elapsed < 5


async def test_too_old_resource_version_is_410_gone(cluster, v1, ns):
    cm = await v1.create_namespaced_config_map(ns, {"metadata": {"name": "old"}})
    await v1.patch_namespaced_config_map("old", ns, {"data": {"x": "1"}})
    cluster.compact()
    with pytest.raises(ApiException) as err:
        await asyncio.wait_for(
            collect(v1, ns, resource_version=cm.metadata.resource_version, timeout_seconds=5), 10
        )
    assert err.value.status == 410
    assert "too old resource version" in err.value.reason


async def test_selector_transitions_become_added_and_deleted(v1, ns):
    await v1.create_namespaced_config_map(ns, {"metadata": {"name": "s", "labels": {"role": "other"}}})
    listed = await v1.list_namespaced_config_map(ns)
    task = asyncio.ensure_future(
        collect(
            v1,
            ns,
            until=2,
            label_selector="role=watched",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=10,
        )
    )
    await v1.patch_namespaced_config_map("s", ns, {"metadata": {"labels": {"role": "watched"}}})
    await v1.patch_namespaced_config_map("s", ns, {"metadata": {"labels": {"role": "gone"}}})
    events = await asyncio.wait_for(task, 10)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "s"), ("DELETED", "s")]


async def test_bookmarks_when_allowed(v1, ns):
    listed = await v1.list_namespaced_config_map(ns)
    resp = await v1.list_namespaced_config_map(
        ns,
        watch=True,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        resource_version=listed.metadata.resource_version,
        _preload_content=False,
    )
    line = await asyncio.wait_for(resp.content.readline(), 5)
    resp.close()
    event = json.loads(line)
    assert event["type"] == "BOOKMARK"
    assert event["object"]["kind"] == "ConfigMap" and int(
        event["object"]["metadata"]["resourceVersion"]
    ) >= int(listed.metadata.resource_version)


async def test_dropped_watch_ends_the_stream(cluster, v1, ns):
    listed = await v1.list_namespaced_config_map(ns)
    task = asyncio.ensure_future(
        collect(v1, ns, resource_version=listed.metadata.resource_version, timeout_seconds=30)
    )
    deadline = time.monotonic() + 5
    while ("configmaps", ns) not in cluster.open_watches():
        assert time.monotonic() < deadline, "watch never opened"
        await asyncio.sleep(0.02)
    assert cluster.drop_watches() >= 1
    assert await asyncio.wait_for(task, 5) == []
    assert ("configmaps", ns) not in cluster.open_watches()


def test_sync_client_watch_from_resource_version(cluster):
    client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    v1 = kubernetes.client.CoreV1Api(client)
    ns = f"ws-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": ns}})
    first = v1.create_namespaced_config_map(ns, {"metadata": {"name": "one"}})
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "two"}})
    seen = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        v1.list_namespaced_config_map, ns, resource_version=first.metadata.resource_version, timeout_seconds=5
    ):
        seen.append((event["type"], event["object"].metadata.name))
        watch.stop()
    assert seen == [("ADDED", "two")]
    cluster.compact()
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        for _ in kubernetes.watch.Watch().stream(
            v1.list_namespaced_config_map,
            ns,
            resource_version=first.metadata.resource_version,
            timeout_seconds=5,
        ):
            pass
    assert err.value.status == 410
    client.close()


def test_legacy_watch_path_streams_newline_delimited_json(cluster):
    url = f"{cluster.url}/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=1"
    requests.post(
        f"{cluster.url}/api/v1/namespaces/default/configmaps",
        json={"metadata": {"name": "legacy"}},
        timeout=5,
    )
    start = time.monotonic()
    with requests.get(url, stream=True, timeout=5) as response:
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert time.monotonic() - start < 4
    assert ("ADDED", "legacy") in [(e["type"], e["object"]["metadata"]["name"]) for e in lines]
