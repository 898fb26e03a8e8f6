"""Properties of gang admission over random clusters and queues (hypothesis).

- no node resource is ever over-committed; all replicas of a job are placed or none;
- quotas hold, except for admissions declared as borrowed (which stay within borrowing limits);
- the same input gives the same decisions (whatever the order jobs are given in);
- with exact runtimes, no job starts later than the first reservation it was given, at any
  reservation depth (conservative backfilling, docs/admission.md): neither a backfill nor a job
  submitted later can push a reservation back;
- the reservations of one cycle fit together: at every instant, on every node, running jobs
  (until their max runtime), admissions and reservations active then stay within allocatable;
- with bounded runtimes, every job that can fit the cluster eventually starts;
- over many cycles with shares, borrowing, preemption and notebooks holding part of the nodes, no
  node ever holds more than its allocatable (notebooks, running and stopping jobs together), and a
  preempted job keeps its place: while it stops, no job of its course queued behind it starts or
  holds a reservation, and none holds one kept from before its return (docs/admission.md,
  "Preemption and reservations").
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hub_ext.core.admission import (
    STARVING_RESERVATIONS,
    CourseQuota,
    NodeState,
    QueueSnapshot,
    RunningJob,
    Snapshot,
    admission_cycle,
    queue_key,
    refuse_at_submit,
)
from hub_ext.core.jobs import Job, Role
from hub_ext.core.quota import Limits, Usage
from hub_ext.core.resources import CPU, NVIDIA_GPU, ResourceVector, sum_vectors

pytestmark = pytest.mark.unit

G = NVIDIA_GPU
COURSES = ("a", "b", "c")


def rv(gpus, cpu=0) -> ResourceVector:
    return ResourceVector({G: gpus, CPU: cpu})


@st.composite
def clusters(draw):
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=5))
    return [(f"n{i}", size) for i, size in enumerate(sizes)]


@st.composite
def job_lists(draw, max_jobs=8, prefix="j"):
    jobs = []
    for k in range(draw(st.integers(1, max_jobs))):
        replicas = draw(st.integers(1, 3))
        gpus = draw(st.sampled_from([Fraction(1, 2), 1, 2, 4, 8]))
        roles = [Role("w", replicas, rv(gpus, draw(st.integers(0, 2))))]
        if draw(st.booleans()):
            roles.append(Role("ps", 1, rv(draw(st.sampled_from([1, 2])))))
        jobs.append(Job(f"{prefix}{k}", draw(st.sampled_from(["u1", "u2"])),
                        draw(st.sampled_from(COURSES)), tuple(roles),
                        float(draw(st.integers(1, 20)) * 100), float(draw(st.integers(0, 50))),
                        draw(st.integers(0, 1))))
    return jobs


def alloc(size):
    return ResourceVector({G: size, CPU: 16})


def snapshot_for(cluster, running, now, **kw):
    used: dict[str, list[ResourceVector]] = {}
    for run in running:
        for node, held in run.per_node.items():
            used.setdefault(node, []).append(held)
    nodes = tuple(NodeState(name, alloc(size), (alloc(size) - sum_vectors(used.get(name, []))).clamp())
                  for name, size in cluster)
    return Snapshot(now, nodes, tuple(running), **kw)


def fitting(jobs, cluster):
    empty = [NodeState(name, alloc(size), alloc(size)) for name, size in cluster]
    return [j for j in jobs if refuse_at_submit(j, empty) is None]


@st.composite
def situations(draw):
    cluster = draw(clusters())
    now = 10_000.0
    # some jobs already run: placed one by one on the empty cluster by the cycle itself
    running: list[RunningJob] = []
    for j in draw(job_lists(max_jobs=4, prefix="r")):
        snap = snapshot_for(cluster, running, now)
        result = admission_cycle(snap, QueueSnapshot.of([j]))
        for a in result.admitted:
            running.append(RunningJob(a.job, a.placement.replicas, now - draw(st.integers(0, 500)),
                                      borrowed=draw(st.booleans())))
    waiting = draw(job_lists())
    courses = {}
    for course in COURSES:
        held = sum_vectors(r.job.total for r in running if r.job.course == course)
        ceiling = draw(st.one_of(st.none(), st.integers(0, 12)))
        limits = Limits() if ceiling is None else Limits(
            resources=rv(max(ceiling, int(held[G]) + 1)) if ceiling or held[G] else ResourceVector(),
            zero=frozenset() if ceiling or held[G] else frozenset({G}))
        courses[course] = CourseQuota(
            nominal=rv(draw(st.integers(0, 8))),
            borrowing_limit=draw(st.one_of(st.none(), st.builds(rv, st.integers(0, 8)))),
            limits=limits, usage=Usage(held))
    return cluster, running, waiting, courses, now


@settings(max_examples=60)
@given(situations())
def test_no_overcommit_all_or_nothing_and_quotas_hold(situation):
    cluster, running, waiting, courses, now = situation
    snap = snapshot_for(cluster, running, now, courses=courses)
    result = admission_cycle(snap, QueueSnapshot.of(waiting))
    free = {n.name: n.free for n in snap.nodes}
    usage = {c: q.usage.resources for c, q in courses.items()}
    for a in result.admitted:
        job = a.job
        # all or nothing: every (role, replica) exactly once
        expected = sorted((role.name, k) for role in job.roles for k in range(role.replicas))
        assert sorted((r, k) for r, k, _ in a.placement.replicas) == expected
        requests = {role.name: role.request for role in job.roles}
        for role, _k, node in a.placement.replicas:
            free[node] = free[node] - requests[role]
            assert free[node].is_nonnegative(), f"{node} over-committed by {job.name}"
        before = usage[job.course]
        after = before + job.total
        q = courses[job.course]
        for name in job.total:
            cap = q.limits.ceiling(name)
            assert cap is None or after[name] <= cap, "a hard ceiling was crossed"
        judged = [n for n in job.total if n in q.nominal or n == G]
        within = all(after[n] <= q.nominal[n] for n in judged)
        assert a.borrowed == (not within)
        if a.borrowed and q.borrowing_limit is not None:
            assert all(after[n] <= q.nominal[n] + q.borrowing_limit[n] for n in judged)
        usage[job.course] = after
    by_name = {j.name: j for j in waiting}
    for p in result.preemptions:
        victim = next(r for r in running if r.job.name == p.job)
        assert victim.borrowed, "only borrowed jobs are preempted"
        assert victim.job.course != by_name[p.for_job].course
        assert p.ends_by <= now + snap.grace


@settings(max_examples=40)
@given(situations(), st.randoms(use_true_random=False))
def test_the_same_input_gives_the_same_decisions(situation, rnd):
    cluster, running, waiting, courses, now = situation
    snap = snapshot_for(cluster, running, now, courses=courses)
    first = admission_cycle(snap, QueueSnapshot.of(waiting))
    shuffled = list(waiting)
    rnd.shuffle(shuffled)
    again = admission_cycle(snapshot_for(cluster, running, now, courses=courses),
                            QueueSnapshot.of(shuffled))
    assert [(a.job.name, a.placement, a.borrowed) for a in first.admitted] == \
        [(a.job.name, a.placement, a.borrowed) for a in again.admitted]
    assert first.reservation == again.reservation
    assert first.preemptions == again.preemptions
    assert {j.name: first.waiting(j.name) for j in waiting} == \
        {j.name: again.waiting(j.name) for j in waiting}


def simulate(cluster, jobs, courses=None, limit=400, depth=None, **policy):
    """Run cycles at every job end and arrival, runtimes exactly max_runtime, every reservation
    carried to the next cycle, and the last admissions' waits (starving big jobs get reservations
    beyond the depth); returns starts and promises (the first reservation of each job).
    `depth` None: the single-reservation interface (`reserved_job`) with depth 1. `policy`: more
    arguments of `admission_cycle` (aging, quantile, starving_after)."""
    now = 0.0
    running: list[RunningJob] = []
    waiting = {j.name: j for j in jobs}
    starts: dict[str, float] = {}
    promised: dict[str, float] = {}
    reserved, placement, carried, waits = None, (), (), ()
    for _ in range(limit):
        arrived = [j for j in waiting.values() if j.submit_time <= now]
        usage = {c: sum_vectors(r.job.total for r in running if r.job.course == c) for c in COURSES}
        quotas = {c: CourseQuota(nominal=q.nominal, borrowing_limit=q.borrowing_limit,
                                 usage=Usage(usage[c])) for c, q in (courses or {}).items()}
        if depth is None:
            snap = snapshot_for(cluster, running, now, courses=quotas, reserved_job=reserved,
                                reserved_placement=placement)
            result = admission_cycle(snap, QueueSnapshot.of(arrived), depth=1)
        else:
            snap = snapshot_for(cluster, running, now, courses=quotas, reservations=carried,
                                recent_waits=waits)
            result = admission_cycle(snap, QueueSnapshot.of(arrived), depth=depth, **policy)
            assert len(result.reservations) <= depth + STARVING_RESERVATIONS
            carried, waits = result.carried, result.recent_waits
        for a in result.admitted:
            running.append(RunningJob(a.job, a.placement.replicas, now, a.borrowed))
            starts[a.job.name] = now
            del waiting[a.job.name]
        for p in result.preemptions:
            running = [RunningJob(r.job, r.placement, r.started, r.borrowed, p.ends_by)
                       if r.job.name == p.job else r for r in running]
        for res in result.reservations:
            promised.setdefault(res.job, res.start)
        reserved = result.reserved_job
        placement = result.reservation.placement.replicas if result.reservation else ()
        if not waiting:
            return starts, promised
        upcoming = [r.expected_end for r in running] + [j.submit_time for j in waiting.values()
                                                        if j.submit_time > now]
        assert upcoming, f"stuck at {now}: {sorted(waiting)} wait and nothing runs"
        now = min(upcoming)
        for r in [r for r in running if r.expected_end <= now]:
            running.remove(r)
            if r.preempted and r.expected_end < r.started + r.job.max_runtime:
                waiting[r.job.name] = r.job  # preempted: back in the queue
                starts.pop(r.job.name, None)
    raise AssertionError(f"jobs still waiting after {limit} cycles: {sorted(waiting)}")


@settings(max_examples=50)
@given(clusters(), job_lists(max_jobs=10))
def test_with_exact_runtimes_backfill_never_delays_the_reserved_job(cluster, jobs):
    jobs = fitting(jobs, cluster)
    starts, promised = simulate(cluster, jobs)
    for name, start in promised.items():
        assert starts[name] <= start, f"{name} promised {start}, started {starts[name]}"


@settings(max_examples=80, deadline=None)
@given(clusters(), job_lists(max_jobs=10), st.integers(1, 6), st.sampled_from([0.0, 300.0]),
       st.sampled_from([0.5, 0.9]))
def test_with_exact_runtimes_no_job_starts_later_than_its_first_reservation(
        cluster, jobs, depth, aging, quantile):
    """The guarantee of conservative backfilling: once a job holds a reservation, neither a job
    backfilled around it nor one submitted later (whatever its priority or course) makes it
    start later. Jobs arrive over time (submit 0-50 s) while others run. Reservations that
    starving big jobs hold beyond the depth keep the same promise (short aging and a low
    quantile make them frequent here)."""
    jobs = fitting(jobs, cluster)
    starts, promised = simulate(cluster, jobs, depth=depth, aging=aging, quantile=quantile,
                                starving_after=aging)
    assert set(starts) == {j.name for j in jobs}
    for name, start in promised.items():
        assert starts[name] <= start, f"{name} promised {start}, started {starts[name]}"


@settings(max_examples=80, deadline=None)
@given(clusters(), job_lists(max_jobs=10), st.sampled_from([1, 2]))
def test_reservations_of_starving_big_jobs_beyond_the_depth_keep_their_promise(cluster, jobs, depth):
    """The same guarantee where reservations beyond the depth are frequent: a depth of 1 or 2,
    no aging, no minimum wait and the median of the recent waits as the starving bar."""
    jobs = fitting(jobs, cluster)
    starts, promised = simulate(cluster, jobs, depth=depth, aging=0.0, quantile=0.5,
                                starving_after=0.0)
    assert set(starts) == {j.name for j in jobs}
    for name, start in promised.items():
        assert starts[name] <= start, f"{name} promised {start}, started {starts[name]}"


@settings(max_examples=60, deadline=None)
@given(situations(), st.integers(1, 6),
       st.lists(st.floats(0, 12_000), max_size=20).map(tuple))
def test_the_reservations_of_a_cycle_fit_together(situation, depth, waits):
    """`waits`: the last admissions' waits; jobs waited up to 10,000 s, so big ones may starve
    and hold reservations beyond the depth."""
    cluster, running, waiting, courses, now = situation
    snap = snapshot_for(cluster, running, now, courses=courses, recent_waits=waits)
    result = admission_cycle(snap, QueueSnapshot.of(waiting), depth=depth)
    assert len(result.reservations) <= depth + STARVING_RESERVATIONS
    jobs = {j.name: j for j in waiting}
    spans = [(r.started, r.expected_end, r.job, r.placement) for r in running]
    spans += [(now, now + a.job.max_runtime, a.job, a.placement.replicas) for a in result.admitted]
    spans += [(r.start, r.start + jobs[r.job].max_runtime, jobs[r.job], r.placement.replicas)
              for r in result.reservations]
    preempted = {p.job: p.ends_by for p in result.preemptions}
    spans = [(s, min(e, preempted.get(j.name, e)), j, pl) for s, e, j, pl in spans]
    sizes = dict(cluster)
    for instant in sorted({s for s, *_ in spans} | {now}):
        held: dict[str, ResourceVector] = {}
        for start, end, job, placement in spans:
            if start <= instant < end:
                requests = {role.name: role.request for role in job.roles}
                for role, _k, node in placement:
                    held[node] = held.get(node, ResourceVector()) + requests[role]
        for node, amount in held.items():
            assert (alloc(sizes[node]) - amount).is_nonnegative(), \
                f"{node} over-committed at {instant} by the plan"


@settings(max_examples=40)
@given(clusters(), job_lists(max_jobs=10),
       st.fixed_dictionaries({c: st.integers(0, 8) for c in COURSES}))
def test_with_bounded_runtimes_every_job_eventually_starts(cluster, jobs, shares):
    jobs = fitting(jobs, cluster)
    courses = {c: CourseQuota(nominal=rv(n)) for c, n in shares.items()}
    starts, _ = simulate(cluster, jobs, courses)
    assert set(starts) == {j.name for j in jobs}
    horizon = max((j.submit_time for j in jobs), default=0) + sum(j.max_runtime + 30 for j in jobs)
    assert all(t <= horizon for t in starts.values())


def simulate_with_preemption(cluster, jobs, shares, depth, notebooks, limit=300):
    """Cycles at every arrival and end, runtimes exactly max_runtime, every reservation carried,
    each course with a nominal share (borrowing beyond it, preemption of borrowed jobs with a 30 s
    grace) and `notebooks` (node -> GPUs) held outside the jobs; the invariants of the module
    docstring are checked after every cycle."""
    now = 0.0
    sizes = dict(cluster)
    running: list[RunningJob] = []
    waiting = {j.name: j for j in jobs}
    carried: tuple = ()
    waits: tuple = ()
    requeued: set[str] = set()
    for _ in range(limit):
        arrived = [j for j in waiting.values() if j.submit_time <= now]
        used: dict[str, list[ResourceVector]] = {}
        for run in running:
            for node, held in run.per_node.items():
                used.setdefault(node, []).append(held)
        nodes = tuple(NodeState(name, alloc(size), (alloc(size) - rv(notebooks.get(name, 0))
                                                    - sum_vectors(used.get(name, []))).clamp())
                      for name, size in cluster)
        usage = {c: sum_vectors(r.job.total for r in running if r.job.course == c) for c in COURSES}
        quotas = {c: CourseQuota(nominal=rv(n), usage=Usage(usage[c])) for c, n in shares.items()}
        snap = Snapshot(now, nodes, tuple(running), quotas, reservations=carried,
                        recent_waits=waits)
        result = admission_cycle(snap, QueueSnapshot.of(arrived), depth=depth)
        queued = {j.name: j for j in arrived}

        # a preempted job keeps its place (cycle.py, rule 8)
        stopping = [r.job for r in running if r.preempted]
        stopping += [r.job for r in running if r.job.name in {p.job for p in result.preemptions}]
        later = [a.job for a in result.admitted] + [queued[r.job] for r in result.reservations]
        for first in stopping:
            for job in later:
                assert not (job.course == first.course and queue_key(job) > queue_key(first)), (
                    f"{job.name} started or holds a reservation while {first.name}, ahead of it "
                    f"in {first.course}'s queue, is preempted at {now}")
        for name in requeued & queued.keys():
            first = queued[name]
            for kept, _placement in carried:
                job = queued.get(kept)
                assert job is None or not (job.course == first.course
                                           and queue_key(job) > queue_key(first)), (
                    f"{kept} kept a reservation made before {name}, ahead of it, came back")

        for a in result.admitted:
            running.append(RunningJob(a.job, a.placement.replicas, now, a.borrowed))
            del waiting[a.job.name]
        cut = {p.job: p.ends_by for p in result.preemptions}
        running = [RunningJob(r.job, r.placement, r.started, r.borrowed, cut[r.job.name])
                   if r.job.name in cut else r for r in running]
        carried, waits = result.carried, result.recent_waits

        # no node holds more than its allocatable: notebooks, running and stopping jobs
        held = {name: rv(notebooks.get(name, 0)) for name in sizes}
        for run in running:
            for node, amount in run.per_node.items():
                held[node] = held[node] + amount
        for node, amount in held.items():
            assert (alloc(sizes[node]) - amount).is_nonnegative(), f"{node} over-committed at {now}"

        if not waiting:
            return
        upcoming = [r.expected_end for r in running] + [j.submit_time for j in waiting.values()
                                                        if j.submit_time > now]
        if not upcoming:
            return  # what waits cannot start beside the notebooks: nothing more happens
        now = min(upcoming)
        requeued = set()
        for r in [r for r in running if r.expected_end <= now]:
            running.remove(r)
            if r.preempted and r.expected_end < r.started + r.job.max_runtime:
                waiting[r.job.name] = r.job  # preempted: back in the queue, in its place
                requeued.add(r.job.name)


def _story_jobs():
    """tests/preemption_story.py: 3 GPUs, a notebook holds one; b borrows two, queues a 1-GPU
    job behind; a (guaranteed 2 GPUs) then needs one."""
    def one(name, course, gpus, submit, runtime):
        return Job(name, "u1", course, (Role("w", 1, rv(gpus)),), runtime, submit)
    return [one("borrow", "b", 2, 0.0, 2000.0), one("small", "b", 1, 1.0, 2000.0),
            one("mine", "a", 1, 2.0, 600.0)]


@settings(max_examples=80, deadline=None)
@given(clusters(), job_lists(max_jobs=10),
       st.fixed_dictionaries({c: st.integers(0, 8) for c in COURSES}), st.integers(1, 6),
       st.dictionaries(st.sampled_from([f"n{i}" for i in range(5)]), st.integers(0, 2), max_size=3))
@example(cluster=[("n0", 3)], jobs=_story_jobs(), shares={"a": 2, "b": 0, "c": 0}, depth=4,
         notebooks={"n0": 1})
def test_preemption_keeps_a_job_s_place_and_no_node_is_ever_over_committed(
        cluster, jobs, shares, depth, notebooks):
    sizes = dict(cluster)
    notebooks = {n: min(g, sizes[n]) for n, g in notebooks.items() if n in sizes}
    room = [(name, size - notebooks.get(name, 0)) for name, size in cluster]
    jobs = fitting(jobs, [(name, size) for name, size in room if size > 0])
    simulate_with_preemption(cluster, jobs, shares, depth, notebooks)
