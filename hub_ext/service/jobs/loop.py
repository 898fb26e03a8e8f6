"""The admission loop: runs the gang-admission core and carries out its decisions.

How it is built (docs/jobs-loop.md), as Kueue splits its scheduler from its job controllers:
- **Memory kept up to date by events, the database read once.** At its first cycle the loop
  reads the queued and the admitted/running jobs from the store (restart safety: the database
  is the durable record, docs/architecture.md, rule 4) and releases ledger reservations of jobs
  that hold nothing. After that, `JobStore` tells it which job changed (a submit, a cancel, an
  admission, an end: `JobStore.listen`), and a cycle re-reads only those. Waiting jobs live in
  a `QueueManager` (kept sorted as jobs come and go); running jobs in a `ClusterState`.
- **The cluster by watches.** The backend answers `nodes()` and `status()` from its live view
  (Kubernetes: a watch on nodes and pods, `JobClusterView`; local: this machine), and says which
  jobs' replicas changed (`changed_jobs`), so a cycle follows only those, the admitted ones and
  those past a deadline.
- **Decide on a snapshot**: `ClusterState.snapshot()` + `QueueManager.snapshot()` ->
  `admission_cycle`, in a worker thread (it is pure, and long at 50,000 waiting jobs).
- **Act after the decision**: reserve in the ledger and record each admission; launching (the
  pods, the processes) is a task of its own per job, so a slow API call never stretches a
  cycle; a job that cannot start is stopped with the reason. Stops run in tasks too (grace
  period). Why each waiting job waits is written for the first `explain_limit` jobs of each
  course's queue.

The loop keeps nothing that matters only in memory: after a SIGKILL, the next service finds every
decision in the store and every replica in the backend (tests/test_jobs_restart.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select

from hub_ext import heap
from hub_ext.backends.jobs import ENDED, PENDING, RUNNING, JobBackend, Launch, ReplicaLaunch
from hub_ext.core import jobs as J
from hub_ext.core.admission import (
    RESERVATION_AGING,
    RESERVATION_DEPTH,
    STARVING_RESERVATIONS,
    WAIT_WINDOW,
    CourseQuota,
    NodeState,
    RunningJob,
    admission_cycle,
    iso_clock,
)
from hub_ext.core.admission.preemption import preemption_message
from hub_ext.core.admission.queue import QueueManager, QueueSnapshot
from hub_ext.core.admission.snapshot import ClusterState
from hub_ext.core.jobs import Job, JobError
from hub_ext.core.quota import Limits, Usage
from hub_ext.core.resources import ResourceVector, is_gpu_resource, sum_vectors
from hub_ext.ports import free_port
from hub_ext.service.jobs.kueue import KUEUE_QUEUE, queue_refusals
from hub_ext.service.jobs.pressure import CullerAsk
from hub_ext.service.jobs.records import Admitted, JobStore, to_core, utcnow
from hub_ext.store import Course, QuotaDenied, UserQuota
from hub_ext.store import CourseQuota as QuotaRow
from hub_ext.store.job_models import JobRecord

log = logging.getLogger(__name__)

#: From this many kept jobs (waiting and held) on, the loop freezes its heap (see `cycle`).
FREEZE_FROM = 10_000

__all__ = ["JobLoop", "course_limits", "launch_of"]


@dataclass(frozen=True)
class Held:
    """A job that holds capacity (admitted or running), as the loop keeps it between cycles."""

    record: JobRecord
    job: Job
    launch: Launch


class JobLoop:
    """Runs admission cycles forever (see the module docstring)."""

    def __init__(self, store: JobStore, backend: JobBackend, *, interval: float = 3.0,
                 grace: float = 10.0, limits: Any = None, start_timeout: float = 120.0,
                 delegate: str | None = None, explain_limit: int = 20,
                 depth: int = RESERVATION_DEPTH, aging: float = RESERVATION_AGING,
                 starving_extra: int = STARVING_RESERVATIONS) -> None:
        self.store = store
        self.backend = backend
        self.interval = interval
        self.grace = grace
        self.start_timeout = start_timeout
        self.delegate = delegate
        """Who admits instead of the core ("Kueue"): jobs are handed over as they come, and the
        loop only follows them."""
        self.policy = {"depth": depth, "aging": aging, "starving_extra": starving_extra}
        """The reservation policy's settings (`ClasshubJobs.reservation_depth` and its siblings),
        passed to every `admission_cycle` (docs/admission.md, "Choosing the trade-off")."""
        self.explain_limit = explain_limit
        """Why a job waits is worked out (and written) for this many jobs at the head of each
        course's queue, in the cycles after something changed (a job, a node, a quota); the jobs
        behind keep their last reason and show their place (`position`)."""
        self._explained: tuple[Any, ...] | None = None
        self.quota_ttl = max(interval, 10.0)
        self._quota_cache: tuple[int, dict[str, CourseQuota], datetime] | None = None
        self.wake = asyncio.Event()
        self.queue = QueueManager()
        self.queued: dict[str, tuple[JobRecord, Job]] = {}
        self.holding: dict[str, Held] = {}
        self.cluster = ClusterState()
        self.last_queues: QueueSnapshot | None = None
        self.nodes: tuple[NodeState, ...] | None = None
        """The nodes as the last cycle saw them (what a submit checks a job against)."""
        self._stopping: dict[str, asyncio.Task] = {}
        self._launching: dict[str, asyncio.Task] = {}
        self._launched: set[str] = set()
        #: admitted jobs the backend holds back (`_follow`): when it last did
        self._held_back: dict[str, datetime] = {}
        #: The cycle's reservations, carried into the next cycle's snapshot so that each keeps
        #: its place (conservative backfilling: docs/admission.md).
        self._reserved: tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...] = ()
        #: How long the last jobs admitted waited, carried the same way (and read from the store
        #: at start): a big job that waited longer than most of them is starving and gets a
        #: reservation beyond the depth.
        self._waits: tuple[float, ...] = ()
        self._limits = limits or course_limits(store)
        self._culler = CullerAsk(store.sessions)
        self._told: dict[str, tuple[Any, ...]] = {}
        self._broken: dict[str, str] = {}
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self._loaded = False
        self._orphans = True
        self._held_cache: tuple[int, dict[str, list[str]], ResourceVector] | None = None
        self._version = 0
        self._changes = 0
        self._asyncio: asyncio.AbstractEventLoop | None = None
        self.cycles = 0
        self._frozen_at = 0
        store.listen(self._note)

    def poke(self) -> None:
        """Run a cycle soon (a submit, a cancel)."""
        self.wake.set()

    def _note(self, job_id: str) -> None:
        """A job changed in the store (any thread): re-read it at the next cycle, and run one."""
        with self._dirty_lock:
            self._dirty.add(job_id)
        loop = self._asyncio
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.wake.set)

    def position(self, job_id: str) -> int | None:
        """A waiting job's place in its course's queue at the last cycle (None: not known), for
        the jobs behind the `explain_limit` first, whose stored place is not written each cycle."""
        queues = self.last_queues
        if queues is None or job_id not in self.queued:
            return None
        found = queues.position.get(job_id)  # built once per cycle, when first asked
        return None if found is None else found[1]

    async def settle(self) -> None:
        """Wait until the launches started so far are done (their objects or processes exist,
        or the launch failed): launching is not part of a cycle."""
        while self._launching:
            await asyncio.gather(*list(self._launching.values()), return_exceptions=True)

    async def run_forever(self) -> None:
        while True:
            try:
                await self.cycle()
            except Exception:  # one bad cycle must not end the loop; the next one retries
                log.exception("classhub jobs: admission cycle failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.interval)
            self.wake.clear()

    async def cycle(self) -> None:
        self._asyncio = asyncio.get_running_loop()
        now = utcnow()
        if not self._loaded:
            await self._load()
        await self._refresh()
        if self._orphans:  # at start, and after an admission that failed half-way
            self._orphans = False
            await asyncio.to_thread(self.store.release_orphans, now, list(self.holding))
        for job_id, message in list(self._broken.items()):
            await asyncio.to_thread(self.store.fail_queued, job_id, now, message)
            self._broken.pop(job_id, None)
        changed = self.backend.changed_jobs() if hasattr(self.backend, "changed_jobs") else None
        for job_id, held in list(self.holding.items()):
            if self.cycles == 0 or changed is None or job_id in changed or self._due(held, now):
                await self._follow(held, now)
        await self._refresh()
        await self._admit(now)
        self.cycles += 1
        kept = len(self.queue) + len(self.holding)
        if kept >= FREEZE_FROM and kept >= 2 * self._frozen_at:
            # Tens of thousands of waiting jobs are long-lived objects that every full garbage
            # collection would walk (seconds of CPU at 50,000, docs/jobs-loop.md): freeze them,
            # as the hub freezes its startup heap (hub_ext/heap.py); again when they doubled.
            self._frozen_at = kept
            await asyncio.to_thread(heap.freeze, log)

    # -- memory from the store
    async def _load(self) -> None:
        """The queue and the jobs holding capacity, from the database, once per process."""
        with self._dirty_lock:
            self._dirty.clear()  # anything changing from here on is read again next
        records = await asyncio.to_thread(self.store.in_states, (J.QUEUED, *J.HOLDING))
        for record in records:
            self._apply(record.job_id, record)
        self._waits = await asyncio.to_thread(self.store.recent_waits, WAIT_WINDOW)
        self._loaded = True

    async def _refresh(self) -> None:
        """Read again the jobs the store said changed."""
        with self._dirty_lock:
            ids, self._dirty = self._dirty, set()
        if not ids:
            return
        found = {r.job_id: r for r in await asyncio.to_thread(self.store.by_ids, ids)}
        for job_id in ids:
            self._apply(job_id, found.get(job_id))

    def _apply(self, job_id: str, record: JobRecord | None) -> None:
        """Bring the queue and the running jobs in line with one job's record."""
        self._changes += 1
        self.queue.remove(job_id)
        self.queued.pop(job_id, None)
        if self.holding.pop(job_id, None) is not None:
            self._version += 1
        self.cluster.end(job_id)
        if record is None:
            return
        try:
            job = to_core(record, record.course.name) if record.state in (J.QUEUED, *J.HOLDING) else None
        except JobError as e:  # cannot happen for a record made by submit; end it visibly
            if record.state == J.QUEUED:
                self._broken[job_id] = str(e)
            return
        if job is None:
            self._told.pop(job_id, None)
            self._launched.discard(job_id)
            self._held_back.pop(job_id, None)
            return
        if record.state == J.QUEUED:
            # back in the queue (after a preemption): its next admission launches it again
            self._launched.discard(job_id)
            self.queue.add(job)
            self.queued[job_id] = (record, job)
            return
        self._told.pop(job_id, None)
        self.holding[job_id] = Held(record, job, launch_of(record))
        self._version += 1
        # a preempted job is marked so (gone by the end of its grace), as the admission core
        # and the benchmark expect: it is not chosen again, and its course's later jobs wait
        # for it to come back to the queue (docs/admission.md, "Preemption and reservations")
        ends_by = (record.stop_requested_at.timestamp() + self.grace
                   if record.stop_requested_at is not None and record.stop_reason == J.STOP_PREEMPT
                   else None)
        self.cluster.start(RunningJob(
            job, tuple((a, b, c) for a, b, c in record.placement.get("replicas", [])),
            (record.started_at or record.admitted_at or utcnow()).timestamp(),
            borrowed=bool(record.placement.get("borrowed")), ends_by=ends_by))

    def _due(self, held: Held, now: datetime) -> bool:
        """Whether a job whose replicas did not change needs a look: not started yet, a stop
        asked, or past its max_runtime."""
        record = held.record
        return (record.state == J.ADMITTED or record.stop_requested_at is not None
                or (record.started_at is not None
                    and (now - record.started_at).total_seconds() > held.job.max_runtime))

    # -- jobs that hold capacity
    async def _follow(self, held: Held, now: datetime) -> None:
        """Launch, observe, stop or end one admitted/running job."""
        record, job, launch = held.record, held.job, held.launch
        if record.stop_requested_at is not None:
            self._stop_soon(record, launch)
            return
        if record.state == J.ADMITTED and record.job_id not in self._launched:
            # the backend may hold an admitted job back (local sandbox jobs: one at a time per
            # grading account, hub_ext.backends.local.sandbox); its start timeout counts from
            # when it is let go, so waiting never fails it
            hold_back = getattr(self.backend, "hold_back", None)
            reason = await hold_back(launch) if hold_back is not None else None
            if reason:
                if record.job_id not in self._held_back:
                    await asyncio.to_thread(self.store.note, record.job_id, now, reason)
                self._held_back[record.job_id] = now
                return
            self._launch_soon(record.job_id, launch)  # after a restart: creates what is missing
        statuses = await self.backend.status(launch)
        since = max(filter(None, (record.admitted_at, self._held_back.get(record.job_id))), default=now)
        waited = (now - since).total_seconds()
        if self.delegate is None and record.state == J.ADMITTED and waited > self.start_timeout and any(
                s.state == PENDING for s in statuses.values()):
            await self._request(record, J.STOP_FAILURE, now,
                                f"not every replica started within {self.start_timeout:g} s; "
                                "stopping the ones that did")
            return
        if _changed(record, statuses):  # a write only when something happened
            record = await asyncio.to_thread(
                self.store.update_replicas, record.job_id,
                {k: (s.state, s.exit_code, s.node) for k, s in statuses.items()}, now)
        ended = {k: s.exit_code for k, s in statuses.items() if s.state == ENDED}
        if await self._restart_failed(record, job, launch, ended, now):
            return
        roles = {role.name: role.replicas for role in job.roles}
        result = J.outcome(job.policy, job.main_role, roles, ended)
        alive = any(s.state == RUNNING for s in statuses.values())
        if result == J.SUCCEEDED:
            if alive:  # the main role succeeded: the others are stopped
                await self._request(record, J.STOP_FAILURE, now, "the main role succeeded; "
                                    "stopping the other replicas", final=J.SUCCEEDED)
                return
            await asyncio.to_thread(self.store.finish, record.job_id, J.SUCCEEDED, now,
                                    "succeeded: " + _codes(ended))
            return
        if result == J.FAILED:
            if alive:
                await self._request(record, J.STOP_FAILURE, now,
                                    "a replica failed (" + _codes(ended) + "); stopping the others")
                return
            await asyncio.to_thread(self.store.finish, record.job_id, J.FAILED, now,
                                    "failed: " + _codes(ended))
            return
        if record.started_at is not None and (now - record.started_at).total_seconds() > job.max_runtime:
            await self._request(record, J.STOP_MAX_RUNTIME, now,
                                f"reached its max_runtime of {job.max_runtime:g} s; stopping it")

    async def _restart_failed(self, record: JobRecord, job: Job, launch: Launch,
                              ended: Mapping[tuple[str, int], int | None], now: datetime) -> bool:
        """Start again the failed replicas that have restarts left (`max_restarts` each), with
        the same rank and environment; True when one was restarted. The record counts the
        restart before the backend acts, so a crash in between never restarts more often."""
        if not job.policy.max_restarts or not hasattr(self.backend, "restart"):
            return False
        counts = {(r.role, r.index): r.restarts for r in record.replicas}
        again = [key for key, code in ended.items()
                 if code != 0 and counts.get(key, 0) < job.policy.max_restarts]
        for role, index in again:
            await asyncio.to_thread(self.store.count_restart, record.job_id, role, index, now)
            await self.backend.restart(launch, role, index)
        return bool(again)

    async def _request(self, record: JobRecord, reason: str, now: datetime, message: str,
                       final: str | None = None) -> None:
        if final == J.SUCCEEDED:
            reason = "main_succeeded"
        record = await asyncio.to_thread(self.store.request_stop, record.job_id, reason,
                                         "classhub", now, message)
        self._stop_soon(record, launch_of(record))

    def _launch_soon(self, job_id: str, launch: Launch) -> None:
        """Create the job's replicas in a task of its own (Kueue's job controller, not its
        scheduler): the cycle goes on; a launch that fails stops the job with the reason."""
        if job_id in self._launching:
            return
        self._launched.add(job_id)

        async def launch_it() -> None:
            try:
                await self.backend.launch(launch)
            except Exception as e:  # the command cannot start (no account, bad workdir, 422)
                log.warning("classhub jobs: launching %s failed: %s", job_id, e)
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.store.request_stop, job_id, J.STOP_FAILURE,
                                            "classhub", utcnow(), f"could not start: {e}")
            finally:
                self._launching.pop(job_id, None)
                self.poke()

        self._launching[job_id] = asyncio.create_task(launch_it())

    def _stop_soon(self, record: JobRecord, launch: Launch) -> None:
        """Stop the job's replicas in a task of its own (the grace period must not hold up the
        cycle), then end the job by why it was stopped."""
        if record.job_id in self._stopping:
            return
        reason = record.stop_reason or J.STOP_CANCEL

        async def stop() -> None:
            try:
                launching = self._launching.get(record.job_id)
                if launching is not None:  # never delete while the objects are being made
                    with contextlib.suppress(Exception):
                        await launching
                await self.backend.stop(launch, self.grace)
                state, message = _ending(reason, record.stop_by)
                await asyncio.to_thread(self.store.finish, record.job_id, state, utcnow(), message)
            except Exception:
                log.exception("classhub jobs: stopping %s failed; retrying", record.job_id)
            finally:
                self._stopping.pop(record.job_id, None)
                self.poke()

        self._stopping[record.job_id] = asyncio.create_task(stop())

    # -- admission
    def _held_now(self) -> tuple[dict[str, list[str]], ResourceVector]:
        """Devices each held job has, and what they hold besides GPUs (for the local node);
        computed again only when the held jobs changed."""
        if self._held_cache is None or self._held_cache[0] != self._version:
            devices = {job_id: [u for rep in h.record.replicas for u in rep.devices.get("gpu_uuids", [])]
                       for job_id, h in self.holding.items()}
            other = sum_vectors(h.job.total.select(lambda n: not is_gpu_resource(n))
                                for h in self.holding.values())
            self._held_cache = (self._version, devices, other)
        return self._held_cache[1], self._held_cache[2]

    async def known_nodes(self) -> tuple[NodeState, ...]:
        """The nodes as the last cycle saw them (asked from the backend if none ran yet)."""
        if self.nodes is None:
            held, other = self._held_now()
            self.nodes = await self.backend.nodes(
                held, other, running=[h.launch for h in self.holding.values()])
        return self.nodes

    async def _admit(self, now: datetime) -> None:
        if not len(self.queue):
            self._reserved = ()
            return
        if self.delegate is not None:
            await self._hand_over(now)
            return
        held, other = self._held_now()
        nodes = await self.backend.nodes(held, other, running=[h.launch for h in self.holding.values()])
        self.nodes = nodes
        self.cluster.set_nodes(nodes)
        queues = self.last_queues = self.queue.snapshot()
        courses = set(queues.by_course) | {h.record.course.name for h in self.holding.values()}
        quotas = await self._quotas(courses, now)
        snapshot = self.cluster.snapshot(now.timestamp(), quotas, reservations=self._reserved,
                                         recent_waits=self._waits, grace=self.grace)
        # reasons name the owner's running jobs by the name they gave them, and carry times as
        # ISO 8601 that pages and the panel show in the reader's format (docs/teachers/jobs.md)
        labels = {job_id: held.record.name for job_id, held in self.holding.items()}
        result = await asyncio.to_thread(admission_cycle, snapshot, queues, clock=iso_clock,
                                         label=lambda job_id: labels.get(job_id, job_id),
                                         **self.policy)
        self._reserved, self._waits = result.carried, result.recent_waits
        taken = {u for uuids in held.values() for u in uuids}
        started = set()
        for admission in result.admitted:
            record, job = self.queued[admission.job.name]
            try:
                plan = self._plan(record, job, admission.placement.replicas, taken)
                plan = Admitted(record.job_id, plan, free_port(), admission.borrowed, job.total)
                if await asyncio.to_thread(self.store.admit, plan, now):
                    started.add(record.job_id)
                    fresh = await asyncio.to_thread(self.store.get, record.job_id)
                    self._apply(record.job_id, fresh)
                    if record.job_id in self.holding and not hasattr(self.backend, "hold_back"):
                        self._launch_soon(record.job_id, self.holding[record.job_id].launch)
                    elif record.job_id in self.holding:
                        self.poke()  # `_follow` asks the backend whether it may start now
            except QuotaDenied as e:  # a server took the room between snapshot and ledger
                await asyncio.to_thread(self.store.set_waiting, {
                    record.job_id: ("course_quota", e.decision.message, None, None)})
            except Exception:
                self._orphans = True  # the ledger may hold what no admitted job does
                log.exception("classhub jobs: admitting %s failed", record.job_id)
        for preemption in result.preemptions:
            for_course = self.queued[preemption.for_job][1].course if preemption.for_job in self.queued \
                else preemption.course
            await asyncio.to_thread(
                self.store.request_stop, preemption.job, J.STOP_PREEMPT, "classhub", now,
                preemption_message(preemption.course, preemption.for_job, for_course, self.grace))
        reserved = result.reservation.job if result.reservation is not None else None
        if result.pressure and reserved in self.queued:
            await asyncio.to_thread(self._culler.ask, reserved, self.queued[reserved][0].owner,
                                    result.pressure, now)
        # Why jobs wait changes only when something did: after a cycle that changed nothing and
        # saw nothing change, the reasons written last time still hold (explaining is most of
        # a quiet cycle's cost: each estimate replays every running job's end).
        seen = (self._changes, nodes, _quota_key(quotas), self._reserved)
        if result.admitted or result.preemptions or seen != self._explained:
            reasons = await asyncio.to_thread(self._reasons, result, queues, started)
            await asyncio.to_thread(self.store.set_waiting, reasons)
            self._explained = (self._changes, nodes, _quota_key(quotas), self._reserved)

    async def _quotas(self, courses: set[str], now: datetime) -> dict[str, CourseQuota]:
        """The ledger's view of the courses, read again after a job changed, for new courses, or
        when `quota_ttl` seconds passed (servers start and stop outside this service). A stale
        view never over-commits: the ledger checks again when it reserves (QuotaDenied)."""
        last = self._quota_cache
        if (last is None or last[0] != self._changes or not courses <= last[1].keys()
                or (now - last[2]).total_seconds() > self.quota_ttl):
            quotas = await asyncio.to_thread(self._limits, courses, now)
            self._quota_cache = (self._changes, quotas, now)
            return quotas
        return last[1]

    def _reasons(self, result: Any, queues: Any, started: set[str]) -> dict[str, tuple[Any, ...]]:
        """Why the first `explain_limit` jobs of each course wait, for those whose reason
        changed (a worker thread: explaining is the admission core's work)."""
        reasons = {}
        for jobs in queues.by_course.values():
            shown = 0
            for job in jobs:
                name = job.name
                if name in started:
                    continue
                if shown >= self.explain_limit:
                    break
                shown += 1
                waiting = result.waiting(name)
                if waiting is None:
                    continue
                _course, place = queues.position[name]
                start = (None if waiting.estimated_start is None
                         else datetime.fromtimestamp(waiting.estimated_start, timezone.utc))
                told = (waiting.code, waiting.message, start, place)
                if self._told.get(name) != told:
                    self._told[name] = told
                    reasons[name] = told
        return reasons

    async def _hand_over(self, now: datetime) -> None:
        """Kueue places: every queued job within its course's quota (the ledger reserves it here,
        the one place the quota is counted, docs/kueue.md) is created at once, suspended, in its
        course's LocalQueue, with its replicas unplaced; Kueue un-suspends it when it fits. A
        course whose LocalQueue feeds another ClusterQueue keeps its jobs here."""
        jobs = dict(self.queued)
        refused = await queue_refusals(self.backend, {r.course.name for r, _ in jobs.values()})
        await asyncio.to_thread(self.store.set_waiting, {
            r.job_id: (KUEUE_QUEUE, refused[r.course.name], None, None)
            for r, _ in jobs.values() if r.course.name in refused})
        for job_id, (record, job) in jobs.items():
            if record.course.name in refused:
                continue
            order = {role.name: i for i, role in enumerate(job.roles)}
            ranked = sorted(((role.name, i) for role in job.roles for i in range(role.replicas)),
                            key=lambda p: (order[p[0]], p[1]))
            plan = tuple((role, index, rank, "", ()) for rank, (role, index) in enumerate(ranked))
            admitted = Admitted(record.job_id, plan, 0, False, job.total)
            try:
                if await asyncio.to_thread(self.store.admit, admitted, now, self.delegate):
                    self._apply(job_id, await asyncio.to_thread(self.store.get, job_id))
                    if job_id in self.holding:
                        self._launch_soon(job_id, self.holding[job_id].launch)
            except QuotaDenied as e:
                await asyncio.to_thread(self.store.set_waiting, {
                    record.job_id: ("course_quota", e.decision.message, None, None)})
            except Exception:  # the others are still handed over; _follow fails this one
                self._orphans = True
                log.exception("classhub jobs: handing %s over failed", record.job_id)

    def _plan(self, record: JobRecord, job: Job, placement: tuple[tuple[str, int, str], ...],
              taken: set[str]) -> tuple[tuple[str, int, int, str, tuple[str, ...]], ...]:
        """Ranks (master first, replicas in order) and the devices of each replica."""
        order = {role.name: i for i, role in enumerate(job.roles)}
        requests = {role.name: role.request for role in job.roles}
        products = {role.name: role.gpu_product for role in job.roles}
        ordered = sorted(placement, key=lambda p: (order[p[0]], p[1]))
        plan = []
        for rank, (role, index, node) in enumerate(ordered):
            devices: list[str] = []
            for resource, amount in requests[role].items():
                if is_gpu_resource(resource) and amount:
                    picked = self.backend.devices_for(node, resource, int(amount), taken,
                                                      product=products[role])
                    taken.update(picked)
                    devices.extend(picked)
            plan.append((role, index, rank, node, tuple(devices)))
        return tuple(plan)


def _quota_key(quotas: Mapping[str, CourseQuota]) -> tuple[Any, ...]:
    """What of the quotas a waiting job's reason depends on (not the GPU-hours, which move with
    the clock)."""
    return tuple((name, q.limits, q.usage.resources, q.usage.servers,
                  tuple((u, lim, use.resources, use.servers) for u, (lim, use) in sorted(q.users.items())))
                 for name, q in sorted(quotas.items()))


def launch_of(record: JobRecord) -> Launch:
    """A backend's view of an admitted job record."""
    spec = record.spec
    roles = {role["name"]: role for role in spec["job"]["roles"]}
    return Launch(
        job_id=record.job_id, owner=record.owner, course=record.course.name,
        command=tuple(spec["command"]), env=dict(spec.get("env") or {}),
        workdir=spec.get("workdir") or "", master_port=int(record.placement.get("port") or 0),
        replicas=tuple(ReplicaLaunch(r.role, r.index, r.rank, r.node,
                                     tuple(r.devices.get("gpu_uuids", [])))
                       for r in sorted(record.replicas, key=lambda r: r.rank)),
        max_runtime=record.max_runtime,
        requests={name: {k: str(v) for k, v in (role.get("resources") or {}).items()}
                  for name, role in roles.items()},
        max_restarts=int(spec["job"].get("max_restarts") or 0),
        pods={role: {k: kept[k] for k in ("limits", "node_selector", "tolerations") if k in kept}
              for role, kept in (spec.get("profiles") or {}).items()},
        sandbox=dict(spec.get("sandbox") or {}),
    )


_RECORDED = {PENDING: ("pending",), RUNNING: ("running",),
             ENDED: ("succeeded", "failed", "killed", "lost")}


def _changed(record: JobRecord, statuses: Mapping[tuple[str, int], Any]) -> bool:
    """Whether the replicas' states differ from what the record holds (or the job should move
    to running now)."""
    recorded = {(r.role, r.index): r.state for r in record.replicas}
    if record.state == J.ADMITTED and statuses and all(s.state != PENDING for s in statuses.values()):
        return True
    return any(recorded.get(key) not in _RECORDED[status.state] for key, status in statuses.items())


def _ending(reason: str, by: str | None) -> tuple[str, str]:
    if reason == J.STOP_CANCEL:
        return J.CANCELLED, f"cancelled by {by}; every replica stopped"
    if reason == J.STOP_MAX_RUNTIME:
        return J.FAILED, "stopped at its max_runtime; every replica stopped"
    if reason == J.STOP_PREEMPT:
        return J.PREEMPTED, "preempted; every replica stopped"
    if reason == "main_succeeded":
        return J.SUCCEEDED, "succeeded: the main role succeeded; the other replicas were stopped"
    # a replica failed, or the job could not start: the event before this one says which
    return J.FAILED, "failed; every replica stopped (the event before says why)"


def _codes(ended: Mapping[tuple[str, int], int | None]) -> str:
    return ", ".join(f"{role}-{index} exited {'(killed)' if code is None else code}"
                     for (role, index), code in sorted(ended.items()))


def course_limits(store: JobStore):
    """The ledger's view of each course: hard ceilings, what servers and jobs hold now, and each
    member's limits and usage (no nominal share: every GPU job borrows, none is preempted)."""
    def limits(courses: set[str], now: datetime) -> dict[str, CourseQuota]:
        out = {}
        with store.sessions() as session:
            rows = session.execute(select(Course.name, QuotaRow).outerjoin(
                QuotaRow, QuotaRow.course_id == Course.id).where(Course.name.in_(courses))).all()
            users = session.execute(select(Course.name, UserQuota).join(
                UserQuota, UserQuota.course_id == Course.id).where(Course.name.in_(courses))).all()
        per_user: dict[str, dict[str, Limits]] = {}
        for name, row in users:
            per_user.setdefault(name, {})[row.username] = row.limits
        for name, row in rows:
            usage, of_users = store.ledger.usage_by_user(now, course=name)  # one query per course
            members = {user: (lim, of_users.get(user, Usage()))
                       for user, lim in per_user.get(name, {}).items()}
            out[name] = CourseQuota(limits=row.limits if row is not None else Limits(), usage=usage,
                                    users=members)
        return out

    return limits

