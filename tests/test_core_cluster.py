"""The Cluster page's data (hub_ext.core.cluster) and whom a pod serves
(hub_ext.backends.kubernetes.informer.holder_of): what an admin and a teacher would read."""

from __future__ import annotations

import pytest

from hub_ext.backends.kubernetes.informer import holder_of, usage_of
from hub_ext.core.capacity import CapacitySnapshot, NodeCapacity
from hub_ext.core.cluster import (
    Held,
    ProfileRoom,
    cluster_view,
    node_of_holdings,
    resource_choices,
    utilisation_by_pod,
    utilisation_source,
)
from hub_ext.core.resources import ResourceVector

pytestmark = pytest.mark.unit

NODES = [
    {"metadata": {"name": "a", "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
     "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "b"},
     "status": {"allocatable": {"cpu": "4", "memory": "8Gi"},
                "conditions": [{"type": "Ready", "status": "True"}]}},
]


def _held(kind, name, user, course, nodes, **resources):
    return Held(kind, name, user, course, None, ResourceVector.from_k8s(resources), nodes=nodes)


def test_the_admin_sees_every_holding_on_its_nodes_and_the_teacher_only_their_course():
    snapshot = CapacitySnapshot.from_k8s(NODES, [])
    held = [
        _held("server", "ann", "ann", "ml101", ("a",), **{"cpu": "1", "nvidia.com/gpu": "1"}),
        _held("job", "train-1", "bob", "cv201", ("a", "b"), cpu="2"),
        _held("server", "cy", "cy", "ml101", (), cpu="1"),  # not bound yet
    ]
    rooms = [ProfileRoom("h200", "Whole H200", 1, frozenset({"ml101"})),
             ProfileRoom("cv", "CV GPU", 0, frozenset({"cv201"})), ProfileRoom("cpu", "CPU", None)]
    whole = cluster_view(snapshot.nodes, held, profiles=rooms)
    on = {n["name"]: [h["name"] for h in n["holdings"]] for n in whole["nodes"]}
    assert on == {"a": ["train-1", "ann"], "b": ["train-1"]}  # a two-node job on both
    assert [h["name"] for h in whole["unplaced"]] == ["cy"]
    assert [p["slug"] for p in whole["profiles"]] == ["h200", "cv", "cpu"]
    gpu = next(r for r in whole["nodes"][0]["resources"] if r["name"] == "nvidia.com/gpu")
    assert gpu["allocatable"] == "2" and whole["nodes"][0]["resources"][0] is gpu  # GPUs first
    assert "pods" not in [r["name"] for r in whole["nodes"][0]["resources"]]

    slice_ = cluster_view(snapshot.nodes, held, profiles=rooms, courses=["ml101"])
    names = [h["name"] for n in slice_["nodes"] for h in n["holdings"]] + [
        h["name"] for h in slice_["unplaced"]]
    assert sorted(names) == ["ann", "cy"]  # nothing of cv201
    assert [p["slug"] for p in slice_["profiles"]] == ["h200", "cpu"]
    assert len(slice_["nodes"]) == 2  # every node's totals still


def test_this_machine_as_a_node_counts_what_the_ledger_holds():
    held = [_held("server", "ann", "ann", "ml101", ("vm",), **{"cpu": "1", "nvidia.com/gpu": "1"}),
            _held("job", "j", "bob", None, ("vm",), **{"nvidia.com/gpu": "1"})]
    node = node_of_holdings("vm", ResourceVector.from_k8s({"cpu": "4", "nvidia.com/gpu": "3"}), held)
    assert node.free["nvidia.com/gpu"] == 1 and node.free["cpu"] == 3
    view = cluster_view((node,), held, mode="local")
    assert view["totals"]["held_gpus"] == "2 nvidia.com/gpu"
    assert view["totals"] == {**view["totals"], "servers": 1, "jobs": 1}


def test_whom_a_pod_serves():
    server = {"metadata": {"labels": {"component": "singleuser-server"},
                           "annotations": {"hub.jupyter.org/username": "Zoë",
                                           "hub.jupyter.org/servername": "gpu"}},
              "spec": {"nodeName": "a"}, "status": {"phase": "Running"}}
    job = {"metadata": {"labels": {"classhub.io/job": "train-1"}}, "spec": {"nodeName": "b"},
           "status": {"phase": "Running"}}
    other = {"metadata": {"labels": {"app": "x"}}, "spec": {"nodeName": "b"}, "status": {"phase": "Running"}}
    assert holder_of(server) == ("server", "Zoë", "gpu")
    assert holder_of(job) == ("job", "train-1", "")
    assert holder_of(other) is None
    assert usage_of(job).holder == ("job", "train-1", "") and usage_of(job).node == "b"
    assert usage_of({**job, "status": {"phase": "Succeeded"}}) is None


def test_who_sees_the_cluster():
    from hub_ext.core import authz

    admin = authz.Caller(name="root", admin=True)
    teacher = authz.Caller(name="t", courses={"ml101": "teacher"})
    ta = authz.Caller(name="a", courses={"ml101": "ta"})
    student = authz.Caller(name="s", courses={"ml101": "student"})
    assert authz.decide(admin, authz.READ_CLUSTER)
    assert authz.decide(admin, authz.READ_COURSE_CLUSTER, course="ml101")
    assert authz.decide(teacher, authz.READ_COURSE_CLUSTER, course="ml101")
    refused = authz.decide(teacher, authz.READ_CLUSTER)
    assert not refused and "Cluster: <course>" in refused.message
    assert not authz.decide(teacher, authz.READ_COURSE_CLUSTER, course="cv201")
    for caller in (ta, student):
        verdict = authz.decide(caller, authz.READ_COURSE_CLUSTER, course="ml101")
        assert not verdict and verdict.status == 403 and "teachers of ml101" in verdict.message
        assert not authz.decide(caller, authz.READ_CLUSTER)


def test_the_quota_picker_names_the_clusters_devices_in_plain_words():
    """What an admin setting a course quota picks from: every device name the nodes have, with
    its count, the course's own names (even one the cluster lacks), CPU and memory."""
    nodes = [NodeCapacity("a", ResourceVector.from_k8s({"cpu": "16", "nvidia.com/mig-1g.10gb": "4"})),
             NodeCapacity("b", ResourceVector.from_k8s({"nvidia.com/mig-1g.10gb": "3", "nvidia.com/gpu": "2",
                                                        "nvidia.com/gpu.shared": "8"}),
                          labels={"nvidia.com/gpu.product": "NVIDIA-H200"})]
    choices = {c["name"]: c["label"] for c in resource_choices(nodes, ["nvidia.com/mig-3g.40gb", "cpu"])}
    assert choices["nvidia.com/mig-1g.10gb"].startswith("MIG slice 1g.10gb (7 on the cluster)")
    assert choices["nvidia.com/gpu"].startswith("whole GPU, NVIDIA H200 (2 on the cluster)")
    assert choices["nvidia.com/gpu.shared"].startswith("shared GPU, NVIDIA H200, time-sliced (8 on")
    assert choices["nvidia.com/mig-3g.40gb"].startswith("MIG slice 3g.40gb (none on the cluster)")
    assert choices["cpu"] == "CPU cores: cpu" and choices["memory"] == "memory"
    assert list(choices)[:4] == sorted(list(choices)[:4])  # GPU resources first, by name
    here = resource_choices([nodes[0]], [], where="on this machine")
    assert here[0]["label"] == "MIG slice 1g.10gb (4 on this machine): nvidia.com/mig-1g.10gb"


def test_gpu_use_per_pod_from_prometheus_and_where_it_comes_from():
    """The Cluster page's GPU use in Kubernetes mode: the DCGM exporter's samples per pod, and a
    sentence that says where it comes from, or which setting turns it on."""
    answer = {"data": {"result": [
        {"metric": {"pod": "jupyter-ann"}, "value": [0, "87.4"]},
        {"metric": {"pod": "jupyter-ann"}, "value": [0, "12"]},      # a second GPU of the pod
        {"metric": {"pod": "job-x-0"}, "value": [0, "140"]},         # clamped
        {"metric": {}, "value": [0, "5"]}, {"metric": {"pod": "p"}, "value": [0, "NaN"]},
    ]}}
    assert utilisation_by_pod(answer) == {"jupyter-ann": 87, "job-x-0": 100}
    assert utilisation_by_pod({"status": "error"}) == {} == utilisation_by_pod(None)
    assert "set c.ClasshubPrometheus.url" in utilisation_source("kubernetes", "")
    assert "from Prometheus at http://prom" in utilisation_source("kubernetes", "http://prom")
    assert "did not answer" in utilisation_source("kubernetes", "http://prom", failed=True)
    assert "NVML" in utilisation_source("local", "")
