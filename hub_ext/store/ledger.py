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
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    String,
    and_,
    bindparam,
    case,
    cast,
    false,
    func,
    insert,
    select,
    true,
    update,
)
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
    parse_limits,
    week_window,
)
from hub_ext.core.resources import ResourceVector, sum_vectors
from hub_ext.store.engine import readers
from hub_ext.store.models import KINDS, AuditLog, Course, CourseQuota, Membership, Reservation, UserQuota

__all__ = ["Holding", "Ledger", "QuotaDenied", "ReconcileReport"]

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
# an admission's time (bench/storm.py). Values come as bound parameters. An admission runs them
# on the transaction's Core connection and reads rows, not ORM objects: through the ORM (entities
# loaded, a unit of work to insert) the same statements cost three times the CPU, and the hub
# runs one admission per start (docs/performance.md).
_UNRELEASED = select(Reservation).where(Reservation.key == bindparam("key"),
                                        Reservation.released_at.is_(None))
_UNRELEASED_ROW = select(*Reservation.__table__.columns).where(
    Reservation.key == bindparam("key"), Reservation.released_at.is_(None))
_RELEASE_ROW = (update(Reservation).where(Reservation.id == bindparam("row_id"))
                .values(released_at=bindparam("released_at")))
_INSERT = insert(Reservation).returning(Reservation.id)
# The course row locked, read with everything a decision needs in one statement (one round trip
# under the lock, not two): the course's limits, the user's membership and their limits (outer
# joins: no limits row means no limits; no membership row means not a member).
_COURSE_LOCKED = (select(Course.id, Course.name, CourseQuota.course_id, CourseQuota.resources,
                         CourseQuota.servers, CourseQuota.gpu_hours_per_week, Membership.id,
                         UserQuota.id, UserQuota.resources, UserQuota.servers,
                         UserQuota.gpu_hours_per_week)
                  .outerjoin(CourseQuota, CourseQuota.course_id == Course.id)
                  .outerjoin(Membership, and_(Membership.course_id == Course.id,
                                              Membership.username == bindparam("username")))
                  .outerjoin(UserQuota, and_(UserQuota.course_id == Course.id,
                                             UserQuota.username == bindparam("username")))
                  .where(Course.name == bindparam("name"))
                  .with_for_update(of=Course))


def _limits(row_id: Any, resources: dict[str, Any] | None, servers: int | None,
            gpu_hours_per_week: Fraction | None) -> Limits:
    """A quota row's limits as `_COURSE_LOCKED` reads them (no row: no limits)."""
    if row_id is None:
        return Limits()
    return parse_limits({"resources": resources or {}, "servers": servers,
                         "gpu_hours_per_week": gpu_hours_per_week})


def _reservation(row: Any) -> Reservation:
    """A reservation row as the `Reservation` that `Ledger.reserve` returns (not in a session)."""
    return Reservation(**row._asdict())


def _usage_statements(scope: ColumnElement[bool], label: ColumnElement[Any] | None = None,
                      ) -> tuple[Select, Select]:
    """`Ledger._held`'s two queries: usage of the reservations `scope` selects in a week, grouped
    by `label` (a column or expression: the user, "is it this user's", nothing), with the week's
    start bound as ``week_start`` and the GPU requests as ``texts``."""
    text = cast(Reservation.resources, String)
    in_week = and_(scope, Reservation.released_at.is_(None)
                   | (Reservation.released_at > bindparam("week_start")))
    held_now = case((Reservation.released_at.is_(None), 1), else_=0)
    part = case((false(), 1), else_=0) if label is None else label  # a constant, not a position
    keys = (text, Reservation.kind, held_now, part)
    grouped = select(*keys, func.count()).where(in_week).group_by(*keys)
    spans = (select(Reservation.started_at, Reservation.released_at, text, part)
             .where(in_week, text.in_(bindparam("texts", expanding=True))))
    return grouped, spans


# An admission's usage: the course's reservations, and the student's part of them (label 1).
_ADMISSION_USAGE = _usage_statements(Reservation.course_id == bindparam("course_id"),
                                     case((Reservation.username == bindparam("username"), 1), else_=0))
# Usage per user: of one course (the course page, a course's share of the job queue) or of
# everyone (the admin's usage page).
_USAGE_BY_USER = {
    True: _usage_statements(Reservation.course_id == select(Course.id).where(
        Course.name == bindparam("course")).scalar_subquery(), Reservation.username),
    False: _usage_statements(true(), Reservation.username),
}
# Usage per course (metrics, the admin's usage page): reservations outside any course left out.
_USAGE_BY_COURSE = _usage_statements(Reservation.course_id.is_not(None), Reservation.course_id)


@dataclass(frozen=True)
class Holding:
    """An unreleased reservation as a reader needs it (no ORM object, no session): what holds
    which resources, for whom, in which course (None: outside any course) and with which
    profile (None for jobs and older rows)."""

    key: str
    kind: str
    username: str
    course: str | None
    profile: str | None
    resources: dict[str, Any]


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

    @functools.cached_property
    def _engine(self) -> Engine:
        """The engine of the ledger's sessions: an admission runs on its connection (Core rows,
        see `_COURSE_LOCKED`), in the same transactions (sqlite: BEGIN IMMEDIATE, engine.py)."""
        return self._sessions.kw["bind"]

    @functools.cached_property
    def _reads(self) -> sessionmaker[Session]:
        """Sessions for the ledger's pure reads (usage, holdings, keys): they never wait on a
        writer nor take sqlite's write lock (`store.readers`; docs/architecture.md, rule 7), so
        a page or a metrics scrape does not queue behind a class start's reservations."""
        return readers(self._sessions)

    # ------------------------------------------------------------------ keys

    @staticmethod
    def server_key(username: str, server_name: str) -> str:
        """The key of a user's server: ``server:<user>/<name>`` ("server:ann/" for the default
        server). Built only here: the spawner reserves under it, and the service's reconcile
        and the culler match the hub's list of servers against it, so a second spelling that
        drifted would release running servers' reservations or cull by the wrong facts."""
        return f"server:{username}/{server_name}"

    @staticmethod
    def job_key(job_id: str) -> str:
        """The key of a distributed job: ``job:<job id>`` (reserved at admission, released
        when its last replica is gone)."""
        return f"job:{job_id}"

    @staticmethod
    def named(key: str) -> str:
        """What a key's holder is called on a page: the job's id, or the server's owner and
        name ("ann" for the default server, "ann/gpu" for a named one)."""
        kind, _, rest = key.partition(":")
        return rest.removesuffix("/") if kind == "server" else rest

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

        The `Reservation` returned is the row as a plain object, in no session (the admission
        reads and writes rows on its connection: `_COURSE_LOCKED`).
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        for attempt in range(3):
            try:
                with self._engine.begin() as connection:
                    if replace_stale:
                        held = connection.execute(_UNRELEASED_ROW, {"key": key}).one_or_none()
                        if held is not None:
                            connection.execute(_RELEASE_ROW, {"row_id": held.id,
                                                              "released_at": max(now, held.started_at)})
                    try:
                        # After a stale release nothing is held under the key (a concurrent
                        # reservation of it fails the insert, and the next attempt sees it);
                        # otherwise the key is read under the course's lock, so a retried
                        # request finds its own reservation instead of being counted against.
                        return self._reserve(connection, username, course, key, request, now, kind,
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
        session: Session | Connection,
        username: str,
        course_name: str | None,
        key: str,
        request: ResourceVector,
        now: datetime,
        kind: str,
        profile: str | None = None,
        *,
        existing: Any = ...,
    ) -> Reservation:
        """`existing`: the unreleased reservation row under `key` as the caller just read it in
        this transaction (None: none; ``...``: read it here). Runs on the transaction's
        connection, with rows, not ORM objects (see `_COURSE_LOCKED`)."""
        connection = session.connection() if isinstance(session, Session) else session
        course: tuple[int, str] | None = None
        limits = (Limits(), Limits())
        if course_name is not None:
            found = connection.execute(_COURSE_LOCKED, {"name": course_name, "username": username}
                                       ).one_or_none()
            if found is None:
                raise LookupError(f"no course named {course_name!r}")
            course = (found[0], found[1])
            if found[6] is None:
                raise QuotaDenied(
                    Decision(False, NOT_MEMBER, f"You are not a member of course {course_name}.")
                )
            limits = (_limits(*found[7:11]), _limits(*found[2:6]))

        if existing is ...:
            existing = connection.execute(_UNRELEASED_ROW, {"key": key}).one_or_none()
        if existing is not None:
            held_request = _request(existing.resources)
            same_course = existing.course_id == (course[0] if course else None)
            same_profile = profile is None or existing.profile == profile
            if (existing.username != username or not same_course or held_request != request
                    or not same_profile):
                held = f" ({existing.profile})" if existing.profile else ""
                raise ValueError(
                    f"{key!r} is already reserved by {existing.username} for {held_request}"
                    f"{held}; release it before reserving it again"
                )
            return _reservation(existing)

        if course is not None:
            decision = self._decide(connection, course, username, request, now, kind, limits)
            if not decision.allowed:
                raise QuotaDenied(decision)
        values = {"key": key, "kind": kind, "username": username,
                  "course_id": course[0] if course else None, "resources": request.to_k8s(),
                  "profile": profile, "started_at": now, "released_at": None}
        row_id = connection.execute(_INSERT, values).scalar_one()
        return Reservation(id=row_id, **values)

    def _decide(
        self,
        connection: Connection,
        course: tuple[int, str],
        username: str,
        request: ResourceVector,
        now: datetime,
        kind: str,
        limits: tuple[Limits, Limits],
    ) -> Decision:
        """Run core `admit` on the course's reservations as this locked transaction sees them;
        `course`: its id and name; `limits`: the student's and the course's, as `_reserve` read
        them with the locks."""
        course_id, course_name = course
        in_course, parts = self._held(connection, now, _ADMISSION_USAGE,
                                      {"course_id": course_id, "username": username})
        of_user = parts.get(1, Usage())
        return admit(
            request,
            (limits[0], of_user),
            (limits[1], in_course),
            course_name,
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
        with self._reads() as session:
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
        with self._reads() as session:
            return self._held(session, now, _usage_statements(and_(true(), *scope)), {})[0]

    def usage_by_user(self, now: datetime, *, course: str | None = None
                      ) -> tuple[Usage, dict[str, Usage]]:
        """What a course (or, `course=None`, everyone) holds at `now`, and each user's part of it:
        every user who holds or held a reservation in `now`'s week, with the week's GPU hours.

        Why one call: a course page shows every member's usage; asked per member it was one
        query per student (300 for a lecture). This is one grouped query (plus one of GPU spans
        when GPUs were held), and the total is the same as `usage(now, course=course)`."""
        statements = _USAGE_BY_USER[course is not None]
        with self._reads() as session:
            return self._held(session, now, statements, {"course": course})

    def usage_by_course(self, now: datetime) -> dict[str, Usage]:
        """What each course holds at `now` (as `usage(now, course=name)`), by course name; a
        course without a reservation in `now`'s week is absent (its usage is ``Usage()``).

        Why: a metrics scrape and the admin's usage page show every course; one grouped query
        instead of one per course."""
        with self._reads() as session:
            by_id = self._held(session, now, _USAGE_BY_COURSE, {})[1]
            names = dict(session.execute(select(Course.id, Course.name)
                                         .where(Course.id.in_(list(by_id)))).all()) if by_id else {}
        return {names[course_id]: usage for course_id, usage in by_id.items() if course_id in names}

    def holdings(self, *, kind: str | None = None) -> list[Holding]:
        """Every unreleased reservation (of `kind`, or all) with its course's name, in one query.

        Why: the culler weighs what a server holds (devices, course), metrics report the GPU
        devices held per user and profile, and the course page shows the profile a server was
        started with; all of them read the same rows, so they read them here."""
        query = (select(Reservation.key, Reservation.kind, Reservation.username, Course.name,
                        Reservation.profile, Reservation.resources)
                 .outerjoin(Course, Course.id == Reservation.course_id)
                 .where(Reservation.released_at.is_(None)))
        if kind is not None:
            query = query.where(Reservation.kind == kind)
        with self._reads() as session:
            return [Holding(*row) for row in session.execute(query)]

    def default_server_profiles(self) -> dict[str, str]:
        """username -> the profile slug recorded for their running default server (users whose
        reservation has no profile are absent). Why the ledger: it holds what the spawner
        actually applied; a start without a ``profile`` option gets the catalog's default, which
        the hub's ``user_options`` do not say."""
        return {h.username: h.profile for h in self.holdings(kind="server")
                if h.profile and h.key == self.server_key(h.username, "")}

    def held_keys(self, *, kind: str | None = None) -> set[str]:
        """Keys of the unreleased reservations (of `kind`, or all), read without a write lock.

        Why: the job loop looks for orphans every few seconds, and in the usual case finds none;
        it must then not open a write transaction (`reconcile` is one)."""
        with self._reads() as session:
            return set(self.held_keys_in(session, kind=kind))

    @staticmethod
    def held_keys_in(session: Session, *, kind: str | None = None, course_id: int | None = None
                     ) -> list[str]:
        """`held_keys` in the caller's transaction, optionally of one course (by id): a course is
        deleted only while nothing holds quota in it, decided in the delete's own transaction."""
        query = select(Reservation.key).where(Reservation.released_at.is_(None))
        if kind is not None:
            query = query.where(Reservation.kind == kind)
        if course_id is not None:
            query = query.where(Reservation.course_id == course_id)
        return list(session.scalars(query.order_by(Reservation.key)))

    @staticmethod
    def detach_course_in(session: Session, course_id: int) -> None:
        """Move every reservation of a course that is being deleted outside any course, in the
        caller's transaction (one UPDATE). Why keep them: finished reservations are their
        users' GPU-hour history, which outlives the course."""
        session.execute(update(Reservation).where(Reservation.course_id == course_id)
                        .values(course_id=None))

    def gpu_seconds_by_course(self, start: datetime | None, end: datetime, now: datetime, *,
                              kind: str | None = None) -> dict[str, Fraction]:
        """GPU-seconds held in [start, end) (`start=None`: since the first reservation) by the
        reservations (of `kind`, or all) of each course, reservations still held counting until
        `now`; courses without any are absent. One query for every course (metrics scrapes)."""
        query = (select(Course.name, Reservation.started_at, Reservation.released_at,
                        Reservation.resources)
                 .join(Course, Course.id == Reservation.course_id)
                 .where(Reservation.started_at < end))
        if start is not None:
            query = query.where(Reservation.released_at.is_(None) | (Reservation.released_at > start))
        if kind is not None:
            query = query.where(Reservation.kind == kind)
        spans: dict[str, list[tuple[datetime, datetime | None, ResourceVector]]] = {}
        with self._reads() as session:
            for name, started, released, resources in session.execute(query):
                spans.setdefault(name, []).append((started, released, _request(resources)))
        window_start = start or datetime.min.replace(tzinfo=end.tzinfo)
        return {name: gpu_seconds(of_course, window_start, end, now) for name, of_course in spans.items()}

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
        with self._reads() as session:
            rows = session.scalars(query).all()
        return gpu_seconds(((r.started_at, r.released_at, r.request) for r in rows), start, end, now)

    def _held(self, session: Session | Connection, now: datetime, statements: tuple[Select, Select],
              params: dict[str, Any]) -> tuple[Usage, dict[Any, Usage]]:
        """Usage in `now`'s week of the reservations that `statements` (`_usage_statements`)
        select, and of each of their parts by label (a label with no reservation in the week is
        absent), summed by the database in one grouped query; `params`: the values of the
        statements' own bound parameters.

        Why grouped: a course's week holds a reservation per server start, and every start of a
        300-student lecture decides against all of them. Requests of one profile serialize
        identically, so the database counts them per (request, kind, held now, label) and only
        a few groups come back; only GPU requests need their rows' times (for GPU-hours). Why
        one query for all parts: an admission needs the course's usage and the student's share
        of it (reading the course's week once halves the work done under the course's lock),
        and a course page needs every member's share (one query, not one per member).
        """
        week_start, week_end = self._week(now)
        grouped, spans_of = statements
        params = {**params, "week_start": week_start}
        groups = session.execute(grouped, params).all()
        total: list[ResourceVector] = []
        parts: dict[Any, list[ResourceVector]] = {}
        servers: dict[Any, int] = {}
        gpu_texts = set()
        for serialized, kind, active, label, count in groups:
            request = _request(json.loads(serialized))
            mine = parts.setdefault(label, [])
            servers.setdefault(label, 0)
            if active:
                total.append(request * count)
                mine.append(request * count)
                servers[label] += count if kind == "server" else 0
            if gpu_amount(request):
                gpu_texts.add(serialized)
        seconds: dict[Any, Fraction] = {}
        all_seconds = Fraction(0)
        if gpu_texts:
            rows = session.execute(spans_of, {**params, "texts": sorted(gpu_texts)}).all()
            spans: dict[Any, list[tuple[datetime, datetime | None, ResourceVector]]] = {}
            for start, end, serialized, label in rows:
                spans.setdefault(label, []).append((start, end, _request(json.loads(serialized))))
            all_seconds = gpu_seconds((span for of_label in spans.values() for span in of_label),
                                      week_start, week_end, now)
            seconds = {label: gpu_seconds(of_label, week_start, week_end, now)
                       for label, of_label in spans.items()}
        everything = Usage(resources=sum_vectors(total), servers=sum(servers.values()),
                           gpu_hours_week=all_seconds / _SECONDS_PER_HOUR)
        return everything, {
            label: Usage(resources=sum_vectors(vectors), servers=servers[label],
                         gpu_hours_week=seconds.get(label, Fraction(0)) / _SECONDS_PER_HOUR)
            for label, vectors in parts.items()
        }

    @staticmethod
    def _scope(
        query: Select[tuple[Reservation]], course: str | None, username: str | None
    ) -> Select[tuple[Reservation]]:
        if course is not None:
            query = query.join(Course, Reservation.course_id == Course.id).where(Course.name == course)
        if username is not None:
            query = query.where(Reservation.username == username)
        return query
