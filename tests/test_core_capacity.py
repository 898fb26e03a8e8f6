"""Capacity snapshots (hub_ext.core.capacity): what the cluster can give right now.

The profile list's "N free now", quota admission and gang admission all read these figures, so
they must agree with what the Kubernetes scheduler would compute from the same nodes and pods.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.core.capacity import (
    CapacitySnapshot,
    NodeCapacity,
    Taint,
    is_terminated,
    tolerates,
)
from hub_ext.core.resources import (
    CPU,
    MEMORY,
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    PODS,
    ZERO,
    MigProfile,
    ResourceVector,
)

pytestmark = pytest.mark.unit

GI = 2**30
MI = 2**20
MIG_1G = "nvidia.com/mig-1g.18gb"
MIG_3G = "nvidia.com/mig-3g.71gb"
MIG_2G = "nvidia.com/mig-2g.35gb"
MIG_7G = "nvidia.com/mig-7g.141gb"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def node(
    name, allocatable, labels=None, taints=None, unschedulable=False, ready="True"
):
    """A Node object as `list_node` returns it (JSON)."""
    spec = {"taints": taints} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready})
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": conditions,
        },
    }


def pod(
    name,
    node_name,
    requests=None,
    limits=None,
    phase="Running",
    init=None,
    overhead=None,
):
    """A Pod object as `list_pod_for_all_namespaces` returns it (JSON)."""
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    spec = {"containers": [{"name": "main", "image": "x", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    if init:
        spec["initContainers"] = [
            {"name": "init", "image": "x", "resources": {"requests": init}}
        ]
    if overhead:
        spec["overhead"] = overhead
    return {
        "metadata": {"name": name, "namespace": "classhub"},
        "spec": spec,
        "status": {"phase": phase},
    }


# --------------------------------------------------------------------------- nodes


def test_node_from_k8s_reads_labels_taints_and_conditions():
    n = NodeCapacity.from_k8s(
        node(
            "gpu-1",
            {"cpu": "224", "memory": "2015Gi", NVIDIA_GPU: "8", "pods": "110"},
            labels={"nvidia.com/gpu.product": "NVIDIA-H200"},
            taints=[GPU_TAINT],
        )
    )
    assert n.name == "gpu-1"
    assert n.allocatable == ResourceVector(
        {CPU: 224, MEMORY: "2015Gi", NVIDIA_GPU: 8, PODS: 110}
    )
    assert n.used == ZERO and n.free == n.allocatable and n.pod_count == 0
    assert n.gpu_product == "NVIDIA-H200"
    assert n.mig_strategy is None and n.single_mig_profile is None
    assert n.gpu_sharing_strategy is None
    assert n.gpu_resources == (NVIDIA_GPU,)
    assert n.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert n.schedulable and n.ready and not n.unschedulable
    with pytest.raises(TypeError):
        n.labels["x"] = (
            "y"  # the snapshot is shared between readers: labels are read-only
        )


@pytest.mark.parametrize(
    ("unschedulable", "ready", "schedulable"),
    [
        (False, "True", True),
        (True, "True", False),
        (False, "False", False),
        (False, "Unknown", False),
        (False, None, False),
    ],
)
def test_cordoned_or_not_ready_nodes_are_not_schedulable(
    unschedulable, ready, schedulable
):
    n = NodeCapacity.from_k8s(
        node("n", {"cpu": "4"}, unschedulable=unschedulable, ready=ready)
    )
    assert n.schedulable is schedulable


@pytest.mark.parametrize(
    ("labels", "allocatable", "strategy", "profile"),
    [
        ({}, {"cpu": "4"}, None, None),
        ({"nvidia.com/gpu.product": "NVIDIA-H200"}, {NVIDIA_GPU: "8"}, None, None),
        ({"nvidia.com/gpu.product": "NVIDIA-H200"}, {MIG_1G: "7"}, "mixed", None),
        (
            {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"},
            {NVIDIA_GPU: "56"},
            "single",
            MigProfile(1, 10),
        ),
        (
            {
                "nvidia.com/gpu.product": "NVIDIA-H200-MIG-3g.71gb",
                "nvidia.com/mig.strategy": "single",
            },
            {NVIDIA_GPU: "16"},
            "single",
            MigProfile(3, 71),
        ),
        (
            {
                "nvidia.com/gpu.product": "NVIDIA-H200",
                "nvidia.com/mig.strategy": "mixed",
            },
            {"cpu": "1"},
            "mixed",
            None,
        ),
        (
            {
                "nvidia.com/gpu.product": "NVIDIA-H200-MIG-junk",
                "nvidia.com/mig.strategy": "none",
            },
            {MIG_1G: "7"},
            None,
            None,
        ),
        (
            {"nvidia.com/gpu.product": "NVIDIA-H200-MIG-junk"},
            {NVIDIA_GPU: "1"},
            "single",
            None,
        ),
    ],
)
def test_mig_strategy(labels, allocatable, strategy, profile):
    n = NodeCapacity.from_k8s(node("n", allocatable, labels=labels))
    assert n.mig_strategy == strategy
    assert n.single_mig_profile == profile


def test_sharing_strategy():
    shared = NodeCapacity.from_k8s(
        node(
            "s",
            {NVIDIA_GPU_SHARED: "16"},
            labels={
                "nvidia.com/gpu.product": "NVIDIA-L40S-SHARED",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
            },
        )
    )
    assert shared.gpu_sharing_strategy == "time-slicing"
    assert shared.gpu_resources == (NVIDIA_GPU_SHARED,)
    plain = NodeCapacity.from_k8s(
        node("p", {NVIDIA_GPU: "1"}, labels={"nvidia.com/gpu.sharing-strategy": "none"})
    )
    assert plain.gpu_sharing_strategy is None


def test_bad_node_data_is_reported_with_the_node_name():
    with pytest.raises(
        ValueError, match=r"^node bad: status.allocatable: memory: '1GB'"
    ):
        NodeCapacity.from_k8s(node("bad", {"memory": "1GB"}))
    with pytest.raises(ValueError, match=r"metadata\.name"):
        NodeCapacity.from_k8s({"status": {}})


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            Taint("nvidia.com/gpu", "present"),
            True,
        ),
        (
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            Taint("nvidia.com/gpu", "", "NoExecute"),
            False,
        ),
        (
            {"key": "nvidia.com/gpu", "value": "present"},
            Taint("nvidia.com/gpu", "present"),
            True,
        ),
        (
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "x"},
            Taint("nvidia.com/gpu", "present"),
            False,
        ),
        ({"key": "other"}, Taint("nvidia.com/gpu", ""), False),
        ({"operator": "Exists"}, Taint("anything", "v", "NoExecute"), True),
        (
            {"key": "k", "operator": "Exists", "effect": ""},
            Taint("k", "v", "NoExecute"),
            True,
        ),
    ],
)
def test_toleration_matching_follows_kubernetes(toleration, taint, tolerated):
    assert tolerates([toleration], taint) is tolerated
    assert tolerates([], taint) is False


def test_prefer_no_schedule_taints_do_not_keep_pods_away():
    n = NodeCapacity.from_k8s(
        node(
            "n",
            {"cpu": "4"},
            taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}],
        )
    )
    assert n.admits(tolerations=[])
    tainted = NodeCapacity.from_k8s(node("t", {"cpu": "4"}, taints=[GPU_TAINT]))
    assert not tainted.admits(tolerations=[])
    assert tainted.admits(tolerations=TOLERATE_GPU)
    assert tainted.admits(
        tolerations=None
    )  # None: the caller does not ask about taints


# --------------------------------------------------------------------------- snapshots


def small_cluster():
    nodes = [
        node(
            "a",
            {"cpu": "8", "memory": "32Gi", NVIDIA_GPU: "2", "pods": "110"},
            labels={"pool": "gpu"},
        ),
        node("b", {"cpu": "4", "memory": "16Gi", "pods": "3"}, labels={"pool": "cpu"}),
    ]
    pods = [
        pod("p1", "a", {"cpu": "2", "memory": "8Gi", NVIDIA_GPU: "1"}),
        pod(
            "p2", "a", {"cpu": "500m"}, phase="Pending"
        ),  # bound but not started: still holds
        pod("done", "a", {"cpu": "8", NVIDIA_GPU: "2"}, phase="Succeeded"),
        pod("crashed", "a", {"cpu": "8"}, phase="Failed"),
        pod("waiting", None, {"cpu": "64"}, phase="Pending"),
        pod("elsewhere", "gone-node", {"cpu": "64"}),
        pod("q1", "b", {"cpu": "1", "memory": "1Gi"}),
    ]
    return nodes, pods


def test_used_free_and_ignored_pods():
    snap = CapacitySnapshot.from_k8s(*small_cluster())
    a, b = snap.node("a"), snap.node("b")
    assert a.used == ResourceVector({CPU: "2.5", MEMORY: "8Gi", NVIDIA_GPU: 1, PODS: 2})
    assert a.free == ResourceVector(
        {CPU: "5.5", MEMORY: "24Gi", NVIDIA_GPU: 1, PODS: 108}
    )
    assert a.pod_count == 2
    assert b.used == ResourceVector({CPU: 1, MEMORY: "1Gi", PODS: 1})
    assert snap.pending_unbound == 1
    assert [n.name for n in snap.nodes] == ["a", "b"]
    with pytest.raises(KeyError):
        snap.node("gone-node")


def test_snapshot_accepts_list_responses():
    nodes, pods = small_cluster()
    from_lists = CapacitySnapshot.from_k8s(nodes, pods)
    from_responses = CapacitySnapshot.from_k8s(
        {"kind": "NodeList", "items": nodes}, {"kind": "PodList", "items": pods}
    )
    assert from_lists == from_responses
    assert CapacitySnapshot.from_k8s({"items": None}, []).nodes == ()


def test_free_for_and_max_fit_respect_selectors():
    snap = CapacitySnapshot.from_k8s(*small_cluster())
    assert snap.free_for(NVIDIA_GPU) == 1
    assert snap.free_for(CPU) == Fraction(17, 2)  # 5.5 + 3
    assert snap.free_for(CPU, {"pool": "cpu"}) == 3
    assert snap.free_for(CPU, {"pool": "nowhere"}) == 0
    assert (
        snap.max_fit(ResourceVector(cpu="500m")) == 11 + 2
    )  # b: 3 pod slots - 1 used = 2
    assert snap.max_fit(ResourceVector(cpu="500m"), {"pool": "gpu"}) == 11
    assert snap.max_fit(ResourceVector({NVIDIA_GPU: 1, CPU: 1})) == 1
    assert snap.max_fit(ResourceVector({NVIDIA_GPU: 2})) == 0
    # asking for a pod slot explicitly is honoured, not doubled
    assert snap.max_fit(ResourceVector({CPU: "500m", PODS: 1}), {"pool": "cpu"}) == 2


@pytest.mark.parametrize(
    "request_", [ZERO, ResourceVector(pods=1), ResourceVector(cpu=-1)]
)
def test_max_fit_refuses_meaningless_requests(request_):
    snap = CapacitySnapshot.from_k8s(*small_cluster())
    with pytest.raises(ValueError, match="a request to fit"):
        snap.max_fit(request_)
    empty = CapacitySnapshot.from_k8s([], [])
    with pytest.raises(ValueError):
        empty.max_fit(request_)


def test_overcommit_is_reported_and_free_never_negative():
    nodes = [
        node("n", {"cpu": "4", NVIDIA_GPU: "1"})
    ]  # the node lost a GPU after binding
    pods = [
        pod("x", "n", {"cpu": "2", NVIDIA_GPU: "1"}),
        pod("y", "n", {"cpu": "1", NVIDIA_GPU: "1"}),
    ]
    snap = CapacitySnapshot.from_k8s(nodes, pods)
    n = snap.node("n")
    assert n.used == ResourceVector({CPU: 3, NVIDIA_GPU: 2, PODS: 2})
    assert n.free == ResourceVector({CPU: 1})
    assert n.overcommit == ResourceVector(
        {NVIDIA_GPU: 1, PODS: 2}
    )  # no pod slots reported
    assert n.is_overcommitted and snap.overcommitted_nodes == ("n",)
    assert snap.total_overcommit == ResourceVector({NVIDIA_GPU: 1, PODS: 2})
    assert snap.max_fit(ResourceVector({NVIDIA_GPU: 1})) == 0


def test_bad_pod_data_names_the_pod():
    pods = [pod("typo", "n", {"memory": "4GB"})]
    with pytest.raises(
        ValueError, match=r"^pod classhub/typo: container 'main': memory: '4GB'"
    ):
        CapacitySnapshot.from_k8s([node("n", {"cpu": "1"})], pods)


def test_is_terminated():
    assert is_terminated({"status": {"phase": "Succeeded"}})
    assert is_terminated({"status": {"phase": "Failed"}})
    assert not is_terminated({"status": {"phase": "Running"}})
    assert not is_terminated({"status": {"phase": "Pending"}})
    assert not is_terminated({})


# --------------------------------------------------------------------------- a 100-node cluster


def hundred_node_cluster():
    """20 whole-GPU H200, 25 MIG-mixed H200, 5 MIG-single A100, 20 time-sliced L40S, 30 CPU nodes."""
    nodes, pods = [], []
    h200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    for i in range(20):
        name = f"h200-{i:02d}"
        nodes.append(
            node(
                name,
                {"cpu": "224", "memory": "2015Gi", NVIDIA_GPU: "8", "pods": "110"},
                labels=h200,
                taints=[GPU_TAINT],
            )
        )
        if i < 10:
            pods += [
                pod(
                    f"{name}-train-{k}",
                    name,
                    {"cpu": "16", "memory": "128Gi", NVIDIA_GPU: "2"},
                )
                for k in range(4)
            ]
        else:  # GPU given as a limit only: the request defaults to it
            pods.append(
                pod(
                    f"{name}-nb",
                    name,
                    {"cpu": "500m", "memory": "16Gi"},
                    limits={NVIDIA_GPU: "1"},
                )
            )
        if i % 2 == 0:
            pods.append(
                pod(
                    f"{name}-old",
                    name,
                    {"cpu": "200", NVIDIA_GPU: "8"},
                    phase="Succeeded",
                )
            )
    for i in range(25):
        name = f"h200mig-{i:02d}"
        mixed = {**h200, "nvidia.com/mig.strategy": "mixed"}
        if i < 15:  # 4 GPUs as 7 x 1g.18gb, 4 GPUs as 2 x 3g.71gb
            nodes.append(
                node(
                    name,
                    {
                        "cpu": "224",
                        "memory": "2015Gi",
                        MIG_1G: "28",
                        MIG_3G: "8",
                        "pods": "110",
                    },
                    labels=mixed,
                    taints=[GPU_TAINT],
                )
            )
            pods += [
                pod(f"{name}-s{k}", name, {"cpu": "2", "memory": "16Gi", MIG_1G: "1"})
                for k in range(7)
            ]
            pods.append(
                pod(f"{name}-m", name, {"cpu": "8", "memory": "64Gi", MIG_3G: "1"})
            )
        else:  # 4 GPUs whole as 7g.141gb, 4 GPUs as 3 x 2g.35gb
            nodes.append(
                node(
                    name,
                    {
                        "cpu": "224",
                        "memory": "2015Gi",
                        MIG_7G: "4",
                        MIG_2G: "12",
                        "pods": "110",
                    },
                    labels=mixed,
                    taints=[GPU_TAINT],
                )
            )
            pods += [
                pod(f"{name}-l{k}", name, {"cpu": "16", "memory": "256Gi", MIG_7G: "1"})
                for k in range(2)
            ]
    for i in range(5):
        name = f"a100s-{i}"
        nodes.append(
            node(
                name,
                {"cpu": "128", "memory": "1000Gi", NVIDIA_GPU: "56", "pods": "110"},
                labels={
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
                    "nvidia.com/mig.strategy": "single",
                },
            )
        )
        if i < 4:
            pods += [
                pod(
                    f"{name}-p{k}", name, {"cpu": "1", "memory": "8Gi", NVIDIA_GPU: "1"}
                )
                for k in range(10)
            ]
        else:  # bound by hand past what the node has: over-committed by 4 GPUs
            pods.append(
                pod(
                    f"{name}-hand",
                    name,
                    {"cpu": "1", "memory": "8Gi", NVIDIA_GPU: "60"},
                )
            )
    for i in range(20):
        name = f"l40s-{i:02d}"
        nodes.append(
            node(
                name,
                {
                    "cpu": "64",
                    "memory": "512Gi",
                    NVIDIA_GPU_SHARED: "16",
                    "pods": "110",
                },
                labels={
                    "nvidia.com/gpu.product": "NVIDIA-L40S-SHARED",
                    "nvidia.com/gpu.sharing-strategy": "time-slicing",
                },
            )
        )
        if i < 10:  # the init container (8 CPU) outweighs the notebook (4 CPU)
            pods += [
                pod(
                    f"{name}-nb{k}",
                    name,
                    {"cpu": "4", "memory": "32Gi", NVIDIA_GPU_SHARED: "1"},
                    init={"cpu": "8", "memory": "1Gi"},
                )
                for k in range(6)
            ]
        else:
            pods += [
                pod(
                    f"{name}-nb{k}",
                    name,
                    {"cpu": "2", "memory": "16Gi", NVIDIA_GPU_SHARED: "1"},
                )
                for k in range(16)
            ]
    for i in range(30):
        name = f"cpu-{i:02d}"
        nodes.append(
            node(
                name,
                {"cpu": "31750m", "memory": "130023424Ki", "pods": "110"},
                labels={"classhub/pool": "cpu"},
                unschedulable=(i == 28),
                ready="False" if i == 29 else "True",
            )
        )
        if i < 28:
            pods += [
                pod(
                    f"{name}-nb{k}",
                    name,
                    {"cpu": "1500m", "memory": "3Gi"},
                    overhead={"cpu": "250m", "memory": "160Mi"},
                )
                for k in range(3)
            ]
        elif i == 28:
            pods.append(pod(f"{name}-nb", name, {"cpu": "1", "memory": "1Gi"}))
    pods += [pod(f"queued-{k}", None, {"cpu": "1"}, phase="Pending") for k in range(5)]
    pods += [
        pod(f"failed-{k}", "cpu-00", {"cpu": "30"}, phase="Failed") for k in range(3)
    ]
    pods += [pod(f"ghost-{k}", "ghost-node", {"cpu": "30"}) for k in range(2)]
    return nodes, pods


@pytest.fixture(scope="module")
def big():
    return CapacitySnapshot.from_k8s(*hundred_node_cluster())


def test_hundred_nodes_totals_match_hand_computation(big):
    assert len(big.nodes) == 100
    assert sum(n.schedulable for n in big.nodes) == 98
    assert big.pending_unbound == 5
    # allocatable: 20*224 + 25*224 + 5*128 + 20*64 + 30*31.75 = 12952.5 CPU;
    # memory 20*2015 + 25*2015 + 5*1000 + 20*512 + 30*124 = 109635 GiB
    assert big.total_allocatable == ResourceVector(
        {
            CPU: "12952.5",
            MEMORY: "109635Gi",
            NVIDIA_GPU: 440,
            NVIDIA_GPU_SHARED: 320,
            MIG_1G: 420,
            MIG_3G: 120,
            MIG_7G: 40,
            MIG_2G: 120,
            PODS: 11000,
        }
    )
    # used: CPU 645 (H200) + 650 (mixed) + 41 (A100) + 800 (L40S) + 148 (CPU nodes) = 2284;
    # memory 5280 + 7760 + 328 + 4480 + 266.125 GiB = 18114 GiB + 128 MiB;
    # pods 50 + 140 + 41 + 220 + 85 = 536
    assert big.total_used == ResourceVector(
        {
            CPU: 2284,
            MEMORY: str(18114 * GI + 128 * MI),
            NVIDIA_GPU: 190,
            NVIDIA_GPU_SHARED: 220,
            MIG_1G: 105,
            MIG_3G: 15,
            MIG_7G: 20,
            PODS: 536,
        }
    )
    # free: 440 - 190 GPUs plus the 4 that a100s-4 over-committed (its free is 0, not -4)
    assert big.total_free == ResourceVector(
        {
            CPU: "10668.5",
            MEMORY: "91520.875Gi",
            NVIDIA_GPU: 254,
            NVIDIA_GPU_SHARED: 100,
            MIG_1G: 315,
            MIG_3G: 105,
            MIG_7G: 20,
            MIG_2G: 120,
            PODS: 10464,
        }
    )
    assert big.total_overcommit == ResourceVector({NVIDIA_GPU: 4})
    assert big.overcommitted_nodes == ("a100s-4",)


def test_hundred_nodes_per_node_figures(big):
    assert big.node("h200-03").used == ResourceVector(
        {CPU: 64, MEMORY: "512Gi", NVIDIA_GPU: 8, PODS: 4}
    )
    assert big.node("h200-12").used == ResourceVector(
        {CPU: "500m", MEMORY: "16Gi", NVIDIA_GPU: 1, PODS: 1}
    )
    assert big.node("h200mig-03").free == ResourceVector(
        {CPU: 202, MEMORY: "1839Gi", MIG_1G: 21, MIG_3G: 7, PODS: 102}
    )
    assert big.node("l40s-04").used == ResourceVector(
        {CPU: 48, MEMORY: "192Gi", NVIDIA_GPU_SHARED: 6, PODS: 6}
    )
    assert big.node("cpu-05").used == ResourceVector(
        {CPU: "5250m", MEMORY: "9696Mi", PODS: 3}
    )
    assert big.node("cpu-00").pod_count == 3  # its three Failed pods hold nothing
    a100 = big.node("a100s-4")
    assert a100.used[NVIDIA_GPU] == 60 and a100.free[NVIDIA_GPU] == 0
    assert a100.overcommit == ResourceVector({NVIDIA_GPU: 4})
    assert big.node("h200-00").mig_strategy is None
    assert big.node("h200mig-00").mig_strategy == "mixed"
    assert big.node("a100s-0").single_mig_profile == MigProfile(1, 10)
    assert big.node("l40s-00").gpu_sharing_strategy == "time-slicing"
    assert (
        big.node("cpu-00").gpu_product is None
        and big.node("cpu-00").gpu_resources == ()
    )


def test_hundred_nodes_free_for(big):
    h200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert (
        big.free_for(NVIDIA_GPU, h200) == 70
    )  # 10 nodes x 7; the mixed nodes have no whole GPUs
    assert big.free_for(NVIDIA_GPU) == 254
    assert (
        big.free_for(NVIDIA_GPU, tolerations=[]) == 184
    )  # tainted H200 nodes left out
    assert big.free_for(NVIDIA_GPU, tolerations=TOLERATE_GPU) == 254
    assert big.free_for(MIG_1G) == 315
    assert (
        big.free_for(
            NVIDIA_GPU_SHARED, {"nvidia.com/gpu.sharing-strategy": "time-slicing"}
        )
        == 100
    )
    # the cordoned (30.75 free) and NotReady (31.75 free) nodes offer nothing
    assert big.free_for(CPU) == Fraction("10606")
    assert big.free_for(CPU, {"classhub/pool": "cpu"}) == 742  # 28 x 26.5
    assert big.free_for("example.com/fpga") == 0


@pytest.mark.parametrize(
    ("request_", "selector", "expected"),
    [
        # 2 GPUs: only h200-10..19 have 7 free -> 3 each
        (
            {NVIDIA_GPU: 2, CPU: 8, MEMORY: "64Gi"},
            {"nvidia.com/gpu.product": "NVIDIA-H200"},
            30,
        ),
        # 1g.18gb: 21 free on each of 15 nodes, CPU and memory to spare
        ({MIG_1G: 1, CPU: 2, MEMORY: "16Gi"}, None, 315),
        ({MIG_3G: 1, CPU: 8, MEMORY: "64Gi"}, None, 105),
        # 7g.141gb: 2 free on each of 10 nodes (memory would allow 5)
        ({MIG_7G: 1, CPU: 16, MEMORY: "256Gi"}, None, 20),
        # shared: 10 free replicas per node, but 16 CPU free -> 4 each on l40s-00..09
        ({NVIDIA_GPU_SHARED: 1, CPU: 4, MEMORY: "32Gi"}, None, 40),
        # single-strategy A100 slices: 46 free on a100s-0..3, none on the over-committed one
        (
            {NVIDIA_GPU: 1, CPU: 1, MEMORY: "8Gi"},
            {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"},
            184,
        ),
        # CPU profile: 26.5 CPU free -> 13 per node on 28 schedulable CPU nodes
        ({CPU: 2, MEMORY: "4Gi"}, {"classhub/pool": "cpu"}, 364),
        (
            {NVIDIA_GPU: 9},
            {"nvidia.com/gpu.product": "NVIDIA-H200"},
            0,
        ),  # at most 7 free per node
        ({NVIDIA_GPU: 9}, None, 20),  # but 46 A100 slices free on each of a100s-0..3
    ],
)
def test_hundred_nodes_max_fit(big, request_, selector, expected):
    assert big.max_fit(ResourceVector(request_), selector) == expected


def test_hundred_nodes_max_fit_with_tolerations(big):
    request = ResourceVector({NVIDIA_GPU: 1, CPU: 1, MEMORY: "8Gi"})
    assert big.max_fit(request, tolerations=[]) == 184  # only the untainted A100 slices
    assert big.max_fit(request, tolerations=TOLERATE_GPU) == 184 + 70


# --------------------------------------------------------------------------- properties

quantities = st.integers(0, 64).map(str) | st.integers(0, 64000).map(lambda m: f"{m}m")
node_strategy = st.fixed_dictionaries(
    {
        "cpu": quantities,
        "memory": st.integers(0, 64).map(lambda g: f"{g}Gi"),
        NVIDIA_GPU: st.integers(0, 8).map(str),
    }
)
pod_strategy = st.tuples(
    st.integers(0, 3) | st.none(),  # node index, or unbound
    st.fixed_dictionaries(
        {},
        optional={
            "cpu": quantities,
            "memory": st.integers(0, 16).map(lambda g: f"{g}Gi"),
            NVIDIA_GPU: st.integers(0, 4).map(str),
        },
    ),
    st.sampled_from(["Pending", "Running", "Running", "Succeeded", "Failed"]),
)


def build(node_specs, pod_specs):
    nodes = [node(f"n{i}", spec) for i, spec in enumerate(node_specs)]
    pods = [
        pod(f"p{k}", None if idx is None else f"n{idx}", requests, phase=phase)
        for k, (idx, requests, phase) in enumerate(pod_specs)
    ]
    return nodes, pods


PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)


@PROPERTY_SETTINGS
@given(
    st.lists(node_strategy, min_size=1, max_size=4), st.lists(pod_strategy, max_size=12)
)
def test_free_plus_used_is_allocatable(node_specs, pod_specs):
    snap = CapacitySnapshot.from_k8s(*build(node_specs, pod_specs))
    for n in snap.nodes:
        assert n.free.is_nonnegative() and n.overcommit.is_nonnegative()
        assert n.free + n.used - n.overcommit == n.allocatable
        if not n.is_overcommitted:
            assert n.free + n.used == n.allocatable
            assert n.used.fits_in(n.allocatable)
    assert (
        snap.total_free + snap.total_used - snap.total_overcommit
        == snap.total_allocatable
    )


@PROPERTY_SETTINGS
@given(
    st.lists(node_strategy, min_size=1, max_size=4), st.lists(pod_strategy, max_size=12)
)
def test_terminated_and_unbound_pods_change_nothing(node_specs, pod_specs):
    nodes, pods = build(node_specs, pod_specs)
    snap = CapacitySnapshot.from_k8s(nodes, pods)
    holding = [p for p in pods if not is_terminated(p) and p["spec"].get("nodeName")]
    assert CapacitySnapshot.from_k8s(nodes, holding).nodes == snap.nodes
    assert CapacitySnapshot.from_k8s(nodes, list(reversed(pods))) == snap
    expected_used = {n.name: ZERO for n in snap.nodes}
    for p in holding:
        if p["spec"]["nodeName"] not in expected_used:
            continue  # bound to a node the snapshot does not have
        expected_used[p["spec"]["nodeName"]] += ResourceVector.from_k8s(
            p["spec"]["containers"][0]["resources"].get("requests")
        ) + ResourceVector(pods=1)
    assert {n.name: n.used for n in snap.nodes} == expected_used


@PROPERTY_SETTINGS
@given(
    st.lists(node_strategy, min_size=1, max_size=4),
    st.lists(pod_strategy, max_size=8),
    st.integers(0, 3),
    st.integers(1, 4),
    st.integers(1, 8),
)
def test_max_fit_matches_placement_and_shrinks_when_pods_bind(
    node_specs, pod_specs, idx, gpus, cpus
):
    nodes, pods = build(node_specs, pod_specs)
    snap = CapacitySnapshot.from_k8s(nodes, pods)
    request = ResourceVector({NVIDIA_GPU: gpus, CPU: cpus})
    fit = snap.max_fit(request)
    # placing that many copies greedily node by node succeeds, and one more does not
    placed = 0
    for n in snap.nodes:
        free = n.free
        while request.fits_in(free):
            free -= request
            placed += 1
    assert placed == fit
    if idx < len(nodes):
        # binding one more copy takes exactly one slot, if it fitted where it was bound
        bound = CapacitySnapshot.from_k8s(
            nodes, [*pods, pod("new", f"n{idx}", request.to_k8s())]
        )
        fitted_there = request.fits_in(snap.node(f"n{idx}").free)
        assert bound.max_fit(request) == fit - (1 if fitted_there else 0)


def test_max_fit_when_empty_counts_allocatable_not_free():
    """A busy node still has room when empty; a request larger than any node never does."""
    nodes = [
        node("gpu-a", {"cpu": "32", "memory": "256Gi", "pods": "110", NVIDIA_GPU: "1"},
             labels={"nvidia.com/gpu.product": "NVIDIA-H200"}),
        node("gpu-b", {"cpu": "32", "memory": "256Gi", "pods": "110", NVIDIA_GPU: "1"},
             labels={"nvidia.com/gpu.product": "NVIDIA-H200"}),
    ]
    busy = [pod("p1", "gpu-a", {"cpu": "1", NVIDIA_GPU: "1"}),
            pod("p2", "gpu-b", {"cpu": "1", NVIDIA_GPU: "1"})]
    snap = CapacitySnapshot.from_k8s(nodes, busy)
    one = ResourceVector({CPU: 1, NVIDIA_GPU: 1})
    two = ResourceVector({CPU: 1, NVIDIA_GPU: 2})
    assert snap.max_fit(one) == 0 and snap.max_fit(one, when_empty=True) == 2
    assert snap.max_fit(two, when_empty=True) == 0  # 1 + 1 GPUs is not 2 on one node
    assert snap.most_allocatable(NVIDIA_GPU) == 1
    assert snap.max_fit(one, {"nvidia.com/gpu.product": "NVIDIA-A100"}, when_empty=True) == 0
    assert snap.most_allocatable(NVIDIA_GPU, {"nvidia.com/gpu.product": "NVIDIA-A100"}) == 0
    with pytest.raises(ValueError):
        snap.max_fit(ZERO, when_empty=True)


def test_max_fit_when_empty_skips_cordoned_nodes():
    snap = CapacitySnapshot.from_k8s(
        [node("n", {"cpu": "8", NVIDIA_GPU: "4"}, unschedulable=True)], [])
    assert snap.max_fit(ResourceVector({NVIDIA_GPU: 1}), when_empty=True) == 0
