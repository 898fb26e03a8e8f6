"""Reads never wait on a writer (docs/architecture.md, rule 7): `store.readers`.

A hub page showing a culler warning, a spawn form counting free GPUs and a metrics scrape only
read; on sqlite every write transaction holds the database's write lock, so reads made with the
writers' sessions would queue behind it. The readers see the last committed snapshot instead.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from hub_ext import store
from hub_ext.store import Course, ensure_course
from hub_ext.store.engine import read_connection
from tests.pg import database_url, postgres_server, postgres_url  # noqa: F401

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def test_a_reader_sees_the_committed_snapshot_while_a_writer_holds_the_lock(database_url):  # noqa: F811
    sessions = store.connect(database_url)
    with sessions.begin() as session:
        ensure_course(session, "cs101", NOW)
    reader = store.readers(sessions)
    with sessions.begin() as writer:  # holds the write lock (BEGIN IMMEDIATE on sqlite) ...
        ensure_course(writer, "bio201", NOW)
        writer.flush()
        with reader() as session:  # ... and the read does not wait for it
            assert list(session.scalars(select(Course.name))) == ["cs101"]
    with reader() as session:
        assert sorted(session.scalars(select(Course.name))) == ["bio201", "cs101"]


def test_readers_refuse_writes_on_sqlite(tmp_path):
    sessions = store.connect(f"sqlite:///{tmp_path / 'c.sqlite'}")
    reader = store.readers(sessions)
    assert store.readers(sessions) is reader  # made once
    with pytest.raises(OperationalError, match="readonly"), reader.begin() as session:
        ensure_course(session, "cs101", NOW)


def test_a_read_connection_sees_the_committed_snapshot_while_a_writer_holds_the_lock(database_url):  # noqa: F811
    """`store.engine.read_connection` (rows without an ORM session, a start's course roles) reads
    like the readers: it does not queue behind a class start's reservations."""
    sessions = store.connect(database_url)
    with sessions.begin() as session:
        ensure_course(session, "cs101", NOW)
    with sessions.begin() as writer:
        ensure_course(writer, "bio201", NOW)
        writer.flush()
        with read_connection(sessions) as connection:
            assert list(connection.scalars(select(Course.name))) == ["cs101"]
    with read_connection(sessions) as connection:
        assert sorted(connection.scalars(select(Course.name))) == ["bio201", "cs101"]
