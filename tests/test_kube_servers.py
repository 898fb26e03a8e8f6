"""Creating a server's objects: a claim that answered 409 and is gone when read is made again."""

from __future__ import annotations

import kubernetes_asyncio
import pytest

from hub_ext.backends.kubernetes import servers
from tests.kubefake import FakeCluster

pytestmark = pytest.mark.cluster

CLAIM = {"metadata": {"name": "claim-ann"},
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}


@pytest.fixture
def cluster(tmp_path):
    with FakeCluster(nodes=[{"name": "n1", "allocatable": {"cpu": "4", "memory": "8Gi"}}]) as fake:
        fake.write_kubeconfig(tmp_path / "config")
        yield fake


async def test_a_claim_that_vanished_after_its_409_is_created_again(cluster):
    """The old claim finished its deletion between the create's 409 and the read: taking the 409
    as "it exists" would start a pod on a claim nobody makes (Pending until the start timeout)."""
    rule = cluster.faults.add(409, verbs="create", path=r"/persistentvolumeclaims$", count=1,
                              message='persistentvolumeclaims "claim-ann" already exists')
    client = await kubernetes_asyncio.config.new_client_from_config(
        config_file=str(cluster.kubeconfig_path))
    async with client:
        api = kubernetes_asyncio.client.CoreV1Api(client)
        first = await servers.create(api, "persistent_volume_claim", "default", CLAIM, 10)
        assert (first.done, first.status) == (False, 409)  # retried, not taken as there
        second = await servers.create(api, "persistent_volume_claim", "default", CLAIM, 10)
        assert second.done and second.created
    assert rule.hits == 1
    assert cluster.get("persistentvolumeclaims", "claim-ann", "default") is not None
