"""Gang admission, rule by rule (hub_ext/core/admission; docs/explanation/gang-admission.md, "Distributed
jobs: gang admission")."""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

import pytest

from hub_ext.core.admission import (
    BEHIND_RESERVATION,
    BORROWING_LIMIT,
    CAPACITY,
    COURSE_QUOTA,
    COURSE_WINDOW,
    PREEMPTING,
    RESERVATION_AGING,
    RESERVATION_DEPTH,
    RESERVED,
    STARVING_MIN_WAIT,
    STARVING_QUANTILE,
    STARVING_RESERVATIONS,
    USER_QUOTA,
    CourseQuota,
    CourseWindow,
    NodeState,
    QueueManager,
    QueueSnapshot,
    RunningJob,
    Snapshot,
    admission_cycle,
    dominant_share,
    refuse_at_submit,
    weekly_windows,
)
from hub_ext.core.capacity import CapacitySnapshot
from hub_ext.core.jobs import Job, Role
from hub_ext.core.quota import Limits, Usage
from hub_ext.core.resources import NVIDIA_GPU, ResourceVector

pytestmark = pytest.mark.unit

G = NVIDIA_GPU
NOW = 1_000_000.0


def rv(gpus) -> ResourceVector:
    return ResourceVector({G: gpus}) if gpus else ResourceVector()


def node(name, free, alloc=8, product="NVIDIA-H200"):
    return NodeState(name, rv(alloc), rv(free), product)


def job(name, replicas=1, gpus=1, *, course="c1", owner="u", t=0.0, rt=3600.0, prio=0, product=None):
    return Job(name, owner, course, (Role("w", replicas, rv(gpus), product),), rt, t, prio)


def running(j, nodes, started=NOW - 100, borrowed=False, ends_by=None):
    return RunningJob(j, tuple(("w", k, n) for k, n in enumerate(nodes)), started, borrowed, ends_by)


def cycle(nodes, jobs, run=(), courses=None, depth=RESERVATION_DEPTH, **kw):
    snap = Snapshot(NOW, tuple(nodes), tuple(run), courses or {}, **kw)
    return admission_cycle(snap, QueueSnapshot.of(jobs), depth=depth)


def names(result):
    return [a.job.name for a in result.admitted]


# --------------------------------------------------------------------------- gang


def test_a_gang_goes_to_nodes_that_each_fit_a_replica_and_carries_the_placement():
    result = cycle([node("a", 4), node("b", 3), node("c", 4)], [job("ddp", 2, 4)])
    assert names(result) == ["ddp"]
    assert result.admitted[0].placement.replicas == (("w", 0, "a"), ("w", 1, "c"))


def test_eight_free_gpus_spread_over_nodes_do_not_admit_two_by_four():
    result = cycle([node("a", 3), node("b", 3), node("c", 4)], [job("ddp", 2, 4)])
    assert result.admitted == ()
    why = result.waiting("ddp")
    assert why.code == CAPACITY  # nothing running will ever free 4 + 4: no reservation
    assert cycle([node("a", 3), node("b", 3), node("c", 4)], [job("x", 1, 1, t=-1), job("ddp", 2, 4)]
                 ).waiting("ddp").message.startswith(
        "waiting for 2 nodes with 4 free nvidia.com/gpu (1 has them now); 1st in c1's queue")


def test_two_replicas_may_share_one_node_with_room_for_both():
    result = cycle([node("a", 8)], [job("ddp", 2, 4)])
    assert result.admitted[0].placement.nodes == ("a",)


def test_best_fit_keeps_whole_nodes_free_for_big_jobs():
    result = cycle([node("a", 8), node("b", 1)], [job("small", 1, 1)])
    assert result.admitted[0].placement.nodes == ("b",)


def test_a_gpu_model_pins_replicas_to_nodes_of_that_model():
    nodes = [node("a", 8, product="NVIDIA-A100"), node("b", 8, product="NVIDIA-H200")]
    result = cycle(nodes, [job("h", 1, 2, product="NVIDIA-H200")])
    assert result.admitted[0].placement.nodes == ("b",)
    assert cycle(nodes[:1], [job("h", 1, 2, product="NVIDIA-H200")]).admitted == ()


def test_a_cordoned_node_gets_nothing():
    nodes = [NodeState("a", rv(8), rv(8), None, schedulable=False)]
    assert cycle(nodes, [job("j")]).admitted == ()


def test_a_job_that_can_never_fit_is_refused_at_submit():
    nodes = [node(f"n{i}", 8) for i in range(4)]
    assert "no node has that much (the largest offers 8 nvidia.com/gpu)" in refuse_at_submit(
        job("big", 3, 16), nodes)
    assert "do not fit the whole cluster at once" in refuse_at_submit(job("big", 5, 8), nodes)
    assert refuse_at_submit(job("ok", 4, 8), [node(n.name, 0) for n in nodes]) is None  # busy != never
    ceiling = Limits(resources=rv(8))
    assert "your course may use at most 8 nvidia.com/gpu" in refuse_at_submit(
        job("q", 2, 8), nodes, course_limits=ceiling)
    assert "you may use at most" in refuse_at_submit(job("q", 2, 8), nodes, user_limits=ceiling)


# --------------------------------------------------------------------------- order and fairness


def test_within_a_course_priority_then_submit_time_then_name():
    jobs = [job("late", t=5), job("early", t=1), job("urgent", t=9, prio=1), job("b-tie", t=1)]
    q = QueueSnapshot.of(jobs)
    assert [j.name for j in q.by_course["c1"]] == ["urgent", "b-tie", "early", "late"]
    result = cycle([node("a", 2, alloc=2)], jobs, depth=1)  # "late" holds no reservation
    assert names(result) == ["urgent", "b-tie"]
    late = result.waiting("late")
    assert "; 2nd in c1's queue; estimated start " in late.message  # "early" is 1st of those left
    assert late.message.endswith(" at the earliest") and late.estimated_start == NOW + 3600


def test_drf_serves_the_course_with_the_smaller_dominant_share_first():
    courses = {"heavy": CourseQuota(usage=Usage(rv(6))), "light": CourseQuota(usage=Usage(rv(1)))}
    # submitted within the aging time: fair order decides (after it, submit order: see below)
    jobs = [job("h1", course="heavy", t=NOW - 100), job("l1", course="light", t=NOW - 50)]
    result = cycle([node("a", 1, alloc=8)], jobs, courses=courses)
    assert names(result) == ["l1"]
    # weights divide the share: heavy with weight 10 now counts 6/8/10 < 1/8
    courses["heavy"] = CourseQuota(usage=Usage(rv(6)), weight=10)
    assert names(cycle([node("a", 1, alloc=8)], jobs, courses=courses)) == ["h1"]


def test_a_job_waiting_longer_than_the_aging_time_goes_first_whatever_its_course_share():
    """Reservations follow submit order once a job has waited RESERVATION_AGING seconds: a big
    job of a busy course is not overtaken for ever by a stream of jobs of lighter courses."""
    courses = {"heavy": CourseQuota(usage=Usage(rv(6))), "light": CourseQuota(usage=Usage(rv(1)))}
    old = job("h1", course="heavy", t=NOW - RESERVATION_AGING - 1)
    young = job("l1", course="light", t=NOW - 5)
    assert names(cycle([node("a", 1, alloc=8)], [old, young], courses=courses)) == ["h1"]
    # and a blocked old job holds a reservation that the young one may not delay
    busy = running(job("r", 1, 1, rt=1100, t=-10), ["a"])  # gives its GPU back at NOW + 1000
    result = cycle([node("a", 1, alloc=2)], [job("h2", 1, 2, course="heavy", t=NOW - 400), young],
                   [busy], courses=courses)
    assert result.reservation.job == "h2" and names(result) == []
    # it fits now but would still run when h2 starts: it gets the next reservation, after h2's
    # end (docs/admission.md: while fewer than the depth are held, a blocked job gets one too)
    assert [r.job for r in result.reservations] == ["h2", "l1"]
    assert result.waiting("l1").code == RESERVED
    assert result.reservations[1].start == NOW + 1000 + 3600
    assert dominant_share({G: 4}, {G: 8}, 2) == 0.25


def starving_cycle(waits, big_waited=6000.0, **kw):
    """Both nodes full (a until NOW+4900, b until NOW+8900), depth 1: the oldest job, 1 GPU,
    holds the one reservation; a job of a whole node (8 GPUs) has waited `big_waited` seconds
    and a 1-GPU job 8,000 s. `waits`: what the last admissions waited (`Snapshot.recent_waits`)."""
    run = [running(job("r1", 1, 8, rt=5000), ["a"]), running(job("r2", 1, 8, rt=9000), ["b"])]
    queued = [job("head", 1, 1, t=NOW - 9000), job("old-small", 1, 1, t=NOW - 8000),
              job("big", 1, 8, t=NOW - big_waited)]
    snap = Snapshot(NOW, (node("a", 0), node("b", 0)), tuple(run), recent_waits=tuple(waits))
    return admission_cycle(snap, QueueSnapshot.of(queued), depth=1, **kw)


def reserved_jobs(result):
    return [r.job for r in result.reservations]


def test_a_whole_node_job_gets_a_reservation_beyond_the_depth_only_once_it_starves():
    """A job needing a whole node's GPUs that has waited longer than STARVING_QUANTILE (p90) of
    the recent admissions' waits, and at least STARVING_MIN_WAIT, is starving: it gets a
    reservation beyond the depth, so that backfilled jobs stop taking the nodes it needs
    (docs/admission.md, issue 30). Below that bar, with no waits known yet, or when the job is
    small, the depth alone decides."""
    assert (STARVING_QUANTILE, STARVING_MIN_WAIT, STARVING_RESERVATIONS) == (0.9, 3600.0, 8)
    # most recent admissions waited 7,000 s: 6,000 s is not starving
    below = starving_cycle([100.0] * 5 + [7000.0] * 5)
    assert reserved_jobs(below) == ["head"]
    assert below.waiting("big").code == CAPACITY
    # they waited 5,000 s at most: the big job starves and holds a second reservation, when a
    # node is whole again: a, once the head's reservation there (NOW+4900, 1 h) has ended
    above = starving_cycle([100.0] * 5 + [5000.0] * 5)
    assert reserved_jobs(above) == ["head", "big"]
    assert above.waiting("big").code == RESERVED
    assert above.reservations[0].placement.nodes == ("a",)
    assert above.reservations[1].start == NOW + 4900 + 3600
    assert above.reservations[1].placement.nodes == ("a",)
    # the 1-GPU job waited longer still, but any hole fits it: no reservation beyond the depth
    assert above.waiting("old-small").code == CAPACITY
    # the bar is the p90 of the window: one long wait in ten does not raise it
    assert reserved_jobs(starving_cycle([5000.0] * 9 + [99_999.0])) == ["head", "big"]
    # most jobs started at once (the p90 is 0): the big job starves only after an hour
    assert reserved_jobs(starving_cycle([0.0] * 10, big_waited=3000.0)) == ["head"]
    assert reserved_jobs(starving_cycle([0.0] * 10, big_waited=4000.0)) == ["head", "big"]
    # no waits known (a loop just started), or no reservation beyond the depth allowed
    assert reserved_jobs(starving_cycle([])) == ["head"]
    assert reserved_jobs(starving_cycle([0.0] * 10, starving_extra=0)) == ["head"]
    # kept by the next cycle like any reservation (it can only move earlier)
    snap = Snapshot(NOW + 10, (node("a", 0), node("b", 0)), tuple(
        running(job(n, 1, 8, rt=rt), [at]) for n, rt, at in (("r1", 5000, "a"), ("r2", 9000, "b"))),
        reservations=above.carried, recent_waits=above.recent_waits)
    queued = QueueSnapshot.of([job("head", 1, 1, t=NOW - 9000), job("old-small", 1, 1, t=NOW - 8000),
                               job("big", 1, 8, t=NOW - 6000)])
    assert reserved_jobs(admission_cycle(snap, queued, depth=1)) == ["head", "big"]


def test_the_cycle_carries_the_last_admissions_waits_for_the_next_one():
    """`CycleResult.recent_waits`: the snapshot's waits, then this cycle's admissions' (now minus
    submit time), the last `window` of them; the loop and the benchmark pass them on."""
    jobs = [job("a", t=NOW - 50), job("b", t=NOW - 20)]
    result = admission_cycle(Snapshot(NOW, (node("n", 2),), recent_waits=(7.0, 8.0)),
                             QueueSnapshot.of(jobs), window=3)
    assert names(result) == ["a", "b"]
    assert result.recent_waits == (8.0, 50.0, 20.0)
    idle = admission_cycle(Snapshot(NOW, (node("n", 0),), recent_waits=(7.0,)), QueueSnapshot.of(jobs))
    assert idle.recent_waits == (7.0,)
    with pytest.raises(ValueError, match="quantile"):
        admission_cycle(Snapshot(NOW, (node("n", 0),)), QueueSnapshot.of(jobs), quantile=0)


def test_the_reserved_job_of_the_last_cycle_comes_first():
    jobs = [job("a", t=0), job("b", t=1)]
    assert names(cycle([node("n", 1)], jobs)) == ["a"]
    assert names(cycle([node("n", 1)], jobs, reserved_job="b")) == ["b"]


def test_queue_manager_keeps_order_and_replaces_resubmissions():
    manager = QueueManager()
    for j in [job("x", t=3), job("y", t=1), job("z", course="c2", t=2)]:
        manager.add(j)
    manager.add(job("x", t=0))  # resubmitted earlier
    snap = manager.snapshot()
    assert [j.name for j in snap.by_course["c1"]] == ["x", "y"]
    assert snap.position["y"] == ("c1", 2)
    assert manager.remove("x").name == "x" and manager.remove("x") is None
    assert "x" not in manager and len(manager) == 2
    assert snap.smallest_gpu_need == 10**9


# --------------------------------------------------------------------------- reservation and backfill


def blocked_cluster():
    """Node a: 4 busy until NOW+1000; b: 4 busy until NOW+5000. A 1 x 8 job must wait for a."""
    first = job("r1", 1, 4, rt=1100, t=-10)
    second = job("r2", 1, 4, rt=5100, t=-10)
    run = [running(first, ["a"]), running(second, ["b"])]
    return [node("a", 4), node("b", 4)], run


def test_the_first_blocked_job_gets_a_reservation_at_its_earliest_start():
    nodes, run = blocked_cluster()
    result = cycle(nodes, [job("big", 1, 8, t=0)], run)
    assert result.reservation.job == "big"
    assert result.reservation.start == NOW + 1000
    assert result.reservation.placement.nodes == ("a",)
    why = result.waiting("big")
    assert why.code == RESERVED and why.estimated_start == NOW + 1000
    # it says what it waits for: the running jobs holding GPUs, soonest end (max runtime) first
    assert why.message == ("next to start; waits for what your job r1 (until "
                           "14:03 at the latest) and your job r2 (until 15:10 at the latest) hold; "
                           "1st in c1's queue; estimated start 14:03")


def test_a_waiting_job_names_the_jobs_holding_what_it_needs_and_when_they_end():
    """A job behind the reserved head says whose running jobs hold the GPUs it waits for: the
    owner's own by name, other people's by course only, soonest end first, the rest counted."""
    mine = job("j-1", 1, 2, owner="ann", rt=600)
    same_course = job("j-2", 1, 1, owner="bob", rt=3600)
    other_course = job("j-3", 1, 1, owner="cy", course="c2", rt=7200)
    run = [running(mine, ["a"]), running(same_course, ["a"]), running(other_course, ["a"])]
    head, behind = job("j-4", 1, 4, owner="dee", t=1), job("j-5", 1, 2, owner="ann", t=2)
    names = {"j-1": "train-a", "j-4": "big"}
    snap = Snapshot(NOW, (node("a", 0, alloc=4),), tuple(run), {})
    result = admission_cycle(snap, QueueSnapshot.of([head, behind]), label=lambda i: names.get(i, i))
    assert result.reservation.job == "j-4"
    # conservative backfilling: the job behind holds the next reservation, and says who holds it
    assert result.waiting("j-5").message.startswith(
        "holds a reservation; waits for what your job train-a (until 13:55 at the latest), another "
        "job of c1 (until 14:45 at the latest) and 1 more job hold; 2nd in c1's queue; ")
    # with one reservation (EASY backfilling, depth 1) the job behind has none, and says the same
    result = admission_cycle(snap, QueueSnapshot.of([head, behind]), label=lambda i: names.get(i, i), depth=1)
    why = result.waiting("j-5")
    assert why.message.startswith(
        "waiting for 1 node with 2 free nvidia.com/gpu (0 has them now), held by your job train-a "
        "(until 13:55 at the latest), another job of c1 (until 14:45 at the latest) and 1 more job; "
        "2nd in c1's queue; "), why.message
    # the reserved head's owner sees other people's jobs by course only, never their names
    assert result.waiting("j-4").message.startswith(
        "next to start; waits for what another job of c1 (until 13:55 at the "
        "latest), another job of c1 (until 14:45 at the latest) and 1 more job hold; ")
    one = admission_cycle(Snapshot(NOW, (node("a", 0, alloc=4),), (running(other_course, ["a"]),), {}),
                          QueueSnapshot.of([head])).waiting("j-4")
    # notebooks hold the other 3 GPUs: the job's end is named, and no estimate is made up
    assert one.message == ("waiting for 1 node with 4 free nvidia.com/gpu (0 has them now), held by a job "
                           "of course c2 (until 15:45 at the latest); 1st in c1's queue; no estimated "
                           "start yet: notebooks hold what it needs")


def test_backfill_starts_a_job_that_ends_before_the_reservation():
    nodes, run = blocked_cluster()
    result = cycle(nodes, [job("big", 1, 8, t=0), job("short", 1, 4, t=1, rt=900)], run)
    assert names(result) == ["short"]
    assert result.admitted[0].backfilled


def test_backfill_refuses_a_long_job_on_the_nodes_the_reservation_needs():
    nodes, run = blocked_cluster()
    # "long" fits now on a (best fit) or b, but would still run at NOW+1000 on a: only b is allowed
    result = cycle(nodes, [job("big", 1, 8, t=0), job("long", 1, 4, t=1, rt=9000)], run)
    assert names(result) == ["long"]
    assert result.admitted[0].placement.nodes == ("b",)
    # with b full too, the long job waits behind the reservation
    nodes2 = [node("a", 4), node("b", 0)]
    result = cycle(nodes2, [job("big", 1, 8, t=0), job("long", 1, 4, t=1, rt=9000)], run, depth=1)
    assert names(result) == []
    why = result.waiting("long")
    assert why.code == BEHIND_RESERVATION
    assert "a shorter max_runtime could start it now" in why.message


def test_a_reservation_whose_nodes_are_no_longer_best_fit_is_kept_where_it_was_planned():
    nodes, run = blocked_cluster()
    pinned = (("w", 0, "a"),)
    result = cycle(nodes, [job("big", 1, 8, t=0)], run, reserved_job="big", reserved_placement=pinned)
    assert result.reservation.placement.replicas == pinned


def test_a_job_that_no_release_can_place_gets_no_estimate():
    # notebooks hold half of the only node: no running job's end makes room for 8
    result = cycle([node("a", 4)], [job("big", 1, 8)])
    assert result.reservation is None
    why = result.waiting("big")
    assert why.code == CAPACITY and "no estimated start yet: notebooks hold what it needs" in why.message
    assert result.pressure == {G: 4}


# --------------------------------------------------------------------------- quotas and borrowing


def test_course_and_user_ceilings_hold_and_servers_count_in_the_same_ledger():
    courses = {"c1": CourseQuota(limits=Limits(resources=rv(4)), usage=Usage(rv(3), servers=1))}
    result = cycle([node("a", 8)], [job("j", 1, 2)], courses=courses)
    assert result.admitted == ()
    why = result.waiting("j")
    assert why.code == COURSE_QUOTA and why.message.startswith("Course c1 uses 3 of its 4 nvidia.com/gpu")
    users = {"u": (Limits(resources=rv(1)), Usage())}
    result = cycle([node("a", 8)], [job("j", 1, 2)], courses={"c1": CourseQuota(users=users)})
    assert result.waiting("j").code == USER_QUOTA
    # admissions of this cycle count: the second job would cross the ceiling
    courses = {"c1": CourseQuota(limits=Limits(resources=rv(4)))}
    assert names(cycle([node("a", 8)], [job("x", 1, 3, t=0), job("y", 1, 3, t=1)],
                       courses=courses)) == ["x"]


def test_a_job_beyond_its_course_share_runs_borrowed_within_the_borrowing_limit():
    courses = {"c1": CourseQuota(nominal=rv(2), usage=Usage(rv(1)))}
    result = cycle([node("a", 8)], [job("in", 1, 1, t=0), job("out", 1, 1, t=1)], courses=courses)
    assert [(a.job.name, a.borrowed) for a in result.admitted] == [("in", False), ("out", True)]
    courses = {"c1": CourseQuota(nominal=rv(2), borrowing_limit=rv(1), usage=Usage(rv(2)))}
    result = cycle([node("a", 8)], [job("one", 1, 1, t=0), job("two", 1, 1, t=1)], courses=courses)
    assert [(a.job.name, a.borrowed) for a in result.admitted] == [("one", True)]
    assert result.waiting("two").code == BORROWING_LIMIT


def test_a_course_without_a_quota_borrows_everything():
    result = cycle([node("a", 8)], [job("j")])
    assert result.admitted[0].borrowed


# --------------------------------------------------------------------------- preemption


def preemption_setup(borrowed=True, course="other"):
    victim = job("victim", 1, 8, course=course, rt=10_000)
    courses = {"mine": CourseQuota(nominal=rv(8)),
               "other": CourseQuota(nominal=rv(0), usage=Usage(rv(8)))}
    return [node("a", 0)], [running(victim, ["a"], borrowed=borrowed)], courses


def test_a_course_within_its_share_preempts_borrowed_jobs_with_grace():
    nodes, run, courses = preemption_setup()
    result = cycle(nodes, [job("mine1", 1, 8, course="mine")], run, courses, grace=60.0)
    assert [(p.job, p.course, p.for_job, p.ends_by) for p in result.preemptions] == [
        ("victim", "other", "mine1", NOW + 60)]
    assert result.reservation.start == NOW + 60
    assert result.reservation.preempting == ("victim",)
    assert result.waiting("mine1").code == PREEMPTING


def test_jobs_within_their_share_are_never_preempted():
    nodes, run, courses = preemption_setup(borrowed=False)
    result = cycle(nodes, [job("mine1", 1, 8, course="mine")], run, courses)
    assert result.preemptions == ()
    assert result.reservation.start == NOW - 100 + 10_000


def test_a_borrowing_job_does_not_preempt():
    nodes, run, courses = preemption_setup()
    courses["mine"] = CourseQuota(nominal=rv(4))
    result = cycle(nodes, [job("mine1", 1, 8, course="mine")], run, courses)
    assert result.preemptions == ()


def test_a_job_already_preempted_is_not_preempted_again_and_frees_at_its_grace_end():
    nodes, run, courses = preemption_setup()
    run = [RunningJob(run[0].job, run[0].placement, run[0].started, True, ends_by=NOW + 20)]
    result = cycle(nodes, [job("mine1", 1, 8, course="mine")], run, courses)
    assert result.preemptions == ()
    assert result.reservation.start == NOW + 20


def test_a_preempted_job_comes_back_ahead_of_its_course_later_reserved_job():
    """The preemption story (tests/preemption_story.py) cycle by cycle: 3 GPUs, a notebook holds
    one, night's borrowing job the other two; night's later 1-GPU job holds a reservation when
    mine1 (within its course's share) reclaims a GPU. The later job gives its reservation up and
    waits while the borrower stops; back in the queue, the borrower is planned first, and the
    later job does not take the GPU that mine1 leaves."""
    courses = {"mine": CourseQuota(nominal=rv(2)),
               "night": CourseQuota(nominal=rv(0), usage=Usage(rv(2)))}
    borrow = job("borrow", 1, 2, course="night", t=NOW - 200)
    small = job("small", 1, 1, course="night", t=NOW - 50)
    mine1 = job("mine1", 1, 1, course="mine", t=NOW - 10, rt=600)
    full = [NodeState("a", rv(3), rv(0), "NVIDIA-H200")]  # notebook 1 + borrow 2
    run = [running(borrow, ["a"], borrowed=True)]

    first = cycle(full, [small], run, courses)
    assert first.carried == (("small", (("w", 0, "a"),)),)

    second = cycle(full, [small, mine1], run, courses, reservations=first.carried, grace=3.0)
    assert [p.job for p in second.preemptions] == ["borrow"]
    assert [name for name, _ in second.carried] == ["mine1"]  # small gave its reservation up
    waits = second.waiting("small")
    assert waits.code == CAPACITY and "waits for your job borrow" in waits.message, waits

    stopping = [running(borrow, ["a"], borrowed=True, ends_by=NOW + 3)]
    third = cycle(full, [small, mine1], stopping, courses, reservations=second.carried, grace=3.0)
    assert third.preemptions == () and names(third) == []
    assert [name for name, _ in third.carried] == ["mine1"]

    # the borrower is gone and back in the queue: the notebook still holds one GPU of three
    courses["night"] = CourseQuota(nominal=rv(0))
    back = cycle([NodeState("a", rv(3), rv(2), "NVIDIA-H200")], [borrow, small, mine1], (),
                 courses, reservations=third.carried)
    assert names(back) == ["mine1"]
    assert back.carried[0][0] == "borrow"
    assert back.waiting("small").code in (BEHIND_RESERVATION, RESERVED)


def test_notebooks_are_never_preempted_but_pressure_asks_the_culler():
    # the node's GPUs are held by notebooks (not in `running`): nothing to preempt
    courses = {"mine": CourseQuota(nominal=rv(8))}
    result = cycle([node("a", 2)], [job("mine1", 1, 8, course="mine")], (), courses)
    assert result.preemptions == ()
    assert result.pressure == {G: 6}


def test_only_the_victims_needed_are_preempted_lowest_priority_first():
    courses = {"mine": CourseQuota(nominal=rv(8)),
               "other": CourseQuota(nominal=rv(0), usage=Usage(rv(16)))}
    keep = job("keep", 1, 8, course="other", prio=5, rt=10_000)
    lose = job("lose", 1, 8, course="other", prio=0, rt=10_000)
    run = [running(keep, ["a"], borrowed=True), running(lose, ["b"], borrowed=True)]
    result = cycle([node("a", 0), node("b", 0)], [job("m", 1, 8, course="mine")], run, courses)
    assert [p.job for p in result.preemptions] == ["lose"]


# --------------------------------------------------------------------------- windows


def window_setup():
    window = CourseWindow("lab", rv(8), NOW + 3600, NOW + 7200, "Tuesday lab")
    return [node("a", 8), node("b", 8)], window


def test_a_job_of_another_course_that_would_run_into_a_window_waits():
    nodes, window = window_setup()
    result = cycle([node("a", 8)], [job("long", 1, 1, course="x", rt=5000)], windows=(window,))
    assert result.admitted == ()
    why = result.waiting("long")
    assert why.code == RESERVED  # it holds the reservation, at the window's end
    assert result.reservation.start == NOW + 7200
    # two nodes: the window's 8 GPUs stay free, so 8 more may run through it
    assert names(cycle(nodes, [job("long", 1, 8, course="x", rt=5000)], windows=(window,))) == ["long"]


def test_jobs_ending_before_the_window_and_the_course_own_jobs_start():
    nodes, window = window_setup()
    jobs = [job("short", 1, 8, course="x", rt=3000), job("mine", 1, 8, course="lab", rt=9000, t=1)]
    assert sorted(names(cycle(nodes, jobs, windows=(window,)))) == ["mine", "short"]


def test_a_window_blocked_job_behind_a_reservation_says_so():
    window = CourseWindow("lab", rv(16), NOW + 3600, NOW + 7200)
    busy = running(job("r", 1, 8, course="y", rt=500, t=-5), ["b"], started=NOW - 100)
    jobs = [job("big", 2, 8, course="lab", t=0), job("long", 1, 1, course="x", rt=5000, t=1)]
    result = cycle([node("a", 8), node("b", 0)], jobs, [busy], windows=(window,))
    assert result.reservation.job == "big" and result.reservation.start == NOW + 400
    why = result.waiting("long")
    assert why.code == COURSE_WINDOW
    assert "would still run during lab's reservation of 16 nvidia.com/gpu" in why.message


def test_weekly_windows_are_wall_clock_occurrences():
    tz = timezone(timedelta(hours=1))
    since = datetime(2026, 12, 7, tzinfo=tz)  # a Monday
    found = weekly_windows("lab", rv(8), 1, time(10), time(12), since, since + timedelta(days=14), tz)
    assert [datetime.fromtimestamp(w.start, tz).strftime("%a %d %H:%M") for w in found] == [
        "Tue 08 10:00", "Tue 15 10:00"]
    assert all(w.end - w.start == 7200 for w in found)


# --------------------------------------------------------------------------- snapshot and determinism


def test_the_capacity_snapshot_feeds_the_cycle_with_notebooks_counted():
    nodes = [{"metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
              "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"},
                         "conditions": [{"type": "Ready", "status": "True"}]}}]
    notebook = {"metadata": {"name": "jupyter-ana"}, "status": {"phase": "Running"},
                "spec": {"nodeName": "gpu-0", "containers": [
                    {"name": "nb", "resources": {"requests": {"nvidia.com/gpu": "6"}}}]}}
    snap = Snapshot.from_capacity(CapacitySnapshot.from_k8s(nodes, [notebook]), NOW)
    assert snap.nodes[0].free[G] == 2 and snap.nodes[0].gpu_product == "NVIDIA-H200"
    q = QueueSnapshot.of([job("four", 1, 4), job("two", 1, 2, t=1)])
    assert names(admission_cycle(snap, q)) == ["two"]


@pytest.mark.parametrize(("taint", "schedulable"), [
    ("nvidia.com/gpu", True), ("amd.com/gpu", True), ("habana.ai/gaudi", True),
    ("nvidia.com/mig-1g.10gb.me", True),  # a GPU resource's own name (ExtendedResourceToleration)
    ("dedicated", False),  # any other hard taint keeps jobs off: their pods do not tolerate it
])
def test_only_gpu_taints_leave_a_node_to_jobs(taint, schedulable):
    """Job pods tolerate every GPU taint key, so a node with only GPU taints is a job node."""
    nodes = [{"metadata": {"name": "n"}, "spec": {"taints": [
                  {"key": taint, "value": "present", "effect": "NoSchedule"}]},
              "status": {"allocatable": {"cpu": "8", "memory": "32Gi"},
                         "conditions": [{"type": "Ready", "status": "True"}]}}]
    snap = Snapshot.from_capacity(CapacitySnapshot.from_k8s(nodes, []), NOW)
    assert snap.nodes[0].schedulable is schedulable


def test_the_same_input_gives_the_same_decisions_whatever_the_input_order():
    nodes, run = blocked_cluster()
    jobs = [job(f"j{i}", 1 + i % 2, 1 + i % 4, course=f"c{i % 3}", t=i % 5) for i in range(12)]
    a = cycle(nodes, jobs, run)
    b = cycle(nodes, list(reversed(jobs)), run)
    assert [(x.job.name, x.placement) for x in a.admitted] == [(x.job.name, x.placement) for x in b.admitted]
    assert a.reservation == b.reservation


def test_the_admission_core_imports_only_the_standard_library_and_core():
    """docs/architecture.md, rule 1, for the new modules."""
    import ast
    import sys
    from pathlib import Path

    from tests.sources import parse_module

    core = Path(__file__).resolve().parent.parent / "hub_ext" / "core"
    files = [core / "jobs.py", *sorted((core / "admission").glob("*.py"))]
    assert len(files) >= 9
    for path in files:
        for stmt in ast.walk(parse_module(path)):
            if isinstance(stmt, ast.Import):
                roots = [alias.name for alias in stmt.names]
            elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0:
                roots = [stmt.module or ""]
            else:
                continue
            for root in roots:
                top = root.split(".")[0]
                assert top in sys.stdlib_module_names or root.startswith("hub_ext.core"), (path, root)
