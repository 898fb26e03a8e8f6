"""A job's life in hub_ext.core.jobs: the allowed state changes, the end decided by the success
policy, and what a student submits (the body model of hub_ext.service.jobs.bodies, whose fields
core's checks refuse with a sentence naming what to change)."""

from __future__ import annotations

import pytest

from hub_ext.core import jobs as J
from hub_ext.service.body_models import BodyError
from hub_ext.service.jobs.bodies import parse_submission

pytestmark = pytest.mark.unit

ROLES = {"master": 1, "worker": 2}


@pytest.mark.parametrize(("current", "new", "allowed"), [
    (J.QUEUED, J.ADMITTED, True), (J.QUEUED, J.CANCELLED, True), (J.QUEUED, J.RUNNING, False),
    (J.ADMITTED, J.RUNNING, True), (J.RUNNING, J.PREEMPTED, True), (J.PREEMPTED, J.QUEUED, True),
    (J.RUNNING, J.QUEUED, False), (J.SUCCEEDED, J.RUNNING, False), (J.CANCELLED, J.QUEUED, False),
    (J.FAILED, J.FAILED, False),
])
def test_transitions(current, new, allowed):
    assert J.may_change(current, new) is allowed


@pytest.mark.parametrize(("success", "tolerated", "ended", "expected"), [
    ("all", 0, {}, None),
    ("all", 0, {("master", 0): 0, ("worker", 0): 0}, None),  # one still runs
    ("all", 0, {("master", 0): 0, ("worker", 0): 0, ("worker", 1): 0}, J.SUCCEEDED),
    ("all", 0, {("worker", 1): 1}, J.FAILED),  # fails at the first failure
    ("all", 1, {("worker", 1): 1}, None),
    ("all", 1, {("master", 0): 0, ("worker", 0): 0, ("worker", 1): 1}, J.SUCCEEDED),
    ("all", 0, {("worker", 0): None}, J.FAILED),  # killed without an exit code
    ("main", 0, {("master", 0): 0}, J.SUCCEEDED),  # the workers are then stopped
    ("main", 0, {("worker", 0): 0}, None),
    ("main", 0, {("master", 0): 2}, J.FAILED),
])
def test_outcome(success, tolerated, ended, expected):
    policy = J.FailurePolicy(success=success, tolerated_failures=tolerated)
    assert J.outcome(policy, "master", ROLES, ended) == expected


def test_the_shorthand_is_one_worker_role_and_the_rest_is_kept():
    sub = parse_submission({"id": "run-1", "name": "ddp", "command": ["python", "train.py"],
                            "replicas": 2, "resources": {"nvidia.com/gpu": 1}, "max_runtime": 60,
                            "env": {"EPOCHS": "3"}, "workdir": "lab3"})
    assert sub.client_id == "run-1" and sub.command == ("python", "train.py")
    assert sub.job_fields["roles"] == [{"name": "worker", "replicas": 2, "resources": {"nvidia.com/gpu": 1}}]
    assert sub.job_fields["max_runtime"] == 60 and sub.env == {"EPOCHS": "3"} and sub.workdir == "lab3"


@pytest.mark.parametrize(("body", "says"), [
    ([], "The body must be like {"),
    ({"command": "python train.py"}, "command must be a list"),
    ({"command": []}, "command must be a list"),
    ({"command": ["x"], "colour": 1}, "unknown field 'colour'"),
    ({"command": ["x"], "id": "bad id!"}, "id 'bad id!' is not valid"),
    ({"command": ["x"], "env": {"RANK": "3"}}, "RANK is set by classhub"),
    ({"command": ["x"], "env": {"1X": "3"}}, "is not a variable name"),
    ({"command": ["x"], "workdir": "../other"}, "workdir must be a folder inside your home"),
    ({"command": ["x"], "workdir": "/etc"}, "workdir must be a folder inside your home"),
    ({"command": ["x"], "replicas": 2, "roles": []}, "either roles or replicas"),
    ({"command": ["x"], "name": "Big Job"}, "job name 'Big Job' is not valid"),
])
def test_refusals_name_what_to_change(body, says):
    with pytest.raises(BodyError) as refused:
        parse_submission(body)
    assert says in str(refused.value)
