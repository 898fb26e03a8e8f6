"""Configurable latencies: off by default (fast), and when on a pod start pulls its image and
takes its time, a claim binds later, a graceful delete waits for the container, and a read at a
future resourceVersion waits before its 504 — what a client racing a real cluster sees."""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from tests.kubefake import FakeCluster
from tests.kubefake.latency import Latencies
from tests.kubefake.waiting import wait_for

pytestmark = pytest.mark.cluster

SLOW = Latencies(
    image_pull=0.6, container_start=0.3, volume_bind=0.5, container_stop=0.4, too_large_rv_wait=0.3
)


@pytest.fixture(scope="module")
def v1(tmp_path_factory):
    with FakeCluster(latencies=SLOW) as cluster:
        client = kubernetes.config.new_client_from_config(
            config_file=str(cluster.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config"))
        )
        yield kubernetes.client.CoreV1Api(client)
        client.close()


def pod(name: str, image: str, claim: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": image, "ports": [{"containerPort": 8888}]}]},
    }
    if claim:
        body["spec"]["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}]
    return body


def ready(v1: Any, name: str) -> bool:
    conditions = v1.read_namespaced_pod(name, "default").status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def kubelet_events(v1: Any, name: str) -> list[tuple[str, str]]:
    events = v1.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in sorted(events, key=lambda e: e.metadata.resource_version)]


def test_the_default_cluster_has_no_latency(monkeypatch):
    monkeypatch.delenv("KUBEFAKE_LATENCIES", raising=False)
    assert FakeCluster().latencies == Latencies()
    monkeypatch.setenv("KUBEFAKE_LATENCIES", "realistic")  # how a whole module can be run slow
    assert FakeCluster().latencies == Latencies.realistic()
    assert Latencies.parse("realistic") == Latencies.realistic()
    assert Latencies.parse("image_pull=2,container_start=0.5") == Latencies(image_pull=2, container_start=0.5)
    with pytest.raises(ValueError, match="unknown latency"):
        Latencies.parse("warp=1")


def test_a_first_start_pulls_the_image_and_a_second_finds_it(v1):
    started = time.monotonic()
    v1.create_namespaced_pod("default", pod("first", "quay.io/jupyter/base-notebook:2025-01-01"))
    wait_for(lambda: ready(v1, "first"), timeout=20, what="first pod Ready")
    assert time.monotonic() - started >= SLOW.image_pull + SLOW.container_start
    reasons = [r for r, _ in kubelet_events(v1, "first")]
    assert reasons[reasons.index("Pulling") :] == ["Pulling", "Pulled", "Created", "Started"]
    pulled = dict(kubelet_events(v1, "first"))["Pulled"]
    assert pulled.startswith('Successfully pulled image "quay.io/jupyter/base-notebook:2025-01-01" in 0.6s')

    v1.create_namespaced_pod("default", pod("second", "quay.io/jupyter/base-notebook:2025-01-01"))
    wait_for(lambda: ready(v1, "second"), timeout=20, what="second pod Ready")
    assert dict(kubelet_events(v1, "second"))["Pulled"] == (
        'Container image "quay.io/jupyter/base-notebook:2025-01-01" already present on machine'
    )


def test_a_graceful_delete_waits_for_the_container_to_exit(v1):
    v1.create_namespaced_pod("default", pod("stopper", "busybox:1"))
    wait_for(lambda: ready(v1, "stopper"), timeout=20, what="pod Ready")
    started = time.monotonic()
    v1.delete_namespaced_pod("stopper", "default", grace_period_seconds=30)
    terminating = v1.read_namespaced_pod("stopper", "default")
    assert terminating.metadata.deletion_timestamp is not None  # still there: Terminating

    def gone() -> bool:
        try:
            v1.read_namespaced_pod("stopper", "default")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=20, what="pod gone")
    assert time.monotonic() - started >= SLOW.container_stop


def test_a_pod_waits_for_its_new_claim_to_bind(v1):
    v1.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "slow-home"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    v1.create_namespaced_pod("default", pod("homeowner", "busybox:1", claim="slow-home"))
    messages = wait_for(
        lambda: [m for r, m in kubelet_events(v1, "homeowner") if r == "FailedScheduling"], what="refusal"
    )
    assert messages[0].startswith("0/") and "pod has unbound immediate PersistentVolumeClaims" in messages[0]
    wait_for(lambda: ready(v1, "homeowner"), timeout=20, what="pod Ready once the claim bound")
    assert v1.read_namespaced_persistent_volume_claim("slow-home", "default").status.phase == "Bound"


def test_a_future_resource_version_waits_before_the_504(v1):
    current = int(v1.list_namespaced_pod("default").metadata.resource_version)
    started = time.monotonic()
    with pytest.raises(ApiException) as info:
        v1.list_namespaced_pod(
            "default", resource_version=str(current + 50), resource_version_match="NotOlderThan"
        )
    assert info.value.status == 504
    assert time.monotonic() - started >= SLOW.too_large_rv_wait
