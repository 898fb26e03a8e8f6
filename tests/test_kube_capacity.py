"""The kubernetes backend's capacity snapshot of a 100-node fake cluster, against hand-computed totals.

The cluster mixes every GPU flavour a teaching cluster has: whole H200s, MIG-mixed H200s,
time-sliced shared GPUs and CPU-only nodes (one cordoned). Pods in two namespaces are bound by
hand or by the fake scheduler; one has Succeeded (it must free its 8 GPUs) and one cannot be
scheduled (it is pending demand, not usage). Every expected number below is worked out by hand.
"""

from __future__ import annotations

from fractions import Fraction

import kubernetes_asyncio
import pytest

from hub_ext.backends.kubernetes import KubernetesBackend
from hub_ext.core.resources import ResourceVector
from tests.kubefake import EXIT_AFTER_ANNOTATION, RUN_ANNOTATION, FakeCluster
from tests.kubefake.waiting import wait_for

pytestmark = pytest.mark.cluster

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def nodes() -> list[dict]:
    h200 = [{"name": f"h200-{i:02}",
             "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
             "labels": {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "8"},
             "taints": [GPU_TAINT]} for i in range(20)]
    mig = [{"name": f"mig-{i:02}",
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/mig-1g.18gb": "14",
                            "nvidia.com/mig-3g.71gb": "4"},
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/mig.strategy": "mixed"}}
           for i in range(10)]
    shared = [{"name": f"shared-{i:02}",
               "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu.shared": "16"},
               "labels": {"nvidia.com/gpu.product": "NVIDIA-H200-SHARED",
                          "nvidia.com/gpu.sharing-strategy": "time-slicing"}} for i in range(20)]
    cpu = [{"name": f"cpu-{i:02}", "allocatable": {"cpu": "32", "memory": "128Gi"},
            "unschedulable": i == 49} for i in range(50)]
    return h200 + mig + shared + cpu


def pod(name: str, requests: dict, node: str | None = None, tolerate: bool = False,
        annotations: dict | None = None) -> dict:
    # Extended resources (GPUs) cannot be overcommitted: their limit must equal the request.
    limits = {name: amount for name, amount in requests.items() if "/" in name}
    spec: dict = {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "python:3.11", "resources": {"requests": requests, "limits": limits}}]}
    if node:
        spec["nodeName"] = node
    if tolerate:
        spec["tolerations"] = [GPU_TOLERATION]
    return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster(nodes=nodes()) as fake:
        fake.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        fake.create("namespaces", {"metadata": {"name": "course-a"}}, None)
        for i in range(5):  # training pods of a course: 2 whole GPUs each on h200-00..04
            fake.create("pods", pod(f"train-{i}", {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"},
                                    node=f"h200-{i:02}", tolerate=True), "course-a")
        for name in ("mig-a", "mig-b", "mig-c"):
            fake.create("pods", pod(name, {"cpu": "1", "memory": "4Gi", "nvidia.com/mig-1g.18gb": "1"},
                                    node="mig-00"))
        fake.create("pods", pod("mig-big", {"cpu": "2", "memory": "16Gi", "nvidia.com/mig-3g.71gb": "1"},
                                node="mig-01"))
        for i in range(4):  # placed by the scheduler: only shared-* nodes offer gpu.shared
            fake.create("pods", pod(f"shared-{i}", {"cpu": "500m", "memory": "2Gi",
                                                   "nvidia.com/gpu.shared": "1"}))
        for i in range(6):
            fake.create("pods", pod(f"cpu-{i}", {"cpu": "2", "memory": "4Gi"}))
        # Finished: it held all 8 GPUs of h200-05 and must free them.
        fake.create("pods", pod("done", {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "8"},
                                node="h200-05", tolerate=True,
                                annotations={RUN_ANNOTATION: "standin", EXIT_AFTER_ANNOTATION: "0.1"}))
        # No node has 100 GPUs: pending demand, bound nowhere.
        fake.create("pods", pod("too-big", {"cpu": "1", "nvidia.com/gpu": "100"}, tolerate=True))

        def settled() -> bool:
            pods = fake.list("pods")
            phases = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in pods}
            bound = [p for p in pods if p["spec"].get("nodeName")]
            return phases.get("done") == "Succeeded" and len(bound) == len(pods) - 1
        wait_for(settled, timeout=30, what="pods bound and the finished pod Succeeded")
        yield fake


@pytest.fixture
async def backend(cluster):
    api_client = await kubernetes_asyncio.config.new_client_from_config(
        config_file=str(cluster.kubeconfig_path))
    async with api_client:
        yield KubernetesBackend(api=kubernetes_asyncio.client.CoreV1Api(api_client))


async def test_snapshot_totals_match_hand_computed_capacity(backend, cluster):
    snap = await backend.capacity_snapshot()

    assert len(snap.nodes) == 100
    # 20x64 + 10x64 + 20x32 + 50x32 CPUs; 20x512 + 10x512 + 20x256 + 50x128 GiB.
    assert snap.total_allocatable == ResourceVector({
        "cpu": "4160", "memory": "26880Gi", "ephemeral-storage": "10000Gi", "pods": "11000",
        "nvidia.com/gpu": "160", "nvidia.com/gpu.shared": "320",
        "nvidia.com/mig-1g.18gb": "140", "nvidia.com/mig-3g.71gb": "40",
    })
    # 5 training + 3 + 1 MIG + 4 shared + 6 CPU pods; the Succeeded and the unbound pod hold nothing.
    assert snap.total_used == ResourceVector({
        "cpu": "59", "memory": "380Gi", "pods": "19",
        "nvidia.com/gpu": "10", "nvidia.com/gpu.shared": "4",
        "nvidia.com/mig-1g.18gb": "3", "nvidia.com/mig-3g.71gb": "1",
    })
    assert snap.total_free == ResourceVector({
        "cpu": "4101", "memory": "26500Gi", "ephemeral-storage": "10000Gi", "pods": "10981",
        "nvidia.com/gpu": "150", "nvidia.com/gpu.shared": "316",
        "nvidia.com/mig-1g.18gb": "137", "nvidia.com/mig-3g.71gb": "39",
    })
    assert snap.total_overcommit.is_zero()
    assert snap.pending_unbound == 1

    # What the profile list would show as "N free now".
    assert snap.max_fit(ResourceVector({"nvidia.com/gpu": "8"})) == 15  # h200-05..19 (05 freed)
    assert snap.max_fit(ResourceVector({"nvidia.com/gpu": "2"})) == 5 * 3 + 15 * 4
    assert snap.max_fit(ResourceVector({"nvidia.com/mig-1g.18gb": "1"})) == 137
    assert snap.max_fit(ResourceVector({"nvidia.com/mig-3g.71gb": "1"})) == 39
    assert snap.max_fit(ResourceVector({"nvidia.com/gpu.shared": "1"})) == 316
    # The cordoned cpu-49 offers nothing new (its 32 CPUs are free but not schedulable).
    assert snap.free_for("cpu", {"kubernetes.io/hostname": "cpu-49"}) == 0
    assert snap.node("cpu-49").free["cpu"] == 32

    # Per node, where the pods were bound by hand.
    assert snap.node("h200-00").free["nvidia.com/gpu"] == 6
    assert snap.node("h200-05").free["nvidia.com/gpu"] == 8
    assert snap.node("mig-00").free["nvidia.com/mig-1g.18gb"] == 11
    assert snap.node("mig-01").used["memory"] == Fraction(16 * 2**30)
    assert snap.node("h200-03").gpu_product == "NVIDIA-H200"
    assert snap.node("mig-04").mig_strategy == "mixed"
    assert snap.node("shared-07").gpu_sharing_strategy == "time-slicing"

    # Finished pods were filtered out by the API server, not only by core.
    pod_lists = [path for method, path in cluster.requests
                 if method == "GET" and path.startswith("/api/v1/pods")]
    assert pod_lists and all("fieldSelector=status.phase" in p for p in pod_lists), pod_lists
