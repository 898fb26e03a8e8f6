"""Who may submit, see and cancel jobs (the job rows of hub_ext.core.authz), from plain data.

The same rules are exercised through a real hub in test_jobs_hub.py (a student never sees another
student's job, the TA sees it, only the owner, the teacher and admins cancel it).
"""

from __future__ import annotations

import pytest

from hub_ext.core import authz
from hub_ext.core.authz import Caller, decide

pytestmark = pytest.mark.unit

C = "cs101"
CALLERS = {
    "owner": Caller("sam", courses={C: "student"}),
    "classmate": Caller("sue", courses={C: "student"}),
    "ta": Caller("tara", courses={C: "ta"}),
    "teacher": Caller("tom", courses={C: "teacher"}),
    "other-teacher": Caller("otto", courses={"bio201": "teacher"}),
    "former-member": Caller("sam", courses={}),  # the owner after leaving the course
    "admin": Caller("ada", admin=True),
    "service": Caller("grader", kind="service", courses={C: "teacher"}, admin=True),
}
TABLE = {
    authz.SUBMIT_JOB: {"owner", "classmate", "ta", "teacher", "admin"},
    authz.READ_JOB: {"owner", "ta", "teacher", "former-member", "admin"},
    authz.CANCEL_JOB: {"owner", "teacher", "former-member", "admin"},
    authz.READ_COURSE_JOBS: {"ta", "teacher", "admin"},
}


@pytest.mark.parametrize("action", sorted(TABLE))
@pytest.mark.parametrize("who", sorted(CALLERS))
def test_job_actions(action: str, who: str) -> None:
    verdict = decide(CALLERS[who], action, course=C, user="sam")
    assert bool(verdict) is (who in TABLE[action])
    if not verdict:
        assert verdict.status == 403 and C in verdict.message


def test_refusals_say_who_may() -> None:
    assert decide(CALLERS["ta"], authz.CANCEL_JOB, course=C, user="sam").message == (
        "You are a TA of cs101; only teachers of cs101 and hub admins can cancel this job of cs101.")
    assert "not a member of cs101" in decide(CALLERS["other-teacher"], authz.SUBMIT_JOB, course=C).message


def test_a_job_the_caller_may_not_see_is_a_missing_job() -> None:
    """With the job's id, a refusal does not say whether the job exists (docs/admins/security.md, "Security
    model")."""
    for who in ("classmate", "other-teacher"):
        for action in (authz.READ_JOB, authz.CANCEL_JOB):
            verdict = decide(CALLERS[who], action, course=C, user="sam", job="j1")
            assert verdict.status == 404
            assert verdict.message.startswith("No job j1 among the jobs you can see")
    missing = decide(CALLERS["admin"], authz.READ_JOB, course=None, user=None, job="j2")
    assert missing.status == 404 and "No job j2" in missing.message
    # the TA sees the job but may not cancel it: a 403 saying who may
    assert decide(CALLERS["ta"], authz.CANCEL_JOB, course=C, user="sam", job="j1").status == 403
    assert decide(CALLERS["service"], authz.READ_JOB, course=C, user="sam", job="j1").message == (
        "Jobs belong to users; ask with a user's token.")


@pytest.mark.parametrize(("who", "allowed"), [
    ("owner", False), ("ta", False), ("teacher", True), ("admin", True), ("other-teacher", False)])
def test_only_teachers_and_admins_give_a_job_a_priority(who: str, allowed: bool) -> None:
    verdict = decide(CALLERS[who], authz.SUBMIT_JOB, course=C, priority=5)
    assert bool(verdict) is allowed
    if who in ("owner", "ta"):
        assert verdict.message == (f"Only teachers of {C} and hub admins set a job's priority; leave "
                                   "priority out.")
    assert bool(decide(CALLERS[who], authz.SUBMIT_JOB, course=C, priority=0)) is (
        who in TABLE[authz.SUBMIT_JOB])


def test_who_lists_which_jobs() -> None:
    teacher = Caller("tom", courses={C: "teacher", "bio201": "student"})
    assert decide(teacher, authz.LIST_JOBS)
    assert decide(CALLERS["owner"], authz.LIST_JOBS, course=C, user="sam")  # my jobs in my course
    refused = decide(CALLERS["owner"], authz.LIST_JOBS, course=C)
    assert refused.status == 403 and "job queue of cs101" in refused.message
    assert decide(CALLERS["service"], authz.LIST_JOBS).status == 403
    # without filters: my jobs, and those of the courses I teach or assist
    assert authz.visible_jobs(teacher, course=None, owner=None) == {
        "owner": "tom", "courses": [C], "either": True}
    assert authz.visible_jobs(CALLERS["owner"], course=C, owner=None) == {"owner": "sam", "courses": [C]}
    assert authz.visible_jobs(teacher, course=C, owner="sam") == {"owner": "sam", "courses": [C]}
    assert authz.visible_jobs(teacher, course=None, owner="sam") == {"owner": "sam", "courses": [C]}
    assert authz.visible_jobs(CALLERS["admin"], course=None, owner=None) == {"owner": None, "courses": None}
