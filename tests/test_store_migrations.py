"""Schema and migrations of the store (hub_ext.store) on sqlite and PostgreSQL.

What an admin would notice: a hub that fails to start because two services migrated at once, a
classhub upgrade that breaks JupyterHub's own database, GPU hours shifted by a time zone, a quota
of 1/3 hour read back as 0.333.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from typing import TypeVar

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, MetaData, String, Table, inspect, select
from sqlalchemy.exc import IntegrityError, StatementError
from sqlalchemy.orm import Session, sessionmaker

from hub_ext.store import (
    AuditLog,
    Base,
    CourseQuota,
    Membership,
    Reservation,
    connect,
    ensure_course,
    make_engine,
)
from hub_ext.store.engine import VERSION_TABLE, alembic_config
from tests.pg import database_url, postgres_server, postgres_url  # noqa: F401

pytestmark = pytest.mark.unit

NOW = datetime(2025, 3, 5, 9, 0, tzinfo=timezone.utc)
CORE_TABLES = {
    "classhub_courses",
    "classhub_memberships",
    "classhub_course_quotas",
    "classhub_user_quotas",
    "classhub_reservations",
    "classhub_audit_log",
}
#: every table the models declare (later revisions add templates, shares, ...), and Alembic's
TABLES = set(Base.metadata.tables) | {VERSION_TABLE}
HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()
T = TypeVar("T")


@pytest.fixture
def sessions(database_url: str) -> Iterator[sessionmaker[Session]]:  # noqa: F811
    factory = connect(database_url)
    yield factory
    factory.kw["bind"].dispose()


def schema_diff(factory: sessionmaker[Session]) -> list:
    with factory.kw["bind"].connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={
                "compare_type": True,
                "version_table": VERSION_TABLE,
                # what migrations/env.py passes: the database may hold JupyterHub's tables too
                "include_name": lambda name, type_, _: type_ != "table" or name.startswith("classhub_"),
            },
        )
        return compare_metadata(context, Base.metadata)


def test_upgrade_creates_the_schema_the_models_describe(sessions: sessionmaker[Session]) -> None:
    assert schema_diff(sessions) == []
    inspector = inspect(sessions.kw["bind"])
    assert set(inspector.get_table_names()) == TABLES
    assert CORE_TABLES <= TABLES
    with sessions() as session:
        version = Table(VERSION_TABLE, MetaData(), Column("version_num")).c.version_num
        assert session.scalars(select(version)).all() == [HEAD]


def at_once(step: Callable[[], T], count: int = 4) -> list[T]:
    """`step()` in `count` threads released together: their results once all ended, or the first
    error any of them raised."""
    errors: list[BaseException] = []
    results: list[T] = []
    barrier = threading.Barrier(count)

    def run() -> None:
        barrier.wait(timeout=30)
        try:
            results.append(step())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    assert len(results) == count
    return results


def test_connect_is_idempotent_and_concurrent_connects_are_safe(database_url: str) -> None:  # noqa: F811
    factories = at_once(lambda: connect(database_url))
    assert schema_diff(factories[0]) == []
    for factory in factories:
        factory.kw["bind"].dispose()


def test_downgrade_to_base_and_upgrade_again(database_url: str) -> None:  # noqa: F811
    engine = make_engine(database_url)
    config = alembic_config()
    for revision, expected in [("head", TABLES), ("base", {VERSION_TABLE}), ("head", TABLES)]:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            if revision == "base":
                command.downgrade(config, "base")
            else:
                command.upgrade(config, revision)
        assert set(inspect(engine).get_table_names()) == expected
    engine.dispose()


def test_shares_a_database_with_jupyterhub(database_url: str) -> None:  # noqa: F811
    """JupyterHub keeps its own Alembic revision in `alembic_version`; classhub must not touch it."""
    engine = make_engine(database_url)
    hub_version = Table("alembic_version", MetaData(), Column("version_num", String(32), primary_key=True))
    with engine.begin() as connection:
        hub_version.create(connection)
        connection.execute(hub_version.insert().values(version_num="4621fec11365"))
    engine.dispose()
    factory = connect(database_url)
    with factory() as session:
        assert session.scalars(select(hub_version.c.version_num)).all() == ["4621fec11365"]
    assert schema_diff(factory) == []
    factory.kw["bind"].dispose()


def test_datetimes_are_stored_as_utc(sessions: sessionmaker[Session]) -> None:
    paris = timezone(timedelta(hours=1))
    with sessions.begin() as session:
        session.add(AuditLog(at=datetime(2025, 3, 5, 10, 0, 0, 123456, tzinfo=paris), actor="t", action="a"))
    with sessions() as session:
        at = session.scalars(select(AuditLog.at)).one()
    assert at == datetime(2025, 3, 5, 9, 0, 0, 123456, tzinfo=timezone.utc)
    assert at.tzinfo == timezone.utc
    with pytest.raises(StatementError, match="naive datetime"), sessions.begin() as session:
        session.add(AuditLog(at=datetime(2025, 3, 5), actor="t", action="a"))
        session.flush()


def test_quota_fractions_and_zero_ceilings_round_trip(sessions: sessionmaker[Session]) -> None:
    from hub_ext.core.quota import parse_limits

    limits = parse_limits(
        {"resources": {"nvidia.com/gpu": 0, "memory": "1536Mi"}, "servers": 0, "gpu_hours_per_week": "1/3"}
    )
    with sessions.begin() as session:
        course = ensure_course(session, "CS101", NOW)
        quota = CourseQuota(course_id=course.id)
        quota.limits = limits
        session.add(quota)
    with sessions() as session:
        stored = session.get(CourseQuota, course.id)
        assert stored is not None
        assert stored.limits == limits
        assert stored.gpu_hours_per_week == Fraction(1, 3)
        assert stored.resources == {"memory": "1536Mi", "nvidia.com/gpu": "0"}


def test_constraints_hold_in_the_database(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        course = ensure_course(session, "CS101", NOW)
        course_id = course.id
    with pytest.raises(IntegrityError), sessions.begin() as session:
        session.add(Membership(course_id=course_id, username="ann", role="admin"))
    with pytest.raises(IntegrityError), sessions.begin() as session:
        session.add_all(
            [Membership(course_id=course_id, username="ann"), Membership(course_id=course_id, username="ann")]
        )
    reservation = {"key": "server:ann/", "username": "ann", "course_id": course_id, "resources": {}}
    with sessions.begin() as session:
        session.add(Reservation(**reservation, started_at=NOW, released_at=NOW + timedelta(hours=1)))
        session.add(Reservation(**reservation, started_at=NOW + timedelta(hours=2)))
    # only one *unreleased* reservation per key
    with pytest.raises(IntegrityError), sessions.begin() as session:
        session.add(Reservation(**reservation, started_at=NOW + timedelta(hours=3)))
    with sessions.begin() as session:
        session.add(Membership(course_id=course_id, username="bob", role="ta"))
    with sessions() as session:
        assert session.scalars(select(Membership.role)).all() == ["ta"]


def test_in_memory_sqlite_for_quick_tools() -> None:
    factory = connect("sqlite://")
    with factory.begin() as session:
        ensure_course(session, "CS101", NOW)
    with factory() as session:
        assert session.scalars(select(AuditLog)).all() == []
        assert ensure_course(session, "CS101", NOW).id == 1
    factory.kw["bind"].dispose()
