"""The reservation ledger: race-free quota admission for servers and jobs.

Why a ledger: asking the cluster "what runs now?" and then starting a pod is a check-then-act
race; fifty students clicking Start at the beginning of a lecture would all see 3 of 4 GPUs in
use. Instead every server or job first *reserves* its resources here. A reservation is decided
and written in one transaction that holds the course's lock, so decisions of one course are
serialized and each one sees every reservation committed before it:

- PostgreSQL: ``SELECT ... FOR UPDATE OF course`` on the course row, which the same statement
  reads with the user's membership and both limits (one lock per reservation, so two
  reservations cannot deadlock; a user's limits are per course, so the course's lock also
  serializes every reservation of a member in it);
- sqlite: every transaction is ``BEGIN IMMEDIATE`` (engine.py), so writers queue for the lock.

The cluster stays the truth for what runs (docs/architecture.md, rule 4): `reconcile` releases reservations of
servers that no longer run and reports servers that run without one; the caller decides what to do.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from types import EllipsisType
from typing import Any

from sqlalchemy import ColumnElement, Select, String, and_, bindparam, case, cast, false, func, select, true
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from hub_ext.core.quota import (
    NOT_MEMBER,
    Decision,
    Limits,
    Usage,
    admit,
    gpu_amount,
    gpu_seconds,
    week_window,
)
from hub_ext.core.resources import ResourceVector, sum_vectors
from hub_ext.store.models import KINDS, AuditLog, Course, CourseQuota, Membership, Reservation, UserQuota

__all__ = ["Ledger", "QuotaDenied", "ReconcileReport"]

_SECONDS_PER_HOUR = 3600


def _request(resources: dict[str, Any]) -> ResourceVector:
    """A reservation's resources as a vector; most reservations of a course ask for the same
    profile, so each distinct request is parsed once (`Ledger.gpu_seconds` reads rows too)."""
    return _parsed(tuple(sorted(resources.items())))


@functools.lru_cache(maxsize=1024)
def _parsed(items: tuple[tuple[str, Any], ...]) -> ResourceVector:
    return ResourceVector.from_k8s(dict(items))


# The statements of an admission, built once: a class start makes hundreds of admissions, each
# under its course's lock, and building the same SQL expressions again for each was a fifth of
# an admission's time (bench/storm.py). Values come as bound parameters.
_UNRELEASED = select(Reservation).where(Reservation.key == bindparam("key"),
                                        Reservation.released_at.is_(None))
# The course row locked, read with everything a decision needs in one statement (one round trip
# under the lock, not two): the course's limits, the user's membership and their limits (outer
# joins: no limits row means no limits; no membership row means not a member).
_COURSE_LOCKED = (select(Course, CourseQuota, Membership, UserQuota)
                  .outerjoin(CourseQuota, CourseQuota.course_id == Course.id)
                  .outerjoin(Membership, and_(Membership.course_id == Course.id,
                                              Membership.username == bindparam("username")))
                  .outerjoin(UserQuota, and_(UserQuota.course_id == Course.id,
                                             UserQuota.username == bindparam("username")))
                  .where(Course.name == bindparam("name"))
                  .with_for_update(of=Course))


def _usage_statements(scope: ColumnElement[bool], part: ColumnElement[bool] | None = None,
                      ) -> tuple[Select, Select]:
    """`Ledger._held`'s two queries: usage of the reservations `scope` selects in a week, grouped
    by "in `part`", with the week's start bound as ``week_start`` and the GPU requests as
    ``texts``."""
    text = cast(Reservation.resources, String)
    in_week = and_(scope, Reservation.released_at.is_(None)
                   | (Reservation.released_at > bindparam("week_start")))
    held_now = case((Reservation.released_at.is_(None), 1), else_=0)
    in_part = case((false() if part is None else part, 1), else_=0)
    keys = (text, Reservation.kind, held_now, in_part)
    grouped = select(*keys, func.count()).where(in_week).group_by(*keys)
    spans = (select(Reservation.started_at, Reservation.released_at, text, in_part)
             .where(in_week, text.in_(bindparam("texts", expanding=True))))
    return grouped, spans


# An admission's usage: the course's reservations, and the student's part of them.
_ADMISSION_USAGE = _usage_statements(Reservation.course_id == bindparam("course_id"),
                                     Reservation.username == bindparam("username"))


class QuotaDenied(Exception):
    """A reservation was refused; `decision.message` is the sentence to show the student."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message)
        self.decision = decision


@dataclass(frozen=True)
class ReconcileReport:
    """What `reconcile` did: keys it released, and running keys that hold no reservation."""

    released: tuple[str, ...]
    unreserved: tuple[str, ...]


class Ledger:
    """Reserve, release and account resources against course and per-user quotas.

    `week` maps an instant to its accounting week [start, end) (default: Monday 00:00 UTC).
    All instants must be timezone-aware.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        week: Callable[[datetime], tuple[datetime, datetime]] = week_window,
    ) -> None:
        self._sessions = sessions
        self._week = week

    # ------------------------------------------------------------------ reserve / release

    def reserve(
        self,
        username: str,
        course: str | None,
        key: str,
        request: ResourceVector,
        now: datetime,
        *,
        kind: str = "server",
        profile: str | None = None,
        replace_stale: bool = False,
    ) -> Reservation:
        """Admit and record `request` for `username` in `course`, or raise QuotaDenied.

        Idempotent per key: while a reservation with `key` is unreleased, reserving it again for
        the same user, course and resources returns it unchanged (a retried spawn is no second
        server). The same key with anything else is a ValueError. `course=None` records usage of
        a user outside any course; no quota applies to it. LookupError: unknown course.

        `profile` is the slug of the server's profile, recorded so that metrics can show GPU use
        by profile; it plays no part in admission. A retry that names a different profile than
        the held reservation is "anything else"; one that names none matches any.

        `replace_stale`: a reservation still held under `key` is stale (the caller knows nothing
        runs under it: the hub does not start a running server) and is released first, in the
        same transaction, so one start is one write (a class start is hundreds of them). The
        release stays even when the new request is refused.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        for attempt in range(3):
            try:
                with self._sessions.begin() as session:
                    if replace_stale:
                        held = session.scalars(_UNRELEASED, {"key": key}).one_or_none()
                        if held is not None:
                            self._mark_released(session, held, now)
                    try:
                        # After a stale release nothing is held under the key (a concurrent
                        # reservation of it fails the insert, and the next attempt sees it);
                        # otherwise the key is read under the course's lock, so a retried
                        # request finds its own reservation instead of being counted against.
                        return self._reserve(session, username, course, key, request, now, kind,
                                             profile, existing=None if replace_stale else ...)
                    except QuotaDenied as e:
                        if not replace_stale:
                            raise
                        denied = e  # leave the block normally: the stale release is committed
                raise denied
            except IntegrityError:
                # Only a concurrent reservation of the same key outside this course's lock can
                # get here (partial unique index); the next attempt finds and returns it.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _reserve(
        self,
        session: Session,
        username: str,
        course_name: str | None,
        key: str,
        request: ResourceVector,
        now: datetime,
        kind: str,
        profile: str | None = None,
        *,
        existing: Reservation | EllipsisType | None = ...,
    ) -> Reservation:
        """`existing`: the unreleased reservation under `key` as the caller just read it in this
        transaction (``...``: read it here)."""
        course: Course | None = None
        limits = (Limits(), Limits())
        if course_name is not None:
            found = session.execute(_COURSE_LOCKED, {"name": course_name, "username": username}
                                    ).one_or_none()
            if found is None:
                raise LookupError(f"no course named {course_name!r}")
            course, course_quota, member, user_quota = found
            if member is None:
                raise QuotaDenied(
                    Decision(False, NOT_MEMBER, f"You are not a member of course {course_name}.")
                )
            limits = (user_quota.limits if user_quota else Limits(),
                      course_quota.limits if course_quota else Limits())

        if existing is ...:
            existing = session.scalars(_UNRELEASED, {"key": key}).one_or_none()
        if existing is not None:
            same_course = existing.course_id == (course.id if course else None)
            same_profile = profile is None or existing.profile == profile
            if (existing.username != username or not same_course or existing.request != request
                    or not same_profile):
                held = f" ({existing.profile})" if existing.profile else ""
                raise ValueError(
                    f"{key!r} is already reserved by {existing.username} for {existing.request}"
                    f"{held}; release it before reserving it again"
                )
            return existing

        if course is not None:
            decision = self._decide(session, course, username, request, now, kind, limits)
            if not decision.allowed:
                raise QuotaDenied(decision)
        reservation = Reservation(
            key=key,
            kind=kind,
            username=username,
            course=course,
            resources=request.to_k8s(),
            profile=profile,
            started_at=now,
        )
        session.add(reservation)
        session.flush()
        return reservation

    def _decide(
        self,
        session: Session,
        course: Course,
        username: str,
        request: ResourceVector,
        now: datetime,
        kind: str,
        limits: tuple[Limits, Limits],
    ) -> Decision:
        """Run core `admit` on the course's reservations as this locked transaction sees them;
        `limits`: the student's and the course's, as `_reserve` read them with the locks."""
        in_course, of_user = self._held(session, now, _ADMISSION_USAGE,
                                        {"course_id": course.id, "username": username})
        return admit(
            request,
            (limits[0], of_user),
            (limits[1], in_course),
            course.name,
            servers=1 if kind == "server" else 0,
        )

    def release(self, key: str, now: datetime, *, started_before: datetime | None = None
                ) -> Reservation | None:
        """Mark the unreleased reservation `key` released at `now`; None when there is none.

        `started_before`: release it only if it was made before then (a release decided at that
        instant and run later must not end a newer reservation of the same server)."""
        with self._sessions.begin() as session:
            return self.release_in(session, key, now, started_before=started_before)

    def release_in(self, session: Session, key: str, now: datetime, *,
                   started_before: datetime | None = None) -> Reservation | None:
        """`release` inside the caller's transaction, so that a record's end and the release of
        what it held commit together (a crash between two transactions would leave it held)."""
        reservation = session.scalars(_UNRELEASED, {"key": key}).one_or_none()
        if reservation is None or (started_before is not None
                                   and reservation.started_at > started_before):
            return None
        self._mark_released(session, reservation, now)
        return reservation

    @staticmethod
    def _mark_released(session: Session, reservation: Reservation, now: datetime) -> None:
        reservation.released_at = max(now, reservation.started_at)
        session.flush()  # before a new reservation of the key (one unreleased per key)

    def reconcile(
        self,
        running_keys: Iterable[str],
        now: datetime,
        *,
        kind: str = "server",
        grace: timedelta = timedelta(minutes=1),
        actor: str = "classhub-reconcile",
    ) -> ReconcileReport:
        """Make the ledger agree with what runs (the cluster is the truth).

        Releases unreleased `kind` reservations whose key is not in `running_keys` and that are
        older than `grace` (a reservation is written just before its server starts, so a fresh one
        may legitimately not run yet), writing one audit entry per release. Returns those keys and
        the running keys that hold no reservation; whether to stop or adopt them is the caller's
        decision.
        """
        running = set(running_keys)
        with self._sessions.begin() as session:
            active = session.scalars(
                select(Reservation).where(
                    Reservation.kind == kind, Reservation.released_at.is_(None)
                )
            ).all()
            released = []
            for reservation in active:
                if reservation.key in running or reservation.started_at > now - grace:
                    continue
                reservation.released_at = max(now, reservation.started_at)
                released.append(reservation.key)
                session.add(
                    AuditLog(
                        at=now,
                        actor=actor,
                        action="reservation.release.not_running",
                        details={"key": reservation.key, "username": reservation.username},
                    )
                )
            held = {r.key for r in active}
        return ReconcileReport(tuple(sorted(released)), tuple(sorted(running - held)))

    # ------------------------------------------------------------------ accounting

    def active(self, *, course: str | None = None, username: str | None = None) -> list[Reservation]:
        """Unreleased reservations, optionally of one course and/or one user, oldest first."""
        query = self._scope(select(Reservation), course, username).where(
            Reservation.released_at.is_(None)
        )
        with self._sessions() as session:
            return list(session.scalars(query.order_by(Reservation.started_at, Reservation.id)))

    def usage(self, now: datetime, *, course: str | None = None, username: str | None = None) -> Usage:
        """What a course, a user (all courses), or a user in a course holds at `now`, with the GPU
        hours of `now`'s week so far."""
        scope = []
        if course is not None:
            scope.append(Reservation.course_id == select(Course.id).where(Course.name == course)
                         .scalar_subquery())
        if username is not None:
            scope.append(Reservation.username == username)
        with self._sessions() as session:
            return self._held(session, now, _usage_statements(and_(true(), *scope)), {})[0]

    def gpu_seconds(
        self,
        start: datetime,
        end: datetime,
        now: datetime,
        *,
        course: str | None = None,
        username: str | None = None,
    ) -> Fraction:
        """GPU-seconds held in [start, end), reservations still held counting until `now`."""
        query = self._scope(select(Reservation), course, username).where(
            Reservation.started_at < end,
            Reservation.released_at.is_(None) | (Reservation.released_at > start),
        )
        with self._sessions() as session:
            rows = session.scalars(query).all()
        return gpu_seconds(((r.started_at, r.released_at, r.request) for r in rows), start, end, now)

    def _held(self, session: Session, now: datetime, statements: tuple[Select, Select],
              params: dict[str, Any]) -> tuple[Usage, Usage]:
        """Usage in `now`'s week of the reservations that `statements` (`_usage_statements`)
        select, and of their part (a zero Usage without one), summed by the database in one
        grouped query; `params`: the values of the statements' own bound parameters.

        Why grouped: a course's week holds a reservation per server start, and every start of a
        300-student lecture decides against all of them. Requests of one profile serialize
        identically, so the database counts them per (request, kind, held now, in part) and only
        a few groups come back; only GPU requests need their rows' times (for GPU-hours). Why
        one query for two scopes: an admission needs the course's usage and the student's share
        of it, and reading the course's week once halves the work done under the course's lock.
        """
        week_start, week_end = self._week(now)
        grouped, spans_of = statements
        params = {**params, "week_start": week_start}
        groups = session.execute(grouped, params).all()
        resources: tuple[list[ResourceVector], list[ResourceVector]] = ([], [])
        servers = [0, 0]
        gpu_texts = set()
        for serialized, kind, active, mine, count in groups:
            request = _request(json.loads(serialized))
            if active:
                for i in (0, 1) if mine else (0,):
                    resources[i].append(request * count)
                    servers[i] += count if kind == "server" else 0
            if gpu_amount(request):
                gpu_texts.add(serialized)
        seconds = [Fraction(0), Fraction(0)]
        if gpu_texts:
            rows = session.execute(spans_of, {**params, "texts": sorted(gpu_texts)}).all()
            spans = [(start, end, _request(json.loads(serialized)), mine)
                     for start, end, serialized, mine in rows]
            seconds[0] = gpu_seconds(((a, b, req) for a, b, req, _ in spans), week_start, week_end, now)
            seconds[1] = gpu_seconds(((a, b, req) for a, b, req, mine in spans if mine),
                                     week_start, week_end, now)
        all_of_it, the_part = (Usage(resources=sum_vectors(resources[i]), servers=servers[i],
                                     gpu_hours_week=seconds[i] / _SECONDS_PER_HOUR) for i in (0, 1))
        return all_of_it, the_part

    @staticmethod
    def _scope(
        query: Select[tuple[Reservation]], course: str | None, username: str | None
    ) -> Select[tuple[Reservation]]:
        if course is not None:
            query = query.join(Course, Reservation.course_id == Course.id).where(Course.name == course)
        if username is not None:
            query = query.where(Reservation.username == username)
        return query
