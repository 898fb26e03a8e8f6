"""Jobs by profile: a job names a profile of its course, and each replica gets what a notebook of
that profile gets; the sentences for a profile the course does not offer or the user may not use."""

from __future__ import annotations

import re

import pytest

from hub_ext.backends.jobs import Launch, ReplicaLaunch
from hub_ext.backends.kubernetes.jobs import pytorch_job
from hub_ext.backends.local.jobs import LocalJobs
from hub_ext.core.devices import Device, Inventory
from hub_ext.core.jobs import parse_job
from hub_ext.core.profiles import Catalog, OptionsError, Viewer, resolve_job_roles
from hub_ext.service.body_models import BodyError
from hub_ext.service.jobs.bodies import parse_submission

pytestmark = pytest.mark.unit

CATALOG = Catalog.from_config([
    {"slug": "cpu", "kind": "cpu", "default": True},
    {"slug": "gpu-1", "display_name": "Whole H200", "kind": "gpu", "gpu_product": "NVIDIA-H200",
     "cpu_guarantee": "4", "cpu_limit": "8", "mem_guarantee": "16Gi", "mem_limit": "32Gi",
     "tolerations": [{"key": "lab", "operator": "Exists", "effect": "NoSchedule"}]},
    {"slug": "mig-1g", "kind": "mig", "mig_profile": "1g.18gb", "groups": ["cs101"]},
    {"slug": "big", "kind": "gpu", "gpu_count": 4, "roles": ["teacher"]},
])
STUDENT = Viewer("ana", groups=frozenset({"cs101", "bio202"}))


def roles_of(body: dict) -> list[dict]:
    return parse_submission({"command": ["python", "train.py"], **body}).job_fields["roles"]


def test_a_profile_becomes_each_replicas_request_and_the_gpu_model_it_needs():
    roles, kept = resolve_job_roles(CATALOG, STUDENT, "cs101", roles_of({"replicas": 2, "profile": "gpu-1"}))
    assert roles == [{"name": "worker", "replicas": 2, "gpu_product": "NVIDIA-H200",
                      "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}]
    job = parse_job({"name": "ddp", "roles": roles}, owner="ana", course="cs101", submit_time=0,
                    default_max_runtime=60)
    assert job.describe() == "2 x 4 CPU, 16 GiB memory, 1 nvidia.com/gpu"
    assert kept["worker"]["display_name"] == "Whole H200"
    assert kept["worker"]["limits"] == {"cpu": "8", "memory": "32Gi"}
    assert kept["worker"]["node_selector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    mig, _ = resolve_job_roles(CATALOG, STUDENT, "cs101", roles_of({"profile": "mig-1g"}))
    assert mig[0]["resources"]["nvidia.com/mig-1g.18gb"] == "1" and "gpu_product" not in mig[0]


@pytest.mark.parametrize(("viewer", "course", "slug", "message"), [
    (STUDENT, "cs101", "h100", "profile 'h100' is not available to you; choose one of: cpu, gpu-1, mig-1g"),
    (STUDENT, "bio202", "mig-1g", "course bio202 does not offer profile 'mig-1g'; choose one of: cpu, gpu-1"),
    (STUDENT, "cs101", "big", "profile 'big' is not available to you; choose one of: cpu, gpu-1, mig-1g"),
    (Viewer("tom", frozenset({"cs101"}), role="ta"), "cs101", "big", "'big' is not available to you"),
])
def test_a_profile_the_course_does_not_offer_or_the_user_may_not_use_is_refused(viewer, course, slug,
                                                                               message):
    with pytest.raises(OptionsError, match=re.escape(message)):
        resolve_job_roles(CATALOG, viewer, course, roles_of({"profile": slug}))


def test_a_teacher_of_the_course_may_use_a_teacher_profile_and_each_role_its_own():
    teacher = Viewer("tess", frozenset({"cs101"}), role="teacher")
    roles, kept = resolve_job_roles(CATALOG, teacher, "cs101", roles_of({"roles": [
        {"name": "master", "profile": "cpu"}, {"name": "worker", "replicas": 2, "profile": "big"}]}))
    assert roles[1]["resources"]["nvidia.com/gpu"] == "4" and set(kept) == {"master", "worker"}
    with pytest.raises(OptionsError, match=r"^role worker: profile 'big' is not available"):
        resolve_job_roles(CATALOG, STUDENT, "cs101", roles_of({"roles": [
            {"name": "master", "profile": "cpu"}, {"name": "worker", "profile": "big"}]}))


@pytest.mark.parametrize(("body", "message"), [
    ({"profile": "gpu-1", "resources": {"cpu": "2"}}, "give either profile or resources, not both"),
    ({"profile": "gpu-1", "gpu_product": "NVIDIA-H200"}, "give either profile or gpu_product"),
    ({"profile": "GPU 1"}, "profile must be the slug of a profile of your course"),
    ({"profile": "gpu-1", "roles": [{"name": "w", "resources": {"cpu": 1}}]}, "give either roles or"),
    ({"roles": [{"name": "master", "profile": "cpu", "resources": {"cpu": 1}}]},
     "role master: give either profile or resources"),
])
def test_a_profile_with_explicit_resources_is_refused_with_a_sentence(body, message):
    with pytest.raises(BodyError, match=message):
        parse_submission({"command": ["true"], **body})


def test_the_local_backend_picks_gpus_of_the_profiles_model_as_the_notebooks_pool_matches():
    devices = [Device("GPU-a100", 0, "NVIDIA A100-SXM4-80GB"), Device("GPU-h200-1", 1, "NVIDIA H200"),
               Device("GPU-h200-2", 2, "NVIDIA H200")]
    backend = LocalJobs("/nonexistent", Inventory(devices))
    assert backend.devices_for("localhost", "nvidia.com/gpu", 2, set(), product="NVIDIA-H200") == [
        "GPU-h200-1", "GPU-h200-2"]
    with pytest.raises(RuntimeError, match=re.escape("only 1 NVIDIA-H200 nvidia.com/gpu free")):
        backend.devices_for("localhost", "nvidia.com/gpu", 2, {"GPU-h200-1"}, product="NVIDIA-H200")


def test_on_kubernetes_a_profile_roles_pods_get_the_notebooks_limits_selector_and_tolerations():
    _, kept = resolve_job_roles(CATALOG, STUDENT, "cs101", roles_of({"profile": "gpu-1"}))
    launch = Launch("ddp-1", "ana", "cs101", ("python", "train.py"), {}, "", 0,
                    (ReplicaLaunch("worker", 0, 0, ""),), 60,
                    requests={"worker": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}},
                    pods={"worker": kept["worker"]})
    spec = pytorch_job(launch, namespace="ns", image="img")["spec"]["pytorchReplicaSpecs"]["Master"]
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert {"key": "lab", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["containers"][0]["resources"]["limits"] == {"memory": "32Gi", "nvidia.com/gpu": "1",
                                                           "cpu": "8"}
