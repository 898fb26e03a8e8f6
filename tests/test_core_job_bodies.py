"""Whatever JSON a student sends in a job body, the answer is a job or a sentence, never a crash.

What a student (or an attacker) notices when this fails: ``POST /api/jobs`` with ``"roles": -1``,
``"priority": 2**40`` or ``"replicas": true`` answered 500 instead of a 400 saying what to send.
The service reads a body as its model (hub_ext.service.jobs.bodies.JobSubmission, whose fields core's
checks refuse with a `BodyError`) -> (roles that name a profile) the profile resolution ->
``parse_job``; each step either returns or raises the error the service turns into a 400
(`BodyError`, `JobError`, or `OptionsError` for a profile). The properties put arbitrary JSON values
(and the boundary values of the attack run) in each field of a job body, in each field of a role
and in a role's resources, and check that nothing else is raised and that a job that parses has
values every later step (the database, the admission core, the backends) can hold.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hub_ext.core import jobs as J
from hub_ext.core.profiles import Catalog, OptionsError, Viewer, resolve_job_roles
from hub_ext.service.body_models import BodyError
from hub_ext.service.jobs.bodies import JobSubmission, parse_submission
from hub_ext.service.jobs.profiles import names_profile

pytestmark = pytest.mark.unit

CATALOG = Catalog.from_config([
    {"slug": "cpu", "kind": "cpu", "default": True},
    {"slug": "gpu-1", "kind": "gpu", "gpu_product": "NVIDIA-H200", "cpu_guarantee": "4"},
])
STUDENT = Viewer("ana", groups=frozenset({"cs101"}))
#: What the store holds: ``priority`` is an Integer column (32 bits on PostgreSQL); a runtime
#: beyond 100 years is no runtime (and ``now + max_runtime`` must stay a time).
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
RUNTIME_MAX = 100 * 365 * 86400

#: The values of the attack run and the edges of every range a job body has.
EDGES = st.sampled_from([
    -1, 0, 1, 1024, 1025, 2**31 - 1, 2**31, -(2**31) - 1, 2**62, 2**63 - 1, 2**63, -(2**63), 10**23,
    1.5, -0.0, 1e308, float("inf"), float("-inf"), float("nan"), True, False, None, "", "1", "abc",
    "1.5", [], {}, [1], ["true"], {"name": "w"}, "\x00", "a" * 5000,
])
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
VALUES = EDGES | JSON

SHORTHAND = {"id": "run-1", "course": "cs101", "name": "ddp", "command": ["python", "train.py"],
             "replicas": 2, "resources": {"cpu": "1", "memory": "1Gi"}, "gpu_product": "NVIDIA-H200",
             "max_runtime": 60, "env": {"EPOCHS": "3"}, "workdir": "lab3", "priority": 0,
             "success": "all", "tolerated_failures": 0, "max_restarts": 0, "main_role": "worker"}
ROLE = {"name": "worker", "replicas": 2, "resources": {"cpu": "1"}, "gpu_product": "NVIDIA-H200"}
WITH_ROLES = {"command": ["python", "train.py"], "name": "ddp",
              "roles": [{"name": "master", "replicas": 1, "profile": "cpu"}, dict(ROLE)]}


def submit(body: object) -> J.Job | None:
    """What ``POST /api/jobs`` does with a body before the quota check: a job, or None for a
    refusal the service answers 400. Any other exception fails the property."""
    try:
        submission = parse_submission(body)
        fields = dict(submission.job_fields)
        if names_profile(fields):
            fields["roles"], _kept = resolve_job_roles(CATALOG, STUDENT, "cs101", fields["roles"])
        job = J.parse_job({**fields, "name": submission.name}, owner="ana", course="cs101",
                          submit_time=1.7e9, default_max_runtime=3600.0, max_runtime_limit=None)
    except (BodyError, J.JobError, OptionsError) as e:
        assert str(e) and "\n" not in str(e)
        return None
    # what the store and the backends do with an accepted job must not fail either
    json.dumps({"command": submission.command, "env": dict(submission.env),
                "fields": fields}, allow_nan=False)
    assert isinstance(job.priority, int) and not isinstance(job.priority, bool)
    assert PRIORITY_RANGE[0] <= job.priority <= PRIORITY_RANGE[1]
    assert math.isfinite(job.max_runtime) and 0 < job.max_runtime <= RUNTIME_MAX
    assert all(1 <= role.replicas <= J.MAX_REPLICAS for role in job.roles)
    assert job.total_need is not None and job.describe()
    return job


@given(field=st.sampled_from(sorted(SHORTHAND)), value=VALUES)
@example(field="replicas", value=True).via("a bool is not a count")
@example(field="priority", value=2**40).via("beyond the 32-bit priority column")
@example(field="max_runtime", value=1e308).via("a runtime no clock can add")
def test_any_value_in_any_field_of_the_shorthand_is_a_job_or_a_sentence(field, value):
    submit({**SHORTHAND, field: value})


@given(field=st.sampled_from(sorted(JobSubmission.model_fields)), value=VALUES)
@example(field="roles", value=-1).via("the attack run")
@example(field="roles", value=1.5).via("the attack run")
@example(field="roles", value=True).via("the attack run")
@example(field="roles", value=[{"name": "w", "profile": "cpu"}, 5]).via("a role that is no object")
def test_any_value_in_any_field_of_a_body_with_roles_is_a_job_or_a_sentence(field, value):
    body = {k: v for k, v in WITH_ROLES.items() if field != "roles" or k != "roles"}
    if field in ("replicas", "resources", "gpu_product", "profile"):
        body.pop("roles")  # the shorthand and roles do not mix (a sentence says so)
    submit({**body, field: value})


@given(field=st.sampled_from(["name", "replicas", "resources", "gpu_product", "profile", "colour"]),
       value=VALUES, profile=st.booleans())
def test_any_value_in_any_field_of_a_role_is_a_job_or_a_sentence(field, value, profile):
    role = {"name": "worker", "profile": "gpu-1"} if profile else dict(ROLE)
    submit({**WITH_ROLES, "roles": [WITH_ROLES["roles"][0], {**role, field: value}]})


@given(resources=st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]) | st.text(max_size=12),
                                 VALUES, max_size=3))
def test_any_resource_list_is_a_job_or_a_sentence(resources):
    submit({"command": ["true"], "resources": resources})


@given(body=st.dictionaries(st.sampled_from(sorted(JobSubmission.model_fields)) | st.text(max_size=6), VALUES,
                            max_size=8) | JSON)
def test_any_body_is_a_job_or_a_sentence(body):
    submit(body)


@pytest.mark.parametrize(("body", "says"), [
    ({"command": ["true"], "roles": -1}, "roles must be a list of"),
    ({"command": ["true"], "roles": 1.5}, "roles must be a list of"),
    ({"command": ["true"], "roles": True}, "roles must be a list of"),
    ({"command": ["true"], "roles": {"name": "w"}}, "roles must be a list of"),
    ({"command": ["true"], "roles": [{"name": "w", "profile": "cpu"}, 5]}, "roles[1] must be an object"),
    ({"command": ["true"], "replicas": True}, "replicas must be a whole number from 1 to 1024, not True"),
    ({"command": ["true"], "replicas": 1.5}, "replicas must be a whole number from 1 to 1024"),
    ({"command": ["true"], "priority": 2**31}, "priority must be a whole number from -2147483648 to "
                                               "2147483647"),
    ({"command": ["true"], "priority": True}, "priority must be a whole number"),
    ({"command": ["true"], "max_runtime": 1e308}, "max_runtime must be a positive number of seconds"),
    ({"command": ["true"], "max_runtime": True}, "max_runtime must be a positive number of seconds"),
    ({"command": ["true"], "max_restarts": False}, "max_restarts must be a whole number from 0 to 100"),
    ({"command": ["true"], "tolerated_failures": 2**63}, "tolerated_failures must be a whole number"),
    ({"command": ["true"], "env": ["A=1"]}, "env must be an object"),
    ({"command": ["true"], "env": 5}, "env must be an object"),
    ({"command": ["true"], "workdir": 5}, "workdir must be a folder inside your home"),
    ({"command": [1]}, "command must be a list"),
    ({"command": ["true"], "success": ["all"]}, "success must be"),
    ({"command": ["true"], "main_role": 5}, "main_role must be the name of one of the roles"),
    ({"command": ["true"], "gpu_product": 5}, "gpu_product must be a GPU model"),
    ({"command": ["true"], "gpu_product": "H" * 64}, "gpu_product must be a GPU model"),
    ({"command": ["true"], "gpu_product": "NVIDIA\nH200;"}, "gpu_product must be a GPU model"),
    ({"command": ["true"], "name": 5}, "job name 5 is not valid"),
    ({"command": ["true"], "course": 5}, "course must be the name of one of your courses"),
    ({"command": ["true"], "id": 5}, "id 5 is not valid"),
])
def test_a_wrong_type_gets_a_sentence_that_says_what_to_send(body, says):
    with pytest.raises((BodyError, J.JobError)) as refused:
        J.parse_job({**parse_submission(body).job_fields, "name": "a"}, owner="ana", course="cs101",
                    submit_time=0.0, default_max_runtime=60.0)
    assert says in str(refused.value)


def test_a_gpu_model_as_discovery_or_as_the_node_label_spells_it_is_taken():
    for product in ("NVIDIA-H200", "NVIDIA H200", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"):
        job = submit({"command": ["true"], "resources": {"nvidia.com/gpu": 1}, "gpu_product": product})
        assert job is not None and job.roles[0].gpu_product == product
