"""The fake scheduler against documented kube-scheduler behaviour: fit on allocatable minus the
requests of non-terminated pods (extended resources included), taints/tolerations, node
selectors and affinity, FailedScheduling events with the scheduler's message, retry on release."""

from __future__ import annotations

import pytest

from tests.kubefake import FakeCluster
from tests.kubefake.waiting import wait_for

pytestmark = pytest.mark.cluster

GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture
def cluster(tmp_path):
    # function scope: every test starts from the three empty sample nodes
    with FakeCluster() as c:
        c.write_kubeconfig(tmp_path / "config")
        yield c


def pod(name: str, requests=None, limits=None, tolerations=None, **spec) -> dict:
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "busybox:1", "resources": resources}],
            "tolerations": tolerations or [],
            **spec,
        },
    }


def node_of(v1, name: str) -> str | None:
    return v1.read_namespaced_pod(name, "default").spec.node_name


def failed_scheduling(v1, name: str) -> str | None:
    events = v1.list_namespaced_event(
        "default",
        field_selector=f"involvedObject.name={name},involvedObject.kind=Pod,reason=FailedScheduling",
    )
    for event in events.items:
        assert event.type == "Warning" and event.source.component == "default-scheduler"
        return event.message
    return None


def unschedulable(v1, name: str) -> str:
    message = wait_for(lambda: failed_scheduling(v1, name), what=f"FailedScheduling for {name}")
    p = v1.read_namespaced_pod(name, "default")
    assert p.spec.node_name is None and p.status.phase == "Pending"
    cond = next(c for c in p.status.conditions if c.type == "PodScheduled")
    assert (cond.status, cond.reason, cond.message) == ("False", "Unschedulable", message)
    return message


def test_cpu_pod_lands_on_the_untainted_node(v1):
    v1.create_namespaced_pod("default", pod("web", {"cpu": "500m", "memory": "1Gi"}))
    assert wait_for(lambda: node_of(v1, "web")) == "cpu-0"
    p = v1.read_namespaced_pod("web", "default")
    assert any(c.type == "PodScheduled" and c.status == "True" for c in p.status.conditions)
    events = v1.list_namespaced_event(
        "default", field_selector="involvedObject.name=web,reason=Scheduled"
    ).items
    assert events and events[0].message == "Successfully assigned default/web to cpu-0"


def test_whole_gpus_are_counted_and_the_third_pod_waits(v1):
    for i in range(2):
        v1.create_namespaced_pod(
            "default", pod(f"g{i}", limits={"nvidia.com/gpu": "1"}, tolerations=GPU_TOLERATION)
        )
    assert {wait_for(lambda i=i: node_of(v1, f"g{i}")) for i in range(2)} == {"gpu-h200-0"}
    v1.create_namespaced_pod("default", pod("g2", limits={"nvidia.com/gpu": "1"}, tolerations=GPU_TOLERATION))
    message = unschedulable(v1, "g2")
    assert message.startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert "preemption: 0/3 nodes are available" in message
    # capacity frees up -> the pending pod is retried and bound
    v1.delete_namespaced_pod("g0", "default", grace_period_seconds=0)
    assert wait_for(lambda: node_of(v1, "g2")) == "gpu-h200-0"


def test_reasons_are_counted_per_node_like_the_real_scheduler(v1):
    selector = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    v1.create_namespaced_pod(
        "default",
        pod("big", limits={"nvidia.com/gpu": "3"}, tolerations=GPU_TOLERATION, nodeSelector=selector),
    )
    message = unschedulable(v1, "big")
    assert message.startswith(
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 Insufficient nvidia.com/gpu."
    )
    assert message.endswith(
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )


def test_untolerated_taints(v1):
    v1.create_namespaced_pod("default", pod("notol", limits={"nvidia.com/gpu": "1"}))
    assert unschedulable(v1, "notol").startswith(
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "2 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_mig_slices_are_extended_resources(v1):
    for i in range(7):
        v1.create_namespaced_pod(
            "default", pod(f"m{i}", limits={"nvidia.com/mig-1g.18gb": "1"}, tolerations=GPU_TOLERATION)
        )
    for i in range(7):
        assert wait_for(lambda i=i: node_of(v1, f"m{i}")) == "gpu-h200-mig-0"
    v1.create_namespaced_pod(
        "default", pod("m7", limits={"nvidia.com/mig-1g.18gb": "1"}, tolerations=GPU_TOLERATION)
    )
    assert "3 Insufficient nvidia.com/mig-1g.18gb." in unschedulable(v1, "m7")


def test_cpu_and_memory_quantities(v1):
    v1.create_namespaced_pod("default", pod("c1", {"cpu": "15500m", "memory": "60Gi"}))
    assert wait_for(lambda: node_of(v1, "c1")) == "cpu-0"
    v1.create_namespaced_pod("default", pod("c2", {"cpu": "1", "memory": "5G"}))
    message = unschedulable(v1, "c2")
    # 15.5 + 1 > 16 CPUs and 60Gi + 5G > 64Gi: both reasons for cpu-0
    assert message.startswith(
        "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
        "2 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_terminated_pods_do_not_hold_resources(cluster, v1):
    v1.create_namespaced_pod("default", pod("done", {"cpu": "16"}, restartPolicy="Never"))
    assert wait_for(lambda: node_of(v1, "done")) == "cpu-0"
    cluster.mutate("pods", "done", lambda p: p["status"].update(phase="Succeeded"))
    v1.create_namespaced_pod("default", pod("next", {"cpu": "16"}))
    assert wait_for(lambda: node_of(v1, "next")) == "cpu-0"


def test_required_node_affinity(v1):
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/mig.strategy", "operator": "Exists"},
                            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["cpu-0"]},
                        ]
                    }
                ]
            }
        }
    }
    v1.create_namespaced_pod(
        "default", pod("aff", {"cpu": "1"}, tolerations=GPU_TOLERATION, affinity=affinity)
    )
    assert wait_for(lambda: node_of(v1, "aff")) == "gpu-h200-mig-0"
    none = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "no-such-label", "operator": "In", "values": ["x"]}]}
                ]
            }
        }
    }
    v1.create_namespaced_pod("default", pod("noaff", {"cpu": "1"}, tolerations=GPU_TOLERATION, affinity=none))
    assert unschedulable(v1, "noaff").startswith(
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )


def test_other_schedulers_pods_bind_through_the_binding_subresource(cluster, v1):
    v1.create_namespaced_pod("default", pod("custom", schedulerName="my-scheduler"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "custom"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "cpu-0"},
    }
    assert node_of(v1, "custom") is None
    response = v1.api_client.rest_client.request(
        "POST",
        f"{cluster.url}/api/v1/namespaces/default/pods/custom/binding",
        headers={"Content-Type": "application/json"},
        body=binding,
    )
    assert response.status == 201
    assert node_of(v1, "custom") == "cpu-0"
    again = v1.api_client.rest_client.request(
        "POST",
        f"{cluster.url}/api/v1/namespaces/default/pods/custom/binding",
        headers={"Content-Type": "application/json"},
        body=binding,
    )
    assert again.status == 409


def test_nodes_can_be_added_at_runtime(cluster, v1):
    v1.create_namespaced_pod(
        "default", pod("late", limits={"nvidia.com/gpu.shared": "1"}, tolerations=GPU_TOLERATION)
    )
    unschedulable(v1, "late")
    cluster.add_node(
        {
            "name": "shared-0",
            "allocatable": {"nvidia.com/gpu.shared": "4"},
            "labels": {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
        }
    )
    assert wait_for(lambda: node_of(v1, "late")) == "shared-0"
    names = {n.metadata.name for n in v1.list_node(label_selector="nvidia.com/gpu.sharing-strategy").items}
    assert names == {"shared-0"}
