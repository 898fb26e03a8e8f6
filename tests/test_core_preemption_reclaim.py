"""Reclaiming borrowed GPUs goes first (hub_ext.core.admission.preemption, `first_reclaimer`).

The situation of a night of borrowing: course night101 (no guaranteed share) runs a 2-GPU job on
idle GPUs and has a 1-GPU job waiting, which held the cycle's reservation; a notebook holds the
third GPU. When a student of demo101 (within its 2-GPU share) submits a 1-GPU job, that job, not
the borrowing one waiting, takes the reservation and preempts the borrower; the notebook is never
a victim, the culler is asked for the missing GPU instead; a borrowing job never preempts.
"""

from __future__ import annotations

import pytest

from hub_ext.core.admission import (
    CourseQuota,
    NodeState,
    QueueSnapshot,
    RunningJob,
    Snapshot,
    admission_cycle,
)
from hub_ext.core.admission.preemption import preemption_message
from hub_ext.core.jobs import parse_job
from hub_ext.core.quota import Usage
from hub_ext.core.resources import ResourceVector

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"


def job(name: str, course: str, gpus: int, submitted: float):
    return parse_job({"name": name, "roles": [{"name": "worker", "replicas": 1,
                                               "resources": {GPU: gpus}}]},
                     owner=f"student-{course}", course=course, submit_time=submitted,
                     default_max_runtime=3600)


BORROWER, WAITING = job("b1", "night101", 2, 1.0), job("b2", "night101", 1, 2.0)
MINE = job("a1", "demo101", 1, 3.0)
#: 3 GPUs: the borrower holds 2, a notebook of demo101 the third (counted in demo101's usage).
NODE = NodeState("n1", ResourceVector({GPU: 3, "pods": 110}), ResourceVector({GPU: 0, "pods": 100}))
COURSES = {"demo101": CourseQuota(nominal=ResourceVector({GPU: 2}),
                                  usage=Usage(resources=ResourceVector({GPU: 1}))),
           "night101": CourseQuota(usage=Usage(resources=ResourceVector({GPU: 2})))}


def cycle(waiting, reserved=None, borrowed=True, courses=COURSES):
    running = (RunningJob(BORROWER, (("worker", 0, "n1"),), 10.0, borrowed=borrowed),)
    snapshot = Snapshot(now=100.0, nodes=(NODE,), running=running, courses=courses,
                        reserved_job=reserved, grace=2.0)
    return admission_cycle(snapshot, QueueSnapshot.of(waiting))


@pytest.mark.parametrize("reserved", [None, "b2"])
def test_a_job_within_its_share_preempts_the_borrower_though_a_borrowing_job_held_the_reservation(reserved):
    result = cycle([WAITING, MINE], reserved)
    assert result.reservation.job == "a1"
    assert [(p.job, p.for_job, p.ends_by) for p in result.preemptions] == [("b1", "a1", 102.0)]
    assert result.waiting("a1").code == "preempting" and result.waiting("b2").code != "preempting"
    # the notebook is no victim: the culler's pressure reclaim is asked for what is missing now
    assert dict(result.pressure) == {GPU: 1}


def test_a_borrowing_job_never_preempts_and_a_job_on_its_own_share_is_never_preempted():
    assert cycle([WAITING]).preemptions == ()  # night101 has no share: it only waits
    assert cycle([MINE], borrowed=False).preemptions == ()  # b1 admitted within a share
    over = {**COURSES, "demo101": CourseQuota(nominal=ResourceVector({GPU: 1}),
                                              usage=Usage(resources=ResourceVector({GPU: 1})))}
    assert cycle([MINE], courses=over).preemptions == ()  # a1 would borrow too


def test_the_event_says_why_for_whom_how_long_and_that_the_place_is_kept():
    text = preemption_message("night101", "a1", "demo101", 2.0)
    assert "beyond course night101's guaranteed share" in text and "course demo101" in text
    assert "job a1" in text and "2 s after SIGTERM" in text and "place by submit time" in text
