"""Fault injection: 5xx and 429 answers for chosen verbs/paths, by count or time, latency,
and the HTTP admin endpoint."""

from __future__ import annotations

import time

import kubernetes_asyncio
import pytest
import requests
from kubernetes.client.rest import ApiException

from tests.kubefake import FakeCluster

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path):
    with FakeCluster(nodes=[]) as c:
        c.write_kubeconfig(tmp_path / "config")
        yield c


def test_5xx_for_n_requests_of_one_verb_and_path(cluster, v1):
    cluster.faults.add(503, verbs="list", path=r"/pods$", count=2)
    v1.read_namespace("default")  # other verbs/paths are unaffected
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            v1.list_namespaced_pod("default")
        assert err.value.status == 503
    assert v1.list_namespaced_pod("default").items == []


def test_429_carries_retry_after(cluster):
    cluster.faults.add(429, verbs=["create"], retry_after=3, count=1)
    response = requests.post(
        f"{cluster.url}/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "x"}}, timeout=5
    )
    assert response.status_code == 429 and response.headers["Retry-After"] == "3"
    body = response.json()
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 3
    again = requests.post(
        f"{cluster.url}/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "x"}}, timeout=5
    )
    assert again.status_code == 201


def test_time_limited_fault_expires(cluster, v1):
    cluster.faults.add(500, path="/configmaps", duration=0.3)
    with pytest.raises(ApiException) as err:
        v1.list_namespaced_config_map("default")
    assert err.value.status == 500
    deadline = time.monotonic() + 5
    while True:
        try:
            v1.list_namespaced_config_map("default")
            break
        except ApiException:
            assert time.monotonic() < deadline


def test_latency(cluster, v1):
    cluster.faults.add_latency(0.4, verbs="get", count=1)
    start = time.monotonic()
    v1.read_namespace("default")
    assert time.monotonic() - start >= 0.4
    start = time.monotonic()
    v1.read_namespace("default")
    assert time.monotonic() - start < 0.4


def test_admin_endpoint(cluster):
    r = requests.post(
        f"{cluster.url}/_kubefake/faults", json={"status": 500, "verbs": ["get"], "path": "/nodes"}, timeout=5
    )
    assert r.status_code == 201
    assert requests.get(f"{cluster.url}/api/v1/nodes/x", timeout=5).status_code == 500
    assert requests.get(f"{cluster.url}/api/v1/nodes", timeout=5).status_code == 200  # list, not get
    requests.delete(f"{cluster.url}/_kubefake/faults", timeout=5)
    assert requests.get(f"{cluster.url}/api/v1/nodes/x", timeout=5).status_code == 404
    assert requests.post(f"{cluster.url}/_kubefake/drop-watches", timeout=5).json() == {"dropped": 0}


async def test_async_client_sees_injected_errors(cluster):
    cluster.faults.add(500, verbs="get", path="/namespaces/default$", count=1)
    client = await kubernetes_asyncio.config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    async with client:
        av1 = kubernetes_asyncio.client.CoreV1Api(client)
        with pytest.raises(kubernetes_asyncio.client.exceptions.ApiException) as err:
            await av1.read_namespace("default")
        assert err.value.status == 500
        assert (await av1.read_namespace("default")).metadata.name == "default"
