"""The job model: what a student may submit, and the sentences for what they may not."""

from __future__ import annotations

import pytest

from hub_ext.core.jobs import SUCCESS_MAIN, FailurePolicy, Job, JobError, Role, parse_job
from hub_ext.core.resources import NVIDIA_GPU, ResourceVector

pytestmark = pytest.mark.unit

GPU4 = {"nvidia.com/gpu": 4, "cpu": "8", "memory": "32Gi"}


def parse(data, **kw):
    args = {"owner": "ana", "course": "gpu101", "submit_time": 100.0, "default_max_runtime": 3600.0}
    args.update(kw)
    return parse_job(data, **args)


def test_a_two_role_job_parses_with_totals_and_main_role():
    job = parse({"name": "resnet-ddp", "main_role": "master", "success": "main", "max_restarts": 1,
                 "roles": [{"name": "master", "replicas": 1, "resources": GPU4},
                           {"name": "worker", "replicas": 3, "resources": GPU4,
                            "gpu_product": "NVIDIA-H200"}]})
    assert job.replicas == 4
    assert job.total[NVIDIA_GPU] == 16
    assert job.gpus == 16.0
    assert job.main_role == "master"
    assert job.policy == FailurePolicy(SUCCESS_MAIN, 0, 1)
    assert job.roles[1].gpu_product == "NVIDIA-H200"
    assert job.describe().startswith("1 x 8 CPU, 32 GiB memory, 4 nvidia.com/gpu + 3 x")
    assert job.total_need[NVIDIA_GPU] == 16 * 10**9


def test_max_runtime_defaults_to_the_course_default_and_respects_its_limit():
    job = parse({"name": "a", "roles": [{"name": "w", "resources": {"nvidia.com/gpu": 1}}]})
    assert job.max_runtime == 3600.0
    assert job.main_role == "w"  # the first role, when not named
    with pytest.raises(JobError, match="above your course's limit of 7200 s"):
        parse({"name": "a", "max_runtime": 9000,
               "roles": [{"name": "w", "resources": {"nvidia.com/gpu": 1}}]}, max_runtime_limit=7200)


def test_shared_and_mig_requests_are_kept_exactly():
    job = parse({"name": "a", "roles": [
        {"name": "w", "replicas": 2, "resources": {"nvidia.com/mig-1g.18gb": 1}},
        {"name": "s", "resources": {"nvidia.com/gpu.shared": 1, "cpu": "500m"}}]})
    assert job.total == ResourceVector({"nvidia.com/mig-1g.18gb": 2, "nvidia.com/gpu.shared": 1,
                                        "cpu": "500m"})
    assert job.roles[0].key_resource == "nvidia.com/mig-1g.18gb"


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "A!", "roles": [{"name": "w", "resources": GPU4}]}, "job name 'A!' is not valid"),
    ({"name": "a", "roles": []}, "roles must be a non-empty list"),
    ({"name": "a", "gpus": 3, "roles": [{"name": "w", "resources": GPU4}]}, "unknown field 'gpus'"),
    ({"name": "a", "roles": [{"name": "w", "replicas": 0, "resources": GPU4}]},
     "replicas must be a whole number from 1 to 1024"),
    ({"name": "a", "roles": [{"name": "w", "resources": {"nvidia.com/gpu": "12Gb"}}]},
     "did you mean"),
    ({"name": "a", "roles": [{"name": "w", "resources": {"nvidia.com/gpu": -1}}]}, "must not be negative"),
    ({"name": "a", "roles": [{"name": "w", "resources": GPU4}, {"name": "w", "resources": GPU4}]},
     "role 'w' is given twice"),
    ({"name": "a", "main_role": "chief", "roles": [{"name": "w", "resources": GPU4}]},
     "main_role 'chief' is not one of the roles"),
    ({"name": "a", "success": "most", "roles": [{"name": "w", "resources": GPU4}]}, "success must be"),
    ({"name": "a", "tolerated_failures": 2, "roles": [{"name": "w", "replicas": 2, "resources": GPU4}]},
     "tolerated_failures \\(2\\) must be below the job's 2 replicas"),
    ({"name": "a", "max_runtime": 0, "roles": [{"name": "w", "resources": GPU4}]},
     "max_runtime must be a positive number of seconds"),
    ({"name": "a", "roles": [{"name": "w", "resources": {"nvidia.com/gpu": True}}]},
     "is not a number or quantity"),
    ({"name": "a", "roles": [{"name": "w", "resources": {}}]}, "resources must be an object"),
    ({"name": "a", "priority": "high", "roles": [{"name": "w", "resources": GPU4}]},
     "priority must be a whole number"),
    ([1, 2], "a job must be a JSON object"),
])
def test_bad_submissions_get_a_sentence_naming_the_fix(data, message):
    with pytest.raises(JobError, match=message):
        parse(data)


def test_a_role_must_ask_for_something_and_a_job_needs_a_course():
    with pytest.raises(JobError, match="ask for something"):
        Role("w", 1, ResourceVector())
    role = Role("w", 1, ResourceVector({NVIDIA_GPU: 1}))
    with pytest.raises(JobError, match="needs a course"):
        Job("a", "ana", "", (role,), 60.0)
    with pytest.raises(JobError, match="at most 8 roles"):
        Job("a", "ana", "c", tuple(Role(f"r{i}", 1, role.request) for i in range(9)), 60.0)
