"""The reservation ledger (hub_ext.store.Ledger) on sqlite and PostgreSQL, one caller at a time.

What a user would notice: a retried spawn counted as a second server, a stopped server still
holding a GPU, a student refused with the wrong sentence, GPU hours billed wrongly.
The concurrent cases are in test_store_race.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session, sessionmaker

from hub_ext.core.quota import (
    COURSE_GPU_HOURS,
    COURSE_RESOURCE,
    NOT_MEMBER,
    USER_GPU_HOURS,
    USER_RESOURCE,
    USER_SERVERS,
    Usage,
    parse_limits,
)
from hub_ext.core.resources import ResourceVector
from hub_ext.store import (
    AuditLog,
    Ledger,
    QuotaDenied,
    Reservation,
    add_member,
    connect,
    ensure_course,
    readers,
    set_course_limits,
    set_user_limits,
)
from tests.pg import database_url, postgres_server, postgres_url  # noqa: F401

pytestmark = pytest.mark.unit

UTC = timezone.utc
T0 = datetime(2025, 3, 5, 9, 0, tzinfo=UTC)  # a Wednesday
GPU = "nvidia.com/gpu"


def R(**kw: object) -> ResourceVector:
    names = {"gpu": GPU, "mig": "nvidia.com/mig-1g.18gb", "shared": "nvidia.com/gpu.shared"}
    return ResourceVector({names.get(k, k): v for k, v in kw.items()})


@pytest.fixture
def sessions(database_url: str) -> Iterator[sessionmaker[Session]]:  # noqa: F811
    factory = connect(database_url)
    yield factory
    factory.kw["bind"].dispose()


def make_course(
    sessions: sessionmaker[Session], name: str, members: list[str], course_limits: dict | None = None,
    user_limits: dict[str, dict] | None = None,
) -> None:
    with sessions.begin() as session:
        course = ensure_course(session, name, T0, display_name=f"{name} display")
        for username in members:
            add_member(session, course, username)
        if course_limits is not None:
            set_course_limits(session, course, parse_limits(course_limits), actor="teacher", now=T0)
        for username, limits in (user_limits or {}).items():
            set_user_limits(session, course, username, parse_limits(limits), actor="teacher", now=T0)


def test_reserve_within_limits_records_and_counts(sessions: sessionmaker[Session]) -> None:
    make_course(sessions, "CS101", ["ann", "bob"], {"resources": {GPU: 2}, "servers": 3})
    ledger = Ledger(sessions)
    first = ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1, cpu=2), T0)
    assert (first.key, first.username, first.kind) == ("server:ann/", "ann", "server")
    assert first.request == R(gpu=1, cpu=2)
    assert first.started_at == T0 and first.released_at is None
    ledger.reserve("bob", "CS101", "server:bob/", R(gpu=1), T0)
    with pytest.raises(QuotaDenied) as denied:
        ledger.reserve("bob", "CS101", "server:bob/two", R(gpu=1), T0)
    assert denied.value.decision.reason_code == COURSE_RESOURCE
    assert str(denied.value) == (
        "Course CS101 uses 2 of its 2 nvidia.com/gpu (you: 1). Stop a server or ask your teacher."
    )
    # a CPU-only server still fits (servers: 2 of 3)
    ledger.reserve("bob", "CS101", "server:bob/cpu", R(cpu=1), T0)
    usage = ledger.usage(T0, course="CS101")
    assert usage.resources == R(gpu=2, cpu=3)
    assert usage.servers == 3
    assert ledger.usage(T0, username="bob").resources == R(gpu=1, cpu=1)
    assert [r.key for r in ledger.active(course="CS101")] == ["server:ann/", "server:bob/", "server:bob/cpu"]


def test_reserve_is_idempotent_per_key(sessions: sessionmaker[Session]) -> None:
    make_course(sessions, "CS101", ["ann"], {"servers": 1})
    ledger = Ledger(sessions)
    first = ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0)
    again = ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0 + timedelta(minutes=1))
    assert again.id == first.id and again.started_at == T0
    assert ledger.usage(T0, course="CS101").servers == 1
    with pytest.raises(ValueError, match="already reserved by ann"):
        ledger.reserve("ann", "CS101", "server:ann/", R(gpu=2), T0)


def test_release_frees_and_key_can_be_reserved_again(sessions: sessionmaker[Session]) -> None:
    make_course(sessions, "CS101", ["ann"], {"resources": {GPU: 1}})
    ledger = Ledger(sessions)
    ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0)
    released = ledger.release("server:ann/", T0 + timedelta(hours=1))
    assert released is not None and released.released_at == T0 + timedelta(hours=1)
    assert ledger.release("server:ann/", T0 + timedelta(hours=2)) is None
    assert ledger.usage(T0 + timedelta(hours=1), course="CS101").resources == R()
    again = ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0 + timedelta(hours=2))
    assert again.id != released.id
    with sessions() as session:
        assert session.scalars(select(Reservation.key)).all() == ["server:ann/", "server:ann/"]


def test_a_start_replaces_a_stale_reservation_in_one_transaction(sessions: sessionmaker[Session]) -> None:
    """A start of a server that does not run ends whatever its key still holds (a hub that died
    before releasing) in the same transaction, even when the new request is refused."""
    make_course(sessions, "CS101", ["ann"], {"resources": {GPU: 1}})
    ledger = Ledger(sessions)
    stale = ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0)
    fresh = ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0 + timedelta(hours=1),
                           replace_stale=True)
    assert fresh.id != stale.id and fresh.started_at == T0 + timedelta(hours=1)
    assert ledger.usage(T0 + timedelta(hours=1), course="CS101").resources == R(gpu=1)
    with pytest.raises(QuotaDenied):  # two GPUs: over the course's one
        ledger.reserve("ann", "CS101", "server:ann/", R(gpu=2), T0 + timedelta(hours=2),
                       replace_stale=True)
    with sessions() as session:
        rows = session.scalars(select(Reservation).order_by(Reservation.id)).all()
        assert [r.released_at for r in rows] == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    assert ledger.usage(T0 + timedelta(hours=2), course="CS101").resources == R()


def test_a_late_release_does_not_end_a_newer_reservation(sessions: sessionmaker[Session]) -> None:
    """The hub clears a stopped server and the release runs in a thread; the student starts again
    at once: the release decided before the new reservation leaves it alone."""
    make_course(sessions, "CS101", ["ann"], {"resources": {GPU: 1}})
    ledger = Ledger(sessions)
    ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0)
    decided = T0 + timedelta(minutes=1)
    ledger.release("server:ann/", T0 + timedelta(minutes=2))  # the new start releases the stale one
    newer = ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0 + timedelta(minutes=2))
    assert ledger.release("server:ann/", decided, started_before=decided) is None
    assert ledger.usage(T0 + timedelta(minutes=3), course="CS101").resources == R(gpu=1)
    assert ledger.release("server:ann/", T0 + timedelta(minutes=4),
                          started_before=T0 + timedelta(minutes=4)).id == newer.id


def test_user_limits_and_membership(sessions: sessionmaker[Session]) -> None:
    make_course(
        sessions, "CS101", ["ann", "bob"], {"resources": {GPU: 4}, "servers": 10},
        user_limits={"ann": {"resources": {GPU: 1}, "servers": 2}},
    )
    ledger = Ledger(sessions)
    ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0)
    with pytest.raises(QuotaDenied) as denied:
        ledger.reserve("ann", "CS101", "server:ann/b", R(gpu=1), T0)
    assert denied.value.decision.reason_code == USER_RESOURCE
    assert str(denied.value) == "You use 1 of your 1 nvidia.com/gpu. Stop a server or ask your teacher."
    ledger.reserve("ann", "CS101", "server:ann/b", R(cpu=1), T0)
    with pytest.raises(QuotaDenied) as denied:
        ledger.reserve("ann", "CS101", "server:ann/c", R(cpu=1), T0)
    assert denied.value.decision.reason_code == USER_SERVERS
    # bob has no per-user limits: only the course ceiling applies
    ledger.reserve("bob", "CS101", "server:bob/", R(gpu=3), T0)
    with pytest.raises(QuotaDenied) as denied:
        ledger.reserve("carl", "CS101", "server:carl/", R(cpu=1), T0)
    assert denied.value.decision.reason_code == NOT_MEMBER
    assert str(denied.value) == "You are not a member of course CS101."
    with pytest.raises(LookupError, match="no course named 'NOPE'"):
        ledger.reserve("ann", "NOPE", "server:ann/x", R(cpu=1), T0)


def test_jobs_hold_resources_but_not_servers(sessions: sessionmaker[Session]) -> None:
    make_course(sessions, "CS101", ["ann"], {"resources": {GPU: 2}, "servers": 1})
    ledger = Ledger(sessions)
    ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0)
    ledger.reserve("ann", "CS101", "job:42", R(gpu=1), T0, kind="job")
    assert ledger.usage(T0, course="CS101") == Usage(R(gpu=2), 1, Fraction(0))
    with pytest.raises(QuotaDenied):
        ledger.reserve("ann", "CS101", "job:43", R(gpu=1), T0, kind="job")
    with pytest.raises(ValueError, match="kind"):
        ledger.reserve("ann", "CS101", "x:1", R(gpu=1), T0, kind="pod")


def test_reservation_outside_any_course_is_recorded_without_quota(sessions: sessionmaker[Session]) -> None:
    ledger = Ledger(sessions)
    first = ledger.reserve("admin", None, "server:admin/", R(gpu=8), T0)
    assert ledger.reserve("admin", None, "server:admin/", R(gpu=8), T0).id == first.id
    assert ledger.usage(T0, username="admin").resources == R(gpu=8)


def test_teacher_cannot_set_student_limits_above_the_ceiling(sessions: sessionmaker[Session]) -> None:
    make_course(sessions, "CS101", ["ann"], {"resources": {GPU: 4}, "gpu_hours_per_week": 10})
    with sessions.begin() as session:
        course = ensure_course(session, "CS101", T0)
        with pytest.raises(ValueError, match=r"5 nvidia\.com/gpu per student is above the course ceiling"):
            set_user_limits(session, course, "ann", parse_limits({"resources": {GPU: 5}}),
                            actor="teacher", now=T0)
        quota = set_user_limits(session, course, "ann", parse_limits({"gpu_hours_per_week": 2}),
                                actor="teacher", now=T0)
        assert quota.limits.gpu_hours_per_week == 2
    with sessions() as session:
        actions = session.scalars(select(AuditLog.action).order_by(AuditLog.id)).all()
    assert actions == ["quota.course.set", "quota.user.set"]


def test_reconcile_releases_stopped_and_reports_unreserved(sessions: sessionmaker[Session]) -> None:
    make_course(sessions, "CS101", ["ann", "bob", "cid"], {"resources": {GPU: 4}})
    ledger = Ledger(sessions)
    ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0)
    ledger.reserve("bob", "CS101", "server:bob/", R(gpu=1), T0)
    ledger.reserve("bob", "CS101", "job:7", R(gpu=1), T0, kind="job")
    now = T0 + timedelta(hours=1)
    ledger.reserve("cid", "CS101", "server:cid/", R(gpu=1), now - timedelta(seconds=5))  # just spawned
    report = ledger.reconcile({"server:ann/", "server:dan/"}, now)
    assert report.released == ("server:bob/",)
    assert report.unreserved == ("server:dan/",)
    assert {r.key for r in ledger.active(course="CS101")} == {"server:ann/", "job:7", "server:cid/"}
    with sessions() as session:
        audit = session.scalars(select(AuditLog).where(AuditLog.actor == "classhub-reconcile")).one()
    assert audit.details == {"key": "server:bob/", "username": "bob"}
    assert audit.at == now


def test_gpu_hours_of_a_simulated_week_to_the_second(sessions: sessionmaker[Session]) -> None:
    """A week of one course (Mon 2025-03-03 00:00 UTC .. Mon 2025-03-10 00:00 UTC), by hand:

    ann  1 GPU    Sun 03-02 22:00:00 -> Mon 03-03 01:30:15   inside: 1:30:15 =   5415 s x 1 =   5415
    ann  2 MIG    Wed 03-05 10:00:00 -> Wed 03-05 12:00:30   inside: 2:00:30 =   7230 s x 2 =  14460
    bob  1 shared Fri 03-07 23:59:59 -> Mon 03-10 00:00:05   inside: 2d 0:00:01 = 172801 s =  172801
    bob  8 CPU    Mon 03-03 00:00:00 -> Sun 03-09 12:00:00   no GPU                          =      0
    ann  1 GPU    Sun 03-09 20:00:00 -> still running        until the week ends: 4 h        =  14400
    ann  1 GPU    Sun 03-02 10:00:00 -> Sun 03-02 11:00:00   before the week                 =      0
    course: 5415 + 14460 + 172801 + 14400 = 207076 GPU-seconds; ann: 34275; bob: 172801.
    """
    make_course(sessions, "CS101", ["ann", "bob"], {"resources": {GPU: 4}})
    make_course(sessions, "OTHER", ["ann"])
    ledger = Ledger(sessions)

    def held(user: str, key: str, request: ResourceVector, start: datetime, end: datetime | None) -> None:
        ledger.reserve(user, "CS101", key, request, start)
        if end is not None:
            ledger.release(key, end)

    d = datetime
    held("ann", "server:ann/a", R(gpu=1), d(2025, 3, 2, 22, tzinfo=UTC), d(2025, 3, 3, 1, 30, 15, tzinfo=UTC))
    held("ann", "server:ann/b", R(mig=2), d(2025, 3, 5, 10, tzinfo=UTC), d(2025, 3, 5, 12, 0, 30, tzinfo=UTC))
    held("bob", "server:bob/a", R(shared=1), d(2025, 3, 7, 23, 59, 59, tzinfo=UTC),
         d(2025, 3, 10, 0, 0, 5, tzinfo=UTC))
    held("bob", "server:bob/b", R(cpu=8), d(2025, 3, 3, tzinfo=UTC), d(2025, 3, 9, 12, tzinfo=UTC))
    held("ann", "server:ann/c", R(gpu=1), d(2025, 3, 9, 20, tzinfo=UTC), None)
    held("ann", "server:ann/d", R(gpu=1), d(2025, 3, 2, 10, tzinfo=UTC), d(2025, 3, 2, 11, tzinfo=UTC))
    # another course's GPU time is not billed to CS101
    ledger.reserve("ann", "OTHER", "server:ann/o", R(gpu=1), d(2025, 3, 4, tzinfo=UTC))
    ledger.release("server:ann/o", d(2025, 3, 4, 1, tzinfo=UTC))

    week = (d(2025, 3, 3, tzinfo=UTC), d(2025, 3, 10, tzinfo=UTC))
    later = d(2025, 3, 10, 8, tzinfo=UTC)
    assert ledger.gpu_seconds(*week, later, course="CS101") == 207076
    assert ledger.gpu_seconds(*week, later, course="CS101", username="ann") == 34275
    assert ledger.gpu_seconds(*week, later, course="CS101", username="bob") == 172801
    assert ledger.gpu_seconds(*week, later, username="ann") == 34275 + 3600
    # mid-week, the still-running server counts until now: Sun 03-09 21:00:00.5 -> 3600.5 s
    now = d(2025, 3, 9, 21, 0, 0, 500_000, tzinfo=UTC)
    assert ledger.usage(now, course="CS101", username="ann").gpu_hours_week == (
        Fraction(5415 + 14460) + Fraction(7201, 2)
    ) / 3600


def test_gpu_hour_budget_refuses_gpu_but_not_cpu(sessions: sessionmaker[Session]) -> None:
    make_course(sessions, "CS101", ["ann"], user_limits={"ann": {"gpu_hours_per_week": "1.5"}})
    ledger = Ledger(sessions)
    ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0)
    ledger.release("server:ann/", T0 + timedelta(minutes=89, seconds=59))
    ledger.reserve("ann", "CS101", "server:ann/", R(mig=1), T0 + timedelta(hours=2))  # 1.4997 h used
    ledger.release("server:ann/", T0 + timedelta(hours=2, seconds=1))  # now exactly 1.5 h
    with pytest.raises(QuotaDenied) as denied:
        ledger.reserve("ann", "CS101", "server:ann/", R(shared=1), T0 + timedelta(hours=3))
    assert denied.value.decision.reason_code == USER_GPU_HOURS
    assert str(denied.value).startswith("You used 1.5 of your 1.5 GPU hours this week.")
    ledger.reserve("ann", "CS101", "server:ann/", R(cpu=2), T0 + timedelta(hours=3))
    # next Monday the budget is fresh
    ledger.release("server:ann/", T0 + timedelta(hours=4))
    ledger.reserve("ann", "CS101", "server:ann/", R(gpu=1), T0 + timedelta(days=5))


def test_a_students_limits_count_their_own_use_and_the_courses_count_everyones(
        sessions: sessionmaker[Session]) -> None:
    """One admission reads the course's week once and splits out the student's share: bob's
    GPU hours and servers never use up ann's own budget, and everyone's count for the course."""
    make_course(sessions, "CS101", ["ann", "bob", "cid"], {"gpu_hours_per_week": 3, "servers": 3},
                user_limits={name: {"gpu_hours_per_week": 2, "servers": 1} for name in ("ann", "bob", "cid")})
    ledger = Ledger(sessions)
    ledger.reserve("bob", "CS101", "server:bob/", R(gpu=1), T0)
    ledger.release("server:bob/", T0 + timedelta(hours=2))  # bob: 2 of his 2 hours
    ledger.reserve("bob", "CS101", "server:bob/", R(cpu=1), T0 + timedelta(hours=2))
    later = T0 + timedelta(hours=3)
    ann = ledger.reserve("ann", "CS101", "server:ann/", R(mig=1), later)  # bob's hours are not ann's
    with pytest.raises(QuotaDenied) as denied:
        ledger.reserve("ann", "CS101", "server:ann/2", R(cpu=1), later)  # ann's one server is running
    assert denied.value.decision.reason_code == USER_SERVERS
    ledger.release(ann.key, later + timedelta(hours=1))  # the course: 2 + 1 of its 3 hours
    with pytest.raises(QuotaDenied) as denied:
        ledger.reserve("cid", "CS101", "server:cid/", R(gpu=1), later + timedelta(hours=1))
    assert denied.value.decision.reason_code == COURSE_GPU_HOURS
    end = later + timedelta(hours=1)
    assert ledger.usage(end, course="CS101", username="ann").gpu_hours_week == 1
    assert ledger.usage(end, course="CS101").gpu_hours_week == 3
    assert ledger.usage(end, course="CS101").servers == 1  # bob's CPU server


def test_a_course_page_reads_every_members_usage_at_once(sessions: sessionmaker[Session]) -> None:
    """The course page and the admin's usage page show every member's usage: the same numbers
    as asking the ledger user by user, from a fixed number of queries however many students."""
    students = [f"s{i:02}" for i in range(12)]
    make_course(sessions, "CS101", students, {"resources": {GPU: 8}})
    make_course(sessions, "CS102", ["s00", "zed"])
    ledger = Ledger(sessions)
    for i, name in enumerate(students):
        ledger.reserve(name, "CS101", f"server:{name}/", R(gpu=1, cpu=1) if i % 3 == 0 else R(cpu=2), T0)
        if i % 2:
            ledger.release(f"server:{name}/", T0 + timedelta(minutes=30 * i))
    ledger.reserve("s00", "CS102", "server:s00/b", R(mig=1), T0)
    ledger.reserve("zed", "CS102", "server:zed/", R(shared=1), T0)
    ledger.reserve("out", None, "server:out/", R(gpu=1), T0)  # outside any course
    now = T0 + timedelta(hours=8)

    statements: list[str] = []
    engine = readers(sessions).kw["bind"]

    def count(*args: object) -> None:
        if str(args[2]).lstrip().upper().startswith("SELECT"):  # not sqlite's BEGIN DEFERRED
            statements.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", count)
    try:
        total, users = ledger.usage_by_user(now, course="CS101")
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(statements) <= 2  # the grouped usage, and the GPU spans
    assert total == ledger.usage(now, course="CS101")
    assert total.servers == 6 and total.resources == R(gpu=2, cpu=10)
    assert users == {name: ledger.usage(now, course="CS101", username=name) for name in students}
    assert users["s03"].gpu_hours_week == Fraction(3, 2) and users["s01"] == Usage()

    everyone, per_user = ledger.usage_by_user(now)
    assert everyone == ledger.usage(now)
    assert per_user == {name: ledger.usage(now, username=name) for name in [*students, "zed", "out"]}
    assert ledger.usage_by_course(now) == {name: ledger.usage(now, course=name)
                                           for name in ("CS101", "CS102")}
