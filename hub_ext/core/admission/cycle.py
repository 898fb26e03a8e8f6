"""One admission cycle: which waiting jobs start now, where, and why the others wait.

As in Kueue's scheduler, `admission_cycle(snapshot, queues)` decides on an immutable snapshot and
returns decisions; creating pods, writing the ledger and signalling preempted jobs happen elsewhere
(issue 17). The rules, in the order a job meets them (docs/explanation/gang-admission.md, "Distributed jobs:
gang admission"):

1. Order: the jobs that held reservations after the last cycle come first, in the order they got
   them (each is planned again on its nodes first, so it can only move earlier); then courses
   take turns by Dominant Resource Fairness (fairness.py), each course's queue in priority,
   submit time, name order (queue.py).
2. Quotas: the course's and the user's hard ceilings from the ledger (`quota.admit`, servers and
   jobs counted together) are never crossed -> `course_quota` / `user_quota`.
3. Borrowing: a job that takes its course beyond its nominal share runs on borrowed capacity
   (`Admission.borrowed`), within the course's borrowing limit -> `borrowing_limit`.
4. Windows: a job of another course that would still run inside a course's reserved window starts
   only if the reservation stays free -> `course_window` (windows.py).
5. Gang: all replicas are placed at once on nodes that fit each of them, or none is (assigner.py)
   -> `capacity`.
6. Reservations: each job that passes 2-4 but not 5 gets a reservation at its earliest start,
   around every reservation before it, up to `depth` of them (conservative backfilling,
   backfill.py; docs/admission.md says why and shows the measurements), and up to
   `starving_extra` more for starving jobs of a whole node or more (`_reserve_starving`).
   For the first one, when its job is within its course's share and borrowed jobs of others
   hold the room, they are preempted with a grace period (preemption.py) -> `reserved` / `preempting`.
7. Backfill: any other job starts only if it fits now and delays no reservation ->
   `behind_reservation`.
8. A preempted job keeps its place: from the cycle that preempts it until it is back in the
   queue, the jobs of its course queued behind it neither start nor hold a reservation (a kept
   one is given up), so that it is planned before them when it returns -> `capacity` with a
   sentence naming it (docs/admission.md, "Preemption and reservations").

The scan stops once all `depth` reservations are held and no node has as much free as the
smallest waiting replica asks for (within what the reservations leave): nothing further could
start or get a reservation. Reasons are built only when asked (`CycleResult.waiting`), so a
cycle over 10,000 waiting jobs writes no 10,000 sentences.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from functools import cached_property
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from hub_ext.core.admission.assigner import NANO, FreeIndex, Placement, _is_gpu, nanos
from hub_ext.core.admission.backfill import (
    InTimeOrder,
    Release,
    Reservation,
    _place_pinned,
    earliest_start,
)
from hub_ext.core.admission.fairness import FairOrder
from hub_ext.core.admission.preemption import choose_victims, first_reclaimer
from hub_ext.core.admission.queue import QueueSnapshot, queue_key
from hub_ext.core.admission.snapshot import CourseWindow, RunningJob, Snapshot
from hub_ext.core.admission.windows import WindowBook
from hub_ext.core.jobs import Job
from hub_ext.core.quota import Limits, Usage, admit
from hub_ext.core.resources import (
    PODS,
    ZERO,
    ResourceVector,
    human_quantity,
    is_gpu_resource,
    sum_vectors,
)

__all__ = [
    "BEHIND_RESERVATION",
    "BORROWING_LIMIT",
    "CAPACITY",
    "COURSE_QUOTA",
    "COURSE_WINDOW",
    "PREEMPTING",
    "RESERVATION_AGING",
    "RESERVATION_DEPTH",
    "RESERVED",
    "STARVING_MIN_WAIT",
    "STARVING_QUANTILE",
    "STARVING_RESERVATIONS",
    "USER_QUOTA",
    "WAITING_CODES",
    "WAIT_WINDOW",
    "Admission",
    "CycleResult",
    "Preemption",
    "Waiting",
    "admission_cycle",
    "format_clock",
    "iso_clock",
    "nearest_rank",
    "policy_problem",
]

# Reason codes of waiting jobs: stable strings (Prometheus labels); never reword them.
CAPACITY = "capacity"
RESERVED = "reserved"
PREEMPTING = "preempting"
BEHIND_RESERVATION = "behind_reservation"
COURSE_QUOTA = "course_quota"
USER_QUOTA = "user_quota"
BORROWING_LIMIT = "borrowing_limit"
COURSE_WINDOW = "course_window"
RESERVATION_DEPTH = 4
"""How many waiting jobs hold a reservation at once (docs/admission.md: chosen by measurement)."""
RESERVATION_AGING = 300.0
"""Seconds after which a waiting job is served in submit order, ahead of fair order, for the
reservations (docs/admission.md)."""
STARVING_QUANTILE = 0.9
"""A job that needs a whole node's GPUs or more is starving, and gets a reservation beyond the
depth, once it has waited longer than this quantile of `Snapshot.recent_waits` (and `aging`)
(docs/admission.md: chosen by measurement on the public traces)."""
STARVING_MIN_WAIT = 3600.0
"""Seconds a job needing a whole node's GPUs must have waited, at least, to be starving: when most
jobs start at once the quantile of the recent waits is 0, and without this floor every such job
past `aging` would count as starving (docs/admission.md: chosen by measurement)."""
STARVING_RESERVATIONS = 8
"""How many reservations starving big jobs may hold beyond `RESERVATION_DEPTH`."""
WAIT_WINDOW = 1000
"""How many of the last admissions' waits `CycleResult.recent_waits` keeps."""
WAITING_CODES = frozenset({CAPACITY, RESERVED, PREEMPTING, BEHIND_RESERVATION, COURSE_QUOTA,
                           USER_QUOTA, BORROWING_LIMIT, COURSE_WINDOW})


@dataclass(frozen=True)
class Admission:
    """Start `job` now with this placement. `borrowed`: beyond its course's nominal share (it may
    be preempted); `backfilled`: started behind the reserved job without delaying it."""

    job: Job
    placement: Placement
    borrowed: bool = False
    backfilled: bool = False


@dataclass(frozen=True)
class Preemption:
    """Stop running job `job` (of `course`) for `for_job`; it must be gone by `ends_by`."""

    job: str
    course: str
    for_job: str
    ends_by: float


@dataclass(frozen=True)
class Waiting:
    """Why a job waits: a stable `code` and one sentence for the student."""

    job: str
    code: str
    message: str
    estimated_start: float | None = None


def format_clock(t: float, now: float) -> str:
    """"14:20" (UTC) today, "Tue 14:20" on another day."""
    when = datetime.fromtimestamp(t, timezone.utc)
    same_day = when.date() == datetime.fromtimestamp(now, timezone.utc).date()
    return when.strftime("%H:%M" if same_day else "%a %H:%M")


def iso_clock(t: float, now: float) -> str:
    """"2026-12-04T14:20Z": a time in a reason as ISO 8601 (UTC, to the minute), which the
    classhub pages and the JupyterLab panel show in the reader's own format and time zone, the
    one format of every time they show (the service's clock; `format_clock` is for logs and
    benchmarks)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


@dataclass(frozen=True)
class CycleResult:
    """The decisions of one cycle. `carried` goes into the next snapshot's `reservations`."""

    now: float
    admitted: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    reservation: Reservation | None
    pressure: Mapping[str, Fraction]
    """GPU units the reserved job misses now: what the culler's pressure reclaim may free from idle
    notebooks (`culling.decide(pressure=...)`), never by preempting them."""
    examined: int
    """How many waiting jobs the cycle looked at before it could stop."""
    _explain: Callable[[str], Waiting | None] = field(repr=False, compare=False)
    reservations: tuple[Reservation, ...] = ()
    """Every reservation after this cycle, in order (the head first): hand them to the next
    snapshot (`Snapshot.reservations`, see `carried`) so that each keeps its place."""
    recent_waits: tuple[float, ...] = ()
    """The snapshot's `recent_waits` with this cycle's admissions' waits added, the last
    `window` of them: hand them to the next snapshot (`Snapshot.recent_waits`)."""

    @property
    def carried(self) -> tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...]:
        """`reservations` as `Snapshot.reservations` takes them: ((job, placement), ...)."""
        return tuple((r.job, r.placement.replicas) for r in self.reservations)

    @property
    def reserved_job(self) -> str | None:
        return None if self.reservation is None else self.reservation.job

    def waiting(self, name: str) -> Waiting | None:
        """Why job `name` waits after this cycle (None if it was admitted or is not queued)."""
        return self._explain(name)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class _Cycle:
    """The working state of one cycle; only `admission_cycle` uses it."""

    def __init__(self, snapshot: Snapshot, queues: QueueSnapshot,
                 clock: Callable[[float, float], str], depth: int, aging: float,
                 label: Callable[[str], str] = str, starving: float | None = None,
                 starving_extra: int = 0, starving_after: float = STARVING_MIN_WAIT) -> None:
        self.s, self.q, self.clock, self.now = snapshot, queues, clock, snapshot.now
        # a job waiting longer than this many seconds is starving (None: no waits known yet)
        self.starving, self.starving_extra = starving, starving_extra
        self.starving_after = starving_after
        self.label = label
        # the snapshot's index, copied on write (ClusterState keeps it between cycles)
        self.index = snapshot.free_index.clone()
        self.positions = self.index.positions
        self.totals = nanos(snapshot.total_allocatable)
        courses = set(snapshot.courses) | set(queues.by_course)
        self.usage: dict[str, dict[str, int]] = {
            c: nanos(snapshot.quota(c).usage.resources) for c in sorted(courses)
        }
        self.nominal = {c: nanos(snapshot.quota(c).nominal) for c in courses}
        self.added: _Sums[str] = _Sums()
        self.user_added: _Sums[tuple[str, str]] = _Sums()
        self.book = WindowBook(snapshot.windows, snapshot.running, self.now, self.totals)
        self.started: list[Release] = []
        self.admitted: list[Admission] = []
        self.admitted_names: set[str] = set()
        self.codes: dict[str, tuple[Any, ...]] = {}
        self.depth, self.aging = depth, aging
        # the reservations, in the order they were made (kept ones first): conservative
        # backfilling up to `depth` (backfill.py); `plan` is `index` minus what they hold
        self.res: list[Reservation] = []
        self.res_jobs: list[Job] = []
        self.res_extra: list[dict[int, dict[str, int]]] = []
        self.res_releases: list[Release] = []
        self.res_index: dict[str, int] = {}
        self.plan: FreeIndex | None = None
        self._running_releases: tuple[Release, ...] | None = None
        self.preemptions: list[Preemption] = []
        self.pressure: dict[str, Fraction] = {}
        self.kept = tuple((name, placement) for name, placement in snapshot.kept_reservations
                          if name in queues.jobs)
        # per course, its first job (in queue order) that is preempted and not back in the
        # queue yet: the course's jobs queued behind it wait for it (rule 8)
        self.returning: dict[str, Job] = {}
        for run in snapshot.preempted:
            self._returns(run.job)
        self.order = FairOrder(queues, self.usage, self.totals,
                               {c: snapshot.quota(c).weight for c in courses},
                               skip={name for name, _ in self.kept})

    @property
    def reservation(self) -> Reservation | None:
        """The head reservation (the one the culler's pressure and preemption serve)."""
        for res in self.res:
            if res.job not in self.admitted_names:
                return res
        return None

    def live(self) -> list[tuple[int, Reservation]]:
        return [(k, r) for k, r in enumerate(self.res) if r.job not in self.admitted_names]

    def _returns(self, job: Job) -> None:
        """`job` was preempted: it comes back to its course's queue in its place (rule 8)."""
        first = self.returning.get(job.course)
        if first is None or queue_key(job) < queue_key(first):
            self.returning[job.course] = job

    def behind_preempted(self, job: Job) -> Job | None:
        """The preempted job of `job`'s course, queued ahead of it, that it waits for; or None.

        Why: reservations are planned around running jobs as if they ran to their max runtime;
        a preempted job goes back to the queue by submit time, and the later jobs of its course
        must not take its place (a kept reservation, or a start on the capacity it gave up)
        while it stops."""
        first = self.returning.get(job.course)
        if first is None or first.name == job.name or queue_key(first) > queue_key(job):
            return None
        return first

    # -- the scan
    def run(self) -> int:
        # 0. reclaiming goes first (preemption.py): a course head within its share that needs
        #    borrowed capacity back plans (and preempts) before kept reservations of borrowers
        if not self.kept or self.borrowing(self.q.jobs[self.kept[0][0]])[0]:
            reclaimer = self._reclaimer()
            if reclaimer is not None:
                self.kept = tuple(k for k in self.kept if k[0] != reclaimer.name)
                self.order.skip.add(reclaimer.name)
                self.consider(reclaimer, head=True)
        examined = 0
        refused: set[str] = set()
        # 1. every kept reservation is planned again first, in its order, on its own nodes: it
        #    can only move earlier (backfill.py); nothing is admitted yet
        for name, placement in self.kept:
            job = self.q.jobs[name]
            examined += 1
            first = self.behind_preempted(job)
            if first is not None:  # its reservation is given up: the preempted job goes first
                self.codes[name] = (CAPACITY, first.name)
                refused.add(name)
            elif self.precheck(job) is None:
                self.reserve(job, borrowed=self.borrowing(job)[0],
                             pinned=Placement(placement) if placement else None)
            else:
                refused.add(name)
        # 2. kept jobs that fit now start now
        smallest_nanos = self.q.smallest_gpu_need
        for name, _ in self.kept:
            if name in refused:
                continue  # refused by a quota or the borrowing limit, or behind a preempted job
            self.consider(self.q.jobs[name])
        # 3. the head of the whole queue, in the order strict FIFO takes it (priority, submit
        #    time, name), among jobs that waited `aging` seconds or more: each starts now or gets
        #    a reservation, until `depth` are held (younger jobs: fair order, step 4)
        if len(self.live()) < self.depth:
            old = self.now - self.aging
            for job in heapq.merge(*self.q.by_course.values(), key=queue_key):
                if len(self.live()) >= self.depth:
                    break
                if (job.submit_time > old or job.name in self.res_index
                        or job.name in self.order.skip):
                    continue
                examined += 1
                self.order.skip.add(job.name)
                self.consider(job, head=True)
        # 3b. a starving job that needs a whole node's GPUs or more (it waited `aging`,
        #     `starving_after` and longer than the `quantile` of the recent admissions' waits)
        #     gets a reservation beyond the depth, in strict FIFO order, up to `starving_extra`
        #     more (docs/admission.md)
        if self.starving is not None and self.starving_extra:
            examined += self._reserve_starving()
        # 4. every other job in fair order: it starts now if it delays no reservation
        for job in self.order:
            if smallest_nanos is not None and len(self.live()) >= self.depth:
                # every reservation is held and nothing left could start: only what the
                # reservations leave is free
                limits = self.limits(self.now + self.q.shortest_runtime)
                if self.index.max_free_any(limits) < smallest_nanos:
                    break
            examined += 1
            self.consider(job)
        return examined

    def _big(self, job: Job) -> bool:
        """Whether `job` needs at least the GPUs of the largest node (it can never be backfilled
        into the holes smaller jobs leave)."""
        return self.whole_node > 0 and job.gpus >= self.whole_node

    @cached_property
    def whole_node(self) -> float:
        """The GPUs of one kind on the largest node, computed once per cycle."""
        return float(max((a for node in self.s.nodes for n, a in node.allocatable.items()
                          if is_gpu_resource(n)), default=0))

    def _reserve_starving(self) -> int:
        """Reserve for every starving big job (`starving`), in strict FIFO order, beyond the
        depth, until `depth + starving_extra` reservations are held; how many it examined.

        Why: in a cluster overloaded for hours (the public DLRM and openb traces), a dozen jobs
        of a whole node each wait at once, and only the `depth` first in line are protected: the
        others see every node they could use refilled by backfilled small jobs with long max
        runtimes, and wait longer than under strict FIFO. A reservation for each of them holds
        the nodes as they free up. The wait bar keeps the extra reservations (each costs a
        replay of the running jobs per cycle, and holds capacity from backfilling) for the jobs
        that already waited longer than most recent admissions, and at least `starving_after`
        (an hour: when most jobs start at once, the quantile is 0); aged big jobs within it, or
        with no waits to compare with yet, get none (docs/admission.md: measurements)."""
        bar = self.now - max(self.aging, self.starving_after, self.starving or 0.0)
        cap = self.depth + self.starving_extra
        examined = 0
        for job in heapq.merge(*(_submitted_before(jobs, bar) for jobs in self.q.by_course.values()),
                               key=queue_key):
            if len(self.live()) >= cap:
                break
            if (job.name in self.res_index or job.name in self.order.skip
                    or job.name in self.admitted_names or not self._big(job)):
                continue
            examined += 1
            self.order.skip.add(job.name)
            self.consider(job, head=True, depth=len(self.live()) + 1)
        return examined

    def _reclaimer(self) -> Job | None:
        if not self.s.borrowing:
            return None

        def may_reclaim(job: Job) -> bool:
            return (self.quota(job, []) is None and not self.borrowing(job)[0]
                    and self.book.blocking(job, self.now, self.now + job.max_runtime) is None
                    and not self._fits_ignoring_reservation(job))

        return first_reclaimer(
            (jobs[0] for jobs in self.q.by_course.values() if jobs), may_reclaim,
            lambda job: choose_victims(job, self.index, self.s.borrowing, self.over_share, self.positions))

    def precheck(self, job: Job) -> tuple[Any, ...] | None:
        """A quota, borrowing-limit or window refusal for `job` starting now, or None."""
        end = self.now + job.max_runtime
        refusal = self.quota(job, [j for r, j in zip(self.res, self.res_jobs, strict=True)
                                   if r.start < end and j.name != job.name
                                   and r.job not in self.admitted_names])
        if refusal is not None:
            self.codes[job.name] = refusal
            return refusal
        _borrowed, limit = self.borrowing(job)
        if limit is not None:
            self.codes[job.name] = (BORROWING_LIMIT, limit)
            return self.codes[job.name]
        return None

    def limits(self, end: float, skip: str | None = None,
               before: int | None = None) -> dict[int, dict[str, int]] | None:
        """Per node, what a job running from now to `end` may take there without delaying any
        reservation starting before `end` (the smallest `extra` of each; a fresh copy).

        `skip`: the job's own reservation. `before`: only reservations made before that one
        count (a reserved job starting on its own nodes: the later ones were planned with it
        holding them already)."""
        merged: dict[int, dict[str, int]] = {}
        for k, res in self.live():
            if res.start >= end or res.job == skip or (before is not None and k >= before):
                continue
            for i, room in self.res_extra[k].items():
                have = merged.get(i)
                if have is None:
                    merged[i] = dict(room)
                else:
                    for name, amount in room.items():
                        if amount < have.get(name, amount):
                            have[name] = amount
        return merged or None

    def consider(self, job: Job, head: bool = False, depth: int | None = None) -> None:
        own = self.res_index.get(job.name)
        depth = self.depth if depth is None else depth
        # the cheap test (no node has one replica's worth free now) may only skip a job that
        # could not get a reservation either: every one of the `depth` is held
        if (own is None and not head and len(self.live()) >= self.depth
                and not all(self.index.can_hold(role) for role in job.roles)):
            self.codes[job.name] = (CAPACITY,)
            return
        first = self.behind_preempted(job)
        if first is not None:
            self.codes[job.name] = (CAPACITY, first.name)
            return
        end = self.now + job.max_runtime
        if own is None and self.precheck(job) is not None:
            return
        borrowed, _limit = self.borrowing(job)
        window = self.book.blocking(job, self.now, end)
        placement = None
        if window is None:
            if own is not None:
                pinned = self.res[own].placement
                placement = self.place_pinned(job, pinned, self.limits(end, before=own))
            if placement is None:
                placement = self.index.place(job, self.limits(end, skip=job.name))
        if placement is not None:
            self.admit(job, placement, borrowed,
                       backfilled=own is None and any(True for _ in self.live()))
        elif own is not None:
            pass  # keeps its reservation (and its code from step 1)
        elif window is None and len(self.live()) < depth:
            self.reserve(job, borrowed=borrowed)
        elif window is not None and not self.live():
            self.reserve(job, borrowed=borrowed, window=window)
        elif window is not None:
            self.codes[job.name] = (COURSE_WINDOW, window)
        elif self.live() and self._fits_ignoring_reservation(job):
            self.codes[job.name] = (BEHIND_RESERVATION,)
        else:
            self.codes[job.name] = (CAPACITY,)

    def _fits_ignoring_reservation(self, job: Job) -> bool:
        placement = self.index.place(job)
        if placement is None:
            return False
        self._undo(job, placement)
        return True

    def _undo(self, job: Job, placement: Placement) -> None:
        needs = {role.name: role.need for role in job.roles}
        for role, _r, node in placement.replicas:
            self.index.take(self.positions[node], needs[role], -1)

    # -- quotas
    def quota(self, job: Job, booked: list[Job]) -> tuple[str, str] | None:
        course, owner = job.course, job.owner
        cq = self.s.quota(course)
        user_limits, user_usage = cq.users.get(owner, (_NO_LIMITS, _NO_USAGE))
        if not _may_refuse(cq.limits, job.total) and not _may_refuse(user_limits, job.total):
            return None  # no ceiling on what it asks: `admit` would allow it, sums or not
        more = self.added.get(course, ZERO)
        user_more = self.user_added.get((course, owner), ZERO)
        for other in booked:  # reserved jobs that start while this one would still run
            if other.course == course:
                more = more + other.total
                if other.owner == owner:
                    user_more = user_more + other.total
        decision = admit(
            job.total,
            (user_limits, _plus(user_usage, user_more)),
            (cq.limits, _plus(cq.usage, more)),
            course,
            servers=0,
        )
        if decision:
            return None
        code = COURSE_QUOTA if decision.reason_code.startswith("course") else USER_QUOTA
        return (code, decision.message)

    def borrowing(self, job: Job) -> tuple[bool, str | None]:
        """(borrowed?, refusal sentence when beyond the borrowing limit)."""
        course = job.course
        used, nominal = self.usage.get(course, {}), self.nominal.get(course, {})
        over = [name for name, amount in job.total_need.items()
                if (name in nominal or _is_gpu(name))
                and used.get(name, 0) + amount > nominal.get(name, 0)]
        if not over:
            return False, None
        limit = self.s.quota(course).borrowing_limit
        if limit is None:
            return True, None
        allowed = nanos(limit)
        for name in over:
            if used.get(name, 0) + job.total_need[name] > nominal.get(name, 0) + allowed.get(name, 0):
                share = ResourceVector({name: Fraction(nominal.get(name, 0), NANO)})
                return True, (
                    f"Course {course} would go beyond its share ({share.human()}) by more than its "
                    f"borrowing limit ({human_quantity(name, Fraction(allowed.get(name, 0), NANO))}); "
                    "it starts when the course's other jobs end"
                )
        return True, None

    def over_share(self, course: str, taken_back: Mapping[str, int]) -> bool:
        used, nominal = self.usage.get(course, {}), self.nominal.get(course, {})
        return any(
            used.get(name, 0) - taken_back.get(name, 0) > nominal.get(name, 0)
            for name in used if name in nominal or is_gpu_resource(name)
        )

    # -- decisions
    def admit(self, job: Job, placement: Placement, borrowed: bool, backfilled: bool) -> None:
        course = job.course
        self.admitted.append(Admission(job, placement, borrowed, backfilled))
        self.admitted_names.add(job.name)
        self.order.charge(course, job.total_need)
        self.added.add(course, job.total)
        key = (course, job.owner)
        self.user_added.add(key, job.total)
        end = self.now + job.max_runtime
        self.book.book(job, self.now, end)
        held = _held(job, placement, self.positions)
        self.started.append((end, job.name, held))
        needs = {role.name: role.need for role in job.roles}
        if self.plan is not None:
            own = self.res_index.get(job.name)
            if own is not None:  # its reservation's hold gives way to what it holds now
                for i, back in _held(job, self.res[own].placement, self.positions).items():
                    self.plan.release(i, back)
                self.res_releases = [r for r in self.res_releases if r[1] != job.name]
            for role, _r, node in placement.replicas:
                self.plan.take(self.positions[node], needs[role])
        for k, res in self.live():  # what it takes from each reservation it would still run at
            if res.start < end:
                extra = self.res_extra[k]
                for role, _r, node in placement.replicas:
                    room = extra.get(self.positions[node])
                    if room is not None:
                        for name, amount in needs[role]:
                            room[name] = room.get(name, 0) - amount

    def releases(self, victims: tuple[RunningJob, ...] = ()) -> InTimeOrder | list[Release]:
        """When running jobs (and this cycle's admissions) give their capacity back, in the order
        the reservation search replays them (`+ list` adds more): the running jobs' releases come
        in time order (ClusterState keeps them so), and the search reads only as far as it needs
        (backfill.InTimeOrder). With victims, whose ends move, a list to sort."""
        if self._running_releases is None:  # kept per running job by ClusterState
            self._running_releases = self.s.running_releases
        if not victims:
            return InTimeOrder(self._running_releases, self.started)
        cut = {run.job.name for run in victims}
        limit = self.now + self.s.grace
        return [(min(end, limit) if name in cut else end, name, held)
                for end, name, held in (*self.started, *self._running_releases)]

    def reserve(self, job: Job, borrowed: bool = False, window: CourseWindow | None = None,
                pinned: Placement | None = None) -> None:
        """Give `job` a reservation: the earliest time all its replicas fit around the running
        jobs and every reservation made before it (held from now until they end: backfill.py)."""
        head = not self.live()
        victims: tuple[RunningJob, ...] = ()
        if head and not borrowed and window is None:
            # only borrowed jobs can be victims: the snapshot keeps them apart (choose_victims)
            victims = choose_victims(job, self.index, self.s.borrowing, self.over_share,
                                     self.positions) or ()
        if self.plan is None:
            self.plan = self.index.clone()
        found = None
        for only_pinned in ((True, False) if pinned is not None else (False,)):
            # a kept reservation stays on its nodes (it can only move earlier there); only if
            # they can no longer hold it (a node gone, a job past its max runtime) is it moved
            found = earliest_start(
                job, self.plan, self.releases(victims) + self.res_releases, self.now,
                allowed=lambda t: self.book.blocking(job, t, t + job.max_runtime) is None,
                extra_times=[w.end for w in self.book.windows],
                pinned=pinned, only_pinned=only_pinned,
            )
            if found is not None:
                break
        if head:
            self.pressure = self._shortfall(job)
        if found is None:
            self.codes[job.name] = (CAPACITY,)
            return
        start, placement, extra = found
        self.res_index[job.name] = len(self.res)
        self.res.append(Reservation(job.name, start, placement,
                                    tuple(run.job.name for run in victims)))
        self.res_jobs.append(job)
        self.res_extra.append(extra)
        held = _held(job, placement, self.positions)
        needs = {role.name: role.need for role in job.roles}
        for role, _r, node in placement.replicas:
            self.plan.take(self.positions[node], needs[role])
        self.res_releases.append((start + job.max_runtime, job.name, held))
        self.book.book(job, start, start + job.max_runtime)
        for run in victims:
            self.preemptions.append(Preemption(run.job.name, run.job.course, job.name,
                                               min(run.expected_end, self.now + self.s.grace)))
            self._returns(run.job)
        self.codes[job.name] = (PREEMPTING if victims else RESERVED,)

    def place_pinned(self, job: Job, pinned: Placement,
                     limits: dict[int, dict[str, int]] | None) -> Placement | None:
        """`job` on exactly its reservation's nodes now, within `limits`; or nothing."""
        placed = _place_pinned(self.index, job, pinned)
        if placed is None or not limits:
            return placed
        needs = {role.name: role.need for role in job.roles}
        room = {i: dict(r) for i, r in limits.items()}
        for role, _r, node in placed.replicas:
            i = self.positions[node]
            if i in room:
                for name, amount in needs[role]:
                    room[i][name] = room[i].get(name, 0) - amount
                    if room[i][name] < 0:
                        self._undo(job, placed)
                        return None
        return placed

    def _shortfall(self, job: Job) -> dict[str, Fraction]:
        free = self.index.free_gpus()  # from the buckets, not a loop over every node
        missing = {name: Fraction(amount - free.get(name, 0), NANO)
                   for name, amount in job.total_need.items()
                   if is_gpu_resource(name) and amount > free.get(name, 0)}
        if not missing:  # enough in total, but scattered: one replica's worth is the ask
            biggest = max(job.roles, key=lambda r: sum(a for _, a in r.need))
            missing = {n: a for n, a in biggest.request.items() if is_gpu_resource(n)}
        return missing

    # -- reasons, on demand
    def explain(self, name: str) -> Waiting | None:
        job = self.q.jobs.get(name)
        if job is None or name in self.admitted_names:
            return None
        code, *detail = self.codes.get(name) or self._unexamined(job)
        course, place = self.q.position[name]
        place -= sum(1 for ahead in self.q.by_course[course][:place - 1]
                     if ahead.name in self.admitted_names)  # started in this cycle
        where = f"{_ordinal(place)} in {course}'s queue"
        res = self.reservation
        if code in (COURSE_QUOTA, USER_QUOTA, BORROWING_LIMIT):
            return Waiting(name, code, f"{detail[0]}; {where}")
        own = self.res_index.get(name)
        if own is not None:
            mine = self.res[own]
            when = self.clock(mine.start, self.now)
            if code == PREEMPTING:
                text = (f"next to start: {len(mine.preempting)} job(s) running on capacity borrowed "
                        f"by other courses were asked to stop; {where}; estimated start {when}")
            else:
                holders = self._holders(job)
                held = "" if holders is None else \
                    f"; waits for what {holders[0]} {'holds' if holders[1] else 'hold'}"
                replicas = f", all {job.replicas} replicas at once" if job.replicas > 1 else ""
                if mine is res:
                    text = f"next to start{replicas}{held}; {where}; estimated start {when}"
                else:
                    text = (f"holds a reservation{replicas}{held}; {where}; estimated start {when} "
                            "at the latest if running jobs end by their max runtime")
            return Waiting(name, code, text, mine.start)
        estimate = self._estimate(job)
        when = ("no estimated start yet: notebooks hold what it needs" if estimate is None
                else f"estimated start {self.clock(estimate, self.now)} at the earliest")
        if code == COURSE_WINDOW:
            window: CourseWindow = detail[0]
            text = (f"would still run during {window.course}'s reservation of "
                    f"{window.resources.human()} ({self.clock(window.start, self.now)}-"
                    f"{self.clock(window.end, self.now)}); {where}; {when}")
        elif code == BEHIND_RESERVATION:
            assert res is not None
            text = (f"fits now, but would still run at {self.clock(res.start, self.now)}, when "
                    f"{self._whose_name(res.job, job)} starts on the nodes it needs; a shorter "
                    f"max_runtime could start it now; {where}; {when}")
        elif detail:  # behind a preempted job of its course (rule 8)
            text = (f"waits for {self._whose_name(detail[0], job)}, submitted before it in {course} "
                    f"and preempted: it goes back to the queue first; {where}; {when}")
        else:
            text = f"{self._need_text(job)}; {where}; {when}"
        return Waiting(name, code, text, estimate)

    def _unexamined(self, job: Job) -> tuple[Any, ...]:
        """The code of a job the scan stopped before: another course's window, or behind the
        reservation if it would fit now on capacity the reserved job needs, else capacity."""
        first = self.behind_preempted(job)
        if first is not None:
            return (CAPACITY, first.name)
        window = self.book.blocking(job, self.now, self.now + job.max_runtime)
        if window is not None:
            return (COURSE_WINDOW, window)
        if any(self.now + job.max_runtime > r.start for _, r in self.live()):
            trial = self.index.clone()
            if trial.place(job) is not None:
                return (BEHIND_RESERVATION,)
        return (CAPACITY,)

    def _need_text(self, job: Job) -> str:
        role = max(job.roles, key=lambda r: (sum(a for _, a in r.need), r.name))
        have = self.index.nodes_fitting(role.need, role.key_resource, role.gpu_product)
        key = role.key_resource
        model = f" {role.gpu_product}" if role.gpu_product else ""
        if key is None:
            what = f"room for {role.request.human()}"
        else:
            what = f"{human_quantity(key, role.request[key])} free{model}".replace(
                f" {key} free{model}", f" free {key}{model}", 1)
        nodes = "node" if role.replicas == 1 else "nodes"
        extra = "" if len(job.roles) == 1 else f" (role {role.name})"
        holders = self._holders(job)
        held = f", held by {holders[0]}" if holders else ""
        return f"waiting for {role.replicas} {nodes} with {what}{extra} ({have} has them now){held}"

    #: How many holders a reason names before "and N more jobs".
    HOLDERS_SHOWN = 2

    def _holders(self, waiting: Job) -> tuple[str, bool] | None:
        """("your job train-a (until 14:20 at the latest)", one job?): the running jobs that hold
        what `waiting`'s biggest role waits for (its GPU resource, or any resource it asks when
        it asks none), on nodes of its GPU model, soonest end first. Their ends are their max
        runtimes (or a preemption's grace): the times the estimate replays. None when no job
        holds any (notebook servers hold it)."""
        role = max(waiting.roles, key=lambda r: (sum(a for _, a in r.need), r.name))
        wanted = [role.key_resource] if role.key_resource else [n for n, _ in role.need if n != PODS]
        holding = []
        for run in self.s.running:
            for node, held in run.held.items():
                i = self.positions.get(node)
                if i is None or role.gpu_product not in (None, self.index.products[i]):
                    continue
                if any(held.get(name, 0) > 0 for name in wanted):
                    holding.append(run)
                    break
        if not holding:
            return None
        holding.sort(key=lambda run: (run.expected_end, run.job.name))
        named = [f"{self._whose(run.job, waiting)} (until {self.clock(run.expected_end, self.now)} "
                 "at the latest)" for run in holding[:self.HOLDERS_SHOWN]]
        more = len(holding) - len(named)
        if more:
            named.append(f"{more} more job{'s' if more > 1 else ''}")
        text = " and ".join(named) if len(named) < 3 else ", ".join(named[:-1]) + " and " + named[-1]
        return text, len(holding) == 1

    def _whose_name(self, name: str, waiting: Job) -> str:
        """`_whose` for a job known by its name (its id: the owner's name for it and a random
        suffix, so never shown to anyone else); a job the queue no longer holds is "a job"."""
        other = self.q.jobs.get(name)
        if other is None:
            for run in self.s.running:
                if run.job.name == name:
                    other = run.job
                    break
        return "a job" if other is None else self._whose(other, waiting)

    def _whose(self, holder: Job, waiting: Job) -> str:
        """"your job train-a" for the same owner; other people's jobs are not named."""
        if holder.owner == waiting.owner:
            return f"your job {self.label(holder.name)}"
        if holder.course == waiting.course:
            return f"another job of {holder.course}"
        return f"a job of course {holder.course}"

    def _estimate(self, job: Job) -> float | None:
        """When `job` would start if it were planned now, behind every reservation."""
        found = earliest_start(
            job, self.plan or self.index, self.releases() + self.res_releases, self.now,
            allowed=lambda t: self.book.blocking(job, t, t + job.max_runtime) is None,
            extra_times=[w.end for w in self.book.windows],
        )
        return None if found is None else found[0]


_K = TypeVar("_K")
_NO_LIMITS = Limits()
_NO_USAGE = Usage()


def _may_refuse(limits: Limits, request: ResourceVector) -> bool:
    """Whether `limits` could refuse a job asking `request` (`quota.admit` with no server): a
    ceiling on one of its resources, or a GPU-hours budget. Most courses cap only some resources,
    and a cycle asks this for every job it examines."""
    if limits.gpu_hours_per_week is not None:
        return True
    if not limits.zero and limits.resources.is_zero():
        return False
    return any(limits.ceiling(name) is not None for name in request)


class _Sums(Generic[_K]):
    """Per key, the sum of the vectors added, summed only when read: `quota` reads the usage
    added in this cycle only for jobs a ceiling caps, while every admission adds to it (at 5,000
    nodes, ~400 admissions a cycle: two `ResourceVector` sums each cost more than the rest of
    `admit`). Sums of vectors are exact, so the order of summing changes nothing."""

    __slots__ = ("_parts", "_sums")

    def __init__(self) -> None:
        self._sums: dict[_K, ResourceVector] = {}
        self._parts: dict[_K, list[ResourceVector]] = {}

    def add(self, key: _K, vector: ResourceVector) -> None:
        self._parts.setdefault(key, []).append(vector)

    def get(self, key: _K, default: ResourceVector = ZERO) -> ResourceVector:
        parts = self._parts.pop(key, None)
        if parts:
            self._sums[key] = sum_vectors([self._sums.get(key, ZERO), *parts])
        return self._sums.get(key, default)


def _plus(usage: Usage, more: ResourceVector) -> Usage:
    if more.is_zero():
        return usage
    return Usage(usage.resources + more, usage.servers, usage.gpu_hours_week)


def _held(job: Job, placement: Placement, positions: Mapping[str, int]) -> dict[int, dict[str, int]]:
    needs = {role.name: role.need for role in job.roles}
    held: dict[int, dict[str, int]] = {}
    for role, _r, node in placement.replicas:
        on = held.setdefault(positions[node], {})
        for name, amount in needs[role]:
            on[name] = on.get(name, 0) + amount
        on[PODS] = on.get(PODS, 0) + NANO
    return held


def _submitted_before(jobs: tuple[Job, ...], bar: float) -> Iterator[Job]:
    """The jobs of one course's queue (priority, submit time, name order) submitted before `bar`,
    in that order: each priority's jobs are in submit order, so the scan skips to the next
    priority at the first later one (a cycle over 10,000 waiting jobs reads only the old ones)."""
    i, n = 0, len(jobs)
    while i < n:
        job = jobs[i]
        if job.submit_time < bar:
            yield job
            i += 1
        else:  # the first job of the next (lower) priority
            i = bisect_right(jobs, -job.priority, lo=i, key=lambda j: -j.priority)


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank `q` quantile of `values` (None when empty): the p90 of the recent waits
    here, the benchmark's p95 and p99."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered), math.ceil(q * len(ordered))) - 1]


POLICY_BOUNDS: Mapping[str, tuple[float, str]] = MappingProxyType({
    "depth": (1, "1 or more (1: EASY backfilling, one reservation)"),
    "aging": (0, "a number of seconds >= 0"),
    "window": (1, "1 or more"),
    "starving_extra": (0, "0 (none) or more"),
    "starving_after": (0, "a number of seconds >= 0"),
})
"""The least value of each numeric argument of `admission_cycle`, and how to say it."""


def policy_problem(name: str, value: float) -> str | None:
    """What is wrong with `value` as `admission_cycle`'s argument `name` ("must be ..., not
    ..."), or None. The one statement of the bounds: the cycle checks its arguments with it, and
    so do the service's settings (`ClasshubJobs`) and the benchmark's options."""
    least, says = POLICY_BOUNDS[name]
    return None if value >= least else f"must be {says}, not {value}"


def admission_cycle(
    snapshot: Snapshot,
    queues: QueueSnapshot,
    *,
    clock: Callable[[float, float], str] = format_clock,
    depth: int = RESERVATION_DEPTH,
    aging: float = RESERVATION_AGING,
    label: Callable[[str], str] = str,
    quantile: float = STARVING_QUANTILE,
    window: int = WAIT_WINDOW,
    starving_extra: int = STARVING_RESERVATIONS,
    starving_after: float = STARVING_MIN_WAIT,
) -> CycleResult:
    """Decide which waiting jobs start now (see the module docstring for the rules).

    Pure: the same snapshot and queues give the same result. `clock(t, now)` words times in
    messages ("14:20"); `label(job)` names a job in them (its name as its owner gave it).
    `depth`: how many jobs hold a reservation at once (1: EASY backfilling); `aging`: seconds of
    waiting after which a job's turn for a reservation follows submit order instead of fair
    order (backfill.py, docs/admission.md). `quantile` of the snapshot's `recent_waits`: how long
    a job needing a whole node's GPUs or more must have waited to be starving, and at least
    `starving_after` seconds; `starving_extra`: how many reservations beyond `depth` starving
    jobs may hold (0: none, the policy before); `window`: how many waits
    `CycleResult.recent_waits` keeps.
    """
    for name, value in (("depth", depth), ("aging", aging), ("window", window),
                        ("starving_extra", starving_extra), ("starving_after", starving_after)):
        problem = policy_problem(name, value)
        if problem:
            raise ValueError(f"{name} {problem}")
    if not 0 < quantile <= 1:
        raise ValueError(f"quantile must be in (0, 1], not {quantile}")
    starving = nearest_rank(snapshot.recent_waits, quantile)
    cycle = _Cycle(snapshot, queues, clock, depth, aging, label, starving, starving_extra,
                   starving_after)
    examined = cycle.run()
    waits = tuple(snapshot.now - a.job.submit_time for a in cycle.admitted)
    return CycleResult(
        now=snapshot.now,
        admitted=tuple(cycle.admitted),
        preemptions=tuple(cycle.preemptions),
        reservation=cycle.reservation,
        pressure=MappingProxyType(cycle.pressure),
        examined=examined,
        _explain=cycle.explain,
        reservations=tuple(r for _, r in cycle.live()),
        recent_waits=(snapshot.recent_waits + waits)[-window:] if waits else snapshot.recent_waits,
    )
