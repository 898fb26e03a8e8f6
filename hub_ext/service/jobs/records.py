"""The job records: every transaction of the job service, in one class (`JobStore`).

Why one class: a job's state changes in exactly one place, each change checked against the
allowed transitions (hub_ext.core.jobs.TRANSITIONS) and written with an event sentence, so the
history a student reads and the state the admission loop acts on cannot disagree. Methods are
synchronous (run them in a worker thread, docs/architecture.md, rule 7) and each is one short
transaction.

Resources a job holds are in the reservation ledger (kind "job", key "job:<job id>"): reserved
when the job is admitted, released when its last replica is gone.

Every method that changes a job tells the store's listeners which job changed (`listen`), after
its transaction committed: the admission loop keeps its queue and its running jobs in memory
and re-reads only the jobs it is told about (docs/jobs-loop.md), never every job per cycle.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload, sessionmaker

from hub_ext.core import jobs as J
from hub_ext.core.jobs import Job, Submission, parse_job
from hub_ext.core.resources import ResourceVector
from hub_ext.store import Course, Ledger, readers
from hub_ext.store.job_models import JobEvent, JobRecord, JobReplica

__all__ = ["JobConflict", "JobStore", "job_key", "to_core"]


class JobConflict(Exception):
    """The request conflicts with the job's state; the message says what to do."""


def job_key(job_id: str) -> str:
    """The job's key in the reservation ledger (built by the ledger, its one owner)."""
    return Ledger.job_key(job_id)


def new_job_id(name: str) -> str:
    """A DNS-1123 name for everything the job makes: ``<name>-<8 random hex>``. Random, so
    nobody can know a job's id (and the names of its objects) before it exists; a retried
    submit finds its job by ``(owner, client_id)`` instead (`JobStore.submit`)."""
    return f"{name[:50].rstrip('-')}-{secrets.token_hex(4)}"


def to_core(record: JobRecord, course: str) -> Job:
    """The admission core's `Job` for a record (named by its job id, which is unique)."""
    return parse_job(
        {**record.spec["job"], "name": record.job_id},
        owner=record.owner, course=course, submit_time=record.submitted_at.timestamp(),
        default_max_runtime=record.max_runtime,
    )


@dataclass(frozen=True)
class Admitted:
    """What the loop decided for one job: replicas (role, index, rank, node, devices)."""

    job_id: str
    replicas: tuple[tuple[str, int, int, str, tuple[str, ...]], ...]
    port: int
    borrowed: bool
    request: ResourceVector


class JobStore:
    """Job records and their transitions (see the module docstring)."""

    def __init__(self, sessions: sessionmaker[Session], ledger: Ledger | None = None) -> None:
        self.sessions = sessions
        self.ledger = ledger or Ledger(sessions)
        #: reads never wait on (nor take) sqlite's write lock: the loop reads every few seconds
        self.readers = readers(sessions)
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    def listen(self, listener: Callable[[str], None]) -> None:
        """Call `listener(job_id)` after every committed change of a job (any thread: the
        handlers write from worker threads; the listener must only note the id)."""
        with self._lock:
            self._listeners.append(listener)

    def _changed(self, job_id: str) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(job_id)

    # ------------------------------------------------------------------ reading
    def get(self, job_id: str) -> JobRecord | None:
        with self.readers() as session:
            return session.scalars(
                select(JobRecord).where(JobRecord.job_id == job_id)
                .options(selectinload(JobRecord.replicas), selectinload(JobRecord.events),
                         selectinload(JobRecord.course))
            ).one_or_none()

    def list(self, *, owner: str | None = None, courses: Iterable[str] | None = None,
             states: Iterable[str] | None = None, offset: int = 0, limit: int = 50,
             either: bool = False) -> tuple[list[JobRecord], int]:
        """Jobs, newest first, and how many match. `owner` and `courses` filter (both given and
        `either`: the owner's jobs *or* those of the courses, what a teacher sees)."""
        query = select(JobRecord).join(Course, JobRecord.course_id == Course.id)
        conditions = []
        if owner is not None:
            conditions.append(JobRecord.owner == owner)
        if courses is not None:
            conditions.append(Course.name.in_(list(courses)))
        if conditions:
            if either and len(conditions) == 2:
                query = query.where(conditions[0] | conditions[1])
            else:
                for condition in conditions:
                    query = query.where(condition)
        if states is not None:
            query = query.where(JobRecord.state.in_(list(states)))
        with self.readers() as session:
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(
                query.options(selectinload(JobRecord.replicas), selectinload(JobRecord.course))
                .order_by(JobRecord.submitted_at.desc(), JobRecord.id.desc())
                .offset(offset).limit(limit)
            ).all()
        return list(rows), total

    def state_counts(self, *, owner: str | None = None, courses: Iterable[str] | None = None,
                     states: Iterable[str]) -> dict[tuple[str, str], int]:
        """How many jobs are in each of `states`, per course: ``{(course, state): n}``, in one
        grouped query (the home page asks every few seconds). `owner` or `courses` filter."""
        query = (select(Course.name, JobRecord.state, func.count())
                 .join(Course, JobRecord.course_id == Course.id)
                 .where(JobRecord.state.in_(list(states))))
        if owner is not None:
            query = query.where(JobRecord.owner == owner)
        if courses is not None:
            query = query.where(Course.name.in_(list(courses)))
        with self.readers() as session:
            rows = session.execute(query.group_by(Course.name, JobRecord.state)).all()
        return {(course, state): int(n) for course, state, n in rows}

    def in_states(self, states: Iterable[str]) -> list[JobRecord]:
        """Jobs in `states`, oldest first, with replicas and course loaded (for the loop)."""
        with self.readers() as session:
            return list(session.scalars(
                select(JobRecord).where(JobRecord.state.in_(list(states)))
                .options(selectinload(JobRecord.replicas), selectinload(JobRecord.course))
                .order_by(JobRecord.submitted_at, JobRecord.id)
            ))

    def recent_waits(self, limit: int) -> tuple[float, ...]:
        """Seconds the last `limit` jobs admitted waited (submit to admission), oldest first: the
        admission cycle's `recent_waits` after a restart, so a starving big job keeps counting
        as starving (docs/admission.md)."""
        with self.readers() as session:
            rows = session.execute(
                select(JobRecord.submitted_at, JobRecord.admitted_at)
                .where(JobRecord.admitted_at.is_not(None))
                .order_by(JobRecord.admitted_at.desc(), JobRecord.id.desc()).limit(limit)
            ).all()
        return tuple(max((admitted - submitted).total_seconds(), 0.0)
                     for submitted, admitted in reversed(rows))

    def by_ids(self, job_ids: Iterable[str]) -> list[JobRecord]:
        """The jobs named (those that exist), with replicas and course loaded: what the loop
        reads of the jobs it was told changed."""
        ids = list(job_ids)
        if not ids:
            return []
        with self.readers() as session:
            return list(session.scalars(
                select(JobRecord).where(JobRecord.job_id.in_(ids))
                .options(selectinload(JobRecord.replicas), selectinload(JobRecord.course))
            ))

    # ------------------------------------------------------------------ submit and cancel
    def submit(self, owner: str, course: str, submission: Submission, job: Job, now: datetime,
               profiles: Mapping[str, Any] | None = None,
               sandbox: Mapping[str, str] | None = None) -> tuple[JobRecord, bool]:
        """Record a queued job; (record, created). The same `client_id` again returns the job
        made the first time (created False) when it asks for the same, else JobConflict.
        `profiles`: role -> what the job keeps of the profile it named
        (hub_ext.core.profiles.job_profile_record). `sandbox`: a grading job's inputs
        (hub_ext.backends.jobs.Launch.sandbox)."""
        spec = {"command": list(submission.command), "env": dict(submission.env),
                "workdir": submission.workdir, "job": dict(submission.job_fields)}
        if sandbox:
            spec["sandbox"] = dict(sandbox)
        if profiles:
            spec["profiles"] = {role: dict(kept) for role, kept in profiles.items()}
        for _attempt in range(3):
            if submission.client_id is not None:
                existing = self._by_client_id(owner, submission.client_id)
                if existing is not None:
                    if existing.spec != spec or existing.course.name != course:
                        raise JobConflict(
                            f"You already submitted a different job with id {submission.client_id!r} "
                            f"({existing.job_id}); choose a new id for a new job.")
                    return existing, False
            try:
                with self.sessions.begin() as session:
                    course_row = session.scalars(select(Course).where(Course.name == course)).one()
                    record = JobRecord(
                        job_id=new_job_id(submission.name),
                        client_id=submission.client_id, name=submission.name, owner=owner,
                        course=course_row, spec=spec, priority=job.priority,
                        max_runtime=job.max_runtime, state=J.QUEUED, reason_code="",
                        reason="waiting for the next admission cycle", submitted_at=now,
                        placement={}, preemptions=0,
                    )
                    session.add(record)
                    named = sorted({kept["display_name"] for kept in (profiles or {}).values()})
                    shown = f" (profile {', '.join(named)})" if named else ""
                    session.add(JobEvent(job=record, at=now, state=J.QUEUED,
                                         message=f"submitted by {owner}: {job.describe()}{shown}"))
                    session.flush()
                    job_id = record.job_id
                self._changed(job_id)
                return self.get(job_id), True  # type: ignore[return-value]
            except IntegrityError:
                if submission.client_id is None:
                    raise
                continue  # the same id submitted concurrently: the next round returns it
        raise JobConflict("The job could not be recorded; try again.")

    def _by_client_id(self, owner: str, client_id: str) -> JobRecord | None:
        with self.readers() as session:
            return session.scalars(
                select(JobRecord).where(JobRecord.owner == owner, JobRecord.client_id == client_id)
                .options(selectinload(JobRecord.course), selectinload(JobRecord.replicas))
            ).one_or_none()

    def request_stop(self, job_id: str, reason: str, by: str, now: datetime,
                     message: str) -> JobRecord:
        """Ask for a job's end: a queued job is cancelled at once; an admitted or running one is
        marked, and the loop stops its replicas (SIGTERM, grace, SIGKILL) and ends it. Asking
        again, or for a job that already ended, changes nothing; so does a preemption of a job
        that no longer runs (the loop decided on a snapshot: the job may have ended or gone back
        to the queue since, and a preemption never cancels a job)."""
        with self.sessions.begin() as session:
            record = self._locked(session, job_id)
            stale = reason == J.STOP_PREEMPT and record.state not in (J.ADMITTED, J.RUNNING)
            if record.state in J.FINAL or record.stop_requested_at is not None or stale:
                pass
            elif record.state == J.QUEUED or (record.state == J.PREEMPTED and reason == J.STOP_CANCEL):
                self._move(session, record, J.CANCELLED, now, message)
                record.stop_reason, record.stop_by, record.finished_at = reason, by, now
                record.reason_code, record.reason, record.queue_position = "", "", None
            else:
                record.stop_reason, record.stop_by, record.stop_requested_at = reason, by, now
                session.add(JobEvent(job=record, at=now, state=record.state, message=message))
        self._changed(job_id)
        return self.get(job_id)  # type: ignore[return-value]

    # ------------------------------------------------------------------ the loop's writes
    def admit(self, admitted: Admitted, now: datetime, delegate: str | None = None) -> bool:
        """Reserve the job in the ledger and record its placement; False when it is no longer
        queued (cancelled meanwhile). QuotaDenied propagates (a server took the room first).

        Two transactions, ledger first: a crash between them leaves a reservation without an
        admitted job, which the loop releases at its next cycle (`release_orphans`)."""
        record = self.get(admitted.job_id)
        if record is None or record.state != J.QUEUED:
            return False
        self.ledger.reserve(record.owner, record.course.name, job_key(record.job_id),
                            admitted.request, now, kind="job")
        with self.sessions.begin() as session:
            record = self._locked(session, admitted.job_id)
            if record.state != J.QUEUED:
                return False
            order = {role["name"]: i for i, role in enumerate(record.spec["job"]["roles"])}
            for role, index, rank, node, devices in admitted.replicas:
                session.add(JobReplica(job=record, role=role, role_order=order.get(role, 0),
                                       index=index, rank=rank, node=node, state="pending",
                                       devices={"gpu_uuids": list(devices)}, restarts=0))
            record.placement = {"replicas": [[r[0], r[1], r[3]] for r in admitted.replicas],
                                "port": admitted.port, "borrowed": admitted.borrowed}
            record.admitted_at = now
            record.waited_seconds = max(0.0, (now - record.submitted_at).total_seconds())
            record.reason_code, record.reason, record.queue_position = "", "", None
            record.estimated_start = None
            where = sorted({r[3] for r in admitted.replicas})
            message = (f"admitted: all {len(admitted.replicas)} replicas placed at once on "
                       f"{', '.join(where)}" + (" (on borrowed capacity)" if admitted.borrowed else ""))
            if delegate:
                message = f"handed to {delegate}, which starts all {len(admitted.replicas)} replicas at once"
            self._move(session, record, J.ADMITTED, now, message)
        self._changed(admitted.job_id)
        return True

    def release_orphans(self, now: datetime, holding_ids: Iterable[str] | None = None) -> tuple[str, ...]:
        """Release job reservations whose job holds nothing (crash between reserve and admit).
        `holding_ids`: the jobs that hold capacity, when the caller knows them (the loop keeps
        them in memory); else they are read."""
        if holding_ids is None:
            holding_ids = [r.job_id for r in self.in_states(J.HOLDING)]
        holding = {job_key(i) for i in holding_ids}
        held = self.ledger.held_keys(kind="job")  # a read: no write lock
        if not held - holding:  # the usual case: no write transaction at all
            return ()
        return self.ledger.reconcile(holding, now, kind="job", grace=timedelta(0),
                                     actor="classhub-jobs").released

    def update_replicas(self, job_id: str, statuses: Mapping[tuple[str, int], tuple[str, int | None, str]],
                        now: datetime) -> JobRecord:
        """Record what replicas do ((role, index) -> (state, exit code, node)); the job moves to
        running when all replicas run."""
        with self.sessions.begin() as session:
            record = self._locked(session, job_id)
            for replica in record.replicas:
                state, code, node = statuses.get((replica.role, replica.index), (replica.state, None, ""))
                if state == replica.state:
                    continue
                if state == "running" and replica.started_at is None:
                    replica.started_at = now
                if state == "ended":
                    replica.exit_code, replica.finished_at = code, now
                    state = "succeeded" if code == 0 else "failed"
                    if replica.state in ("succeeded", "failed"):
                        continue
                replica.state = state
                replica.node = node or replica.node
            if record.state == J.ADMITTED and record.replicas and all(
                    r.state != "pending" for r in record.replicas):
                record.started_at = now
                self._move(session, record, J.RUNNING, now,
                           f"running: all {len(record.replicas)} replicas started")
        self._changed(job_id)
        return self.get(job_id)  # type: ignore[return-value]

    def count_restart(self, job_id: str, role: str, index: int, now: datetime) -> None:
        """Record that replica (role, index) failed and is started again."""
        with self.sessions.begin() as session:
            record = self._locked(session, job_id)
            for replica in record.replicas:
                if (replica.role, replica.index) == (role, index):
                    replica.restarts += 1
                    replica.state, replica.finished_at = "pending", None
                    session.add(JobEvent(job=record, at=now, state=record.state, message=(
                        f"{role}-{index} exited {replica.exit_code}; restart {replica.restarts} "
                        f"of {record.spec['job'].get('max_restarts', 0)}")))
        self._changed(job_id)

    def finish(self, job_id: str, state: str, now: datetime, message: str) -> JobRecord:
        """End a job that holds capacity: its final state (or PREEMPTED, then queued again) and
        the ledger reservation released, in one transaction."""
        with self.sessions.begin() as session:
            record = self._locked(session, job_id)
            if record.state not in J.HOLDING:
                return record
            for replica in record.replicas:
                if replica.state in ("pending", "running"):
                    replica.state = "killed" if record.stop_requested_at else "lost"
                    replica.finished_at = now
            self._move(session, record, state, now, message)
            record.finished_at = now
            if state == J.PREEMPTED:
                record.preemptions += 1
                for replica in list(record.replicas):
                    session.delete(replica)
                record.placement, record.stop_requested_at, record.stop_reason = {}, None, None
                record.admitted_at = record.started_at = record.finished_at = None
                self._move(session, record, J.QUEUED, now, "back in the queue after preemption")
            # the same transaction: a crash must not leave an ended job's reservation held
            self.ledger.release_in(session, job_key(job_id), now)
        self._changed(job_id)
        return self.get(job_id)  # type: ignore[return-value]

    def note(self, job_id: str, now: datetime, message: str) -> None:
        """An event that changes no state (why an admitted job has not started yet)."""
        with self.sessions.begin() as session:
            record = self._locked(session, job_id)
            session.add(JobEvent(job=record, at=now, state=record.state, message=message))
        self._changed(job_id)

    def fail_queued(self, job_id: str, now: datetime, message: str) -> None:
        with self.sessions.begin() as session:
            record = self._locked(session, job_id)
            if record.state == J.QUEUED:
                record.finished_at = now
                self._move(session, record, J.FAILED, now, message)
        self._changed(job_id)

    def set_waiting(self, reasons: Mapping[str, tuple[str, str, datetime | None, int | None]]) -> None:
        """Store why each queued job waits (code, sentence, estimated start, queue position)."""
        if not reasons:
            return
        with self.sessions.begin() as session:
            rows = session.scalars(select(JobRecord).where(JobRecord.job_id.in_(list(reasons)),
                                                           JobRecord.state == J.QUEUED)).all()
            for record in rows:
                code, text, start, position = reasons[record.job_id]
                if (record.reason_code, record.reason, record.queue_position) != (code, text, position):
                    record.reason_code, record.reason, record.queue_position = code, text, position
                record.estimated_start = start

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _locked(session: Session, job_id: str) -> JobRecord:
        record = session.scalars(
            select(JobRecord).where(JobRecord.job_id == job_id).with_for_update()
            .options(selectinload(JobRecord.replicas))
        ).one_or_none()
        if record is None:
            raise LookupError(job_id)
        return record

    @staticmethod
    def _move(session: Session, record: JobRecord, state: str, now: datetime, message: str) -> None:
        if not J.may_change(record.state, state):
            raise JobConflict(f"job {record.job_id} cannot go from {record.state} to {state}")
        record.state = state
        session.add(JobEvent(job=record, at=now, state=state, message=message))


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def as_json(record: JobRecord, *, position_detail: bool = True) -> dict[str, Any]:
    """The API's view of a job."""
    spec = record.spec
    kept = spec.get("profiles") or {}
    names = {kept[r["name"]]["display_name"] if r.get("name") in kept else None
             for r in spec["job"]["roles"]}
    out: dict[str, Any] = {
        "id": record.job_id, "client_id": record.client_id, "name": record.name,
        "owner": record.owner, "course": record.course.name, "state": record.state,
        "command": spec["command"], "roles": spec["job"]["roles"], "priority": record.priority,
        # the profile's display name when every role has the same one; per role in "profiles"
        "profile": next(iter(names)) if len(names) == 1 else None,
        "profiles": {role: _profile_json(k) for role, k in kept.items()},
        "max_runtime": record.max_runtime, "submitted_at": _iso(record.submitted_at),
        "admitted_at": _iso(record.admitted_at), "started_at": _iso(record.started_at),
        "finished_at": _iso(record.finished_at), "preemptions": record.preemptions,
        "stop_requested": record.stop_requested_at is not None, "stop_reason": record.stop_reason,
    }
    if position_detail:
        out.update({
            "reason_code": record.reason_code or None, "reason": record.reason or None,
            "queue_position": record.queue_position,
            "estimated_start": _iso(record.estimated_start),
            "replicas": [{"role": r.role, "index": r.index, "rank": r.rank, "state": r.state,
                          "node": r.node or None, "exit_code": r.exit_code, "restarts": r.restarts,
                          "gpus": r.devices.get("gpu_uuids", [])} for r in record.replicas],
        })
    return out


def _profile_json(kept: Mapping[str, Any]) -> dict[str, str]:
    """A role's profile as the API shows it."""
    return {"slug": kept["slug"], "display_name": kept["display_name"],
            "summary": kept.get("summary", "")}


def events_json(events: Sequence[JobEvent]) -> list[dict[str, Any]]:
    return [{"at": _iso(e.at), "state": e.state, "message": e.message} for e in events]


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()
