"""The admission loop: runs the gang-admission core and carries out its decisions.

One cycle (on each submit, cancel, job end, and every `interval` seconds):
1. **Reconcile** (docs/architecture.md, rule 4): ledger reservations of jobs that hold nothing
   are released (a crash between the ledger and the job record); every admitted or running job
   is (re)launched if some replica does not exist yet (the backend creates only what is absent,
   so a crash in the middle of a launch starts no replica twice) and its replicas' states are
   read back; a job whose replicas ended is finished by its success policy; a job past its
   max_runtime, cancelled or preempted is stopped (SIGTERM, grace, SIGKILL, in a task of its
   own) and then ended.
2. **Decide** on a snapshot (nodes' free capacity with notebooks counted, running jobs, the
   ledger's quotas, the queues): `hub_ext.core.admission.admission_cycle`.
3. **Act**, only after the decision: reserve in the ledger and record each admission, then
   launch it; ask preempted jobs to stop; store every waiting job's reason and queue position.

The loop keeps nothing that matters in memory: after a SIGKILL, the next service finds every
decision in the store and every replica in the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select

from hub_ext.backends.jobs import ENDED, PENDING, RUNNING, JobBackend, Launch, ReplicaLaunch
from hub_ext.core import jobs as J
from hub_ext.core.admission import (
    CourseQuota,
    QueueSnapshot,
    RunningJob,
    Snapshot,
    admission_cycle,
)
from hub_ext.core.admission.preemption import preemption_message
from hub_ext.core.jobs import Job, JobError
from hub_ext.core.quota import Limits, Usage
from hub_ext.core.resources import is_gpu_resource, sum_vectors
from hub_ext.service.jobs.kueue import KUEUE_QUEUE, queue_refusals
from hub_ext.service.jobs.pressure import CullerAsk
from hub_ext.service.jobs.records import Admitted, JobStore, to_core, utcnow
from hub_ext.store import Course, QuotaDenied, UserQuota
from hub_ext.store import CourseQuota as QuotaRow
from hub_ext.store.job_models import JobRecord

log = logging.getLogger(__name__)

__all__ = ["JobLoop", "course_limits", "launch_of"]


def free_port() -> int:
    """A TCP port free now on this machine, for a job's rendezvous (MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JobLoop:
    """Runs admission cycles forever (see the module docstring)."""

    def __init__(self, store: JobStore, backend: JobBackend, *, interval: float = 3.0,
                 grace: float = 10.0, limits: Any = None, start_timeout: float = 120.0,
                 delegate: str | None = None) -> None:
        self.store = store
        self.backend = backend
        self.interval = interval
        self.grace = grace
        self.start_timeout = start_timeout
        self.delegate = delegate
        """Who admits instead of the core ("Kueue"): jobs are handed over as they come, and the
        loop only follows them."""
        self.wake = asyncio.Event()
        self._stopping: dict[str, asyncio.Task] = {}
        self._reserved: tuple[str | None, tuple[tuple[str, int, str], ...]] = (None, ())
        self._limits = limits or course_limits(store)
        self._culler = CullerAsk(store.sessions)
        self.cycles = 0

    def poke(self) -> None:
        """Run a cycle soon (a submit, a cancel)."""
        self.wake.set()

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
        now = utcnow()
        await asyncio.to_thread(self.store.release_orphans, now)
        holding = await asyncio.to_thread(self.store.in_states, J.HOLDING)
        still: list[tuple[JobRecord, Job]] = []
        for record in holding:
            try:
                job = to_core(record, record.course.name)
            except JobError as e:  # cannot happen for a record made by submit; end it visibly
                await asyncio.to_thread(self.store.finish, record.job_id, J.FAILED, now, str(e))
                continue
            if await self._follow(record, job, now):
                still.append((record, job))
        await self._admit(still, now)
        self.cycles += 1

    # -- jobs that hold capacity
    async def _follow(self, record: JobRecord, job: Job, now: datetime) -> bool:
        """Launch, observe, stop or end one admitted/running job; True while it holds capacity."""
        launch = launch_of(record)
        if record.stop_requested_at is not None:
            self._stop_soon(record, launch)
            return True
        if record.state == J.ADMITTED:
            try:
                await self.backend.launch(launch)
            except Exception as e:  # the command cannot start (no account, bad workdir)
                log.warning("classhub jobs: launching %s failed: %s", record.job_id, e)
                await asyncio.to_thread(self.store.request_stop, record.job_id, J.STOP_FAILURE,
                                        "classhub", now, f"could not start: {e}")
                return True
        statuses = await self.backend.status(launch)
        waited = (now - (record.admitted_at or now)).total_seconds()
        if self.delegate is None and record.state == J.ADMITTED and waited > self.start_timeout and any(
                s.state == PENDING for s in statuses.values()):
            await self._request(record, J.STOP_FAILURE, now,
                                f"not every replica started within {self.start_timeout:g} s; "
                                "stopping the ones that did")
            return True
        if _changed(record, statuses):  # a write only when something happened
            record = await asyncio.to_thread(
                self.store.update_replicas, record.job_id,
                {k: (s.state, s.exit_code, s.node) for k, s in statuses.items()}, now)
        ended = {k: s.exit_code for k, s in statuses.items() if s.state == ENDED}
        restarted = await self._restart_failed(record, job, launch, ended, now)
        if restarted:
            return True
        roles = {role.name: role.replicas for role in job.roles}
        result = J.outcome(job.policy, job.main_role, roles, ended)
        alive = any(s.state == RUNNING for s in statuses.values())
        if result == J.SUCCEEDED:
            if alive:  # the main role succeeded: the others are stopped
                await self._request(record, J.STOP_FAILURE, now, "the main role succeeded; "
                                    "stopping the other replicas", final=J.SUCCEEDED)
                return True
            await asyncio.to_thread(self.store.finish, record.job_id, J.SUCCEEDED, now,
                                    "succeeded: " + _codes(ended))
            self.poke()
            return False
        if result == J.FAILED:
            if alive:
                await self._request(record, J.STOP_FAILURE, now,
                                    "a replica failed (" + _codes(ended) + "); stopping the others")
                return True
            await asyncio.to_thread(self.store.finish, record.job_id, J.FAILED, now,
                                    "failed: " + _codes(ended))
            self.poke()
            return False
        if record.started_at is not None and (now - record.started_at).total_seconds() > job.max_runtime:
            await self._request(record, J.STOP_MAX_RUNTIME, now,
                                f"reached its max_runtime of {job.max_runtime:g} s; stopping it")
        return True

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

    def _stop_soon(self, record: JobRecord, launch: Launch) -> None:
        """Stop the job's replicas in a task of its own (the grace period must not hold up the
        cycle), then end the job by why it was stopped."""
        if record.job_id in self._stopping:
            return
        reason = record.stop_reason or J.STOP_CANCEL

        async def stop() -> None:
            try:
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
    async def _admit(self, running: list[tuple[JobRecord, Job]], now: datetime) -> None:
        queued = await asyncio.to_thread(self.store.in_states, (J.QUEUED,))
        if not queued:
            self._reserved = (None, ())
            return
        jobs: dict[str, tuple[JobRecord, Job]] = {}
        for record in queued:
            try:
                jobs[record.job_id] = (record, to_core(record, record.course.name))
            except JobError as e:
                await asyncio.to_thread(self.store.fail_queued, record.job_id, now, str(e))
        if self.delegate is not None:
            await self._hand_over(jobs, now)
            return
        held = {r.job_id: [u for rep in r.replicas for u in rep.devices.get("gpu_uuids", [])]
                for r, _ in running}
        other = sum_vectors(job.total.select(lambda n: not is_gpu_resource(n)) for _, job in running)
        nodes = await self.backend.nodes(held, other, running=[launch_of(r) for r, _ in running])
        courses = {record.course.name for record, _ in jobs.values()} | {r.course.name for r, _ in running}
        quotas = await asyncio.to_thread(self._limits, courses, now)
        snapshot = Snapshot(
            now=now.timestamp(), nodes=nodes,
            running=tuple(RunningJob(job, tuple((a, b, c) for a, b, c in r.placement.get("replicas", [])),
                                     (r.started_at or r.admitted_at or now).timestamp(),
                                     borrowed=bool(r.placement.get("borrowed")))
                          for r, job in running),
            courses=quotas, reserved_job=self._reserved[0], reserved_placement=self._reserved[1],
            grace=self.grace,
        )
        queues = QueueSnapshot.of(job for _, job in jobs.values())
        result = admission_cycle(snapshot, queues)
        self._reserved = ((result.reservation.job, tuple(result.reservation.placement.replicas))
                          if result.reservation else (None, ()))
        taken = {u for uuids in held.values() for u in uuids}
        started = set()
        for admission in result.admitted:
            record, job = jobs[admission.job.name]
            try:
                plan = self._plan(record, job, admission.placement.replicas, taken)
                plan = Admitted(record.job_id, plan, free_port(), admission.borrowed, job.total)
                if await asyncio.to_thread(self.store.admit, plan, now):
                    started.add(record.job_id)
                    record = await asyncio.to_thread(self.store.get, record.job_id)
                    await self.backend.launch(launch_of(record))
            except QuotaDenied as e:  # a server took the room between snapshot and ledger
                await asyncio.to_thread(self.store.set_waiting, {
                    record.job_id: ("course_quota", e.decision.message, None, None)})
            except Exception:
                log.exception("classhub jobs: admitting %s failed", record.job_id)
        for preemption in result.preemptions:
            record = await asyncio.to_thread(
                self.store.request_stop, preemption.job, J.STOP_PREEMPT, "classhub", now,
                preemption_message(preemption.course, preemption.for_job,
                                   jobs[preemption.for_job][1].course, self.grace))
        if result.pressure and result.reservation is not None and result.reservation.job in jobs:
            await asyncio.to_thread(self._culler.ask, result.reservation.job,
                                    jobs[result.reservation.job][0].owner, result.pressure, now)
        reasons = {}
        for name in jobs:
            if name in started:
                continue
            waiting = result.waiting(name)
            if waiting is None:
                continue
            _course, place = queues.position[name]
            start = (None if waiting.estimated_start is None
                     else datetime.fromtimestamp(waiting.estimated_start, timezone.utc))
            record = jobs[name][0]
            if (record.reason_code, record.reason, record.queue_position, record.estimated_start) != (
                    waiting.code, waiting.message, place, start):
                reasons[name] = (waiting.code, waiting.message, start, place)
        await asyncio.to_thread(self.store.set_waiting, reasons)

    async def _hand_over(self, jobs: Mapping[str, tuple[JobRecord, Job]], now: datetime) -> None:
        """Kueue places: every queued job within its course's quota (the ledger reserves it here,
        the one place the quota is counted, docs/kueue.md) is created at once, suspended, in its
        course's LocalQueue, with its replicas unplaced; Kueue un-suspends it when it fits. A
        course whose LocalQueue feeds another ClusterQueue keeps its jobs here."""
        refused = await queue_refusals(self.backend, {r.course.name for r, _ in jobs.values()})
        await asyncio.to_thread(self.store.set_waiting, {
            r.job_id: (KUEUE_QUEUE, refused[r.course.name], None, None)
            for r, _ in jobs.values() if r.course.name in refused})
        for record, job in jobs.values():
            if record.course.name in refused:
                continue
            order = {role.name: i for i, role in enumerate(job.roles)}
            ranked = sorted(((role.name, i) for role in job.roles for i in range(role.replicas)),
                            key=lambda p: (order[p[0]], p[1]))
            plan = tuple((role, index, rank, "", ()) for rank, (role, index) in enumerate(ranked))
            admitted = Admitted(record.job_id, plan, 0, False, job.total)
            try:
                if await asyncio.to_thread(self.store.admit, admitted, now, self.delegate):
                    await self.backend.launch(launch_of(await asyncio.to_thread(self.store.get,
                                                                                record.job_id)))
            except QuotaDenied as e:
                await asyncio.to_thread(self.store.set_waiting, {
                    record.job_id: ("course_quota", e.decision.message, None, None)})
            except Exception:  # the others are still handed over; _follow fails this one
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

