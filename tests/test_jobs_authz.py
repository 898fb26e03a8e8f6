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
